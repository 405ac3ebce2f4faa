package faults

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/fakeagent"
	"github.com/saltbush/saltbush/tests/invariants"
	"github.com/saltbush/saltbush/tlsclient"
)

// killReplay replays a run of TestKillLoopKeepsInvariants: the kill
// delays and every workload choice are drawn from a random source started
// at this number (the run logs the number it used). What the server has
// done when the kill lands still depends on the machine's speed.
var killReplay = flag.Uint64("faults.kill-replay", 0, "random state of TestKillLoopKeepsInvariants to replay (0: from the clock; the run logs it)")

// Kill delays, from the moment the workload starts: uniform in between.
const (
	klMinDelay = 300 * time.Millisecond
	klMaxDelay = 3 * time.Second
)

const klAccount = "000000000000"

var (
	// klStable are never deleted: their acknowledged children accumulate
	// over the iterations. Each has two members with agents.
	klStable = []string{"kl-a", "kl-b"}
	// klRecycled is deleted, purged, recreated and upgraded over and over.
	klRecycled   = "kl-r"
	klMembers    = []string{"i-a", "i-b"}
	klAddons     = []string{"coredns", "kube-proxy", "vpc-cni", "metrics-server", "saltbush-noop"}
	klPrincipals = []string{"arn:aws:iam::000000000000:role/kl-1", "arn:aws:iam::000000000000:role/ops/kl-2",
		"arn:aws:iam::000000000000:user/kl-3"}
	klPolicies = []string{"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
		"arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy", "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy"}
	klRoles  = []string{"arn:aws:iam::000000000000:role/pods-1", "arn:aws:iam::000000000000:role/pods-2"}
	klPhases = []controlv1.AddonPhase{controlv1.AddonPhase_ADDON_PHASE_APPLIED, controlv1.AddonPhase_ADDON_PHASE_READY,
		controlv1.AddonPhase_ADDON_PHASE_FAILED, controlv1.AddonPhase_ADDON_PHASE_REMOVED}
)

