package sts

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/iam"
)

// IAM's operations that make, change and delete OIDC providers, and the
// tag listing. The providers they make are records of the key store
// (server/iam/oidc.go); a provider derived from the account's clusters
// (oidc.go) has none, and is treated as IAM treats a provider that exists:
//
//   - CreateOpenIDConnectProvider for its URL is EntityAlreadyExists;
//   - a change to it (thumbprints, client ids, tags) makes it a record,
//     from what was derived, changed; the record then takes its place;
//   - it cannot be deleted (InvalidInput: it goes with the last cluster
//     that has the issuer); deleting a record made from it brings back
//     what is derived.
//
// Model violations are ValidationError, with AWS's "N validation errors
// detected" message naming the members as AWS does; what the model allows
// but IAM refuses is InvalidInput, LimitExceeded (IAM's quotas),
// EntityAlreadyExists, NoSuchEntity or ConcurrentModification. A refused
// request changes nothing: each change is one etcd transaction.

// Providers keeps the providers CreateOpenIDConnectProvider makes: the
// key store (iam.Service), which Config.Keys is.
type Providers interface {
	CreatedProviders
	CreateOIDCProvider(ctx context.Context, rec *storagev1.OpenIDConnectProviderRecord) (*storagev1.OpenIDConnectProviderRecord, error)
	UpdateOIDCProvider(ctx context.Context, account, url string, seed *storagev1.OpenIDConnectProviderRecord,
		change func(*storagev1.OpenIDConnectProviderRecord) error) (*storagev1.OpenIDConnectProviderRecord, error)
	DeleteOIDCProvider(ctx context.Context, account, url string) error
}

// providers is the key store's Providers; Config has no field of its own
// for them, the key store (Config.Keys) being where they are kept.
func (h *Handler) providers() (Providers, error) {
	p, ok := h.cfg.Keys.(Providers)
	if !ok {
		return nil, errors.New("sts: the key store (Config.Keys) keeps no OIDC providers")
	}
	return p, nil
}

// iamError turns the key store's refusals into IAM's codes: a limit is
// LimitExceeded, a resource in use is inUse (EntityAlreadyExists for a
// create, ConcurrentModification for a change); the rest as every error
// of the endpoint (toQueryError: InvalidInput, NoSuchEntity, ...).
func iamError(err error, inUse string) error {
	var e *errdefs.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Exception {
	case errdefs.ResourceLimitExceededException:
		return senderError(http.StatusConflict, "LimitExceeded", "%s", e.Message)
	case errdefs.ResourceInUseException:
		return senderError(http.StatusConflict, inUse, "%s", e.Message)
	}
	return err
}

// emptyResult is the answer of an operation without output: only its
// ResponseMetadata, in {Action}Response.
type emptyResult struct {
	XMLName  xml.Name
	Xmlns    string   `xml:"xmlns,attr"`
	Metadata metadata `xml:"ResponseMetadata"`
}

func empty(ctx context.Context, action string) emptyResult {
	return emptyResult{XMLName: xml.Name{Local: action + "Response"}, Xmlns: apiIAM.namespace, Metadata: metadata{RequestID: requestID(ctx)}}
}

// Model constraints of the operations (botocore iam/2010-05-08).
const (
	maxURLLen      = 255 // OpenIDConnectProviderUrlType
	maxClientIDLen = 255 // clientIDType
	thumbprintLen  = 40  // thumbprintType, exactly
	maxTagsInCall  = 50  // tagListType, tagKeyListType
)

// stringList reads a query-protocol list of strings (Name.member.1, …)
// and whether it was sent at all: an empty list is sent as "Name=".
func stringList(p params, name string) (vals []string, sent bool) {
	for i := 1; ; i++ {
		v, ok := p.get(name + ".member." + strconv.Itoa(i))
		if !ok {
			break
		}
		vals = append(vals, v)
	}
	return vals, len(vals) > 0 || p.has(name)
}

