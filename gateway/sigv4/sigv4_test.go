package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
)

const (
	testKey    = "AKIDSALTBUSHTEST0001"
	testSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I"
	testRegion = "us-east-1"
	testARN    = "arn:aws:eks:us-east-1:111122223333:addon/c/a/0cc9a0c5-1f4f-4a5e-9b1f-2f8f3c2d1e0a"
)

var signTime = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func testLookup(_ context.Context, id string) (string, bool, error) {
	if id == testKey {
		return testSecret, true, nil
	}
	return "", false, nil
}

func verifierAt(t time.Time) *Verifier {
	return &Verifier{Now: func() time.Time { return t }, Lookup: testLookup}
}

func creds(key, secret string) aws.Credentials {
	return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
}

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// wantException checks err is an *Error with the exception (or nil for "").
func wantException(t *testing.T, err error, exception string) {
	t.Helper()
	if exception == "" {
		if err != nil {
			t.Fatalf("Verify: unexpected error %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify: want %s, got %v", exception, err)
	}
	if e.Exception != exception {
		t.Fatalf("Verify: want %s, got %s: %s", exception, e.Exception, e.Message)
	}
	if e.StatusCode() != http.StatusForbidden {
		t.Fatalf("status %d", e.StatusCode())
	}
}

// wantExpired checks that err is (or is not) refused for its date alone.
func wantExpired(t *testing.T, err error, want bool) {
	t.Helper()
	var e *Error
	got := errors.As(err, &e) && e.Expired
	if got != want {
		t.Fatalf("Verify: Expired = %v, want %v (err %v)", got, want, err)
	}
}

// serverSide round-trips a client request through the HTTP/1.1 wire
// format, so Verify sees it as a server does: Host moved to r.Host, URL
// parsed from the request line (RawPath kept), Content-Length handled the
// way net/http handles it.
func serverSide(t *testing.T, req *http.Request) (*http.Request, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatal(err)
	}
	sr, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(sr.Body)
	if err != nil {
		t.Fatal(err)
	}
	return sr, body
}

// --- Real eks.Client calls -------------------------------------------------

type recorded struct {
	uri string
	res Result
	err error
}

// eksServer runs Verify in the handler of an httptest server and records
// every outcome.
func eksServer(t *testing.T) (*httptest.Server, func() recorded) {
	t.Helper()
	v := &Verifier{Lookup: testLookup} // real clock: the SDK signs with time.Now
	var mu sync.Mutex
	var last recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		res, err := v.Verify(r.Context(), r, body)
		mu.Lock()
		last = recorded{uri: r.RequestURI, res: res, err: err}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv, func() recorded { mu.Lock(); defer mu.Unlock(); return last }
}

func eksClient(srv *httptest.Server, key, secret string) *eks.Client {
	return eks.New(eks.Options{
		Region:           testRegion,
		BaseEndpoint:     aws.String(srv.URL),
		Credentials:      aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds(key, secret), nil }),
		RetryMaxAttempts: 1,
	})
}

