// Package sigv4 verifies AWS Signature Version 4 on requests to the EKS
// façade (docs/architecture.md, "Identity and authorization"), in both the
// Authorization-header and the presigned query forms. It rebuilds the canonical request exactly as aws-sdk-go-v2's
// signer does for service "eks", so that requests from unmodified AWS SDKs
// and the AWS CLI verify, and it reports failures as the AWS exceptions
// those clients expect. server/token uses it too, for the presigned STS
// URLs inside EKS bearer tokens (service "sts", path "/", so the same
// canonical form).
//
// A request signed with temporary credentials (a role session) carries
// X-Amz-Security-Token, signed as a header or as a presigned URL's query
// parameter; Verifier.SessionLookup resolves such key ids with their token.
//
// The package only authenticates: it says which access key signed a
// request and for which region. Mapping keys to accounts and principals,
// and authorization, are the caller's job.
package sigv4

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Exception names, as AWS sends them in X-Amzn-ErrorType.
const (
	// MissingAuthenticationToken is sent when a request carries no
	// signature at all.
	MissingAuthenticationToken = "MissingAuthenticationTokenException"
	// UnrecognizedClient is sent when the access key id is unknown.
	UnrecognizedClient = "UnrecognizedClientException"
	// InvalidSignature is sent for every other failure: malformed
	// signature fields, wrong scope, dates out of range, expired presigned
	// URLs and signatures that do not match.
	InvalidSignature = "InvalidSignatureException"
	// ExpiredToken is sent when a request is signed with temporary
	// credentials whose session has expired.
	ExpiredToken = "ExpiredTokenException"
)

