package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Authentication end to end: the real server, the unmodified SDK and the
// SDK's own v4 signer. gateway/sigv4's unit tests cover the verifier's
// parsing; these check that what reaches the façade is refused with the
// exact AWS exception, before routing, and that a refused request writes
// nothing.

// AWS's authentication messages, verbatim (what SDKs and users match on).
const (
	authMsgMismatch = "The request signature we calculated does not match the signature you provided. " +
		"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	authMsgBadToken = "The security token included in the request is invalid."
	authMsgMissing  = "Missing Authentication Token"
)

// authForbidden asserts that an SDK call failed with the AWS exception
// code: the SDK's error code, HTTP 403 and X-Amzn-ErrorType, and a message
// that starts with msgPrefix. It returns the message.
func authForbidden(t *testing.T, err error, code, msgPrefix string) string {
	t.Helper()
	_, msg := wanterr.AWS(t, err, code, http.StatusForbidden)
	if !strings.HasPrefix(msg, msgPrefix) || msg == "" {
		t.Errorf("message = %q, want prefix %q", msg, msgPrefix)
	}
	return msg
}

// authRawForbidden is authForbidden for a raw HTTP response.
func authRawForbidden(t *testing.T, resp *http.Response, code, msgPrefix string) {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("HTTP status = %d (%s), want 403", resp.StatusCode, b)
	}
	if got := resp.Header.Get("X-Amzn-ErrorType"); got != code {
		t.Errorf("X-Amzn-ErrorType = %q (%s), want %q", got, b, code)
	}
	var body struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, b)
	}
	if body.Message == "" || !strings.HasPrefix(body.Message, msgPrefix) {
		t.Errorf("message = %q, want prefix %q", body.Message, msgPrefix)
	}
}

// authOneAttempt makes one attempt per call: a refusal is what one request got,
// and the SDK's clock-skew retry does not paper over a date case.
func authOneAttempt(o *eks.Options) { o.Retryer = aws.NopRetryer{} }

// authSkewedSigner is the SDK's v4 signer with its clock moved by offset.
type authSkewedSigner struct {
	offset time.Duration
	s      *v4.Signer
}

func (k authSkewedSigner) SignHTTP(ctx context.Context, c aws.Credentials, r *http.Request, payloadHash, service, region string,
	signingTime time.Time, optFns ...func(*v4.SignerOptions)) error {
	return k.s.SignHTTP(ctx, c, r, payloadHash, service, region, signingTime.Add(k.offset), optFns...)
}

func authSignedAt(offset time.Duration) func(*eks.Options) {
	return func(o *eks.Options) { o.HTTPSignerV4 = authSkewedSigner{offset: offset, s: v4.NewSigner()} }
}

func authSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// authSignRaw signs req as c at signingTime with the SDK's signer.
func authSignRaw(t *testing.T, srv *servertest.Server, req *http.Request, body []byte, c servertest.Creds, signingTime time.Time) {
	t.Helper()
	err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey},
		req, authSHA256(body), "eks", srv.Config.Cluster.Region, signingTime)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
}

// authPresign returns a presigned URL for method path, valid for expires
// seconds from signingTime.
func authPresign(t *testing.T, srv *servertest.Server, c servertest.Creds, method, path string, expires string, signingTime time.Time) string {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := req.URL.Query()
	q.Set("X-Amz-Expires", expires)
	req.URL.RawQuery = q.Encode()
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey},
		req, "UNSIGNED-PAYLOAD", "eks", srv.Config.Cluster.Region, signingTime)
	if err != nil {
		t.Fatalf("authPresign: %v", err)
	}
	return u
}

func authSend(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp
}

func authClusterNames(t *testing.T, c *eks.Client) []string {
	t.Helper()
	out, err := c.ListClusters(ctxT(t), &eks.ListClustersInput{})
	if err != nil {
		t.Fatalf("ListClusters: %v", err)
	}
	return out.Clusters
}