// TestKillLoopKeepsInvariants runs `saltbush serve` on one data directory
// again and again. Each iteration starts it, runs a mixed workload from
// several goroutines (clusters, add-ons, access entries and policies, pod
// identity associations, tags and updates through the AWS SDK; status,
// version completions, drains and add-on reports through the control
// gRPC API; fake agents of two clusters holding delivery streams and
// reporting at their epochs), kills it with SIGKILL after a delay drawn
// from a random source the run logs (-faults.kill-replay), opens its etcd
// data directly and checks the whole keyspace with tests/invariants
// against the previous iteration's snapshot and every write the server
// acknowledged. The next iteration starts again on the same data.
//
// Short form: 3 iterations. Long form (-args -faults.long): 50, every
// tenth of them long enough for the add-on deadline sweeper to be elected.
func TestKillLoopKeepsInvariants(t *testing.T) {
	t.Parallel()
	iterations := 3
	if *long {
		iterations = 50
	}
	state := *killReplay
	if state == 0 {
		state = uint64(time.Now().UnixNano())
	}
	form := ""
	if *long {
		form = " -faults.long"
	}
	t.Logf("random state %d; replay: go test ./tests/faults -run TestKillLoopKeepsInvariants -args%s -faults.kill-replay=%d", state, form, state)
	// serve reads every flag from SALTBUSH_<FLAG> (cmd/saltbush/main.go),
	// and the child gets these on top of the test's own environment (which
	// stays as it is: the test runs in parallel with others): no
	// throttling, so the load is the workload's and not the token
	// bucket's; delivery timing short enough for executors to change
	// within a run (fence-after + margin + heartbeat < session TTL still
	// holds); add-on deadlines that pass within a run, for the sweeper.
	env := []string{
		"SALTBUSH_THROTTLE_RATE=0",
		"SALTBUSH_DELIVERY_SESSION_TTL=3s",
		"SALTBUSH_DELIVERY_HEARTBEAT_INTERVAL=200ms",
		"SALTBUSH_DELIVERY_FENCE_AFTER=1500ms",
		"SALTBUSH_DELIVERY_SAFETY_MARGIN=500ms",
		"SALTBUSH_ADDON_CREATE_TIMEOUT=1s",
		"SALTBUSH_ADDON_UPDATE_TIMEOUT=1s",
		"SALTBUSH_ADDON_DELETE_TIMEOUT=1s",
		"SALTBUSH_ADDON_SWEEP_INTERVAL=250ms",
	}
	bin := buildSaltbush(t)
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(iterations)*2*time.Minute)
	defer cancel()

	rng := mrand.New(mrand.NewPCG(state, 0x6b696c6c))
	acked := invariants.NewAcked()
	certs := map[string]klCert{}
	var prev *invariants.Snapshot
	var records, verified, violations, requests int64
	began := time.Now()
	for i := 1; i <= iterations; i++ {
		lo, hi := klMinDelay, klMaxDelay
		if *long && i%10 == 0 {
			// A killed replica's election key (server/addon/sweeper.go)
			// lives on its lease for the election's 10 s session TTL,
			// which etcd renews whenever it restarts: a run shorter than
			// that never gets the sweeper elected.
			lo, hi = 11*time.Second, 14*time.Second
		}
		delay := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		w := &klWorkload{t: t, iter: i, env: env, acked: acked, state: rng.Uint64(), ca: clustertest.CertificateAuthorityData(t)}
		w.run(ctx, bin, dataDir, certs, delay)

		rep := klCheck(t, ctx, dataDir, acked, prev)
		prev = rep.Snapshot
		records += int64(rep.Records())
		verified += int64(rep.AckedVerified)
		violations += int64(len(rep.Violations))
		requests += w.requests.Load()
		t.Logf("iteration %d: killed after %s (workload state %d): %d requests, %d writes acknowledged and recorded, %d agent reports; %s",
			i, delay, w.state, w.requests.Load(), w.acks.Load(), w.reports.Load(), rep.Summary())
		for _, v := range rep.Violations {
			t.Errorf("iteration %d (random state %d, killed after %s): %s", i, state, delay, v)
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d iterations in %s: %d requests, %d records checked, %d acknowledged writes verified (%d distinct held at the end), %d violations",
		iterations, time.Since(began).Round(time.Second), requests, records, verified, acked.Len(), violations)
}

// run starts saltbush on dataDir, runs the workload and the agents, and
// kills saltbush with SIGKILL after delay; it returns once every goroutine
// of the workload has stopped.
func (w *klWorkload) run(ctx context.Context, bin, dataDir string, certs map[string]klCert, delay time.Duration) {
	t := w.t
	t.Helper()
	p := startServeEnv(t, bin, dataDir, w.env)
	w.eks, w.conn, w.grpcAddr = p.client(t), p.grpc(t), p.grpcAddr
	agents := w.setup(ctx, certs)

	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Also on a failure below: no goroutine may outlive the test.
	defer func() {
		stopWork()
		wg.Wait()
	}()
	states := mrand.New(mrand.NewPCG(w.state, 0))
	for n := range 6 {
		rng := mrand.New(mrand.NewPCG(states.Uint64(), states.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(workCtx, n, rng)
		}()
	}
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.run(workCtx, w)
		}()
	}
	select {
	case <-time.After(delay):
	case err := <-p.done:
		t.Fatalf("iteration %d: saltbush exited under the workload: %v", w.iter, err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if err := p.wait(t, 30*time.Second); !errors.As(err, &exitErr) {
		t.Fatalf("iteration %d: exit after SIGKILL: %v", w.iter, err)
	}
}

// klCheck opens the killed server's etcd data directory and checks its
// keyspace.
func klCheck(t *testing.T, ctx context.Context, dataDir string, acked *invariants.Acked, prev *invariants.Snapshot) *invariants.Report {
	t.Helper()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: filepath.Join(dataDir, "etcd"), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("reopen the data directory: %v", err)
	}
	defer etcd.Close()
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	rep, err := invariants.Check(ctx, cli, store.DefaultPrefix, acked, invariants.Previous(prev))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked["cluster"] == 0 {
		t.Fatal("no cluster record in the keyspace: the workload wrote nothing")
	}
	return rep
}