// Messages AWS uses verbatim; clients and tests match on them.
const (
	msgMissingToken = "Missing Authentication Token"
	msgUnrecognized = "The security token included in the request is invalid."
	msgExpiredToken = "The security token included in the request is expired"
	msgMismatch     = "The request signature we calculated does not match the signature you provided. " +
		"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)

const (
	algorithm       = "AWS4-HMAC-SHA256"
	terminator      = "aws4_request"
	timeFormat      = "20060102T150405Z"
	unsignedPayload = "UNSIGNED-PAYLOAD"

	// Input bounds. They are far above anything an SDK sends and exist so
	// that a hostile request costs a bounded amount of work before it is
	// rejected.
	maxAuthorizationLen = 4 << 10
	maxSignedHeaders    = 64
	maxQueryLen         = 16 << 10
	maxQueryParams      = 256
	maxPathLen          = 8 << 10
	maxKeyIDLen         = 128
	maxRegionLen        = 64
	// maxPresignExpires is AWS's own ceiling for presigned URLs (7 days).
	maxPresignExpires = 7 * 24 * 60 * 60

	defaultService = "eks"
	defaultSkew    = 15 * time.Minute
)

// Error is an authentication failure, carrying the AWS exception name and
// message the façade must send. Every Error is rendered as HTTP 403.
type Error struct {
	// Exception is the AWS error type, one of the constants above.
	Exception string
	// Message is the human-readable message AWS would send.
	Message string
	// Expired is true when the request was refused because its date lies
	// outside the validity window (expired, or not yet current), before
	// its key or signature were looked at. AWS sends these as
	// InvalidSignatureException like any other failure; callers that
	// report expiry differently (bearer tokens) need to tell them apart
	// without parsing Message.
	Expired bool
}

// Error implements error.
func (e *Error) Error() string { return e.Exception + ": " + e.Message }

// StatusCode is the HTTP status AWS sends for all SigV4 failures.
func (e *Error) StatusCode() int { return http.StatusForbidden }

func invalid(format string, args ...any) *Error {
	return &Error{Exception: InvalidSignature, Message: fmt.Sprintf(format, args...)}
}

// Lookup returns the secret of an access key id, ok=false when unknown. A
// non-nil err means the store could not answer (not that the key is bad);
// Verify returns it unchanged so the caller can answer 500, not 403.
type Lookup func(ctx context.Context, accessKeyID string) (secret string, ok bool, err error)

// SessionLookup returns the secret of temporary credentials (a role
// session's key id) presented with their session token, ok=false when the
// pair is unknown, mismatched or revoked. An expired session is the
// *Error ExpiredTokenError returns; any other error means the store could
// not answer.
type SessionLookup func(ctx context.Context, accessKeyID, sessionToken string) (secret string, ok bool, err error)

// ExpiredTokenError is the refusal of an expired session's request.
func ExpiredTokenError() *Error {
	return &Error{Exception: ExpiredToken, Message: msgExpiredToken}
}

// Verifier checks SigV4 signatures. The zero value of each field has a
// sensible default except Lookup, without which every key is unknown.
type Verifier struct {
	// Service is the signing name required in the credential scope; "eks"
	// when empty.
	Service string
	// Skew is how far X-Amz-Date may be from Now in either direction;
	// 15 minutes (AWS's window) when zero.
	Skew time.Duration
	// Now returns the current time; time.Now when nil. Tests fix it.
	Now func() time.Time
	// Lookup resolves access key ids to secrets.
	Lookup Lookup
	// SessionLookup resolves the key ids of temporary credentials, for a
	// request that carries X-Amz-Security-Token (a signed header, or a
	// query parameter of a presigned URL). When nil, every request with a
	// session token is refused as unrecognized.
	SessionLookup SessionLookup
	// Keys memoises derived signing keys; none when nil. A signing key
	// depends only on the secret, the date and the scope, so a client
	// signing many requests a day costs four HMACs once, not per request
	// (the AWS SDKs cache it on their side for the same reason).
	Keys *SigningKeys
	// PresignedLifetime, when > 0, replaces X-Amz-Expires for presigned
	// URLs: they are valid from X-Amz-Date-Skew until
	// X-Amz-Date+PresignedLifetime whatever X-Amz-Expires says, and
	// X-Amz-Expires=0 is accepted. This is STS's rule for presigned
	// GetCallerIdentity URLs (they live 15 minutes), on which EKS bearer
	// tokens rely: `aws eks get-token` signs X-Amz-Expires=60 and the
	// token is used for up to 15 minutes. When zero, X-Amz-Expires (1 s
	// to 7 days) bounds the URL, as for every other AWS service.
	PresignedLifetime time.Duration
}

// SigningKeys is a bounded memo of derived signing keys, safe for
// concurrent use.
type SigningKeys struct {
	mu sync.Mutex
	m  map[signingKeyID][]byte
}

// signingKeyID names a derived key. The secret is part of it: a key
// derived from an old secret is never used for a new one.
type signingKeyID struct {
	secret, date, region, service string
}

// maxSigningKeys bounds the memo; it is emptied when full (it refills at
// the cost of one derivation per active key).
const maxSigningKeys = 10000

// NewSigningKeys returns an empty memo.
func NewSigningKeys() *SigningKeys { return &SigningKeys{m: map[signingKeyID][]byte{}} }

func (c *SigningKeys) get(secret, date, region, service string) []byte {
	if c == nil {
		return signingKey(secret, date, region, service)
	}
	id := signingKeyID{secret, date, region, service}
	c.mu.Lock()
	k, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return k
	}
	k = signingKey(secret, date, region, service)
	c.mu.Lock()
	if len(c.m) >= maxSigningKeys {
		clear(c.m)
	}
	c.m[id] = k
	c.mu.Unlock()
	return k
}

// Result is what a verified signature proves.
type Result struct {
	// AccessKeyID is the key that signed the request.
	AccessKeyID string
	// Region is the region named in the credential scope. It is signed, so
	// it can be trusted; checking it against the serving region is the
	// caller's choice.
	Region string
	// SessionToken is the verified request's session token, empty for a
	// long-term access key.
	SessionToken string
}

// parsed holds the signature fields of either form.
type parsed struct {
	presigned     bool
	keyID         string
	date          string // the credential scope's yyyymmdd
	region        string
	service       string
	signedHeaders []string
	signedRaw     string // SignedHeaders exactly as sent, as it is signed
	signature     string
	amzDate       string
	expires       int64 // presigned only
}

