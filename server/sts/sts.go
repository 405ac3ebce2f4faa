package sts

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/policy"
)

type getCallerIdentityResponse struct {
	XMLName  xml.Name                `xml:"GetCallerIdentityResponse"`
	Xmlns    string                  `xml:"xmlns,attr"`
	Result   getCallerIdentityResult `xml:"GetCallerIdentityResult"`
	Metadata metadata                `xml:"ResponseMetadata"`
}

type getCallerIdentityResult struct {
	Arn     string `xml:"Arn"`
	UserID  string `xml:"UserId"`
	Account string `xml:"Account"`
}

// getCallerIdentity answers who signed the request. No policy is needed:
// AWS answers it for every authenticated caller, whatever its policies.
func (h *Handler) getCallerIdentity(ctx context.Context, _ params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	return getCallerIdentityResponse{
		Xmlns:    apiSTS.namespace,
		Result:   getCallerIdentityResult{Arn: who.PrincipalARN, UserID: userID(who), Account: who.AccountID},
		Metadata: metadata{RequestID: requestID(ctx)},
	}, nil
}

// userID is STS's UserId: the account id for root, the principal's
// unique id (AIDA…, AROA…) for a user or role, and for a role session
// the role's id, a colon and the session name.
func userID(who identity.Caller) string {
	s, ok := access.ParseSigner(who.PrincipalARN)
	if !ok {
		return who.AccountID
	}
	if s.SessionName != "" {
		return s.Principal.ID() + ":" + s.SessionName
	}
	return s.Principal.ID()
}

type assumeRoleResponse struct {
	XMLName  xml.Name         `xml:"AssumeRoleResponse"`
	Xmlns    string           `xml:"xmlns,attr"`
	Result   assumeRoleResult `xml:"AssumeRoleResult"`
	Metadata metadata         `xml:"ResponseMetadata"`
}

type assumeRoleResult struct {
	Credentials      credentialsXML     `xml:"Credentials"`
	AssumedRoleUser  assumedRoleUserXML `xml:"AssumedRoleUser"`
	PackedPolicySize *int               `xml:"PackedPolicySize,omitempty"`
	SourceIdentity   string             `xml:"SourceIdentity,omitempty"`
}

type credentialsXML struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

type assumedRoleUserXML struct {
	AssumedRoleID string `xml:"AssumedRoleId"`
	Arn           string `xml:"Arn"`
}

// Model constraints of AssumeRole (botocore sts/2011-06-15).
var (
	roleSessionNamePattern = regexp.MustCompile(`^[\w+=,.@-]*$`)
	externalIDPattern      = regexp.MustCompile(`^[\w+=,.@:/-]*$`)
	tagPattern             = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)
	policyChars            = regexp.MustCompile(`^[\x{0009}\x{000A}\x{000D}\x{0020}-\x{00FF}]+$`)
	arnChars               = regexp.MustCompile(`^[\x{0009}\x{000A}\x{000D}\x{0020}-\x{007E}\x{0085}\x{00A0}-\x{D7FF}\x{E000}-\x{FFFD}\x{10000}-\x{10FFFF}]+$`)
)

const (
	maxSessionTags = 50
	// packedTagLimit is the packed size of session tags that is 100%:
	// the plain-text bound AWS documents for session policies and tags.
	packedTagLimit = 2048
)

// violations collects AWS's "1 validation error detected: …" message.
type violations []string

func (v *violations) add(format string, args ...any) { *v = append(*v, fmt.Sprintf(format, args...)) }

func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	noun := "error"
	if len(v) > 1 {
		noun = "errors"
	}
	return senderError(http.StatusBadRequest, "ValidationError", "%d validation %s detected: %s", len(v), noun, strings.Join(v, "; "))
}

// length checks a string member's length bounds (in characters, as the
// model counts them).
func (v *violations) length(member, value string, minLen, maxLen int) bool {
	n := utf8.RuneCountInString(value)
	switch {
	case n < minLen:
		v.add("Value '%s' at '%s' failed to satisfy constraint: Member must have length greater than or equal to %d", clip(value), member, minLen)
	case n > maxLen:
		v.add("Value '%s' at '%s' failed to satisfy constraint: Member must have length less than or equal to %d", clip(value), member, maxLen)
	default:
		return true
	}
	return false
}

