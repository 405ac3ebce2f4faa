package token

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/saltbush/saltbush/gateway/sigv4"
)

const (
	testKey     = "AKIDSALTBUSHTOKEN001"
	testSecret  = "dG9rZW4tc2VjcmV0LXRva2VuLXNlY3JldC10b2tlbi1z"
	testCluster = "prod-blue"
	testRegion  = "us-east-1"
	// privateHost is an STS host a private cloud fronts itself.
	privateHost = "sts.saltbush.internal"
)

// signTime is when the test tokens are signed. Fixing it makes tokens,
// and so the fuzz corpus, the same in every process.
var signTime = time.Date(2026, 11, 30, 6, 15, 0, 0, time.UTC)

// keys is the test key store: a map, as the real store is a lookup by id.
var keys = map[string]string{testKey: testSecret}

func testLookup(_ context.Context, id string) (string, bool, error) {
	s, ok := keys[id]
	return s, ok, nil
}

func verifierAt(now time.Time) *Verifier {
	return &Verifier{
		Hosts:  DefaultHosts(privateHost),
		Lookup: testLookup,
		Keys:   sigv4.NewSigningKeys(),
		Now:    func() time.Time { return now },
	}
}

// gen describes a token to generate. Zero fields take the defaults of a
// `aws eks get-token --cluster-name prod-blue` run with testKey.
type gen struct {
	key, secret, session string
	region               string
	cluster              string
	noCluster            bool   // do not sign x-k8s-aws-id
	expires              string // X-Amz-Expires; "60" when empty, none when "-"
	endpoint             string // BaseEndpoint, for a private STS host
	at                   time.Time
}

// fixedTime is the SDK's own v4 presigner with the signing time fixed.
type fixedTime struct {
	signer *v4.Signer
	at     time.Time
}

func (p fixedTime) PresignHTTP(ctx context.Context, c aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return p.signer.PresignHTTP(ctx, c, r, payloadHash, service, region, p.at, optFns...)
}

// setExpires is the Build-step middleware EKS token generators use to put
// X-Amz-Expires on the presigned URL (the v4 presigner does not).
func setExpires(v string) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Build.Add(middleware.BuildMiddlewareFunc("SetXAmzExpires", func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok {
				q := req.URL.Query()
				q.Set("X-Amz-Expires", v)
				req.URL.RawQuery = q.Encode()
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
	}
}

// presignURL presigns sts:GetCallerIdentity as `aws eks get-token` does,
// with aws-sdk-go-v2.
func presignURL(t testing.TB, g gen) string {
	t.Helper()
	if g.key == "" {
		g.key, g.secret = testKey, testSecret
	}
	if g.region == "" {
		g.region = testRegion
	}
	if g.cluster == "" {
		g.cluster = testCluster
	}
	if g.expires == "" {
		g.expires = "60"
	}
	opts := sts.Options{
		Region:      g.region,
		Credentials: credentials.NewStaticCredentialsProvider(g.key, g.secret, g.session),
	}
	if g.endpoint != "" {
		opts.BaseEndpoint = aws.String(g.endpoint)
	}
	pc := sts.NewPresignClient(sts.New(opts))
	req, err := pc.PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		if !g.at.IsZero() {
			po.Presigner = fixedTime{signer: v4.NewSigner(), at: g.at}
		}
		po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
			if !g.noCluster {
				o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue(clusterIDHeader, g.cluster))
			}
			if g.expires != "-" {
				o.APIOptions = append(o.APIOptions, setExpires(g.expires))
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return req.URL
}

// encode wraps a URL as a token.
func encode(u string) string { return Prefix + base64.RawURLEncoding.EncodeToString([]byte(u)) }

// makeToken returns a token signed at signTime unless g says otherwise.
func makeToken(t testing.TB, g gen) string {
	t.Helper()
	if g.at.IsZero() {
		g.at = signTime
	}
	return encode(presignURL(t, g))
}

// editURL rewrites the URL inside a token with r (old, new, old, new...),
// failing if an old string is absent so that a case cannot silently test
// nothing.
func editURL(t testing.TB, tok string, r ...string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, Prefix))
	if err != nil {
		t.Fatal(err)
	}
	u := string(raw)
	if len(r)%2 != 0 {
		t.Fatalf("replacements come in pairs, got %d strings", len(r))
	}
	for i := 0; i+1 < len(r); i += 2 {
		if !strings.Contains(u, r[i]) {
			t.Fatalf("URL %q lacks %q", u, r[i])
		}
		u = strings.Replace(u, r[i], r[i+1], 1)
	}
	return encode(u)
}

// signatureOf returns the X-Amz-Signature of the URL inside a token.
func signatureOf(t testing.TB, tok string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, Prefix))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("X-Amz-Signature")
}