// Verify checks r (header form `Authorization: AWS4-HMAC-SHA256
// Credential=AKID/date/region/service/aws4_request, SignedHeaders=...,
// Signature=...` with X-Amz-Date, or the presigned query form with
// X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires,
// X-Amz-SignedHeaders and X-Amz-Signature) against payload, the complete
// request body, and returns the verified access key id and credential
// scope region.
//
// Failures are *Error; any other error comes from Lookup.
func (v *Verifier) Verify(ctx context.Context, r *http.Request, payload []byte) (Result, error) {
	service := v.Service
	if service == "" {
		service = defaultService
	}
	skew := v.Skew
	if skew <= 0 {
		skew = defaultSkew
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	now = now.UTC()

	if r == nil || r.URL == nil {
		return Result{}, &Error{Exception: MissingAuthenticationToken, Message: msgMissingToken}
	}
	if len(r.URL.RawQuery) > maxQueryLen {
		return Result{}, invalid("The query string is too long.")
	}
	// The query is parsed the way the SDK reads it (url.ParseQuery:
	// '+' is a space) because the SDK signs req.URL.Query().
	query, qerr := url.ParseQuery(r.URL.RawQuery)

	authz := r.Header.Values("Authorization")
	presign := qerr == nil && (query.Has("X-Amz-Algorithm") || query.Has("X-Amz-Credential") || query.Has("X-Amz-Signature"))
	switch {
	case len(authz) == 0 && !presign:
		return Result{}, &Error{Exception: MissingAuthenticationToken, Message: msgMissingToken}
	case len(authz) > 0 && presign:
		// Two signatures could disagree about what is signed; AWS refuses
		// the ambiguity and so do we.
		return Result{}, invalid("Only one authentication mechanism may be used: the Authorization header or the X-Amz-Algorithm query parameter.")
	case len(authz) > 1:
		return Result{}, invalid("Only one Authorization header may be sent.")
	}
	if qerr != nil {
		return Result{}, invalid("The query string is malformed.")
	}
	if len(query) > maxQueryParams {
		return Result{}, invalid("The query string has too many parameters.")
	}
	// A session token is never ignored: ignoring it would accept an
	// expired or revoked session as a long-term key. It must be signed:
	// a header named in SignedHeaders, or a query parameter of the
	// presigned URL (the whole query is signed).
	token, hasToken, err := sessionToken(r, query, presign)
	if err != nil {
		return Result{}, err
	}

	var p parsed
	if presign {
		p, err = parsePresigned(query, v.PresignedLifetime > 0)
	} else {
		p, err = parseAuthorization(authz[0])
		if err == nil {
			p.amzDate, err = singleHeader(r, "X-Amz-Date")
		}
	}
	if err != nil {
		return Result{}, err
	}
	if err := checkScope(&p, service); err != nil {
		return Result{}, err
	}
	if hasToken && !presign && !p.signs("x-amz-security-token") {
		return Result{}, invalid("SignedHeaders must include x-amz-security-token when the request carries a session token.")
	}
	// Dates are checked before the key lookup so that replayed or stale
	// requests are refused without touching the key store.
	if err := checkTime(&p, now, skew, v.PresignedLifetime); err != nil {
		return Result{}, err
	}

	var secret string
	var ok bool
	var lerr error
	if hasToken {
		if v.SessionLookup != nil {
			secret, ok, lerr = v.SessionLookup(ctx, p.keyID, token)
		}
	} else {
		secret, ok, lerr = lookup(ctx, v.Lookup, p.keyID)
	}
	if lerr != nil {
		return Result{}, lerr
	}
	if !ok {
		return Result{}, &Error{Exception: UnrecognizedClient, Message: msgUnrecognized}
	}

	uri, err := canonicalURI(r)
	if err != nil {
		return Result{}, err
	}
	headers, err := canonicalHeaders(r, p.signedHeaders)
	if err != nil {
		return Result{}, err
	}
	if presign {
		query.Del("X-Amz-Signature")
	}
	cq := canonicalQuery(query)
	hashes, err := payloadHashes(r, payload, presign)
	if err != nil {
		return Result{}, err
	}

	scope := p.date + "/" + p.region + "/" + p.service + "/" + terminator
	key := v.Keys.get(secret, p.date, p.region, p.service)
	for _, h := range hashes {
		creq := r.Method + "\n" + uri + "\n" + cq + "\n" + headers + "\n" + p.signedRaw + "\n" + h
		sum := sha256.Sum256([]byte(creq))
		sts := algorithm + "\n" + p.amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
		want := hex.EncodeToString(hmacSHA256(key, []byte(sts)))
		// Constant time, so the comparison leaks nothing about how much
		// of a forged signature was right.
		if hmac.Equal([]byte(want), []byte(p.signature)) {
			return Result{AccessKeyID: p.keyID, Region: p.region, SessionToken: token}, nil
		}
	}
	return Result{}, &Error{Exception: InvalidSignature, Message: msgMismatch}
}

// maxSessionTokenLen bounds X-Amz-Security-Token (saltbush's are 128
// characters; AWS's stay under a few KiB).
const maxSessionTokenLen = 8 << 10

// sessionToken returns the request's session token: one header value (the
// header form) or one query parameter (the presigned form).
func sessionToken(r *http.Request, query url.Values, presign bool) (string, bool, *Error) {
	hs := r.Header.Values("X-Amz-Security-Token")
	qs, inQuery := query["X-Amz-Security-Token"]
	switch {
	case len(hs) == 0 && !inQuery:
		return "", false, nil
	case len(hs) > 0 && inQuery, presign && len(hs) > 0, !presign && inQuery:
		return "", false, invalid("The session token must be sent once: as the X-Amz-Security-Token header, or for a presigned URL as its query parameter.")
	case len(hs) > 1, len(qs) > 1:
		return "", false, invalid("Only one X-Amz-Security-Token may be sent.")
	}
	t := ""
	if presign {
		t = qs[0]
	} else {
		t = hs[0]
	}
	if t == "" || len(t) > maxSessionTokenLen {
		return "", false, &Error{Exception: UnrecognizedClient, Message: msgUnrecognized}
	}
	return t, true, nil
}

func lookup(ctx context.Context, l Lookup, keyID string) (string, bool, error) {
	if l == nil {
		return "", false, nil
	}
	return l(ctx, keyID)
}

// parseAuthorization reads `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`.
// The three components may come in any order (AWS accepts that) but each
// exactly once.
func parseAuthorization(h string) (parsed, *Error) {
	var p parsed
	if len(h) > maxAuthorizationLen {
		return p, invalid("The Authorization header is too long.")
	}
	alg, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || alg != algorithm {
		return p, invalid("Authorization header algorithm must be %s.", algorithm)
	}
	var cred, signed, sig string
	var haveCred, haveSigned, haveSig bool
	for _, part := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return p, invalid("Authorization header is malformed.")
		}
		switch k {
		case "Credential":
			if haveCred {
				return p, invalid("Authorization header has a duplicate 'Credential' parameter.")
			}
			cred, haveCred = val, true
		case "SignedHeaders":
			if haveSigned {
				return p, invalid("Authorization header has a duplicate 'SignedHeaders' parameter.")
			}
			signed, haveSigned = val, true
		case "Signature":
			if haveSig {
				return p, invalid("Authorization header has a duplicate 'Signature' parameter.")
			}
			sig, haveSig = val, true
		default:
			return p, invalid("Authorization header is malformed.")
		}
	}
	var missing []string
	if !haveCred {
		missing = append(missing, "Authorization header requires 'Credential' parameter.")
	}
	if !haveSig {
		missing = append(missing, "Authorization header requires 'Signature' parameter.")
	}
	if !haveSigned {
		missing = append(missing, "Authorization header requires 'SignedHeaders' parameter.")
	}
	if len(missing) > 0 {
		return p, invalid("%s", strings.Join(missing, " "))
	}
	if err := p.setCredential(cred); err != nil {
		return p, err
	}
	if err := p.setSignedHeaders(signed); err != nil {
		return p, err
	}
	if err := p.setSignature(sig); err != nil {
		return p, err
	}
	// x-amz-date must be signed or a captured request could be replayed
	// forever with a fresh date.
	if !p.signs("x-amz-date") {
		return p, invalid("SignedHeaders must include x-amz-date.")
	}
	return p, nil
}

