// Package token verifies the bearer tokens that `aws eks get-token` (and
// aws-iam-authenticator, and the EKS client libraries) give kubectl: the
// prefix "k8s-aws-v1." and a base64url-encoded sts:GetCallerIdentity URL,
// presigned with SigV4 and with the cluster name in the signed header
// x-k8s-aws-id.
//
// An EKS cluster checks such a token with aws-iam-authenticator, which
// validates the URL (pkg/token/token.go, tokenVerifier.Verify) and then
// sends it to STS, whose answer names the signer. Saltbush is its own STS:
// it applies the same checks in the same order and then verifies the
// signature itself against its key store, so it needs no network call and
// accepts exactly the tokens unmodified clients produce.
//
// The package only authenticates: it says which access key signed a token
// for which cluster. Mapping the key to a principal, and authorization,
// are the caller's job.
package token

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/saltbush/saltbush/gateway/sigv4"
)

const (
	// Prefix starts every version 1 token.
	Prefix = "k8s-aws-v1."
	// MaxLen is the longest token accepted, in bytes (aws-iam-authenticator's
	// bound; a real token is well under 2 KiB).
	MaxLen = 4096
	// Lifetime is how long a token is valid after its X-Amz-Date. STS
	// ignores X-Amz-Expires for presigned GetCallerIdentity URLs and
	// honours them for 15 minutes; clients rely on that (they sign
	// X-Amz-Expires=60 and cache the token for 14 minutes).
	Lifetime = 15 * time.Minute
)

const (
	// clusterIDHeader carries the cluster name in the signed request.
	clusterIDHeader = "x-k8s-aws-id"
	// dateFormat is the format of X-Amz-Date.
	dateFormat = "20060102T150405Z"
	// maxExpires is the largest X-Amz-Expires aws-iam-authenticator allows
	// (it is ignored, but a larger value is not from a known client).
	maxExpires = 900
	// skew is how far X-Amz-Date may be ahead of the clock: AWS's window.
	skew = 15 * time.Minute
	// stsService is the signing name in the credential scope.
	stsService = "sts"
)

// allowedParams are the only query keys (compared in lowercase) a token's
// URL may carry: aws-iam-authenticator's parameterWhitelist. Anything
// else could change what STS does with the request.
var allowedParams = map[string]bool{
	"action":               true,
	"version":              true,
	"x-amz-algorithm":      true,
	"x-amz-credential":     true,
	"x-amz-date":           true,
	"x-amz-expires":        true,
	"x-amz-security-token": true,
	"x-amz-signature":      true,
	"x-amz-signedheaders":  true,
}

// Reason classifies why a token was refused.
type Reason string

// Reasons a token is refused.
const (
	// Malformed: the token or its URL is not what a client produces.
	Malformed Reason = "Malformed"
	// Expired: X-Amz-Date is more than Lifetime ago, or too far ahead.
	Expired Reason = "Expired"
	// WrongHost: the URL names a host outside the STS allow-list.
	WrongHost Reason = "WrongHost"
	// BadSignature: the signature does not verify for the expected
	// cluster name (a token made for another cluster ends here).
	BadSignature Reason = "BadSignature"
	// UnknownKey: the access key is unknown or inactive, or the role
	// session of the token is unknown, revoked or expired.
	UnknownKey Reason = "UnknownKey"
)

// Error says why a token was refused. Message is safe to return to the
// cluster: it never contains the token, its signature or a secret.
type Error struct {
	// Reason classifies the failure.
	Reason Reason
	// Message explains it, worded as aws-iam-authenticator words it.
	Message string
}

// Error implements error.
func (e *Error) Error() string { return string(e.Reason) + ": " + e.Message }

// formatError is aws-iam-authenticator's FormatError: the token is refused
// before any signature work.
func formatError(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: "input token was not properly formatted: " + fmt.Sprintf(format, args...)}
}