// members checks each string of a list against the model's bounds. AWS
// names the whole list, and the constraints a member failed:
// "Value '[a, b]' at 'thumbprintList' failed to satisfy constraint: Member
// must satisfy constraint: [Member must have length greater than or equal
// to 40]".
func (v *violations) members(member string, vals []string, minLen, maxLen int, pattern func(string) bool, shown string) {
	var failed []string
	add := func(c string) {
		if !slices.Contains(failed, c) {
			failed = append(failed, c)
		}
	}
	for _, s := range vals {
		n := len([]rune(s))
		if n > maxLen {
			add(fmt.Sprintf("Member must have length less than or equal to %d", maxLen))
		}
		if n < minLen {
			add(fmt.Sprintf("Member must have length greater than or equal to %d", minLen))
		}
		if pattern != nil && !pattern(s) {
			add("Member must satisfy regular expression pattern: " + shown)
		}
	}
	if len(failed) > 0 {
		v.add("Value '%s' at '%s' failed to satisfy constraint: Member must satisfy constraint: [%s]",
			clip("["+strings.Join(vals, ", ")+"]"), member, strings.Join(failed, ", "))
	}
}

// resourceTags reads IAM's Tags.member.N.Key and .Value, with the model's
// violations named as AWS names them (tags.N.member.key); dup reports a
// key given twice whatever its case, which IAM refuses as InvalidInput.
func resourceTags(p params, v *violations) (tags []*storagev1.ResourceTag, dup bool) {
	for _, t := range readTags(p, v, func() { dup = true }) {
		tags = append(tags, &storagev1.ResourceTag{Key: t.key, Value: t.value})
	}
	if len(tags) > maxTagsInCall {
		v.add("Value '[…]' at 'tags' failed to satisfy constraint: Member must have length less than or equal to %d", maxTagsInCall)
	}
	return tags, dup
}

// markerPattern is markerType's pattern.
var markerPattern = regexp.MustCompile(`^[\x{0020}-\x{00FF}]+$`)

var errDuplicateTags = senderError(http.StatusBadRequest, "InvalidInput", "Duplicate tag keys found. Please note that Tag keys are case insensitive.")

// checkThumbprints refuses what the model lets through but is no
// thumbprint: 40 characters that are not all hexadecimal digits.
func checkThumbprints(tps []string) error {
	for _, t := range tps {
		if !iam.ValidOIDCThumbprint(t) {
			return senderError(http.StatusBadRequest, "InvalidInput", "Thumbprint %s is not valid: a thumbprint is 40 hexadecimal digits.", clip(t))
		}
	}
	return nil
}

// unique keeps the first of equal strings (equal by fold, or exactly).
func unique(vals []string, fold bool) []string {
	out := []string{}
	for _, s := range vals {
		if !slices.ContainsFunc(out, func(o string) bool { return o == s || (fold && strings.EqualFold(o, s)) }) {
			out = append(out, s)
		}
	}
	return out
}

type createOIDCResponse struct {
	XMLName  xml.Name         `xml:"CreateOpenIDConnectProviderResponse"`
	Xmlns    string           `xml:"xmlns,attr"`
	Result   createOIDCResult `xml:"CreateOpenIDConnectProviderResult"`
	Metadata metadata         `xml:"ResponseMetadata"`
}

type createOIDCResult struct {
	Arn  string  `xml:"OpenIDConnectProviderArn"`
	Tags tagsXML `xml:"Tags"`
}