// parsePresigned reads the X-Amz-* query parameters of a presigned URL.
// zeroExpires allows X-Amz-Expires=0, meaningful only when a fixed
// lifetime replaces it (see Verifier.PresignedLifetime).
func parsePresigned(q url.Values, zeroExpires bool) (parsed, *Error) {
	p := parsed{presigned: true}
	get := func(name string) (string, *Error) {
		vs := q[name]
		if len(vs) != 1 || vs[0] == "" {
			return "", invalid("The presigned URL requires exactly one '%s' query parameter.", name)
		}
		return vs[0], nil
	}
	var vals [6]string
	for i, name := range [...]string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
		s, err := get(name)
		if err != nil {
			return p, err
		}
		vals[i] = s
	}
	if vals[0] != algorithm {
		return p, invalid("X-Amz-Algorithm must be %s.", algorithm)
	}
	if err := p.setCredential(vals[1]); err != nil {
		return p, err
	}
	p.amzDate = vals[2]
	minExpires := int64(1)
	if zeroExpires {
		minExpires = 0
	}
	n, perr := strconv.ParseInt(vals[3], 10, 64)
	if perr != nil || n < minExpires || n > maxPresignExpires || vals[3][0] == '+' {
		return p, invalid("X-Amz-Expires must be an integer between %d and %d.", minExpires, maxPresignExpires)
	}
	p.expires = n
	if err := p.setSignedHeaders(vals[4]); err != nil {
		return p, err
	}
	if err := p.setSignature(vals[5]); err != nil {
		return p, err
	}
	return p, nil
}