// flipLastHex changes the last character of a hex string.
func flipLastHex(s string) string {
	last := s[len(s)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return s[:len(s)-1] + string(repl)
}

func TestVerify(t *testing.T) {
	valid := makeToken(t, gen{})
	sig := signatureOf(t, valid)
	cases := []struct {
		name    string
		token   func(t *testing.T) string
		cluster string        // the cluster verifying; testCluster when empty
		after   time.Duration // Now - signTime
		region  string        // expected Identity.Region; testRegion when empty
		want    Reason        // "" = accepted
	}{
		{name: "valid", token: func(*testing.T) string { return valid }},
		{name: "valid-at-minute-10-expires-60", token: func(*testing.T) string { return valid }, after: 10 * time.Minute},
		{name: "valid-at-minute-15", token: func(*testing.T) string { return valid }, after: Lifetime},
		{name: "valid-clock-behind-14min", token: func(*testing.T) string { return valid }, after: -14 * time.Minute},
		{name: "valid-expires-0", token: func(t *testing.T) string { return makeToken(t, gen{expires: "0"}) }},
		{name: "valid-expires-900", token: func(t *testing.T) string { return makeToken(t, gen{expires: "900"}) }, after: 14 * time.Minute},
		{name: "valid-regional-eu-west-1", token: func(t *testing.T) string { return makeToken(t, gen{region: "eu-west-1"}) }, region: "eu-west-1"},
		{name: "valid-private-host", token: func(t *testing.T) string {
			return makeToken(t, gen{endpoint: "https://" + privateHost})
		}},
		{name: "valid-query-reordered", token: func(t *testing.T) string {
			// The canonical query is sorted, so order does not matter to
			// the signature or to aws-iam-authenticator.
			return editURL(t, valid, "Action=GetCallerIdentity&Version=2011-06-15&", "", "X-Amz-Signature=", "Version=2011-06-15&Action=GetCallerIdentity&X-Amz-Signature=")
		}},
		{name: "expired-16min", token: func(*testing.T) string { return valid }, after: 16 * time.Minute, want: Expired},
		{name: "expired-15min-1s", token: func(*testing.T) string { return valid }, after: Lifetime + time.Second, want: Expired},
		{name: "not-yet-valid-20min", token: func(*testing.T) string { return valid }, after: -20 * time.Minute, want: Expired},
		{name: "wrong-cluster-name", token: func(*testing.T) string { return valid }, cluster: "prod-green", want: BadSignature},
		{name: "token-for-other-cluster", token: func(t *testing.T) string { return makeToken(t, gen{cluster: "prod-green"}) }, want: BadSignature},
		{name: "wrong-secret", token: func(t *testing.T) string { return makeToken(t, gen{key: testKey, secret: "not-the-secret"}) }, want: BadSignature},
		{name: "tampered-signature", token: func(t *testing.T) string { return editURL(t, valid, sig, flipLastHex(sig)) }, want: BadSignature},
		{name: "tampered-signed-expires", token: func(t *testing.T) string { return editURL(t, valid, "X-Amz-Expires=60", "X-Amz-Expires=900") }, want: BadSignature},
		{name: "tampered-date", token: func(t *testing.T) string {
			return editURL(t, valid, "X-Amz-Date=20261130T061500Z", "X-Amz-Date=20261130T061501Z")
		}, want: BadSignature},
		{name: "tampered-region-host", token: func(t *testing.T) string {
			return editURL(t, valid, "sts.us-east-1.amazonaws.com", "sts.us-west-2.amazonaws.com")
		}, want: BadSignature},
		{name: "tampered-action", token: func(t *testing.T) string {
			return editURL(t, valid, "Action=GetCallerIdentity", "Action=GetSessionToken")
		}, want: Malformed},
		{name: "no-action", token: func(t *testing.T) string { return editURL(t, valid, "Action=GetCallerIdentity&", "") }, want: Malformed},
		{name: "extra-key", token: func(t *testing.T) string {
			return editURL(t, valid, "X-Amz-Signature=", "DurationSeconds=3600&X-Amz-Signature=")
		}, want: Malformed},
		{name: "duplicate-key", token: func(t *testing.T) string {
			return editURL(t, valid, "X-Amz-Signature=", "Version=2011-06-15&X-Amz-Signature=")
		}, want: Malformed},
		{name: "duplicate-key-other-case", token: func(t *testing.T) string {
			return editURL(t, valid, "X-Amz-Signature=", "x-amz-date=20261130T061500Z&X-Amz-Signature=")
		}, want: Malformed},
		{name: "bad-query-escape", token: func(t *testing.T) string { return editURL(t, valid, "Action=", "Action=%zz") }, want: Malformed},
		{name: "unknown-key", token: func(t *testing.T) string {
			return makeToken(t, gen{key: "AKIDNOBODY0000000000", secret: testSecret})
		}, want: UnknownKey},
		{name: "session-token", token: func(t *testing.T) string {
			return makeToken(t, gen{key: testKey, secret: testSecret, session: "FQoGZXIvYXdzEXAMPLESESSION"})
		}, want: UnknownKey},
		{name: "oversize", token: func(*testing.T) string { return Prefix + strings.Repeat("A", MaxLen) }, want: Malformed},
		{name: "wrong-prefix", token: func(*testing.T) string { return "k8s-aws-v2." + strings.TrimPrefix(valid, Prefix) }, want: Malformed},
		{name: "no-prefix", token: func(*testing.T) string { return strings.TrimPrefix(valid, Prefix) }, want: Malformed},
		{name: "empty", token: func(*testing.T) string { return "" }, want: Malformed},
		{name: "not-base64", token: func(*testing.T) string { return Prefix + "!!not*base64!!" }, want: Malformed},
		{name: "padded-base64", token: func(*testing.T) string {
			return Prefix + base64.URLEncoding.EncodeToString([]byte("https://sts.amazonaws.com/?a"))
		}, want: Malformed},
		{name: "unparsable-url", token: func(*testing.T) string { return encode("https://sts.amazonaws.com/%zz") }, want: Malformed},
		{name: "http-scheme", token: func(t *testing.T) string { return editURL(t, valid, "https://", "http://") }, want: Malformed},
		{name: "wrong-host", token: func(t *testing.T) string { return editURL(t, valid, "sts.us-east-1.amazonaws.com", "sts.example.com") }, want: WrongHost},
		{name: "host-with-port", token: func(t *testing.T) string {
			return editURL(t, valid, "sts.us-east-1.amazonaws.com", "sts.us-east-1.amazonaws.com:443")
		}, want: WrongHost},
		{name: "path-not-root", token: func(t *testing.T) string { return editURL(t, valid, ".com/?", ".com/x?") }, want: Malformed},
		{name: "path-empty", token: func(t *testing.T) string { return editURL(t, valid, ".com/?", ".com?") }, want: Malformed},
		{name: "cluster-id-not-signed", token: func(t *testing.T) string { return makeToken(t, gen{noCluster: true}) }, want: Malformed},
		{name: "expires-901", token: func(t *testing.T) string { return makeToken(t, gen{expires: "901"}) }, want: Malformed},
		{name: "expires-negative", token: func(t *testing.T) string { return makeToken(t, gen{expires: "-1"}) }, want: Malformed},
		{name: "expires-missing", token: func(t *testing.T) string { return makeToken(t, gen{expires: "-"}) }, want: Malformed},
		{name: "date-missing", token: func(t *testing.T) string { return editURL(t, valid, "X-Amz-Date=20261130T061500Z&", "") }, want: Malformed},
		{name: "date-unparsable", token: func(t *testing.T) string {
			return editURL(t, valid, "X-Amz-Date=20261130T061500Z", "X-Amz-Date=2026-11-30")
		}, want: Malformed},
		{name: "signature-missing", token: func(t *testing.T) string { return editURL(t, valid, "&X-Amz-Signature="+sig, "") }, want: BadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := c.token(t)
			cluster := c.cluster
			if cluster == "" {
				cluster = testCluster
			}
			id, err := verifierAt(signTime.Add(c.after)).Verify(context.Background(), tok, cluster)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				region := c.region
				if region == "" {
					region = testRegion
				}
				if want := (Identity{AccessKeyID: testKey, Region: region, Date: signTime}); id != want {
					t.Fatalf("identity %+v, want %+v", id, want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Verify: want %s, got %v", c.want, err)
			}
			if e.Reason != c.want {
				t.Fatalf("Verify: want %s, got %s: %s", c.want, e.Reason, e.Message)
			}
			t.Logf("refused: %v", e)
			if id != (Identity{}) {
				t.Fatalf("refused token returned identity %+v", id)
			}
			// The message goes back to the cluster and into logs.
			body := strings.TrimPrefix(tok, Prefix)
			if strings.Contains(e.Message, sig) || strings.Contains(e.Message, testSecret) || len(body) > 16 && strings.Contains(e.Message, body) {
				t.Fatalf("message leaks token material: %s", e.Message)
			}
		})
	}
}

// TestVerifyMessages pins the wording shared with aws-iam-authenticator.
func TestVerifyMessages(t *testing.T) {
	valid := makeToken(t, gen{})
	cases := []struct {
		name, token string
		after       time.Duration
		want        string
	}{
		{"too-large", Prefix + strings.Repeat("A", MaxLen), 0, "input token was not properly formatted: token is too large"},
		{"prefix", "x", 0, `input token was not properly formatted: token is missing expected "k8s-aws-v1." prefix`},
		{"host", editURL(t, valid, "sts.us-east-1.amazonaws.com", "sts.example.com"), 0, `input token was not properly formatted: unexpected hostname "sts.example.com" in pre-signed URL`},
		{"expires", makeToken(t, gen{expires: "901"}), 0, "input token was not properly formatted: invalid X-Amz-Expires parameter in pre-signed URL: 901"},
		{"expired", valid, 16 * time.Minute, "input token was not properly formatted: X-Amz-Date parameter is expired (15 minute expiration) 2026-11-30 06:15:00 +0000 UTC"},
		{"unknown-key", makeToken(t, gen{key: "AKIDNOBODY0000000000", secret: "x"}), 0, "sts getCallerIdentity failed: The security token included in the request is invalid."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := verifierAt(signTime.Add(c.after)).Verify(context.Background(), c.token, testCluster)
			var e *Error
			if !errors.As(err, &e) || e.Message != c.want {
				t.Fatalf("got %v, want message %q", err, c.want)
			}
		})
	}
}