// createOpenIDConnectProvider makes a provider in the caller's account
// (iam:CreateOpenIDConnectProvider on its ARN, and
// iam:TagOpenIDConnectProvider too when it is given tags). Client ids and
// thumbprints given twice are kept once. Without ThumbprintList (the
// newest model makes it optional) the provider has none: IAM would fetch
// the issuer's certificate, saltbush contacts no issuer.
func (h *Handler) createOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	var v violations
	rawURL, ok := p.get("Url")
	if !ok {
		v.add("Value null at 'url' failed to satisfy constraint: Member must not be null")
	} else {
		v.length("url", rawURL, 1, maxURLLen)
	}
	clientIDs, _ := stringList(p, "ClientIDList")
	v.members("clientIDList", clientIDs, 1, maxClientIDLen, nil, "")
	thumbprints, _ := stringList(p, "ThumbprintList")
	v.members("thumbprintList", thumbprints, thumbprintLen, thumbprintLen, nil, "")
	tags, dup := resourceTags(p, &v)
	if err := v.err(); err != nil {
		return nil, err
	}
	if dup {
		return nil, errDuplicateTags
	}
	providerURL, err := iam.NormalizeOIDCProviderURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := checkThumbprints(thumbprints); err != nil {
		return nil, err
	}
	arn := iam.OIDCProviderARN(who.AccountID, providerURL)
	if err := h.cfg.Authorizer.Authorize(ctx, "iam:CreateOpenIDConnectProvider", arn); err != nil {
		return nil, err
	}
	if len(tags) > 0 {
		if err := h.cfg.Authorizer.Authorize(ctx, "iam:TagOpenIDConnectProvider", arn); err != nil {
			return nil, err
		}
	}
	provs, err := h.providers()
	if err != nil {
		return nil, err
	}
	// A provider derived from a cluster exists already. (A cluster that
	// reports this issuer after the check only finds the record in its
	// place, as for any made provider.)
	issuers, err := h.cfg.Issuers(ctx, who.AccountID)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(issuers, func(iss Issuer) bool { return iss.URL == providerURL }) {
		return nil, senderError(http.StatusConflict, "EntityAlreadyExists", "Provider with url %s already exists.", providerURL)
	}
	rec, err := provs.CreateOIDCProvider(ctx, &storagev1.OpenIDConnectProviderRecord{
		Url: providerURL, AccountId: who.AccountID, ClientIds: unique(clientIDs, false), Thumbprints: unique(thumbprints, true), Tags: tags,
	})
	if err != nil {
		return nil, iamError(err, "EntityAlreadyExists")
	}
	return createOIDCResponse{
		Xmlns: apiIAM.namespace, Result: createOIDCResult{Arn: arn, Tags: tagsOf(issuerOf(rec).Tags)},
		Metadata: metadata{RequestID: requestID(ctx)},
	}, nil
}

// deleteOpenIDConnectProvider deletes a provider CreateOpenIDConnectProvider
// made. A provider derived from a cluster cannot be deleted: it is there
// as long as a cluster of the account has its issuer.
func (h *Handler) deleteOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	if err := v.err(); err != nil {
		return nil, err
	}
	account, iss, err := h.resolveProvider(ctx, arn, "iam:DeleteOpenIDConnectProvider")
	if err != nil {
		return nil, err
	}
	if !iss.Created {
		return nil, senderError(http.StatusBadRequest, "InvalidInput",
			"OpenIDConnect Provider %s is the OIDC issuer of a cluster of the account and cannot be deleted: it is removed with the last cluster that has this issuer.", arn)
	}
	provs, err := h.providers()
	if err != nil {
		return nil, err
	}
	if err := provs.DeleteOIDCProvider(ctx, account, iss.URL); err != nil {
		return nil, iamError(err, "ConcurrentModification")
	}
	return empty(ctx, "DeleteOpenIDConnectProvider"), nil
}

// changeProvider applies change to the provider named by arn in one
// transaction, once the caller's policies allow action on it; a derived
// provider becomes a record (see the top of this file).
func (h *Handler) changeProvider(ctx context.Context, arn, action string, change func(*storagev1.OpenIDConnectProviderRecord) error) error {
	account, iss, err := h.resolveProvider(ctx, arn, action)
	if err != nil {
		return err
	}
	provs, err := h.providers()
	if err != nil {
		return err
	}
	var seed *storagev1.OpenIDConnectProviderRecord
	if !iss.Created {
		seed = &storagev1.OpenIDConnectProviderRecord{
			Url: iss.URL, AccountId: account, ClientIds: slices.Clone(iss.ClientIDs), Thumbprints: slices.Clone(iss.Thumbprints),
			CreatedAt: timestamppb.New(iss.CreateDate),
		}
	}
	if _, err := provs.UpdateOIDCProvider(ctx, account, iss.URL, seed, change); err != nil {
		return iamError(err, "ConcurrentModification")
	}
	return nil
}