// setCredential splits AKID/yyyymmdd/region/service/aws4_request.
func (p *parsed) setCredential(c string) *Error {
	parts := strings.Split(c, "/")
	if len(parts) != 5 {
		return invalid("Credential must have the form <key>/<yyyymmdd>/<region>/<service>/aws4_request.")
	}
	if !isKeyID(parts[0]) {
		return invalid("The Credential access key id is malformed.")
	}
	if len(parts[1]) != 8 || !allDigits(parts[1]) {
		return invalid("The Credential date must have the form yyyymmdd.")
	}
	if !isRegion(parts[2]) {
		return invalid("Credential should be scoped to a valid region.")
	}
	if parts[4] != terminator {
		return invalid("Credential should be scoped with a valid terminator: 'aws4_request', not '%s'.", clip(parts[4]))
	}
	p.keyID, p.date, p.region, p.service = parts[0], parts[1], parts[2], parts[3]
	return nil
}

// setSignedHeaders validates the SignedHeaders list: lowercase header
// names, strictly ascending (as every SDK sends them), host included.
// Requiring the canonical order means one signature has one reading.
func (p *parsed) setSignedHeaders(s string) *Error {
	if s == "" {
		return invalid("SignedHeaders must not be empty.")
	}
	if strings.Count(s, ";") >= maxSignedHeaders {
		return invalid("SignedHeaders may name at most %d headers.", maxSignedHeaders)
	}
	names := strings.Split(s, ";")
	for i, n := range names {
		if !isLowerToken(n) {
			return invalid("SignedHeaders must be lowercase header names separated by ';'.")
		}
		if i > 0 && names[i-1] >= n {
			return invalid("SignedHeaders must be sorted and unique.")
		}
	}
	p.signedHeaders, p.signedRaw = names, s
	// host must be signed or the request could be replayed to another
	// endpoint.
	if !p.signs("host") {
		return invalid("SignedHeaders must include host.")
	}
	return nil
}