// TestVerifyRealClock checks a token the SDK signs now, with the
// verifier's default clock.
func TestVerifyRealClock(t *testing.T) {
	tok := encode(presignURL(t, gen{}))
	v := &Verifier{Hosts: DefaultHosts(), Lookup: testLookup}
	id, err := v.Verify(context.Background(), tok, testCluster)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if id.AccessKeyID != testKey || id.Region != testRegion || time.Since(id.Date) > time.Minute {
		t.Fatalf("identity %+v", id)
	}
}

// TestVerifyGlobalEndpoint checks the host the SDK uses for the legacy
// global STS endpoint.
func TestVerifyGlobalEndpoint(t *testing.T) {
	u := presignURL(t, gen{region: "aws-global", at: signTime})
	if !strings.HasPrefix(u, "https://sts.amazonaws.com/?") {
		t.Fatalf("presigned URL %q is not for the global endpoint", u)
	}
	id, err := verifierAt(signTime).Verify(context.Background(), encode(u), testCluster)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if id.Region != "us-east-1" {
		t.Fatalf("identity %+v", id)
	}
}

func TestVerifyLookupError(t *testing.T) {
	boom := errors.New("store down")
	v := verifierAt(signTime)
	v.Lookup = func(context.Context, string) (string, bool, error) { return "", false, boom }
	_, err := v.Verify(context.Background(), makeToken(t, gen{}), testCluster)
	var e *Error
	if !errors.Is(err, boom) || errors.As(err, &e) {
		t.Fatalf("want the store error, not a refusal; got %v", err)
	}
}