// klWorkload is one iteration's workload on one serve process.
type klWorkload struct {
	t    *testing.T
	iter int
	// env is added to serve's environment.
	env []string
	// state starts the workers' random sources.
	state    uint64
	eks      *eks.Client
	conn     *grpc.ClientConn
	grpcAddr string
	acked    *invariants.Acked
	ca       string

	requests atomic.Int64
	creates  atomic.Int64 // the recycled cluster's creates, for their tokens
	acks     atomic.Int64
	reports  atomic.Int64
}

func (w *klWorkload) record(tok invariants.Token, wr invariants.Write) {
	if w.acked.Add(tok, wr) {
		w.acks.Add(1)
	}
}

func klRef(name string) *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: klAccount, Name: name}
}

// exception is the AWS exception of a gRPC error, "" when it carries none.
func exception(err error) string {
	if e := errdefs.FromGRPC(status.Convert(err)); e != nil {
		return e.Exception
	}
	return ""
}

func lastSegment(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }

// klCert is an agent's certificate.
type klCert struct{ cert, key, bundle []byte }

// setup makes sure what the workload works on exists (whatever state the
// previous kill left) and returns the agents to run.
func (w *klWorkload) setup(ctx context.Context, certs map[string]klCert) []*klAgent {
	t := w.t
	t.Helper()
	idc := controlv1.NewIdentityControlServiceClient(w.conn)
	for _, arn := range klPrincipals {
		if _, err := idc.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil && exception(err) != "ResourceInUseException" {
			t.Fatalf("CreatePrincipal %s: %v", arn, err)
		}
	}
	cc := controlv1.NewClusterControlServiceClient(w.conn)
	var agents []*klAgent
	for _, name := range klStable {
		tok := w.acked.Begin()
		_, err := w.eks.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{}, AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}})
		var inUse *types.ResourceInUseException
		switch {
		case err == nil:
			w.record(tok, invariants.ClusterCreated(klAccount, name))
		case !errors.As(err, &inUse):
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
		// A kill may have left it FAILED (SetStatus FAILED, then ACTIVE).
		if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: klRef(name), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
			Endpoint: clustertest.Endpoint, CertificateAuthorityData: w.ca}); err != nil {
			t.Fatalf("SetStatus %s ACTIVE: %v", name, err)
		}
		for _, m := range klMembers {
			out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: klRef(name), InstanceId: m})
			if err != nil {
				t.Fatalf("AddMember %s/%s: %v", name, m, err)
			}
			uid := out.GetCluster().GetUid()
			c, ok := certs[uid+"/"+m]
			if !ok {
				c = w.issueAgentCert(ctx, idc, uid, m)
				certs[uid+"/"+m] = c
			}
			agents = append(agents, &klAgent{cluster: name, instance: m, cert: c})
		}
	}
	w.createRecycled(ctx)
	return agents
}