func (p *parsed) setSignature(s string) *Error {
	if len(s) != 64 || !isLowerHex(s) {
		return invalid("The Signature must be 64 lowercase hexadecimal characters.")
	}
	p.signature = s
	return nil
}

func (p *parsed) signs(name string) bool {
	i := sort.SearchStrings(p.signedHeaders, name)
	return i < len(p.signedHeaders) && p.signedHeaders[i] == name
}

// checkScope compares the credential scope with the service and the date.
func checkScope(p *parsed, service string) *Error {
	if p.service != service {
		return invalid("Credential should be scoped to correct service: '%s'. ", service)
	}
	if len(p.amzDate) != len(timeFormat) {
		return invalid("X-Amz-Date must have the form yyyymmddThhmmssZ.")
	}
	if p.amzDate[:8] != p.date {
		return invalid("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from 'X-Amz-Date'.", p.date, p.amzDate[:8])
	}
	return nil
}

// checkTime enforces the skew window (header form) or the presigned
// validity window [date-skew, date+expires], where lifetime, when > 0,
// stands in for expires.
func checkTime(p *parsed, now time.Time, skew, lifetime time.Duration) *Error {
	t, ok := parseAmzDate(p.amzDate)
	if !ok {
		return invalid("X-Amz-Date must have the form yyyymmddThhmmssZ.")
	}
	f := func(t time.Time) string { return t.UTC().Format(timeFormat) }
	mins := int64(skew / time.Minute)
	if t.After(now.Add(skew)) {
		return expired("Signature not yet current: %s is still later than %s (%s + %d min.)", p.amzDate, f(now.Add(skew)), f(now), mins)
	}
	if p.presigned {
		valid := time.Duration(p.expires) * time.Second
		if lifetime > 0 {
			valid = lifetime
		}
		if end := t.Add(valid); now.After(end) {
			return expired("Signature expired: %s is now earlier than %s (%s - %d sec.)", f(end), f(now), p.amzDate, int64(valid/time.Second))
		}
		return nil
	}
	if t.Before(now.Add(-skew)) {
		return expired("Signature expired: %s is now earlier than %s (%s - %d min.)", p.amzDate, f(now.Add(-skew)), f(now), mins)
	}
	return nil
}

// expired is invalid for a date outside the validity window.
func expired(format string, args ...any) *Error {
	e := invalid(format, args...)
	e.Expired = true
	return e
}

// parseAmzDate accepts exactly yyyymmddThhmmssZ. time.Parse alone would
// also accept fractional seconds, so the shape is checked first.
func parseAmzDate(s string) (time.Time, bool) {
	if len(s) != len(timeFormat) || s[8] != 'T' || s[15] != 'Z' || !allDigits(s[:8]) || !allDigits(s[9:15]) {
		return time.Time{}, false
	}
	t, err := time.Parse(timeFormat, s)
	return t, err == nil
}

// canonicalURI matches aws-sdk-go-v2's signer for service eks: the path as
// sent on the wire (escaped, so an ARN label keeps its %3A and %2F), then
// escaped once more (DisableURIPathEscaping is false for eks, so '%'
// becomes %25). Only this double-encoded form is accepted: also accepting
// the single-encoded form would let a signature for /a%2Fb verify a
// request for /a%252Fb.
func canonicalURI(r *http.Request) (string, *Error) {
	p := r.URL.EscapedPath()
	if r.URL.Opaque != "" {
		return "", invalid("The request URI is malformed.")
	}
	if len(p) > maxPathLen {
		return "", invalid("The request path is too long.")
	}
	if p == "" {
		p = "/"
	}
	var b strings.Builder
	b.Grow(len(p) + 16)
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isUnreserved(c) || c == '/' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String(), nil
}