func TestAuthSigV4EndToEnd(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	h := &addonHarness{srv: srv} // for addonKeyspace / addonNoWrites
	ctx := ctxT(t)
	dev := srv.Dev(t)
	admin := srv.EKS(t)
	if _, err := admin.CreateCluster(ctx, createInput("sig-1")); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	wantClusters := []string{"sig-1"}

	// A key that worked, then was deactivated: refused as soon as the key
	// cache has seen the change (a watch event; bounded poll).
	deactivated := srv.NewKey(t, dev.PrincipalARN)
	if _, err := srv.EKSAs(t, deactivated).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters with the new key: %v", err)
	}
	if err := srv.IAM().SetAccessKeyStatus(ctx, deactivated.AccessKeyID, "Inactive"); err != nil {
		t.Fatalf("SetAccessKeyStatus Inactive: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := srv.EKSAs(t, deactivated, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a deactivated key was still accepted after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	t.Run("valid", func(t *testing.T) {
		if got := authClusterNames(t, srv.EKSAs(t, dev, authOneAttempt)); !reflect.DeepEqual(got, wantClusters) {
			t.Errorf("clusters = %v, want %v", got, wantClusters)
		}
		resp := srv.DoAs(t, dev, http.MethodGet, "/clusters/sig-1", nil)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("raw signed DescribeCluster: %d, want 200", resp.StatusCode)
		}
	})

	// Every SDK variant tries a write (CreateCluster) and two reads; all
	// are refused before routing with the same exception.
	sdkCases := []struct {
		name  string
		creds servertest.Creds
		opts  []func(*eks.Options)
		code  string
		msg   string
	}{
		{"wrong secret", servertest.Creds{AccessKeyID: dev.AccessKeyID, SecretAccessKey: dev.SecretAccessKey + "x"}, nil,
			"InvalidSignatureException", authMsgMismatch},
		// Well-formed (AKIA + 16 of A-Z2-7) and never issued.
		{"unknown key", servertest.Creds{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: dev.SecretAccessKey}, nil,
			"UnrecognizedClientException", authMsgBadToken},
		{"deactivated key", deactivated, nil, "UnrecognizedClientException", authMsgBadToken},
		{"signed 20 minutes ago", dev, []func(*eks.Options){authSignedAt(-20 * time.Minute)},
			"InvalidSignatureException", "Signature expired: "},
		{"signed 20 minutes ahead", dev, []func(*eks.Options){authSignedAt(20 * time.Minute)},
			"InvalidSignatureException", "Signature not yet current: "},
		// A session token names a role session (server/iam/session.go); a
		// long-term key with one is refused, the way AWS refuses a token it
		// does not recognise (tests/sts covers real sessions).
		{"session token", dev, []func(*eks.Options){func(o *eks.Options) {
			o.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: dev.AccessKeyID, SecretAccessKey: dev.SecretAccessKey, SessionToken: "FwoGZXIvYXdzEXAMPLE"}, nil
			})
		}}, "UnrecognizedClientException", authMsgBadToken},
		{"unsigned", dev, []func(*eks.Options){func(o *eks.Options) { o.Credentials = aws.AnonymousCredentials{} }},
			"MissingAuthenticationTokenException", authMsgMissing},
		{"scoped to another region", dev, []func(*eks.Options){func(o *eks.Options) { o.Region = "eu-west-1" }},
			"InvalidSignatureException", "Credential should be scoped to a valid region"},
	}
	for _, tc := range sdkCases {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			c := srv.EKSAs(t, tc.creds, append([]func(*eks.Options){authOneAttempt}, tc.opts...)...)
			_, err := c.CreateCluster(ctxT(t), createInput("refused-1"))
			authForbidden(t, err, tc.code, tc.msg)
			_, err = c.DescribeCluster(ctxT(t), &eks.DescribeClusterInput{Name: aws.String("sig-1")})
			authForbidden(t, err, tc.code, tc.msg)
			_, err = c.ListClusters(ctxT(t), &eks.ListClustersInput{})
			authForbidden(t, err, tc.code, tc.msg)
			addonNoWrites(t, h, before)
			if got := authClusterNames(t, admin); !reflect.DeepEqual(got, wantClusters) {
				t.Errorf("clusters after a refused CreateCluster = %v, want %v", got, wantClusters)
			}
		})
	}

	// Raw requests, signed by the SDK's signer and then altered (or not
	// signed, or presigned).
	createA := []byte(`{"name":"tamper-a","roleArn":"` + roleARN + `","resourcesVpcConfig":{"subnetIds":["subnet-a"]}}`)
	createB := bytes.Replace(createA, []byte("tamper-a"), []byte("tamper-b"), 1)
	now := time.Now()
	rawCases := []struct {
		name string
		req  func(t *testing.T) *http.Request
		code string
		msg  string
	}{
		{"tampered body", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/clusters", bytes.NewReader(createA))
			req.Header.Set("Content-Type", "application/json")
			authSignRaw(t, srv, req, createA, dev, now)
			req.Body = io.NopCloser(bytes.NewReader(createB)) // same length
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		{"tampered body with the signed body's x-amz-content-sha256", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/clusters", bytes.NewReader(createA))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Amz-Content-Sha256", authSHA256(createA))
			authSignRaw(t, srv, req, createA, dev, now)
			req.Body = io.NopCloser(bytes.NewReader(createB))
			return req
		}, "InvalidSignatureException", "The provided 'x-amz-content-sha256' header does not match what was computed."},
		{"tampered query", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/clusters?maxResults=5", nil)
			authSignRaw(t, srv, req, nil, dev, now)
			req.URL.RawQuery = "maxResults=6"
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		{"tampered path", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/clusters/sig-2", nil)
			authSignRaw(t, srv, req, nil, dev, now)
			req.URL.Path, req.URL.RawPath = "/clusters/sig-1", ""
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		{"tampered method", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/clusters/sig-1", nil)
			authSignRaw(t, srv, req, nil, dev, now)
			req.Method = http.MethodDelete
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		{"unsigned", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/clusters", bytes.NewReader(createA))
			req.Header.Set("Content-Type", "application/json")
			return req
		}, "MissingAuthenticationTokenException", authMsgMissing},
		{"presigned, expired", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, authPresign(t, srv, dev, http.MethodGet, "/clusters/sig-1", "60", now.Add(-5*time.Minute)), nil)
			return req
		}, "InvalidSignatureException", "Signature expired: "},
		{"presigned, query altered", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, authPresign(t, srv, dev, http.MethodGet, "/clusters", "60", now)+"&maxResults=1", nil)
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		// A presigned URL signs UNSIGNED-PAYLOAD: it must not carry a body
		// nobody signed.
		{"presigned, with an unsigned body", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, authPresign(t, srv, dev, http.MethodPost, "/clusters", "60", now), bytes.NewReader(createA))
			req.Header.Set("Content-Type", "application/json")
			return req
		}, "InvalidSignatureException", authMsgMismatch},
		{"presigned by a deactivated key", func(t *testing.T) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, authPresign(t, srv, deactivated, http.MethodGet, "/clusters/sig-1", "60", now), nil)
			return req
		}, "UnrecognizedClientException", authMsgBadToken},
		{"presigned with a session token", func(t *testing.T) *http.Request {
			u := authPresign(t, srv, dev, http.MethodGet, "/clusters/sig-1", "60", now)
			req, _ := http.NewRequest(http.MethodGet, u+"&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLE", nil)
			return req
		}, "UnrecognizedClientException", authMsgBadToken},
	}
	for _, tc := range rawCases {
		t.Run("raw "+tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			authRawForbidden(t, authSend(t, tc.req(t)), tc.code, tc.msg)
			addonNoWrites(t, h, before)
		})
	}
	if got := authClusterNames(t, admin); !reflect.DeepEqual(got, wantClusters) {
		t.Errorf("clusters after the refused raw requests = %v, want %v", got, wantClusters)
	}
	// The DELETE that was re-aimed at sig-1 did not start a deletion.
	if out, err := admin.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("sig-1")}); err != nil || out.Cluster.Status != "CREATING" {
		t.Errorf("sig-1 after refused requests: %v, %v; want CREATING", out, err)
	}

	// Controls: the same raw requests unaltered are accepted, so each
	// refusal above was for its alteration alone.
	t.Run("raw controls", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/clusters?maxResults=5", nil)
		authSignRaw(t, srv, req, nil, dev, time.Now())
		resp := authSend(t, req)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("signed ListClusters?maxResults=5: %d, want 200", resp.StatusCode)
		}
		req, _ = http.NewRequest(http.MethodPost, srv.URL+"/clusters", bytes.NewReader(createA))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Amz-Content-Sha256", authSHA256(createA))
		authSignRaw(t, srv, req, createA, dev, time.Now())
		resp = authSend(t, req)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("signed CreateCluster tamper-a: %d, want 200", resp.StatusCode)
		}
		if got, want := authClusterNames(t, admin), []string{"sig-1", "tamper-a"}; !reflect.DeepEqual(got, want) {
			t.Errorf("clusters = %v, want %v", got, want)
		}
	})

	t.Run("presigned within expiry", func(t *testing.T) {
		resp := authSend(t, authRequest(t, http.MethodGet, authPresign(t, srv, dev, http.MethodGet, "/clusters/sig-1", "60", time.Now())))
		defer func() { _ = resp.Body.Close() }()
		var body struct {
			Cluster struct{ Name, Arn string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || body.Cluster.Name != "sig-1" {
			t.Errorf("presigned DescribeCluster: %d %+v, want 200 sig-1", resp.StatusCode, body)
		}
		// Presigned with the path escaped twice in the canonical request,
		// like the header form: an ARN label.
		arn := url.PathEscape("arn:aws:eks:" + srv.Config.Cluster.Region + ":" + dev.AccountID + ":cluster/sig-1")
		arn = strings.ReplaceAll(arn, ":", "%3A")
		resp = authSend(t, authRequest(t, http.MethodGet, authPresign(t, srv, dev, http.MethodGet, "/tags/"+arn, "60", time.Now())))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("presigned ListTagsForResource: %d, want 200", resp.StatusCode)
		}
	})

	// ARN labels: the SDK escapes '/' and ':' in the path (%2F, %3A) and
	// escapes that again in the canonical request; the verifier must agree.
	t.Run("ARN path label", func(t *testing.T) {
		c := srv.EKSAs(t, dev, authOneAttempt)
		arn := "arn:aws:eks:" + srv.Config.Cluster.Region + ":" + dev.AccountID + ":cluster/sig-1"
		if _, err := c.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: map[string]string{"a/b": "c:d", "team": "x y"}}); err != nil {
			t.Fatalf("TagResource: %v", err)
		}
		if _, err := c.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: []string{"team"}}); err != nil {
			t.Fatalf("UntagResource: %v", err)
		}
		out, err := c.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		if err != nil {
			t.Fatalf("ListTagsForResource: %v", err)
		}
		if want := map[string]string{"a/b": "c:d"}; !reflect.DeepEqual(out.Tags, want) {
			t.Errorf("tags = %v, want %v", out.Tags, want)
		}
	})
}

func authRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
