package client

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// The client against real gRPC servers over real mutual TLS: each test
// server is a saltbush stand-in serving ClusterControlService and the EKS
// ClusterService from fakes that record what reached them.

// record is what one test server saw. Its fields are guarded by mu: the
// handlers run on gRPC's goroutines.
type record struct {
	name string

	mu sync.Mutex
	// unavailable is how many calls still to answer with UNAVAILABLE.
	unavailable int
	// calls counts the calls of each method that reached the handler.
	calls map[string]int
	// deadline is the deadline of the last GetCluster, if it had one.
	deadline    time.Time
	hasDeadline bool
	// actFor is the act-for metadata of the last call of each method.
	actFor map[string][]string
}

// enter counts a call of method, notes its metadata, and returns the
// UNAVAILABLE answer while some are due.
func (r *record) enter(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[method]++
	r.actFor[method] = md.Get(ActForAccountHeader)
	if r.unavailable > 0 {
		r.unavailable--
		return status.Error(codes.Unavailable, r.name+" is unavailable")
	}
	return nil
}

func (r *record) failNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unavailable = n
}

func (r *record) callsOf(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

func (r *record) actForOf(method string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.actFor[method]
}

type fakeControl struct {
	controlv1.UnimplementedClusterControlServiceServer
	r *record
}

// GetCluster answers with the server's name as the cluster's, so a test
// sees which server answered.
func (f *fakeControl) GetCluster(ctx context.Context, _ *controlv1.GetClusterRequest) (*controlv1.GetClusterResponse, error) {
	if err := f.r.enter(ctx, "GetCluster"); err != nil {
		return nil, err
	}
	d, ok := ctx.Deadline()
	f.r.mu.Lock()
	f.r.deadline, f.r.hasDeadline = d, ok
	f.r.mu.Unlock()
	return &controlv1.GetClusterResponse{Cluster: &controlv1.ClusterInfo{Name: f.r.name}}, nil
}

func (f *fakeControl) SetStatus(ctx context.Context, _ *controlv1.SetStatusRequest) (*controlv1.SetStatusResponse, error) {
	if err := f.r.enter(ctx, "SetStatus"); err != nil {
		return nil, err
	}
	return &controlv1.SetStatusResponse{Cluster: &controlv1.ClusterInfo{Name: f.r.name}}, nil
}

type fakeEKS struct {
	eksv1.UnimplementedClusterServiceServer
	r *record
}

func (f *fakeEKS) DescribeCluster(ctx context.Context, req *eksv1.DescribeClusterRequest) (*eksv1.DescribeClusterResponse, error) {
	if err := f.r.enter(ctx, "DescribeCluster"); err != nil {
		return nil, err
	}
	return &eksv1.DescribeClusterResponse{Cluster: &eksv1.Cluster{Name: req.GetName(), Status: "CREATING"}}, nil
}

// testServer is a running saltbush stand-in.
type testServer struct {
	addr string
	rec  *record
	srv  *grpc.Server
}

// startServer serves on a free loopback port until stop or the test's end.
func startServer(t *testing.T, p *testPKI, name string) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &record{name: name, calls: map[string]int{}, actFor: map[string][]string{}}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(p.serverTLS(t))))
	controlv1.RegisterClusterControlServiceServer(srv, &fakeControl{r: rec})
	eksv1.RegisterClusterServiceServer(srv, &fakeEKS{r: rec})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return &testServer{addr: lis.Addr().String(), rec: rec, srv: srv}
}