// canonicalQuery encodes names and values (RFC 3986, %20 for space) and
// sorts the pairs by encoded name, then encoded value, as SigV4 and the
// SDK's EncodeQuery do.
func canonicalQuery(q url.Values) string {
	type pair struct{ k, v string }
	pairs := make([]pair, 0, len(q))
	for k, vs := range q {
		ek := encodeQuery(k)
		for _, v := range vs {
			pairs = append(pairs, pair{ek, encodeQuery(v)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String()
}

func encodeQuery(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// canonicalHeaders renders `name:value\n` for each signed header. host
// comes from r.Host (Go moves it out of Header); content-length from the
// header or r.ContentLength (the SDK signs the length it sends). Values
// are trimmed and inner runs of spaces collapsed; repeated headers are
// joined with ','.
func canonicalHeaders(r *http.Request, names []string) (string, *Error) {
	// Index headers by lowercase name once; a client's capitalisation
	// does not matter to SigV4.
	lower := make(map[string][]string, len(r.Header))
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		lower[lk] = append(lower[lk], vs...)
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(':')
		switch n {
		case "host":
			host := r.Host
			if host == "" {
				host = r.URL.Host
			}
			if host == "" {
				return "", invalid("The signed header 'host' is missing.")
			}
			b.WriteString(stripExcessSpaces(host))
		default:
			vs, ok := lower[n]
			if !ok && n == "content-length" && r.ContentLength > 0 {
				vs, ok = []string{strconv.FormatInt(r.ContentLength, 10)}, true
			}
			if !ok {
				return "", invalid("The signed header '%s' is missing.", clip(n))
			}
			for i, v := range vs {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strings.TrimSpace(stripExcessSpaces(v)))
			}
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// payloadHashes returns the payload hashes a valid signature may have
// used. The body is always hashed: an X-Amz-Content-Sha256 header must
// agree with it. UNSIGNED-PAYLOAD is accepted only where the body is
// empty, so that no signature ever leaves a body unauthenticated; a
// presigned URL (which usually says UNSIGNED-PAYLOAD) therefore works for
// bodiless requests and, with the body hash, for others.
func payloadHashes(r *http.Request, payload []byte, presigned bool) ([]string, *Error) {
	sum := sha256.Sum256(payload)
	computed := hex.EncodeToString(sum[:])
	if vs := r.Header.Values("X-Amz-Content-Sha256"); len(vs) > 0 {
		if len(vs) != 1 {
			return nil, invalid("Only one X-Amz-Content-Sha256 header may be sent.")
		}
		switch {
		case vs[0] == computed:
			return []string{computed}, nil
		case vs[0] == unsignedPayload && len(payload) == 0:
			return []string{unsignedPayload}, nil
		default:
			return nil, invalid("The provided 'x-amz-content-sha256' header does not match what was computed.")
		}
	}
	if presigned && len(payload) == 0 {
		return []string{computed, unsignedPayload}, nil
	}
	return []string{computed}, nil
}

// signingKey derives kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request").
func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), []byte(date))
	k = hmacSHA256(k, []byte(region))
	k = hmacSHA256(k, []byte(service))
	return hmacSHA256(k, []byte(terminator))
}

func hmacSHA256(key, data []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(data)
	return h.Sum(nil)
}

// singleHeader returns the one value of a required header.
func singleHeader(r *http.Request, name string) (string, *Error) {
	vs := r.Header.Values(name)
	if len(vs) != 1 || vs[0] == "" {
		return "", invalid("Authorization header requires existence of exactly one '%s' header.", name)
	}
	return vs[0], nil
}

// stripExcessSpaces trims spaces at both ends and collapses inner runs of
// spaces to one, as the SDK's StripExcessSpaces does (spaces only, not tabs).
func stripExcessSpaces(s string) string {
	s = strings.Trim(s, " ")
	if !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prevSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' {
			if prevSpace {
				continue
			}
			prevSpace = true
		} else {
			prevSpace = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

func isUnreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isKeyID accepts AWS-shaped access key ids: 1-128 letters and digits.
func isKeyID(s string) bool {
	if s == "" || len(s) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func isRegion(s string) bool {
	if s == "" || len(s) > maxRegionLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// isLowerToken accepts a lowercase RFC 9110 header field name.
func isLowerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// clip bounds attacker-controlled text echoed in messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