// Identity is what a verified token proves about its signer.
type Identity struct {
	// AccessKeyID is the key that signed the token.
	AccessKeyID string
	// Region is the region of the credential scope (signed).
	Region string
	// Date is the token's X-Amz-Date; it is valid until Date+Lifetime.
	Date time.Time
	// SessionToken is the X-Amz-Security-Token of a token signed with a
	// role session's temporary credentials; empty for an access key.
	SessionToken string
}

// Verifier checks tokens. The zero value refuses every token: Hosts and
// Lookup must be set.
type Verifier struct {
	// Hosts is the STS host allow-list, usually DefaultHosts().
	Hosts Hosts
	// Lookup returns the secret of an active access key.
	Lookup sigv4.Lookup
	// SessionLookup returns the secret of a valid role session, for
	// tokens signed with temporary credentials (`aws eks get-token` run
	// with an assumed role's credentials); such tokens are refused when
	// nil.
	SessionLookup sigv4.SessionLookup
	// HTTPHosts are hosts whose presigned URLs may be plain http: the
	// addresses of saltbush's own façade, which answers STS itself, as a
	// client configured with an http STS endpoint URL names it. Every
	// other host must be https, as aws-iam-authenticator requires.
	HTTPHosts Hosts
	// Keys memoises derived signing keys; none when nil.
	Keys *sigv4.SigningKeys
	// Now returns the current time; time.Now when nil. Tests fix it.
	Now func() time.Time
}