// updateOpenIDConnectProviderThumbprint replaces a provider's thumbprints.
func (h *Handler) updateOpenIDConnectProviderThumbprint(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	thumbprints, sent := stringList(p, "ThumbprintList")
	if !sent {
		v.add("Value null at 'thumbprintList' failed to satisfy constraint: Member must not be null")
	}
	v.members("thumbprintList", thumbprints, thumbprintLen, thumbprintLen, nil, "")
	if err := v.err(); err != nil {
		return nil, err
	}
	if err := checkThumbprints(thumbprints); err != nil {
		return nil, err
	}
	thumbprints = unique(thumbprints, true)
	err := h.changeProvider(ctx, arn, "iam:UpdateOpenIDConnectProviderThumbprint", func(rec *storagev1.OpenIDConnectProviderRecord) error {
		rec.Thumbprints = slices.Clone(thumbprints)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return empty(ctx, "UpdateOpenIDConnectProviderThumbprint"), nil
}

// clientIDParam reads ClientID, 1 to 255 characters.
func clientIDParam(p params, v *violations) string {
	id, ok := p.get("ClientID")
	if !ok {
		v.add("Value null at 'clientID' failed to satisfy constraint: Member must not be null")
	} else {
		v.length("clientID", id, 1, maxClientIDLen)
	}
	return id
}

// addClientIDToOpenIDConnectProvider adds an audience; adding one the
// provider has changes nothing, as in IAM.
func (h *Handler) addClientIDToOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	id := clientIDParam(p, &v)
	if err := v.err(); err != nil {
		return nil, err
	}
	err := h.changeProvider(ctx, arn, "iam:AddClientIDToOpenIDConnectProvider", func(rec *storagev1.OpenIDConnectProviderRecord) error {
		if !slices.Contains(rec.ClientIds, id) {
			rec.ClientIds = append(rec.ClientIds, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return empty(ctx, "AddClientIDToOpenIDConnectProvider"), nil
}

// removeClientIDFromOpenIDConnectProvider removes an audience; removing
// one the provider does not have changes nothing, as in IAM.
func (h *Handler) removeClientIDFromOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	id := clientIDParam(p, &v)
	if err := v.err(); err != nil {
		return nil, err
	}
	err := h.changeProvider(ctx, arn, "iam:RemoveClientIDFromOpenIDConnectProvider", func(rec *storagev1.OpenIDConnectProviderRecord) error {
		rec.ClientIds = slices.DeleteFunc(rec.ClientIds, func(c string) bool { return c == id })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return empty(ctx, "RemoveClientIDFromOpenIDConnectProvider"), nil
}

// tagOpenIDConnectProvider adds tags; a tag whose key the provider has
// (whatever its case) replaces that tag, in its place.
func (h *Handler) tagOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	if !p.has("Tags") {
		v.add("Value null at 'tags' failed to satisfy constraint: Member must not be null")
	}
	tags, dup := resourceTags(p, &v)
	if err := v.err(); err != nil {
		return nil, err
	}
	if dup {
		return nil, errDuplicateTags
	}
	err := h.changeProvider(ctx, arn, "iam:TagOpenIDConnectProvider", func(rec *storagev1.OpenIDConnectProviderRecord) error {
		for _, t := range tags {
			i := slices.IndexFunc(rec.Tags, func(o *storagev1.ResourceTag) bool { return strings.EqualFold(o.GetKey(), t.GetKey()) })
			if i < 0 {
				rec.Tags = append(rec.Tags, &storagev1.ResourceTag{Key: t.GetKey(), Value: t.GetValue()})
			} else {
				rec.Tags[i] = &storagev1.ResourceTag{Key: t.GetKey(), Value: t.GetValue()}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return empty(ctx, "TagOpenIDConnectProvider"), nil
}

// untagOpenIDConnectProvider removes the tags of the keys given (whatever
// their case); a key the provider does not have changes nothing.
func (h *Handler) untagOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	keys, sent := stringList(p, "TagKeys")
	if !sent {
		v.add("Value null at 'tagKeys' failed to satisfy constraint: Member must not be null")
	}
	v.members("tagKeys", keys, 1, 128, tagPattern.MatchString, `[\p{L}\p{Z}\p{N}_.:/=+\-@]+`)
	if len(keys) > maxTagsInCall {
		v.add("Value '[…]' at 'tagKeys' failed to satisfy constraint: Member must have length less than or equal to %d", maxTagsInCall)
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	err := h.changeProvider(ctx, arn, "iam:UntagOpenIDConnectProvider", func(rec *storagev1.OpenIDConnectProviderRecord) error {
		rec.Tags = slices.DeleteFunc(rec.Tags, func(t *storagev1.ResourceTag) bool {
			return slices.ContainsFunc(keys, func(k string) bool { return strings.EqualFold(k, t.GetKey()) })
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return empty(ctx, "UntagOpenIDConnectProvider"), nil
}

type listOIDCTagsResponse struct {
	XMLName  xml.Name           `xml:"ListOpenIDConnectProviderTagsResponse"`
	Xmlns    string             `xml:"xmlns,attr"`
	Result   listOIDCTagsResult `xml:"ListOpenIDConnectProviderTagsResult"`
	Metadata metadata           `xml:"ResponseMetadata"`
}

type listOIDCTagsResult struct {
	Tags        tagsXML `xml:"Tags"`
	IsTruncated bool    `xml:"IsTruncated"`
	Marker      string  `xml:"Marker,omitempty"`
}

// listOpenIDConnectProviderTags lists a provider's tags, MaxItems (1 to
// 1000, 100 when absent) at a time; Marker is where the next page starts.
func (h *Handler) listOpenIDConnectProviderTags(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	start, limit := 0, 100
	marker, hasMarker := p.get("Marker")
	if hasMarker && v.length("marker", marker, 1, 320) {
		v.pattern("marker", marker, markerPattern, `[\u0020-\u00FF]+`)
	}
	if s, ok := p.get("MaxItems"); ok {
		n, err := strconv.Atoi(s)
		switch {
		case errors.Is(err, strconv.ErrRange) && strings.HasPrefix(s, "-"), err == nil && n < 1:
			v.add("Value '%s' at 'maxItems' failed to satisfy constraint: Member must have value greater than or equal to 1", clip(s))
		case errors.Is(err, strconv.ErrRange), err == nil && n > 1000:
			v.add("Value '%s' at 'maxItems' failed to satisfy constraint: Member must have value less than or equal to 1000", clip(s))
		case err != nil:
			v.add("Value '%s' at 'maxItems' failed to satisfy constraint: Member must be an integer", clip(s))
		default:
			limit = n
		}
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	_, iss, err := h.resolveProvider(ctx, arn, "iam:ListOpenIDConnectProviderTags")
	if err != nil {
		return nil, err
	}
	if hasMarker {
		n, err := strconv.Atoi(marker)
		if err != nil || n < 1 || n > len(iss.Tags) {
			return nil, senderError(http.StatusBadRequest, "InvalidInput", "Marker %s is not valid for the tags of %s.", clip(marker), arn)
		}
		start = n
	}
	page := iss.Tags[start:min(start+limit, len(iss.Tags))]
	res := listOIDCTagsResult{Tags: tagsOf(page)}
	if end := start + len(page); end < len(iss.Tags) {
		res.IsTruncated, res.Marker = true, strconv.Itoa(end)
	}
	return listOIDCTagsResponse{Xmlns: apiIAM.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
}