func (w *klWorkload) issueAgentCert(ctx context.Context, idc controlv1.IdentityControlServiceClient, uid, instance string) klCert {
	t := w.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: instance}}, key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := idc.IssueCertificate(ctx, &controlv1.IssueCertificateRequest{
		CsrPem:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
		Subject: &controlv1.IssueCertificateRequest_Agent{Agent: &controlv1.AgentSubject{ClusterUid: uid, Instance: instance}}, TtlSeconds: 24 * 3600})
	if err != nil {
		t.Fatalf("IssueCertificate for agent %s of %s: %v", instance, uid, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return klCert{cert: []byte(out.GetCertificatePem()), bundle: []byte(out.GetCaBundlePem()),
		key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
}

// createRecycled creates the recycled cluster (if it is not there) at an
// old version, so that it can be upgraded a few times, and makes it ACTIVE.
func (w *klWorkload) createRecycled(ctx context.Context) {
	tok := w.acked.Begin()
	w.requests.Add(1)
	_, err := w.eks.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(klRecycled), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		Version: aws.String("1.33"), ResourcesVpcConfig: &types.VpcConfigRequest{},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap},
		ClientRequestToken: aws.String(fmt.Sprintf("kl-r-%d-%d", w.iter, w.creates.Add(1)))})
	if err != nil {
		return
	}
	w.record(tok, invariants.ClusterCreated(klAccount, klRecycled))
	w.requests.Add(1)
	_, _ = controlv1.NewClusterControlServiceClient(w.conn).SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: klRef(klRecycled),
		Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: clustertest.Endpoint, CertificateAuthorityData: w.ca})
}

// klWorker is one goroutine of the workload. Its tag keys are its own, so
// the value it last tagged is the value a key must have.
type klWorker struct {
	w   *klWorkload
	id  int
	rng *mrand.Rand
	n   int
	// Taggable resources this worker saw acknowledged, with the write that
	// made them (a tag goes with it). Add-ons are not among them: an
	// add-on's deletion ends with a REMOVED report, later than DeleteAddon
	// returns, and a DELETING add-on still takes tags (see
	// invariants.Acked).
	targets []klTarget
}

type klTarget struct {
	of  invariants.Write
	arn string
}

// worker runs operations until ctx ends. Their errors are expected
// (conflicts, ResourceInUse, refused connections after the kill): only
// what the server acknowledged is recorded, and the keyspace is judged
// afterwards.
func (w *klWorkload) worker(ctx context.Context, id int, rng *mrand.Rand) {
	wk := &klWorker{w: w, id: id, rng: rng}
	ops := []struct {
		weight int
		run    func(context.Context)
	}{
		{6, wk.createAddon}, {4, wk.updateAddon}, {3, wk.deleteAddon}, {3, wk.readAddons}, {4, wk.report},
		{4, wk.createEntry}, {4, wk.associate}, {2, wk.disassociate}, {2, wk.updateEntry}, {2, wk.deleteEntry},
		{4, wk.createAssociation}, {2, wk.changeAssociation},
		{3, wk.tag}, {1, wk.untag},
		{2, wk.readClusters}, {2, wk.updateConfig}, {1, wk.recycle}, {1, wk.upgrade}, {1, wk.setStatus}, {1, wk.drain},
	}
	total := 0
	for _, op := range ops {
		total += op.weight
	}
	for ctx.Err() == nil {
		wk.n++
		pick := rng.IntN(total)
		for _, op := range ops {
			if pick < op.weight {
				op.run(ctx)
				break
			}
			pick -= op.weight
		}
	}
}

// cluster picks a cluster for a child operation: mostly a stable one.
func (wk *klWorker) cluster() string {
	if wk.rng.IntN(4) == 0 {
		return klRecycled
	}
	return klStable[wk.rng.IntN(len(klStable))]
}

func pick[T any](rng *mrand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// token is a client request token no other request uses: a replay after
// the resource was deleted is no part of this workload.
func (wk *klWorker) token() *string {
	return aws.String(fmt.Sprintf("kl-%d-%d-%d", wk.w.iter, wk.id, wk.n))
}

func (wk *klWorker) createAddon(ctx context.Context) {
	w, cl, name := wk.w, wk.cluster(), pick(wk.rng, klAddons)
	in := &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(name)}
	if wk.rng.IntN(2) == 0 {
		in.ClientRequestToken = wk.token()
	}
	if name == "vpc-cni" && wk.rng.IntN(2) == 0 {
		in.PodIdentityAssociations = []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(pick(wk.rng, klRoles))}}
	}
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.CreateAddon(ctx, in)
	if err == nil {
		w.record(tok, invariants.AddonCreated(klAccount, cl, name, lastSegment(aws.ToString(out.Addon.AddonArn))))
	}
}