func TestEKSClient(t *testing.T) {
	srv, last := eksServer(t)
	ctx := context.Background()
	ops := []struct {
		name    string
		call    func(c *eks.Client) error
		wantURI string // substring of the request URI, proving the shape
	}{
		{"CreateAddon", func(c *eks.Client) error {
			_, err := c.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String("x"), AddonName: aws.String("vpc-cni"), AddonVersion: aws.String("v1.2.3  with  spaces")})
			return err
		}, "/clusters/x/addons"},
		{"DescribeAddon", func(c *eks.Client) error {
			_, err := c.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String("x"), AddonName: aws.String("y")})
			return err
		}, "/clusters/x/addons/y"},
		{"DeleteAddonPreserve", func(c *eks.Client) error {
			_, err := c.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String("x"), AddonName: aws.String("y"), Preserve: true})
			return err
		}, "preserve=true"},
		{"TagResourceARN", func(c *eks.Client) error {
			_, err := c.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(testARN), Tags: map[string]string{"team": "a b/c"}})
			return err
		}, "/tags/arn%3Aaws%3Aeks%3Aus-east-1%3A111122223333%3Aaddon%2Fc%2Fa%2F"},
		{"ListTagsForResourceARN", func(c *eks.Client) error {
			_, err := c.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(testARN)})
			return err
		}, "%3Aaddon%2Fc%2Fa%2F"},
		{"UntagResourceARN", func(c *eks.Client) error {
			_, err := c.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(testARN), TagKeys: []string{"team", "a b", "z/y"}})
			return err
		}, "tagKeys="},
		{"DescribeAddonVersionsRepeatedQuery", func(c *eks.Client) error {
			_, err := c.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{Types: []string{"networking", "a"}})
			return err
		}, "types="},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			for _, c := range []struct {
				name, key, secret, exception string
			}{
				{"valid", testKey, testSecret, ""},
				{"wrong-secret", testKey, "not-the-secret", InvalidSignature},
				{"unknown-key", "AKIDUNKNOWN000000000", testSecret, UnrecognizedClient},
			} {
				t.Run(c.name, func(t *testing.T) {
					if err := op.call(eksClient(srv, c.key, c.secret)); err != nil {
						t.Fatalf("client call: %v", err)
					}
					got := last()
					if !strings.Contains(got.uri, op.wantURI) {
						t.Fatalf("request URI %q lacks %q", got.uri, op.wantURI)
					}
					wantException(t, got.err, c.exception)
					if c.exception == "" && (got.res.AccessKeyID != testKey || got.res.Region != testRegion) {
						t.Fatalf("result %+v", got.res)
					}
				})
			}
		})
	}
	t.Run("unsigned", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/clusters/x/addons")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		wantException(t, last().err, MissingAuthenticationToken)
	})
}

// --- SignHTTP / PresignHTTP with controlled clocks -----------------------

type reqSpec struct {
	method, url, body string
	header            map[string]string
}

