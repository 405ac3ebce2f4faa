package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/saltbush/saltbush/server/servertest"
)

// The façade verifies SigV4 on every request (gateway/sigv4), so the bare
// net/http client of the facade-http paths has to sign too. Those paths
// exist to measure the façade's server side with as little client CPU on
// the shared cores as possible (README.md), so they sign every request
// before the clock starts and replay it, as BenchmarkDescribeClusterAuth
// does: the server still verifies each signature in full, the client
// computes none while timed. What signing costs a real client is in the
// facade paths (the AWS SDK signs every request) and in the sign-us/op
// metric of the facade-http create paths.
//
// A signature is valid for 15 minutes (gateway/sigv4's clock skew), so the
// requests are signed again for every sub-benchmark run; a single run of
// more than 15 minutes would fail with 403.

// signedRequest is one façade request signed before the clock starts.
type signedRequest struct {
	method, path string
	body         []byte
	header       http.Header
}

// requestSigner signs bare façade requests as the development
// administrator, the way servertest.Server.Sign does.
type requestSigner struct {
	baseURL, region string
	creds           aws.Credentials
	signer          *v4.Signer
}

func newRequestSigner(tb testing.TB, srv *servertest.Server) *requestSigner {
	tb.Helper()
	dev := srv.Dev(tb)
	return &requestSigner{
		baseURL: srv.URL,
		region:  srv.Config.Cluster.Region,
		creds:   aws.Credentials{AccessKeyID: dev.AccessKeyID, SecretAccessKey: dev.SecretAccessKey},
		signer:  v4.NewSigner(),
	}
}

// sign signs one request; body nil means no body (and no Content-Type).
func (s *requestSigner) sign(method, path string, body []byte) (signedRequest, error) {
	req, err := http.NewRequest(method, s.baseURL+path, bodyReader(body))
	if err != nil {
		return signedRequest{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	sum := sha256.Sum256(body)
	if err := s.signer.SignHTTP(context.Background(), s.creds, req, hex.EncodeToString(sum[:]), "eks", s.region, time.Now()); err != nil {
		return signedRequest{}, fmt.Errorf("sign %s %s: %w", method, path, err)
	}
	return signedRequest{method: method, path: path, body: body, header: req.Header}, nil
}

// signAll signs a GET of every path, for paths whose requests are the same
// on every op (the one DescribeAddon, the ten ListAddons pages).
func (s *requestSigner) signAll(b *testing.B, paths []string) map[string]signedRequest {
	b.Helper()
	m := make(map[string]signedRequest, len(paths))
	for _, p := range paths {
		r, err := s.sign(http.MethodGet, p, nil)
		if err != nil {
			b.Fatal(err)
		}
		m[p] = r
	}
	return m
}

func bodyReader(body []byte) io.Reader {
	if body == nil {
		return nil
	}
	return bytes.NewReader(body)
}

// send sends r from client (to the server r was signed for) and decodes a
// JSON answer into out when out is not nil.
func (r signedRequest) send(ctx context.Context, client *http.Client, baseURL string, out any) error {
	req, err := http.NewRequestWithContext(ctx, r.method, baseURL+r.path, bodyReader(r.body))
	if err != nil {
		return err
	}
	// Many workers replay one signedRequest at once: each request gets its
	// own header map (the values are only read).
	for k, v := range r.header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: status %d: %s", r.method, r.path, resp.StatusCode, msg)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return err
	}
	// Read to EOF, so the transport keeps the connection for the next op.
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// signedQueue hands out requests that are each sent once (creates: every
// op names a new resource), signed in advance.
type signedQueue struct {
	reqs []signedRequest
	next atomic.Int64
}

// fill replaces the queue with n POST requests, the i-th built by the i-th
// call of build, signed now (untimed: measure resets the timer). It returns
// the function that reports the signing time per request as sign-us/op
// (what signing on the client would add to each op, on one goroutine; not
// part of the op's own figures), to be called after measure: measure's
// ResetTimer deletes metrics reported before it.
func (q *signedQueue) fill(b *testing.B, s *requestSigner, n int, build func() (path string, body []byte, err error)) (report func()) {
	b.Helper()
	q.reqs = make([]signedRequest, 0, n)
	q.next.Store(0)
	var signing time.Duration
	for range n {
		path, body, err := build()
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		r, err := s.sign(http.MethodPost, path, body)
		signing += time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		q.reqs = append(q.reqs, r)
	}
	return func() { b.ReportMetric(float64(signing)/float64(n)/float64(time.Microsecond), "sign-us/op") }
}

// take returns the next request; every op takes one.
func (q *signedQueue) take() (signedRequest, error) {
	i := int(q.next.Add(1)) - 1
	if i >= len(q.reqs) {
		return signedRequest{}, fmt.Errorf("signed request queue exhausted at %d", i)
	}
	return q.reqs[i], nil
}