// deadAddress is a loopback address nothing listens on: connecting to it
// is refused, as connecting to a replica that is down is.
func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// call is a context for one call, bounded so a broken client fails the
// test rather than hanging it.
func call(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// answeredBy calls GetCluster and returns the name of the server that
// answered.
func answeredBy(t *testing.T, c *Client) string {
	t.Helper()
	resp, err := c.ClusterControl.GetCluster(call(t), &controlv1.GetClusterRequest{})
	if err != nil {
		t.Fatalf("GetCluster: %v", err)
	}
	return resp.GetCluster().GetName()
}

// TestFailover: with the first endpoint down the client reaches the
// second; when that one stops, it moves on to the third.
func TestFailover(t *testing.T) {
	p := newTestPKI(t)
	a, b := startServer(t, p, "a"), startServer(t, p, "b")
	c := newClient(t, Config{
		Endpoints: []string{deadAddress(t), a.addr, b.addr},
		CertDir:   p.clientDir(t, "provisioner"), CertName: "provisioner",
	})

	if got := answeredBy(t, c); got != "a" {
		t.Fatalf("first call answered by %q, want a (the first endpoint that is up)", got)
	}
	// pick_first stays where it is while that replica answers.
	if got := answeredBy(t, c); got != "a" {
		t.Fatalf("second call answered by %q, want a again", got)
	}
	a.srv.Stop()
	if got := answeredBy(t, c); got != "b" {
		t.Fatalf("call after a stopped answered by %q, want b", got)
	}
	if n := b.rec.callsOf("GetCluster"); n != 1 {
		t.Errorf("b saw %d GetCluster calls, want 1", n)
	}
}

// TestRetryOnUnavailable: a method the contract declares free of side
// effects is retried on UNAVAILABLE until it succeeds; SetStatus, which
// it does not declare idempotent, is tried once and its UNAVAILABLE
// returned.
func TestRetryOnUnavailable(t *testing.T) {
	p := newTestPKI(t)
	s := startServer(t, p, "a")
	c := newClient(t, Config{Endpoints: []string{s.addr}, CertDir: p.clientDir(t, "svc"), CertName: "svc"})

	s.rec.failNext(2)
	if _, err := c.ClusterControl.GetCluster(call(t), &controlv1.GetClusterRequest{}); err != nil {
		t.Fatalf("GetCluster after two UNAVAILABLE answers: %v", err)
	}
	if n := s.rec.callsOf("GetCluster"); n != 3 {
		t.Errorf("GetCluster reached the server %d times, want 3 (two UNAVAILABLE, one answer)", n)
	}

	s.rec.failNext(1)
	_, err := c.ClusterControl.SetStatus(call(t), &controlv1.SetStatusRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("SetStatus answered UNAVAILABLE once: %v, want that UNAVAILABLE", err)
	}
	if n := s.rec.callsOf("SetStatus"); n != 1 {
		t.Errorf("SetStatus reached the server %d times, want 1: it is not declared idempotent", n)
	}
}

// TestDefaultDeadline: a call without a deadline gets CallTimeout; a
// caller's own deadline is kept.
func TestDefaultDeadline(t *testing.T) {
	p := newTestPKI(t)
	s := startServer(t, p, "a")
	const timeout = 5 * time.Second
	c := newClient(t, Config{Endpoints: []string{s.addr}, CertDir: p.clientDir(t, "svc"), CertName: "svc", CallTimeout: timeout})
	deadline := func() (time.Time, bool) {
		s.rec.mu.Lock()
		defer s.rec.mu.Unlock()
		return s.rec.deadline, s.rec.hasDeadline
	}

	before := time.Now()
	if _, err := c.ClusterControl.GetCluster(context.Background(), &controlv1.GetClusterRequest{}); err != nil {
		t.Fatal(err)
	}
	if d, ok := deadline(); !ok || d.After(time.Now().Add(timeout)) || d.Before(before) {
		t.Errorf("a call without a deadline reached the server with deadline %v (set: %v), want one at most %v after the call", d, ok, timeout)
	}

	own := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), own)
	defer cancel()
	if _, err := c.ClusterControl.GetCluster(ctx, &controlv1.GetClusterRequest{}); err != nil {
		t.Fatal(err)
	}
	// The deadline travels as a timeout, so the server's is near the
	// caller's, not equal; what matters is that it is not CallTimeout.
	if d, ok := deadline(); !ok || d.Before(time.Now().Add(timeout)) {
		t.Errorf("a call with a one-hour deadline reached the server with deadline %v (set: %v), want about an hour away", d, ok)
	}
}

// TestActForAccount: EKS calls carry the account once; control calls carry
// none; a caller's own header is sent as it is, not doubled.
func TestActForAccount(t *testing.T) {
	p := newTestPKI(t)
	s := startServer(t, p, "a")
	dir := p.clientDir(t, "svc")
	c := newClient(t, Config{Endpoints: []string{s.addr}, CertDir: dir, CertName: "svc", Account: "111122223333"})

	if _, err := c.Clusters.DescribeCluster(call(t), &eksv1.DescribeClusterRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	if got := s.rec.actForOf("DescribeCluster"); !slices.Equal(got, []string{"111122223333"}) {
		t.Errorf("DescribeCluster carried %s %q, want [111122223333]", ActForAccountHeader, got)
	}
	if _, err := c.ClusterControl.GetCluster(call(t), &controlv1.GetClusterRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := s.rec.actForOf("GetCluster"); len(got) != 0 {
		t.Errorf("GetCluster carried %s %q, want none: control methods act for no account", ActForAccountHeader, got)
	}
	ctx := metadata.AppendToOutgoingContext(call(t), ActForAccountHeader, "444455556666")
	if _, err := c.Clusters.DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	if got := s.rec.actForOf("DescribeCluster"); !slices.Equal(got, []string{"444455556666"}) {
		t.Errorf("DescribeCluster with the caller's own header carried %q, want [444455556666]", got)
	}

	none := newClient(t, Config{Endpoints: []string{s.addr}, CertDir: dir, CertName: "svc"})
	if _, err := none.Clusters.DescribeCluster(call(t), &eksv1.DescribeClusterRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	if got := s.rec.actForOf("DescribeCluster"); len(got) != 0 {
		t.Errorf("a client without Account sent %s %q, want none", ActForAccountHeader, got)
	}
}

// TestVerifiesServer: a server whose certificate another CA signed is not
// trusted, whatever it serves.
func TestVerifiesServer(t *testing.T) {
	s := startServer(t, newTestPKI(t), "impostor")
	other := newTestPKI(t)
	c := newClient(t, Config{Endpoints: []string{s.addr}, CertDir: other.clientDir(t, "svc"), CertName: "svc"})
	_, err := c.ClusterControl.GetCluster(call(t), &controlv1.GetClusterRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GetCluster from a server of another CA: %v, want UNAVAILABLE naming its certificate", err)
	}
	if n := s.rec.callsOf("GetCluster"); n != 0 {
		t.Errorf("the impostor saw %d calls, want 0", n)
	}
}
