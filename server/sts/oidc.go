package sts

import (
	"context"
	"crypto/sha1" //nolint:gosec // G505: IAM's OIDC thumbprint is SHA-1 by definition, not a security check here
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// iamOperations are IAM's OIDC provider operations (oidc_write.go has
// those that change providers).
var iamOperations = map[string]operation{
	"ListOpenIDConnectProviders":              {run: (*Handler).listOpenIDConnectProviders},
	"GetOpenIDConnectProvider":                {run: (*Handler).getOpenIDConnectProvider},
	"ListOpenIDConnectProviderTags":           {run: (*Handler).listOpenIDConnectProviderTags},
	"CreateOpenIDConnectProvider":             {mutates: true, run: (*Handler).createOpenIDConnectProvider},
	"DeleteOpenIDConnectProvider":             {mutates: true, run: (*Handler).deleteOpenIDConnectProvider},
	"UpdateOpenIDConnectProviderThumbprint":   {mutates: true, run: (*Handler).updateOpenIDConnectProviderThumbprint},
	"AddClientIDToOpenIDConnectProvider":      {mutates: true, run: (*Handler).addClientIDToOpenIDConnectProvider},
	"RemoveClientIDFromOpenIDConnectProvider": {mutates: true, run: (*Handler).removeClientIDFromOpenIDConnectProvider},
	"TagOpenIDConnectProvider":                {mutates: true, run: (*Handler).tagOpenIDConnectProvider},
	"UntagOpenIDConnectProvider":              {mutates: true, run: (*Handler).untagOpenIDConnectProvider},
}

// derivedClientID is the one audience of a provider derived from a
// cluster: the one EKS registers for IRSA.
const derivedClientID = "sts.amazonaws.com"

// Issuer is one OIDC provider of an account, as IAM reports it: either
// made by CreateOpenIDConnectProvider (a record of the key store,
// server/iam/oidc.go) or derived from the account's clusters, every
// distinct OIDC issuer among them being a provider. A made one takes the
// place of a derived one with the same URL.
type Issuer struct {
	// URL is the issuer, https://….
	URL string
	// CreateDate is when the provider was made; for a derived one, when
	// the first cluster with this issuer was created.
	CreateDate time.Time
	// ClientIDs are the audiences a token of the provider may carry;
	// ["sts.amazonaws.com"] for a derived one.
	ClientIDs []string
	// Thumbprints are hex SHA-1 thumbprints of the provider's
	// certificates; for a derived one, that of the cluster's CA
	// certificate when the cluster's CA is known, else none.
	Thumbprints []string
	// Tags are a made provider's tags; a derived one has none.
	Tags []Tag
	// Created reports a provider made by CreateOpenIDConnectProvider.
	Created bool
}

// Tag is one tag of a provider.
type Tag struct {
	Key, Value string
}

// ARN is the provider's ARN: arn:aws:iam::{account}:oidc-provider/{URL
// without https://}.
func (i Issuer) ARN(account string) string {
	return "arn:aws:iam::" + account + ":oidc-provider/" + strings.TrimPrefix(i.URL, "https://")
}

// Issuers lists an account's OIDC providers, sorted by URL.
type Issuers func(ctx context.Context, account string) ([]Issuer, error)

// CreatedProviders lists the providers CreateOpenIDConnectProvider made
// in an account (iam.Service).
type CreatedProviders interface {
	OIDCProviders(ctx context.Context, account string) ([]*storagev1.OpenIDConnectProviderRecord, error)
}

// AccountIssuers answers with the account's providers as IAM has them:
// those made by CreateOpenIDConnectProvider and those derived from its
// clusters (ClusterIssuers), a made one taking the place of a derived one
// with the same URL.
func AccountIssuers(st *store.Store, created CreatedProviders) Issuers {
	derived := ClusterIssuers(st)
	return func(ctx context.Context, account string) ([]Issuer, error) {
		recs, err := created.OIDCProviders(ctx, account)
		if err != nil {
			return nil, err
		}
		out, err := derived(ctx, account)
		if err != nil {
			return nil, err
		}
		byURL := make(map[string]Issuer, len(out)+len(recs))
		for _, iss := range out {
			byURL[iss.URL] = iss
		}
		for _, rec := range recs {
			byURL[rec.GetUrl()] = issuerOf(rec)
		}
		out = out[:0]
		for _, iss := range byURL {
			out = append(out, iss)
		}
		slices.SortFunc(out, func(a, b Issuer) int { return strings.Compare(a.URL, b.URL) })
		return out, nil
	}
}

// issuerOf is the Issuer of a made provider.
func issuerOf(rec *storagev1.OpenIDConnectProviderRecord) Issuer {
	iss := Issuer{
		URL: rec.GetUrl(), CreateDate: rec.GetCreatedAt().AsTime(), Created: true,
		ClientIDs: slices.Clone(rec.GetClientIds()), Thumbprints: slices.Clone(rec.GetThumbprints()),
	}
	for _, t := range rec.GetTags() {
		iss.Tags = append(iss.Tags, Tag{Key: t.GetKey(), Value: t.GetValue()})
	}
	return iss
}

// ClusterIssuers answers from the account's clusters alone: every cluster
// whose provisioner reported a service-account issuer is an OIDC provider
// of its account (IAM's provider is what IRSA trusts; here the cluster
// itself is). Clusters sharing an issuer are one provider.
func ClusterIssuers(st *store.Store) Issuers {
	return func(ctx context.Context, account string) ([]Issuer, error) {
		byURL := map[string]Issuer{}
		token := ""
		for {
			page, err := st.List(ctx, store.ListOptions{
				Prefix: store.ClustersPrefix(account), Scope: "ListOpenIDConnectProviders/" + account, Token: token,
			})
			if err != nil {
				return nil, fmt.Errorf("list the clusters of %s: %w", account, err)
			}
			for _, kv := range page.Items {
				rec := &storagev1.ClusterRecord{}
				if err := store.Decode(kv.Value, rec); err != nil {
					return nil, fmt.Errorf("cluster %s of %s: %w", kv.Name, account, err)
				}
				u := rec.GetOidcIssuer()
				if u == "" {
					continue
				}
				iss := Issuer{URL: u, CreateDate: rec.GetCreatedAt().AsTime(), ClientIDs: []string{derivedClientID}, Thumbprints: []string{}}
				if tp := thumbprint(rec.GetCertificateAuthorityData()); tp != "" {
					iss.Thumbprints = append(iss.Thumbprints, tp)
				}
				if prev, ok := byURL[u]; ok && !iss.CreateDate.Before(prev.CreateDate) {
					continue
				}
				byURL[u] = iss
			}
			if page.NextToken == "" {
				break
			}
			token = page.NextToken
		}
		out := make([]Issuer, 0, len(byURL))
		for _, iss := range byURL {
			out = append(out, iss)
		}
		slices.SortFunc(out, func(a, b Issuer) int { return strings.Compare(a.URL, b.URL) })
		return out, nil
	}
}

// thumbprint is the hex SHA-1 of the first certificate in a base64 PEM
// bundle (the cluster's certificateAuthority.data), "" when there is none.
func thumbprint(caData string) string {
	raw, err := base64.StdEncoding.DecodeString(caData)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return ""
	}
	sum := sha1.Sum(block.Bytes) //nolint:gosec // G401: see the import
	return hex.EncodeToString(sum[:])
}