func TestVerifyNoClusterName(t *testing.T) {
	_, err := verifierAt(signTime).Verify(context.Background(), makeToken(t, gen{}), "")
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Fatalf("want a caller error, got %v", err)
	}
}

func TestVerifyZeroVerifier(t *testing.T) {
	// No hosts: every token is refused before any key work.
	v := &Verifier{Lookup: testLookup, Now: func() time.Time { return signTime }}
	_, err := v.Verify(context.Background(), makeToken(t, gen{}), testCluster)
	var e *Error
	if !errors.As(err, &e) || e.Reason != WrongHost {
		t.Fatalf("want WrongHost, got %v", err)
	}
}

func TestDefaultHosts(t *testing.T) {
	h := DefaultHosts(privateHost)
	for _, c := range []struct {
		host string
		want bool
	}{
		{"sts.amazonaws.com", true},
		{"sts.us-east-1.amazonaws.com", true},
		{"sts.us-west-2.amazonaws.com", true},
		{"sts.eu-west-1.amazonaws.com", true},
		{"sts.ap-southeast-7.amazonaws.com", true},
		{"sts.il-central-1.amazonaws.com", true},
		{"sts.mx-central-1.amazonaws.com", true},
		{"sts-fips.us-east-1.amazonaws.com", true},
		{"sts-fips.ca-central-1.amazonaws.com", true},
		{privateHost, true},
		{"sts.cn-north-1.amazonaws.com.cn", false},
		{"sts.us-gov-west-1.amazonaws.com", false},
		{"sts.us-east-1.amazonaws.com:443", false},
		{"STS.US-EAST-1.AMAZONAWS.COM", false},
		{"sts.us-east-1.amazonaws.com.example.com", false},
		{"", false},
	} {
		if h[c.host] != c.want {
			t.Errorf("DefaultHosts()[%q] = %v, want %v", c.host, h[c.host], c.want)
		}
	}
	if DefaultHosts()[privateHost] {
		t.Error("an extra host leaked into another call's list")
	}
}