// Verify checks token for clusterName, the name of the cluster the token
// is presented to (never the one in the token: the signature is checked
// against this name, so a token made for another cluster fails). It
// returns the signer's access key id.
//
// A refused token is an *Error. Any other error means the key store could
// not answer (or clusterName is empty, a caller bug), not that the token
// is bad.
func (v *Verifier) Verify(ctx context.Context, token, clusterName string) (Identity, error) {
	if clusterName == "" {
		return Identity{}, errors.New("token: no cluster name to verify against")
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}

	// The checks below are aws-iam-authenticator's, in its order and with
	// its messages, so that saltbush refuses what an EKS cluster refuses.
	if len(token) > MaxLen {
		return Identity{}, formatError(Malformed, "token is too large")
	}
	if !strings.HasPrefix(token, Prefix) {
		return Identity{}, formatError(Malformed, "token is missing expected %q prefix", Prefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(token[len(Prefix):])
	if err != nil {
		// The decoder's message names only an offset.
		return Identity{}, formatError(Malformed, "%v", err)
	}
	// url.Parse's error quotes the whole URL, signature included, so it
	// is not passed on.
	u, err := url.Parse(string(raw))
	if err != nil {
		return Identity{}, formatError(Malformed, "the pre-signed URL does not parse")
	}
	plain := u.Scheme == "http" && v.HTTPHosts[u.Host]
	if u.Scheme != "https" && !plain {
		return Identity{}, formatError(Malformed, "unexpected scheme %q in pre-signed URL", clip(u.Scheme))
	}
	if !plain && !v.Hosts[u.Host] {
		return Identity{}, formatError(WrongHost, "unexpected hostname %q in pre-signed URL", clip(u.Host))
	}
	if u.Path != "/" {
		return Identity{}, formatError(Malformed, "unexpected path in pre-signed URL")
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Identity{}, formatError(Malformed, "malformed query parameter")
	}
	params := make(map[string]string, len(query))
	for key, values := range query {
		lk := strings.ToLower(key)
		if !allowedParams[lk] {
			return Identity{}, formatError(Malformed, "non-whitelisted query parameter %q", clip(key))
		}
		// aws-iam-authenticator lets X-Amz-Date and x-amz-date both
		// through (the last one read wins); refusing the pair too means
		// the value checked here is the one that is signed.
		if _, dup := params[lk]; dup || len(values) != 1 {
			return Identity{}, formatError(Malformed, "query parameter with multiple values not supported")
		}
		params[lk] = values[0]
	}
	if params["action"] != "GetCallerIdentity" {
		return Identity{}, formatError(Malformed, "unexpected action parameter in pre-signed URL")
	}
	if !signsClusterID(params["x-amz-signedheaders"]) {
		return Identity{}, formatError(Malformed, "client did not sign the %s header in the pre-signed URL", clusterIDHeader)
	}
	// X-Amz-Expires is ignored (tokens live Lifetime after X-Amz-Date),
	// but a value outside 0..900 does not come from a known client.
	expires, err := strconv.Atoi(params["x-amz-expires"])
	if err != nil || expires < 0 || expires > maxExpires {
		if err != nil {
			expires = 0 // as aws-iam-authenticator reports it
		}
		return Identity{}, formatError(Malformed, "invalid X-Amz-Expires parameter in pre-signed URL: %d", expires)
	}
	date := params["x-amz-date"]
	if date == "" {
		return Identity{}, formatError(Malformed, "X-Amz-Date parameter must be present in pre-signed URL")
	}
	signedAt, err := time.Parse(dateFormat, date)
	if err != nil {
		return Identity{}, formatError(Malformed, "error parsing X-Amz-Date parameter %q into format %s", clip(date), dateFormat)
	}
	if now.After(signedAt.Add(Lifetime)) {
		return Identity{}, formatError(Expired, "X-Amz-Date parameter is expired (%.f minute expiration) %s", Lifetime.Minutes(), signedAt)
	}

	// Where aws-iam-authenticator sends the URL to STS, verify the
	// signature here: the request STS would have seen, with the cluster
	// name this cluster expects.
	r := &http.Request{
		Method: http.MethodGet,
		URL:    u,
		Host:   u.Host,
		Header: http.Header{},
	}
	r.Header.Set(clusterIDHeader, clusterName)
	sv := sigv4.Verifier{
		Service:           stsService,
		Skew:              skew,
		Now:               func() time.Time { return now },
		Lookup:            v.Lookup,
		SessionLookup:     v.SessionLookup,
		Keys:              v.Keys,
		PresignedLifetime: Lifetime,
	}
	res, err := sv.Verify(ctx, r, nil)
	if err != nil {
		var se *sigv4.Error
		if !errors.As(err, &se) {
			return Identity{}, fmt.Errorf("token: look up access key: %w", err)
		}
		reason := BadSignature
		switch {
		case se.Exception == sigv4.UnrecognizedClient, se.Exception == sigv4.ExpiredToken:
			reason = UnknownKey
		case se.Expired:
			reason = Expired
		}
		// STS's own message, as aws-iam-authenticator's STSError would
		// carry it.
		return Identity{}, &Error{Reason: reason, Message: "sts getCallerIdentity failed: " + se.Message}
	}
	if want, ok := hostRegion(u.Host); ok && res.Region != want {
		// STS answers a signature scoped to another region than its
		// endpoint's with an error; so does saltbush.
		return Identity{}, &Error{Reason: BadSignature, Message: fmt.Sprintf(
			"sts getCallerIdentity failed: Credential should be scoped to a valid region, not '%s'.", clip(res.Region))}
	}
	return Identity{AccessKeyID: res.AccessKeyID, Region: res.Region, Date: signedAt, SessionToken: res.SessionToken}, nil
}

// awsSTSHost is an AWS regional STS endpoint name.
var awsSTSHost = regexp.MustCompile(`^sts(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com$`)

// hostRegion is the region an AWS STS endpoint takes signatures for: its
// own, or us-east-1 for the global endpoint. Other hosts (--sts-host) are
// not constrained.
func hostRegion(host string) (string, bool) {
	if host == "sts.amazonaws.com" {
		return "us-east-1", true
	}
	if m := awsSTSHost.FindStringSubmatch(host); m != nil {
		return m[1], true
	}
	return "", false
}

// signsClusterID reports whether the X-Amz-SignedHeaders value names the
// cluster id header.
func signsClusterID(signedHeaders string) bool {
	for _, h := range strings.Split(signedHeaders, ";") {
		if strings.EqualFold(h, clusterIDHeader) {
			return true
		}
	}
	return false
}

// clip bounds token text echoed in messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