type listOIDCResponse struct {
	XMLName  xml.Name       `xml:"ListOpenIDConnectProvidersResponse"`
	Xmlns    string         `xml:"xmlns,attr"`
	Result   listOIDCResult `xml:"ListOpenIDConnectProvidersResult"`
	Metadata metadata       `xml:"ResponseMetadata"`
}

type listOIDCResult struct {
	Providers []providerEntry `xml:"OpenIDConnectProviderList>member"`
}

type providerEntry struct {
	Arn string `xml:"Arn"`
}

// listOpenIDConnectProviders lists the caller's account's providers.
func (h *Handler) listOpenIDConnectProviders(ctx context.Context, _ params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.cfg.Authorizer.Authorize(ctx, "iam:ListOpenIDConnectProviders", "*"); err != nil {
		return nil, err
	}
	issuers, err := h.cfg.Issuers(ctx, who.AccountID)
	if err != nil {
		return nil, err
	}
	res := listOIDCResult{Providers: []providerEntry{}}
	for _, iss := range issuers {
		res.Providers = append(res.Providers, providerEntry{Arn: iss.ARN(who.AccountID)})
	}
	return listOIDCResponse{Xmlns: apiIAM.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
}

type getOIDCResponse struct {
	XMLName  xml.Name      `xml:"GetOpenIDConnectProviderResponse"`
	Xmlns    string        `xml:"xmlns,attr"`
	Result   getOIDCResult `xml:"GetOpenIDConnectProviderResult"`
	Metadata metadata      `xml:"ResponseMetadata"`
}

type getOIDCResult struct {
	URL         string   `xml:"Url"`
	ClientIDs   []string `xml:"ClientIDList>member"`
	Thumbprints []string `xml:"ThumbprintList>member"`
	CreateDate  string   `xml:"CreateDate"`
	Tags        tagsXML  `xml:"Tags"`
}

// tagsXML is a list of tags, written (empty or not) as <Tags><member>….
type tagsXML struct {
	Members []tagXML `xml:"member"`
}

type tagXML struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

func tagsOf(tags []Tag) tagsXML {
	out := tagsXML{Members: []tagXML{}}
	for _, t := range tags {
		out.Members = append(out.Members, tagXML(t))
	}
	return out
}

// providerARN is arn:aws:iam::{account}:oidc-provider/{host and path}.
var providerARN = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):oidc-provider/(.+)$`)

// getOpenIDConnectProvider describes one provider of the caller's account.
// Its URL is returned without the scheme, as IAM returns it. A missing or
// malformed ARN is InvalidInput here (where the operations that change
// providers answer ValidationError, oidc_write.go), as it always was.
func (h *Handler) getOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	var v violations
	arn := arnParam(p, &v)
	if err := v.err(); err != nil {
		qe := err.(*queryError)
		qe.code = "InvalidInput"
		return nil, qe
	}
	_, iss, err := h.resolveProvider(ctx, arn, "iam:GetOpenIDConnectProvider")
	if err != nil {
		return nil, err
	}
	res := getOIDCResult{
		URL: strings.TrimPrefix(iss.URL, "https://"), ClientIDs: iss.ClientIDs, Thumbprints: iss.Thumbprints,
		CreateDate: iss.CreateDate.UTC().Format(time.RFC3339), Tags: tagsOf(iss.Tags),
	}
	return getOIDCResponse{Xmlns: apiIAM.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
}

// arnParam reads OpenIDConnectProviderArn, adding the model's violations.
func arnParam(p params, v *violations) string {
	arn, ok := p.get("OpenIDConnectProviderArn")
	if !ok {
		v.add("Value null at 'openIDConnectProviderArn' failed to satisfy constraint: Member must not be null")
	} else {
		v.length("openIDConnectProviderArn", arn, 20, 2048)
	}
	return arn
}

// resolveProvider finds the caller's account's provider named by arn,
// once the caller's policies allow action on it: InvalidInput for what
// is not a provider ARN, NoSuchEntity for a provider the account does
// not have (another account's included, which authorization refuses
// first).
func (h *Handler) resolveProvider(ctx context.Context, arn, action string) (account string, _ Issuer, _ error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return "", Issuer{}, err
	}
	m := providerARN.FindStringSubmatch(arn)
	if m == nil {
		return "", Issuer{}, senderError(http.StatusBadRequest, "InvalidInput", "ARN %s is not valid.", clip(arn))
	}
	if err := h.cfg.Authorizer.Authorize(ctx, action, arn); err != nil {
		return "", Issuer{}, err
	}
	notFound := senderError(http.StatusNotFound, "NoSuchEntity", "OpenIDConnect Provider not found for arn %s", arn)
	if m[1] != who.AccountID {
		return "", Issuer{}, notFound
	}
	issuers, err := h.cfg.Issuers(ctx, who.AccountID)
	if err != nil {
		return "", Issuer{}, err
	}
	for _, iss := range issuers {
		if iss.ARN(who.AccountID) == arn {
			return who.AccountID, iss, nil
		}
	}
	return "", Issuer{}, notFound
}