func (v *violations) pattern(member, value string, re *regexp.Regexp, shown string) {
	if !re.MatchString(value) {
		v.add("Value '%s' at '%s' failed to satisfy constraint: Member must satisfy regular expression pattern: %s", clip(value), member, shown)
	}
}

// assumeRole issues temporary credentials for a session of a role. Both
// the caller's own policies (sts:AssumeRole on the role, and
// sts:TagSession when it passes tags) and the role's trust policy must let
// it in. An inline session policy (Policy) limits the session to what both
// it and the role's policies allow; managed session policies (PolicyArns)
// are refused, never ignored, since an ignored one would grant more than
// the caller asked for.
func (h *Handler) assumeRole(ctx context.Context, p params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	in, err := parseAssumeRole(p)
	if err != nil {
		return nil, err
	}
	in.Caller = who
	// The role may be another account's: its trust policy decides that.
	if err := h.cfg.Authorizer.AuthorizeAssumeRole(ctx, iam.ActionAssumeRole, in.RoleARN); err != nil {
		return nil, err
	}
	if len(in.Tags) > 0 {
		if err := h.cfg.Authorizer.AuthorizeAssumeRole(ctx, iam.ActionTagSession, in.RoleARN); err != nil {
			return nil, err
		}
	}
	packed, err := packedSize(in)
	if err != nil {
		return nil, err
	}
	sess, err := h.cfg.Keys.AssumeRole(ctx, in)
	if err != nil {
		return nil, err
	}
	signer, _ := access.ParseSigner(sess.ARN)
	res := assumeRoleResult{
		Credentials: credentialsXML{
			AccessKeyID: sess.AccessKeyID, SecretAccessKey: sess.SecretAccessKey, SessionToken: sess.SessionToken,
			Expiration: sess.Expiration.UTC().Format(time.RFC3339),
		},
		AssumedRoleUser: assumedRoleUserXML{AssumedRoleID: signer.Principal.ID() + ":" + in.SessionName, Arn: sess.ARN},
		SourceIdentity:  in.SourceIdentity,
	}
	if packed >= 0 {
		res.PackedPolicySize = &packed
	}
	return assumeRoleResponse{Xmlns: apiSTS.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
}

// parseAssumeRole checks AssumeRole's members against the model, naming
// every violation as AWS does, before anything is looked up.
func parseAssumeRole(p params) (iam.AssumeRoleInput, error) {
	var v violations
	var in iam.AssumeRoleInput
	roleARN, name := roleAndSession(p, &v)
	in.Duration = durationSeconds(p, &v)
	if si, ok := p.get("SourceIdentity"); ok && v.length("sourceIdentity", si, 2, 64) {
		v.pattern("sourceIdentity", si, roleSessionNamePattern, `[\w+=,.@-]*`)
		in.SourceIdentity = si
	}
	if ext, ok := p.get("ExternalId"); ok && v.length("externalId", ext, 2, 1224) {
		// The trust policy's sts:ExternalId condition decides on it.
		v.pattern("externalId", ext, externalIDPattern, `[\w+=,.@:\/-]*`)
		in.Context = map[string][]string{"sts:externalid": {ext}}
	}
	in.Tags = parseTags(p, &v)
	if err := v.err(); err != nil {
		return in, err
	}
	sp, err := sessionPolicy(p)
	if err != nil {
		return in, err
	}
	in.RoleARN, in.SessionName, in.SessionPolicy = roleARN, name, sp
	return in, nil
}

// sessionPolicy reads the inline session policy (Policy): 1 to 2048
// characters of a policy document saltbush evaluates (MalformedPolicyDocument
// otherwise). Managed session policies (PolicyArns) are refused.
func sessionPolicy(p params) (string, error) {
	if p.has("PolicyArns") {
		return "", senderError(http.StatusBadRequest, "ValidationError",
			"Managed session policies (PolicyArns) are not supported: pass the policy inline (Policy).")
	}
	doc, ok := p.get("Policy")
	if !ok {
		return "", nil
	}
	var v violations
	if v.length("policy", doc, 1, 2048) {
		v.pattern("policy", doc, policyChars, `[\u0009\u000A\u000D\u0020-\u00FF]+`)
	}
	if err := v.err(); err != nil {
		return "", err
	}
	if _, err := policy.Parse([]byte(doc)); err != nil {
		return "", senderError(http.StatusBadRequest, "MalformedPolicyDocument", "The policy is not a policy document saltbush evaluates: %v", err)
	}
	return doc, nil
}

// packedSize is the session's PackedPolicySize, the share of the packed
// limit its tags and session policy take (-1 when it has neither, so it is
// left out of the answer); over 100 is PackedPolicyTooLarge.
func packedSize(in iam.AssumeRoleInput) (int, error) {
	if len(in.Tags) == 0 && in.SessionPolicy == "" {
		return -1, nil
	}
	n := len(in.SessionPolicy)
	for _, t := range in.Tags {
		n += len(t.GetKey()) + len(t.GetValue())
	}
	packed := (100*n + packedTagLimit - 1) / packedTagLimit
	if packed > 100 {
		return 0, senderError(http.StatusBadRequest, "PackedPolicyTooLarge",
			"Serialized token too large for session: the session policy and tags take %d%% of the packed size limit.", packed)
	}
	return packed, nil
}

// roleAndSession reads the RoleArn and RoleSessionName every AssumeRole*
// operation takes, with the model's constraints.
func roleAndSession(p params, v *violations) (roleARN, name string) {
	roleARN, ok := p.get("RoleArn")
	if !ok {
		v.add("Value null at 'roleArn' failed to satisfy constraint: Member must not be null")
	} else if v.length("roleArn", roleARN, 20, 2048) && !arnChars.MatchString(roleARN) {
		v.pattern("roleArn", roleARN, arnChars, `[\u0009\u000A\u000D\u0020-\u007E\u0085\u00A0-\uD7FF\uE000-\uFFFD\u10000-\u10FFFF]+`)
	}
	name, ok = p.get("RoleSessionName")
	if !ok {
		v.add("Value null at 'roleSessionName' failed to satisfy constraint: Member must not be null")
	} else if v.length("roleSessionName", name, 2, 64) {
		v.pattern("roleSessionName", name, roleSessionNamePattern, `[\w+=,.@-]*`)
	}
	return roleARN, name
}

// tagPair is one Tags.member.N of a query request.
type tagPair struct{ key, value string }

// readTags reads Tags.member.N.Key and .Value, STS's and IAM's alike, with
// the model's violations named as AWS names them (tags.N.member.key);
// onDup is called, in the violations' order, for a key given again
// whatever its case (STS and IAM refuse it with different codes).
func readTags(p params, v *violations, onDup func()) []tagPair {
	var tags []tagPair
	seen := map[string]bool{}
	for i := 1; ; i++ {
		prefix := "Tags.member." + strconv.Itoa(i)
		key, hasKey := p.get(prefix + ".Key")
		value, hasValue := p.get(prefix + ".Value")
		if !hasKey && !hasValue {
			break
		}
		member := fmt.Sprintf("tags.%d.member", i)
		if !hasKey {
			v.add("Value null at '%s.key' failed to satisfy constraint: Member must not be null", member)
		} else if v.length(member+".key", key, 1, 128) {
			v.pattern(member+".key", key, tagPattern, `[\p{L}\p{Z}\p{N}_.:/=+\-@]+`)
		}
		if !hasValue {
			v.add("Value null at '%s.value' failed to satisfy constraint: Member must not be null", member)
		} else if v.length(member+".value", value, 0, 256) {
			v.pattern(member+".value", value, tagPattern, `[\p{L}\p{Z}\p{N}_.:/=+\-@]*`)
		}
		if lk := strings.ToLower(key); hasKey && seen[lk] {
			onDup()
		} else {
			seen[lk] = true
		}
		tags = append(tags, tagPair{key: key, value: value})
	}
	return tags
}

// parseTags reads AssumeRole's session tags: keys are case-insensitive and
// unique.
func parseTags(p params, v *violations) []*storagev1.SessionTag {
	var tags []*storagev1.SessionTag
	for _, t := range readTags(p, v, func() {
		v.add("Duplicate tag keys found. Please note that Tag keys are case insensitive.")
	}) {
		tags = append(tags, &storagev1.SessionTag{Key: t.key, Value: t.value})
	}
	if len(tags) > maxSessionTags {
		v.add("Value '[…]' at 'tags' failed to satisfy constraint: Member must have length less than or equal to %d", maxSessionTags)
	}
	return tags
}

// requestID is the id of the request ctx belongs to.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

type requestIDKey struct{}

// withRequestID returns ctx carrying the request id for response metadata.
func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}