func (wk *klWorker) updateAddon(ctx context.Context) {
	w, cl, name := wk.w, wk.cluster(), pick(wk.rng, klAddons)
	in := &eks.UpdateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(name),
		ConfigurationValues: aws.String(fmt.Sprintf(`{"replicaCount": %d}`, 1+wk.rng.IntN(5)))}
	if name == "vpc-cni" {
		in.ConfigurationValues = nil
		in.PodIdentityAssociations = []types.AddonPodIdentityAssociations{}
		if wk.rng.IntN(2) == 0 {
			in.PodIdentityAssociations = append(in.PodIdentityAssociations,
				types.AddonPodIdentityAssociations{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String(pick(wk.rng, klRoles))})
		}
	}
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.UpdateAddon(ctx, in)
	if err == nil {
		w.record(tok, invariants.AddonUpdated(klAccount, cl, name, aws.ToString(out.Update.Id)))
	}
}

func (wk *klWorker) deleteAddon(ctx context.Context) {
	w, cl, name := wk.w, wk.cluster(), pick(wk.rng, klAddons)
	done := w.acked.Forget(invariants.AddonScope(klAccount, cl, name))
	defer done()
	w.requests.Add(1)
	_, _ = w.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(name), Preserve: wk.rng.IntN(3) == 0})
}

func (wk *klWorker) readAddons(ctx context.Context) {
	w, cl := wk.w, wk.cluster()
	w.requests.Add(2)
	_, _ = w.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cl)})
	_, _ = w.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(pick(wk.rng, klAddons))})
}

// report plays the operator's report (control ApplyAddonReport, not
// fenced; it names no instance or epoch): a REMOVED one erases a DELETING
// add-on, so it is a deletion the workload asks for.
func (wk *klWorker) report(ctx context.Context) {
	w, cl, name := wk.w, wk.cluster(), pick(wk.rng, klAddons)
	control := controlv1.NewAddonControlServiceClient(w.conn)
	w.requests.Add(1)
	got, err := control.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: klRef(cl), AddonName: name})
	if err != nil {
		return
	}
	a, phase := got.GetAddon(), pick(wk.rng, klPhases)
	if phase == controlv1.AddonPhase_ADDON_PHASE_REMOVED {
		defer w.acked.Forget(invariants.AddonScope(klAccount, cl, name))()
	}
	w.requests.Add(1)
	_, _ = control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{ClusterUid: a.GetClusterUid(), AddonName: name,
		AddonUid: a.GetUid(), Generation: a.GetGeneration(), Phase: phase})
}

func (wk *klWorker) createEntry(ctx context.Context) {
	w, cl, principal := wk.w, wk.cluster(), pick(wk.rng, klPrincipals)
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
		KubernetesGroups: []string{fmt.Sprintf("g%d", wk.rng.IntN(3))}, ClientRequestToken: wk.token(),
		Tags: map[string]string{fmt.Sprintf("w%d-k0", wk.id): "created"}})
	if err != nil {
		return
	}
	arn := aws.ToString(out.AccessEntry.AccessEntryArn)
	entry := invariants.AccessEntryCreated(klAccount, cl, principal, lastSegment(arn))
	w.record(tok, entry)
	w.record(tok, invariants.Tagged(entry, arn, fmt.Sprintf("w%d-k0", wk.id), "created"))
	wk.targets = append(wk.targets, klTarget{of: entry, arn: arn})
}

func (wk *klWorker) associate(ctx context.Context) {
	w, cl, principal, policy := wk.w, wk.cluster(), pick(wk.rng, klPrincipals), pick(wk.rng, klPolicies)
	scope := &types.AccessScope{Type: types.AccessScopeTypeCluster}
	if wk.rng.IntN(2) == 0 {
		scope = &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev", "team-*"}}
	}
	tok := w.acked.Begin()
	w.requests.Add(1)
	if _, err := w.eks.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
		PolicyArn: aws.String(policy), AccessScope: scope}); err == nil {
		w.record(tok, invariants.PolicyAssociated(klAccount, cl, principal, policy))
	}
}