func newReq(t testing.TB, s reqSpec) *http.Request {
	t.Helper()
	var body io.Reader
	if s.body != "" {
		body = strings.NewReader(s.body)
	}
	req, err := http.NewRequest(s.method, s.url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s.header {
		req.Header.Set(k, v)
	}
	return req
}

func sign(t testing.TB, req *http.Request, body, service string, c aws.Credentials, at time.Time, opts ...func(*v4.SignerOptions)) {
	t.Helper()
	if err := v4.NewSigner().SignHTTP(context.Background(), c, req, hashHex([]byte(body)), service, testRegion, at, opts...); err != nil {
		t.Fatal(err)
	}
}

var (
	addonPost = reqSpec{"POST", "http://eks.local:8080/clusters/x/addons", `{"addonName":"vpc-cni","addonVersion":"v1"}`,
		map[string]string{"Content-Type": "application/json", "X-Custom": "one  two"}}
	addonGet    = reqSpec{"GET", "http://eks.local/clusters/x/addons/y", "", nil}
	addonDelete = reqSpec{"DELETE", "http://eks.local/clusters/x/addons/y?preserve=true", "", nil}
	tagsGet     = reqSpec{"GET", "http://eks.local/tags/arn%3Aaws%3Aeks%3Aus-east-1%3A111122223333%3Aaddon%2Fc%2Fa%2Fuuid", "", nil}
	versions    = reqSpec{"GET", "http://eks.local/addons/supported-versions?types=b&types=a&maxResults=10", "", nil}
)

func TestSignHTTP(t *testing.T) {
	good := creds(testKey, testSecret)
	cases := []struct {
		name      string
		spec      reqSpec
		service   string
		creds     aws.Credentials
		signAt    time.Time
		opts      []func(*v4.SignerOptions)
		mutate    func(r *http.Request) // after signing, before the wire
		lifetime  time.Duration         // Verifier.PresignedLifetime
		exception string
		expired   bool // refused for its date alone
	}{
		{name: "post-json-valid", spec: addonPost},
		{name: "get-valid", spec: addonGet},
		{name: "delete-query-valid", spec: addonDelete},
		{name: "arn-path-valid", spec: tagsGet},
		{name: "repeated-query-valid", spec: versions},
		{name: "wrong-secret", spec: addonPost, creds: creds(testKey, "wrong"), exception: InvalidSignature},
		{name: "unknown-key", spec: addonGet, creds: creds("AKIDNOBODY", testSecret), exception: UnrecognizedClient},
		{name: "unsigned", spec: addonGet, mutate: func(r *http.Request) {
			r.Header.Del("Authorization")
		}, exception: MissingAuthenticationToken},
		{name: "date-20min-old", spec: addonGet, signAt: signTime.Add(-20 * time.Minute), exception: InvalidSignature, expired: true},
		{name: "date-20min-future", spec: addonGet, signAt: signTime.Add(20 * time.Minute), exception: InvalidSignature, expired: true},
		// PresignedLifetime is for presigned URLs only; the header form
		// keeps its ±Skew window.
		{name: "presigned-lifetime-ignored-for-header-form", spec: addonGet, signAt: signTime.Add(-20 * time.Minute), lifetime: time.Hour, exception: InvalidSignature, expired: true},
		{name: "date-14min-old", spec: addonGet, signAt: signTime.Add(-14 * time.Minute)},
		{name: "date-14min-future", spec: addonGet, signAt: signTime.Add(14 * time.Minute)},
		{name: "tampered-body", spec: addonPost, mutate: func(r *http.Request) {
			b := strings.Replace(addonPost.body, "v1", "v2", 1)
			r.Body = io.NopCloser(strings.NewReader(b))
		}, exception: InvalidSignature},
		{name: "tampered-query", spec: addonDelete, mutate: func(r *http.Request) {
			r.URL.RawQuery = "preserve=false"
		}, exception: InvalidSignature},
		{name: "added-query", spec: addonGet, mutate: func(r *http.Request) {
			r.URL.RawQuery = "x=1"
		}, exception: InvalidSignature},
		{name: "tampered-path", spec: addonGet, mutate: func(r *http.Request) {
			r.URL.Path = "/clusters/x/addons/z"
		}, exception: InvalidSignature},
		{name: "tampered-arn-path-encoding", spec: tagsGet, mutate: func(r *http.Request) {
			// Same bytes decoded, different wire form: the signature covers the wire form.
			r.URL.RawPath = strings.Replace(r.URL.RawPath, "%2Fuuid", "/uuid", 1)
		}, exception: InvalidSignature},
		{name: "added-unsigned-header", spec: addonPost, mutate: func(r *http.Request) {
			r.Header.Set("X-Added-Later", "fine")
			r.Header.Set("User-Agent", "changed")
		}},
		{name: "changed-signed-header", spec: addonPost, mutate: func(r *http.Request) {
			r.Header.Set("X-Custom", "three")
		}, exception: InvalidSignature},
		{name: "signed-header-space-collapse", spec: addonPost, mutate: func(r *http.Request) {
			r.Header.Set("X-Custom", "  one     two ")
		}},
		{name: "changed-host", spec: addonGet, mutate: func(r *http.Request) {
			r.Host = "other.local"
		}, exception: InvalidSignature},
		{name: "changed-method", spec: addonGet, mutate: func(r *http.Request) {
			r.Method = "DELETE"
		}, exception: InvalidSignature},
		{name: "wrong-service", spec: addonGet, service: "s3", exception: InvalidSignature},
		{name: "single-encoded-path-rejected", spec: tagsGet, opts: []func(*v4.SignerOptions){func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }}, exception: InvalidSignature},
		{name: "content-sha256-header-valid", spec: reqSpec{"POST", "http://eks.local/clusters/x/addons", `{"a":1}`,
			map[string]string{"X-Amz-Content-Sha256": hashHex([]byte(`{"a":1}`))}}},
		{name: "content-sha256-header-mismatch", spec: reqSpec{"POST", "http://eks.local/clusters/x/addons", `{"a":1}`,
			map[string]string{"X-Amz-Content-Sha256": hashHex([]byte(`{"a":2}`))}}, exception: InvalidSignature},
		{name: "session-token-refused", spec: addonGet, creds: aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret, SessionToken: "tok"}, exception: UnrecognizedClient},
		{name: "second-authorization-header", spec: addonGet, mutate: func(r *http.Request) {
			r.Header.Add("Authorization", r.Header.Get("Authorization"))
		}, exception: InvalidSignature},
		{name: "date-header-changed", spec: addonGet, mutate: func(r *http.Request) {
			r.Header.Set("X-Amz-Date", "20261130T000001Z")
		}, exception: InvalidSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := newReq(t, c.spec)
			service, cr, at := c.service, c.creds, c.signAt
			if service == "" {
				service = "eks"
			}
			if cr.AccessKeyID == "" {
				cr = good
			}
			if at.IsZero() {
				at = signTime
			}
			sign(t, req, c.spec.body, service, cr, at, c.opts...)
			if c.mutate != nil {
				c.mutate(req)
			}
			sr, body := serverSide(t, req)
			v := verifierAt(signTime)
			v.PresignedLifetime = c.lifetime
			res, err := v.Verify(context.Background(), sr, body)
			wantException(t, err, c.exception)
			wantExpired(t, err, c.expired)
			if c.exception == "" && res != (Result{AccessKeyID: testKey, Region: testRegion}) {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestPresignHTTP(t *testing.T) {
	cases := []struct {
		name      string
		spec      reqSpec
		payload   string // hash the presigner used; "" = sha256 of the body
		expires   string
		service   string
		now       time.Time
		lifetime  time.Duration // Verifier.PresignedLifetime
		mutate    func(r *http.Request)
		exception string
		expired   bool // refused for its date alone
	}{
		{name: "valid-unsigned-payload", spec: addonGet, payload: "UNSIGNED-PAYLOAD", expires: "300", now: signTime.Add(time.Minute)},
		{name: "valid-body-hash", spec: addonGet, expires: "300", now: signTime.Add(4 * time.Minute)},
		{name: "valid-post-body-hash", spec: addonPost, expires: "300", now: signTime},
		{name: "valid-arn-path", spec: tagsGet, payload: "UNSIGNED-PAYLOAD", expires: "60", now: signTime.Add(59 * time.Second)},
		{name: "valid-repeated-query", spec: versions, expires: "60", now: signTime},
		{name: "post-unsigned-payload-refused", spec: addonPost, payload: "UNSIGNED-PAYLOAD", expires: "300", now: signTime, exception: InvalidSignature},
		{name: "expired", spec: addonGet, payload: "UNSIGNED-PAYLOAD", expires: "300", now: signTime.Add(6 * time.Minute), exception: InvalidSignature, expired: true},
		{name: "not-yet-valid", spec: addonGet, expires: "300", now: signTime.Add(-20 * time.Minute), exception: InvalidSignature, expired: true},
		{name: "expires-zero-refused-by-default", spec: addonGet, expires: "0", now: signTime, exception: InvalidSignature},
		{name: "missing-expires", spec: addonGet, now: signTime, exception: InvalidSignature},
		{name: "expires-too-long", spec: addonGet, expires: "604801", now: signTime, exception: InvalidSignature},
		{name: "wrong-service", spec: addonGet, expires: "300", service: "sts", now: signTime, exception: InvalidSignature},
		{name: "tampered-query", spec: addonDelete, expires: "300", now: signTime, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "preserve=true", "preserve=false", 1)
		}, exception: InvalidSignature},
		{name: "extended-expiry", spec: addonGet, expires: "300", now: signTime, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "X-Amz-Expires=300", "X-Amz-Expires=3000", 1)
		}, exception: InvalidSignature},
		// PresignedLifetime: STS's rule for GetCallerIdentity (15 minutes
		// from X-Amz-Date whatever X-Amz-Expires says).
		{name: "lifetime-outlives-expires", spec: addonGet, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(10 * time.Minute)},
		{name: "lifetime-last-second", spec: addonGet, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(15 * time.Minute)},
		{name: "lifetime-over", spec: addonGet, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(15*time.Minute + time.Second), exception: InvalidSignature, expired: true},
		{name: "lifetime-caps-longer-expires", spec: addonGet, expires: "3600", lifetime: 15 * time.Minute, now: signTime.Add(20 * time.Minute), exception: InvalidSignature, expired: true},
		{name: "lifetime-expires-zero-accepted", spec: addonGet, expires: "0", lifetime: 15 * time.Minute, now: signTime.Add(time.Minute)},
		{name: "lifetime-within-skew-before-date", spec: addonGet, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(-14 * time.Minute)},
		{name: "lifetime-not-yet-valid", spec: addonGet, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(-20 * time.Minute), exception: InvalidSignature, expired: true},
		{name: "lifetime-expires-negative", spec: addonGet, expires: "-1", lifetime: 15 * time.Minute, now: signTime, exception: InvalidSignature},
		{name: "lifetime-expires-too-long", spec: addonGet, expires: "604801", lifetime: 15 * time.Minute, now: signTime, exception: InvalidSignature},
		{name: "lifetime-tampered-query", spec: addonDelete, expires: "60", lifetime: 15 * time.Minute, now: signTime.Add(10 * time.Minute), mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "preserve=true", "preserve=false", 1)
		}, exception: InvalidSignature},
		{name: "plus-authorization-header", spec: addonGet, expires: "300", now: signTime, mutate: func(r *http.Request) {
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 x")
		}, exception: InvalidSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := newReq(t, c.spec)
			if c.expires != "" {
				q := req.URL.Query()
				q.Set("X-Amz-Expires", c.expires)
				req.URL.RawQuery = q.Encode()
			}
			payload := c.payload
			if payload == "" {
				payload = hashHex([]byte(c.spec.body))
			}
			service := c.service
			if service == "" {
				service = "eks"
			}
			signedURL, hdr, err := v4.NewSigner().PresignHTTP(context.Background(), creds(testKey, testSecret), req, payload, service, testRegion, signTime)
			if err != nil {
				t.Fatal(err)
			}
			out := newReq(t, reqSpec{c.spec.method, signedURL, c.spec.body, nil})
			for k, vs := range hdr {
				if k != "Host" {
					out.Header[k] = vs
				}
			}
			if c.mutate != nil {
				c.mutate(out)
			}
			sr, body := serverSide(t, out)
			v := verifierAt(c.now)
			v.PresignedLifetime = c.lifetime
			res, err := v.Verify(context.Background(), sr, body)
			wantException(t, err, c.exception)
			wantExpired(t, err, c.expired)
			if c.exception == "" && res.AccessKeyID != testKey {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

// TestMalformed feeds hand-written Authorization headers: each must be
// refused with the right exception, never verified.
func TestMalformed(t *testing.T) {
	sig := strings.Repeat("a", 64)
	cred := "Credential=" + testKey + "/20261130/us-east-1/eks/aws4_request"
	cases := []struct {
		name, authz, query, exception string
	}{
		{"wrong-algorithm", "AWS4-HMAC-SHA512 " + cred + ", SignedHeaders=host;x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"sigv2", "AWS " + testKey + ":abc", "", InvalidSignature},
		{"missing-signature", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;x-amz-date", "", InvalidSignature},
		{"duplicate-credential", "AWS4-HMAC-SHA256 " + cred + ", " + cred + ", SignedHeaders=host;x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"host-not-signed", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"date-not-signed", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host, Signature=" + sig, "", InvalidSignature},
		{"unsorted-signed-headers", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=x-amz-date;host, Signature=" + sig, "", InvalidSignature},
		{"uppercase-signature", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("A", 64), "", InvalidSignature},
		{"short-credential", "AWS4-HMAC-SHA256 Credential=" + testKey + "/20261130/us-east-1/eks, SignedHeaders=host;x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"scope-date-mismatch", "AWS4-HMAC-SHA256 Credential=" + testKey + "/20261129/us-east-1/eks/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"too-long", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;x-amz-date, Signature=" + sig + strings.Repeat(" ", 5000), "", InvalidSignature},
		{"too-many-signed-headers", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=" + manyHeaders(65) + ", Signature=" + sig, "", InvalidSignature},
		{"well-formed-bad-signature", "AWS4-HMAC-SHA256 " + cred + ", SignedHeaders=host;x-amz-date, Signature=" + sig, "", InvalidSignature},
		{"well-formed-unknown-key", "AWS4-HMAC-SHA256 Credential=AKIDNOBODY/20261130/us-east-1/eks/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + sig, "", UnrecognizedClient},
		{"presign-incomplete", "", "X-Amz-Algorithm=AWS4-HMAC-SHA256", InvalidSignature},
		{"presign-bad-query", "", "X-Amz-Signature=%zz", MissingAuthenticationToken},
		{"nothing", "", "a=b", MissingAuthenticationToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://eks.local/clusters?"+c.query, nil)
			r.Header.Set("X-Amz-Date", "20261130T000000Z")
			if c.authz != "" {
				r.Header.Set("Authorization", c.authz)
			}
			_, err := verifierAt(signTime).Verify(context.Background(), r, nil)
			wantException(t, err, c.exception)
		})
	}
}

func manyHeaders(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "h" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	return strings.Join(names, ";")
}

func TestLookupError(t *testing.T) {
	boom := errors.New("store down")
	v := &Verifier{Now: func() time.Time { return signTime }, Lookup: func(context.Context, string) (string, bool, error) {
		return "", false, boom
	}}
	req := newReq(t, addonGet)
	sign(t, req, "", "eks", creds(testKey, testSecret), signTime)
	sr, body := serverSide(t, req)
	if _, err := v.Verify(context.Background(), sr, body); !errors.Is(err, boom) {
		t.Fatalf("want store error, got %v", err)
	}
}

func TestExpiredMessage(t *testing.T) {
	req := newReq(t, addonGet)
	sign(t, req, "", "eks", creds(testKey, testSecret), signTime)
	sr, body := serverSide(t, req)
	_, err := verifierAt(signTime.Add(30*time.Minute)).Verify(context.Background(), sr, body)
	want := "Signature expired: 20261130T000000Z is now earlier than 20261130T001500Z (20261130T003000Z - 15 min.)"
	var e *Error
	if !errors.As(err, &e) || e.Message != want {
		t.Fatalf("got %v, want message %q", err, want)
	}
}

// FuzzVerify throws arbitrary Authorization headers and query strings at
// Verify. It must never panic, and must never accept a request (the secret
// is unknown to the fuzzer, so a success would be a forgery).
func FuzzVerify(f *testing.F) {
	req := newReq(f, addonPost)
	sign(f, req, addonPost.body, "eks", creds(testKey, testSecret), signTime)
	f.Add(req.Header.Get("Authorization"), "")
	f.Add(req.Header.Get("Authorization"), "preserve=true&types=a&types=b")
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=", "")
	f.Add("", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="+testKey+"%2F20261130%2Fus-east-1%2Feks%2Faws4_request&X-Amz-Date=20261130T000000Z&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature="+strings.Repeat("0", 64))
	f.Add("AWS4-HMAC-SHA256 ,,,==", "%zz;&&=")
	f.Fuzz(func(t *testing.T, authz, query string) {
		r := &http.Request{Method: "POST", Host: "eks.local", Header: http.Header{}}
		r.URL = &url.URL{Path: "/clusters/x/addons", RawQuery: query}
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		r.Header.Set("X-Amz-Date", "20261130T000000Z")
		r.Header.Set("Content-Type", "application/json")
		_, err := verifierAt(signTime).Verify(context.Background(), r, []byte(addonPost.body))
		if err == nil && authz != req.Header.Get("Authorization") {
			t.Fatalf("accepted a forged request: %q %q", authz, query)
		}
	})
}

// BenchmarkVerify measures one header-form verification of an EKS POST,
// for the façade's overhead budget (≤ 15%; tests/bench).
func BenchmarkVerify(b *testing.B) {
	req := newReq(b, addonPost)
	sign(b, req, addonPost.body, "eks", creds(testKey, testSecret), signTime)
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		b.Fatal(err)
	}
	sr, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(sr.Body)
	v := verifierAt(signTime)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, sr, body); err != nil {
			b.Fatal(err)
		}
	}
}