func (wk *klWorker) disassociate(ctx context.Context) {
	w, cl, principal, policy := wk.w, wk.cluster(), pick(wk.rng, klPrincipals), pick(wk.rng, klPolicies)
	defer w.acked.Forget(invariants.PolicyScope(klAccount, cl, principal, policy))()
	w.requests.Add(1)
	_, _ = w.eks.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
		PolicyArn: aws.String(policy)})
}

func (wk *klWorker) updateEntry(ctx context.Context) {
	w, cl, principal := wk.w, wk.cluster(), pick(wk.rng, klPrincipals)
	w.requests.Add(1)
	_, _ = w.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal),
		KubernetesGroups: []string{fmt.Sprintf("g%d", wk.rng.IntN(3))}, Username: aws.String(fmt.Sprintf("u%d:{{SessionName}}", wk.rng.IntN(3)))})
}

func (wk *klWorker) deleteEntry(ctx context.Context) {
	w, cl, principal := wk.w, wk.cluster(), pick(wk.rng, klPrincipals)
	defer w.acked.Forget(invariants.AccessEntryScope(klAccount, cl, principal))()
	w.requests.Add(1)
	_, _ = w.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cl), PrincipalArn: aws.String(principal)})
}

func (wk *klWorker) createAssociation(ctx context.Context) {
	w, cl := wk.w, wk.cluster()
	// A fresh service account each time; now and then an add-on's, which
	// the add-on's own association may hold.
	sa, ns := fmt.Sprintf("sa-%d-%d-%d", w.iter, wk.id, wk.n), "apps"
	if wk.rng.IntN(6) == 0 {
		sa, ns = "aws-node", "kube-system"
	}
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(cl),
		Namespace: aws.String(ns), ServiceAccount: aws.String(sa), RoleArn: aws.String(pick(wk.rng, klRoles)), ClientRequestToken: wk.token()})
	if err != nil {
		return
	}
	a := invariants.PodIdentityAssociationCreated(klAccount, cl, aws.ToString(out.Association.AssociationId))
	w.record(tok, a)
	wk.targets = append(wk.targets, klTarget{of: a, arn: aws.ToString(out.Association.AssociationArn)})
}

// changeAssociation updates or deletes one association made directly (an
// add-on's are its own).
func (wk *klWorker) changeAssociation(ctx context.Context) {
	w, cl := wk.w, wk.cluster()
	w.requests.Add(1)
	out, err := w.eks.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(cl)})
	if err != nil {
		return
	}
	var direct []types.PodIdentityAssociationSummary
	for _, s := range out.Associations {
		if s.OwnerArn == nil {
			direct = append(direct, s)
		}
	}
	if len(direct) == 0 {
		return
	}
	s := pick(wk.rng, direct)
	w.requests.Add(1)
	if wk.rng.IntN(2) == 0 {
		_, _ = w.eks.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{ClusterName: aws.String(cl),
			AssociationId: s.AssociationId, RoleArn: aws.String(pick(wk.rng, klRoles))})
		return
	}
	defer w.acked.Forget(invariants.PodIdentityScope(klAccount, cl, aws.ToString(s.AssociationId)))()
	_, _ = w.eks.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{ClusterName: aws.String(cl), AssociationId: s.AssociationId})
}

// target picks something to tag: a stable cluster (its ARN read back
// with DescribeCluster) or a resource this worker created.
func (wk *klWorker) target(ctx context.Context) (klTarget, bool) {
	if len(wk.targets) > 0 && wk.rng.IntN(3) != 0 {
		return pick(wk.rng, wk.targets), true
	}
	w, cl := wk.w, pick(wk.rng, klStable)
	w.requests.Add(1)
	out, err := w.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cl)})
	if err != nil {
		return klTarget{}, false
	}
	return klTarget{of: invariants.ClusterCreated(klAccount, cl), arn: aws.ToString(out.Cluster.Arn)}, true
}

func (wk *klWorker) tag(ctx context.Context) {
	w := wk.w
	tg, ok := wk.target(ctx)
	if !ok {
		return
	}
	key, value := fmt.Sprintf("w%d-k%d", wk.id, wk.rng.IntN(3)), strconv.Itoa(wk.n)
	// The value this request may replace says nothing any more.
	w.acked.Forget(invariants.TagScope(tg.arn, key))()
	tok := w.acked.Begin()
	w.requests.Add(1)
	if _, err := w.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(tg.arn), Tags: map[string]string{key: value}}); err == nil {
		w.record(tok, invariants.Tagged(tg.of, tg.arn, key, value))
	}
}

func (wk *klWorker) untag(ctx context.Context) {
	w := wk.w
	tg, ok := wk.target(ctx)
	if !ok {
		return
	}
	key := fmt.Sprintf("w%d-k%d", wk.id, wk.rng.IntN(3))
	defer w.acked.Forget(invariants.TagScope(tg.arn, key))()
	w.requests.Add(1)
	_, _ = w.eks.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: aws.String(tg.arn), TagKeys: []string{key}})
}

func (wk *klWorker) readClusters(ctx context.Context) {
	w := wk.w
	w.requests.Add(2)
	_, _ = w.eks.ListClusters(ctx, &eks.ListClustersInput{})
	_, _ = w.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(wk.cluster())})
}

func (wk *klWorker) updateConfig(ctx context.Context) {
	w, cl := wk.w, wk.cluster()
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.UpdateClusterConfig(ctx, &eks.UpdateClusterConfigInput{Name: aws.String(cl), ClientRequestToken: wk.token(),
		Logging: &types.Logging{ClusterLogging: []types.LogSetup{{Types: []types.LogType{pick(wk.rng, types.LogType("").Values())},
			Enabled: aws.Bool(wk.rng.IntN(2) == 0)}}}})
	if err == nil {
		w.record(tok, invariants.ClusterUpdated(klAccount, cl, aws.ToString(out.Update.Id)))
	}
}

// recycle deletes the recycled cluster, purges it (the provisioner's
// FinalizeDeletion) and creates it again: a new incarnation. Only one
// time in three, so that its add-ons (it has no agents) live long
// enough for their deadlines to pass.
func (wk *klWorker) recycle(ctx context.Context) {
	w := wk.w
	if wk.rng.IntN(3) != 0 {
		return
	}
	done := w.acked.Forget(invariants.ClusterScope(klAccount, klRecycled))
	w.requests.Add(2)
	_, _ = w.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String(klRecycled)})
	_, _ = controlv1.NewClusterControlServiceClient(w.conn).FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: klRef(klRecycled)})
	done()
	w.createRecycled(ctx)
}

// upgrade moves the recycled cluster one minor version up and, most of
// the time, has the provisioner complete it.
func (wk *klWorker) upgrade(ctx context.Context) {
	w := wk.w
	w.requests.Add(1)
	d, err := w.eks.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(klRecycled)})
	if err != nil {
		return
	}
	major, minor, _ := strings.Cut(aws.ToString(d.Cluster.Version), ".")
	m, err := strconv.Atoi(minor)
	if err != nil {
		return
	}
	tok := w.acked.Begin()
	w.requests.Add(1)
	out, err := w.eks.UpdateClusterVersion(ctx, &eks.UpdateClusterVersionInput{Name: aws.String(klRecycled),
		Version: aws.String(major + "." + strconv.Itoa(m+1)), ClientRequestToken: wk.token()})
	if err != nil {
		return
	}
	id := aws.ToString(out.Update.Id)
	w.record(tok, invariants.ClusterUpdated(klAccount, klRecycled, id))
	if wk.rng.IntN(4) == 0 {
		return // left InProgress: the cluster stays UPDATING until another run completes it, or is recycled
	}
	outcome := controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL
	if wk.rng.IntN(4) == 0 {
		outcome = controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED
	}
	w.requests.Add(1)
	_, _ = controlv1.NewClusterUpdateControlServiceClient(w.conn).CompleteUpdate(ctx, &controlv1.CompleteUpdateRequest{
		Cluster: klRef(klRecycled), UpdateId: id, Outcome: outcome})
}

// setStatus reports a stable cluster FAILED and ACTIVE again (which
// fences its executor, and a new epoch is assigned), or the recycled one
// ACTIVE.
func (wk *klWorker) setStatus(ctx context.Context) {
	w := wk.w
	cc := controlv1.NewClusterControlServiceClient(w.conn)
	cl := wk.cluster()
	active := &controlv1.SetStatusRequest{Cluster: klRef(cl), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: clustertest.Endpoint, CertificateAuthorityData: w.ca}
	if cl != klRecycled && wk.rng.IntN(2) == 0 {
		w.requests.Add(1)
		_, _ = cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: klRef(cl), Status: controlv1.ClusterStatus_CLUSTER_STATUS_FAILED,
			Reason: "kill loop"})
	}
	w.requests.Add(1)
	_, _ = cc.SetStatus(ctx, active)
}

func (wk *klWorker) drain(ctx context.Context) {
	w := wk.w
	w.requests.Add(1)
	_, _ = controlv1.NewDeliveryControlServiceClient(w.conn).DrainExecutor(ctx, &controlv1.DrainExecutorRequest{Cluster: klRef(pick(wk.rng, klStable))})
}

// klAgent is one member's guest agent (tests/fakeagent): it keeps a
// delivery stream open, acknowledges what it is sent and, as the
// executor, reports every add-on of its desired set at its epoch.
type klAgent struct {
	cluster, instance string
	cert              klCert
	// applied outlives streams and iterations, as the agent's own
	// record of what it applied does.
	applied fakeagent.Applied
}

// run holds streams to the iteration's serve process until ctx ends,
// connecting again whenever one ends (the host fences and ends streams of
// a FAILED cluster, a drained executor, …).
func (a *klAgent) run(ctx context.Context, w *klWorkload) {
	cfg, err := tlsclient.Config(a.cert.bundle, a.cert.cert, a.cert.key, "127.0.0.1")
	if err != nil {
		w.t.Errorf("agent %s of %s: TLS config: %v", a.instance, a.cluster, err)
		return
	}
	for ctx.Err() == nil {
		a.stream(ctx, w, cfg)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *klAgent) stream(ctx context.Context, w *klWorkload, cfg *tls.Config) {
	conn, err := grpc.NewClient(w.grpcAddr, grpc.WithTransportCredentials(grpccreds.NewTLS(cfg)))
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	hello := a.applied.Resume(&deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: klAccount, Name: a.cluster},
		InstanceId: a.instance, BootId: "kill-loop", AgentVersion: "kill-loop"})
	fs, err := fakeagent.Connect(ctx, conn, fakeagent.Options{Hello: hello})
	if err != nil {
		return
	}
	defer fs.Close()
	sess := fakeagent.NewSession(a.instance, &a.applied, fakeagent.SessionOptions{})
	for {
		m, err := fs.Recv()
		if err != nil {
			return
		}
		taken, err := sess.Take(m)
		if err != nil {
			w.t.Errorf("agent %s of %s: the host broke the delivery protocol: %v", a.instance, a.cluster, err)
		}
		for _, r := range taken.Replies {
			if fs.Send(r) != nil {
				return
			}
		}
		for _, r := range sess.Due() {
			if fs.Send(sess.Track(r, true)) != nil {
				return
			}
			w.reports.Add(1)
		}
	}
}
