package faults

// The mixed load of the etcd fault tests (etcd_members_test.go,
// etcd_quorum_test.go): unmodified SDK clients with the SDK's default
// retryer creating, describing, listing, updating and deleting add-ons and
// access entries on a few ACTIVE clusters, while the test breaks etcd
// beneath the server. Each worker owns its resources (one add-on name and
// its own principals on every cluster) and keeps a model of what its
// acknowledged writes left behind; verify compares the model with what the
// server answers and what the keyspace holds. The guest agent's part of an
// add-on's lifecycle (READY after a create or update, REMOVED after a
// delete) is played over AddonControlService with gRPC's standard retry
// policy, as an agent retries its reports.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/invariants"
)

// loadAddon is an add-on name a load worker owns on every cluster: the
// configuration values of its n-th version, and the service accounts its
// create gives pod identity associations (a multi-key write).
type loadAddon struct {
	name   string
	config func(n int) string
	pods   []string
}

// resourcesConfig is configuration values the common add-on schema takes
// (catalog/addons/*/schema.json): the container's CPU request.
func resourcesConfig(n int) string {
	return fmt.Sprintf(`{"resources":{"requests":{"cpu":"%dm"}}}`, 10+n)
}

// loadAddons are the add-ons of the load's workers, one each.
var loadAddons = []loadAddon{
	{name: "saltbush-noop", config: func(n int) string { return fmt.Sprintf(`{"replicaCount": %d}`, 1+n%10) }},
	{name: "saltbush-pod-identity", config: func(n int) string { return fmt.Sprintf(`{"message": "version %d"}`, n) },
		pods: []string{"saltbush-pod-identity-controller", "saltbush-pod-identity-node"}},
	{name: "coredns", config: resourcesConfig},
	{name: "vpc-cni", config: resourcesConfig, pods: []string{"aws-node"}},
}

// loadConfig sizes a mixed load (its clusters are setupLoadClusters').
type loadConfig struct {
	// workers is how many concurrent workers run (at most len(loadAddons)).
	workers int
	// principals is how many access-entry principals each worker owns.
	principals int
}

// loadCluster is a cluster the load works on.
type loadCluster struct{ name, uid string }

// mixedLoad is a running mixed load.
type mixedLoad struct {
	t        *testing.T
	srv      *servertest.Server
	eks      *eks.Client
	control  controlv1.AddonControlServiceClient
	clusters []loadCluster
	workers  []*loadWorker

	// stopping ends the workers between steps: a call cut short would
	// leave it unknown whether its write was made.
	stopping atomic.Bool
	wg       sync.WaitGroup

	// acked counts acknowledged operations; retried the calls the SDK
	// sent more than once.
	acked   atomic.Int64
	retried atomic.Int64

	mu       sync.Mutex
	failures []string
}

// loadWorker's models are its own until the load stops.
type loadWorker struct {
	l          *mixedLoad
	id         int
	addon      loadAddon
	principals []string
	rng        *rand.Rand
	version    int
	// addons is keyed by cluster name, entries by cluster name and
	// principal ARN.
	addons  map[string]*addonModel
	entries map[[2]string]*entryModel
}

// addonModel is what a worker's acknowledged writes left of its add-on
// on one cluster.
type addonModel struct {
	present bool
	// settled: the agent's part of the last acknowledged write is done
	// (the add-on is ACTIVE, or gone); the load may stop before it is.
	settled bool
	uid     string
	config  string
}

// entryModel is what a worker's acknowledged writes left of one
// principal's access entry on one cluster.
type entryModel struct {
	present bool
	groups  []string
}

// attemptsKey carries a call's attempt counter to the counting transport.
type attemptsKey struct{}

// countingTransport counts the HTTP requests of each SDK call (its
// attempts), so a retried call is known.
type countingTransport struct{ next http.RoundTripper }

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if n, ok := r.Context().Value(attemptsKey{}).(*atomic.Int32); ok {
		n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// controlRetryPolicy is gRPC's standard retry policy (gRFC A6) for the
// agent's side of the lifecycle: an UNAVAILABLE answer is retried, as an
// agent retries its reports.
const controlRetryPolicy = `{"methodConfig":[{"name":[{"service":"saltbush.control.v1.AddonControlService"}],
"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.2s","maxBackoff":"2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// setupLoadClusters creates n ACTIVE clusters named prefix-0.., with
// access entries on (the API authentication mode).
func setupLoadClusters(ctx context.Context, t *testing.T, srv *servertest.Server, prefix string, n int) []loadCluster {
	t.Helper()
	client := srv.EKS(t)
	conn := srv.GRPC(t)
	var out []loadCluster
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
			AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
		}); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
		res, err := controlv1.NewClusterControlServiceClient(conn).SetStatus(ctx, &controlv1.SetStatusRequest{
			Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name},
			Status:  controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: clustertest.Endpoint,
			CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
		})
		if err != nil {
			t.Fatalf("SetStatus ACTIVE %s: %v", name, err)
		}
		out = append(out, loadCluster{name: name, uid: res.GetCluster().GetUid()})
	}
	return out
}

// startMixedLoad starts cfg.workers workers on clusters (made by
// setupLoadClusters) until stop.
func startMixedLoad(ctx context.Context, t *testing.T, srv *servertest.Server, clusters []loadCluster, cfg loadConfig) *mixedLoad {
	t.Helper()
	if cfg.workers > len(loadAddons) {
		t.Fatalf("mixed load: %d workers, but only %d add-ons to own", cfg.workers, len(loadAddons))
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(),
		grpc.WithTransportCredentials(grpccreds.NewTLS(srv.ClientTLS(t))),
		grpc.WithUnaryInterceptor(server.ActForAccount(srv.Config.DevAccount)),
		grpc.WithDefaultServiceConfig(controlRetryPolicy))
	if err != nil {
		t.Fatalf("dial gRPC: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	l := &mixedLoad{
		t: t, srv: srv, clusters: clusters, control: controlv1.NewAddonControlServiceClient(conn),
		eks: srv.EKS(t, func(o *eks.Options) {
			o.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: countingTransport{next: http.DefaultTransport}}
		}),
	}
	identity := controlv1.NewIdentityControlServiceClient(srv.GRPC(t))
	for w := range cfg.workers {
		lw := &loadWorker{
			l: l, id: w, addon: loadAddons[w], rng: rand.New(rand.NewPCG(uint64(w)+1, 7)),
			addons: map[string]*addonModel{}, entries: map[[2]string]*entryModel{},
		}
		for p := range cfg.principals {
			arn := fmt.Sprintf("arn:aws:iam::%s:role/load-%d-%d", srv.Config.DevAccount, w, p)
			if _, err := identity.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: arn}); err != nil {
				t.Fatalf("CreatePrincipal %s: %v", arn, err)
			}
			lw.principals = append(lw.principals, arn)
		}
		for _, c := range clusters {
			lw.addons[c.name] = &addonModel{settled: true}
			for _, p := range lw.principals {
				lw.entries[[2]string{c.name, p}] = &entryModel{}
			}
		}
		l.workers = append(l.workers, lw)
	}
	for _, lw := range l.workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stopping.Load() && ctx.Err() == nil {
				lw.step(ctx)
			}
		}()
	}
	return l
}

// fail records a client-visible failure.
func (l *mixedLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf(format, args...))
}

// waitAcked waits until n more operations than now were acknowledged: the
// load makes progress (under whatever the test did to etcd).
func (l *mixedLoad) waitAcked(ctx context.Context, n int64, what string) {
	l.t.Helper()
	target := l.acked.Load() + n
	deadline := time.Now().Add(60 * time.Second)
	for l.acked.Load() < target {
		if time.Now().After(deadline) || ctx.Err() != nil {
			l.t.Fatalf("mixed load %s: %d operations acknowledged, want %d within 60s; failures: %v",
				what, l.acked.Load(), target, l.failureList())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *mixedLoad) failureList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.failures)
}

// stop ends the workers once their steps in flight are done.
func (l *mixedLoad) stop() {
	l.stopping.Store(true)
	l.wg.Wait()
}

// call runs one SDK call, counting its attempts.
func (lw *loadWorker) call(ctx context.Context, fn func(ctx context.Context) error) (attempts int32, err error) {
	var n atomic.Int32
	err = fn(context.WithValue(ctx, attemptsKey{}, &n))
	switch {
	case n.Load() > 1:
		lw.l.retried.Add(1)
	case n.Load() == 0 && err == nil:
		// Then retried would say nothing.
		lw.l.fail("worker %d: a call answered without a request the counting transport saw", lw.id)
	}
	return n.Load(), err
}

// failed records err of op on what as a failure unless the test's
// context ended; it reports whether there was an error at all.
func (lw *loadWorker) failed(ctx context.Context, op, what string, attempts int32, err error) bool {
	if err == nil {
		lw.l.acked.Add(1)
		return false
	}
	if ctx.Err() == nil {
		lw.l.fail("worker %d: %s %s (%d attempts): %v", lw.id, op, what, attempts, err)
	}
	return true
}

func (lw *loadWorker) step(ctx context.Context) {
	c := lw.l.clusters[lw.rng.IntN(len(lw.l.clusters))]
	if lw.rng.IntN(2) == 0 {
		lw.addonStep(ctx, c)
	} else {
		lw.entryStep(ctx, c, lw.principals[lw.rng.IntN(len(lw.principals))])
	}
}

func (lw *loadWorker) addonStep(ctx context.Context, c loadCluster) {
	m := lw.addons[c.name]
	name := lw.addon.name
	what := c.name + "/" + name
	in := &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String(name)}
	if !m.present {
		lw.version++
		cfg := lw.addon.config(lw.version)
		create := &eks.CreateAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName, ConfigurationValues: aws.String(cfg)}
		for _, sa := range lw.addon.pods {
			create.PodIdentityAssociations = append(create.PodIdentityAssociations, types.AddonPodIdentityAssociations{
				ServiceAccount: aws.String(sa), RoleArn: aws.String(fmt.Sprintf("arn:aws:iam::000000000000:role/%s-%d", sa, lw.id))})
		}
		var out *eks.CreateAddonOutput
		attempts, err := lw.call(ctx, func(ctx context.Context) (err error) {
			out, err = lw.l.eks.CreateAddon(ctx, create)
			return err
		})
		if lw.failed(ctx, "CreateAddon", what, attempts, err) {
			return
		}
		arn := aws.ToString(out.Addon.AddonArn)
		*m = addonModel{present: true, uid: arn[strings.LastIndex(arn, "/")+1:], config: cfg}
		lw.settle(ctx, c, m)
		return
	}
	switch lw.rng.IntN(5) {
	case 0, 1:
		var out *eks.DescribeAddonOutput
		attempts, err := lw.call(ctx, func(ctx context.Context) (err error) {
			out, err = lw.l.eks.DescribeAddon(ctx, in)
			return err
		})
		if lw.failed(ctx, "DescribeAddon", what, attempts, err) {
			return
		}
		if got := aws.ToString(out.Addon.ConfigurationValues); got != m.config || !strings.HasSuffix(aws.ToString(out.Addon.AddonArn), "/"+m.uid) {
			lw.l.fail("worker %d: DescribeAddon %s: configuration %s (arn %s), want %s (uid %s)", lw.id, what, got,
				aws.ToString(out.Addon.AddonArn), m.config, m.uid)
		}
	case 2:
		var out *eks.ListAddonsOutput
		attempts, err := lw.call(ctx, func(ctx context.Context) (err error) {
			out, err = lw.l.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: in.ClusterName})
			return err
		})
		if lw.failed(ctx, "ListAddons", c.name, attempts, err) {
			return
		}
		if !slices.Contains(out.Addons, name) {
			lw.l.fail("worker %d: ListAddons %s: %v lacks %s", lw.id, c.name, out.Addons, name)
		}
	case 3:
		lw.version++
		cfg := lw.addon.config(lw.version)
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			_, err := lw.l.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName,
				ConfigurationValues: aws.String(cfg)})
			return err
		})
		if lw.failed(ctx, "UpdateAddon", what, attempts, err) {
			return
		}
		m.config = cfg
		lw.settle(ctx, c, m)
	case 4:
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			_, err := lw.l.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName})
			return err
		})
		if lw.failed(ctx, "DeleteAddon", what, attempts, err) {
			return
		}
		m.present = false
		lw.settle(ctx, c, m)
	}
}

// settle plays the agent after an acknowledged add-on write: it reports
// the generation in flight READY (REMOVED when it is a deletion) until the
// SDK sees the outcome: ACTIVE, or the add-on gone. A report whose answer
// was lost may have been applied already, so each round reads the add-on
// afresh (level triggered, as an agent reports).
func (lw *loadWorker) settle(ctx context.Context, c loadCluster, m *addonModel) {
	m.settled = false
	what := c.name + "/" + lw.addon.name
	deadline := time.Now().Add(30 * time.Second)
	for ctx.Err() == nil {
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			out, err := lw.l.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String(lw.addon.name)})
			if err == nil && m.present && out.Addon.Status == types.AddonStatusActive {
				return nil
			}
			var nf *types.ResourceNotFoundException
			if !m.present && errors.As(err, &nf) {
				return nil
			}
			if err == nil {
				return errNotSettled
			}
			return err
		})
		switch {
		case err == nil:
			lw.l.acked.Add(1)
			m.settled = true
			return
		case !errors.Is(err, errNotSettled):
			lw.failed(ctx, "DescribeAddon", what, attempts, err)
			return
		case time.Now().After(deadline):
			lw.l.fail("worker %d: %s did not settle within 30s (present %v)", lw.id, what, m.present)
			return
		}
		got, err := lw.l.control.GetAddon(ctx, &controlv1.GetAddonRequest{
			Cluster: &controlv1.ClusterRef{AccountId: lw.l.srv.Config.DevAccount, Name: c.name}, AddonName: lw.addon.name})
		if err != nil {
			if ctx.Err() == nil {
				lw.l.fail("worker %d: GetAddon %s: %v", lw.id, what, err)
			}
			return
		}
		a := got.GetAddon()
		phase := controlv1.AddonPhase_ADDON_PHASE_READY
		if a.GetDeleting() {
			phase = controlv1.AddonPhase_ADDON_PHASE_REMOVED
		}
		if _, err := lw.l.control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
			ClusterUid: a.GetClusterUid(), AddonName: a.GetName(), AddonUid: a.GetUid(), Generation: a.GetGeneration(), Phase: phase,
		}); err != nil {
			if ctx.Err() == nil {
				lw.l.fail("worker %d: ApplyAddonReport %s %s: %v", lw.id, what, phase, err)
			}
			return
		}
	}
}

var errNotSettled = errors.New("not settled yet")

func (lw *loadWorker) entryStep(ctx context.Context, c loadCluster, principal string) {
	m := lw.entries[[2]string{c.name, principal}]
	what := c.name + " " + principal
	lw.version++
	groups := []string{fmt.Sprintf("group-%d", lw.version)}
	if !m.present {
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			_, err := lw.l.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(c.name),
				PrincipalArn: aws.String(principal), KubernetesGroups: groups})
			return err
		})
		if !lw.failed(ctx, "CreateAccessEntry", what, attempts, err) {
			*m = entryModel{present: true, groups: groups}
		}
		return
	}
	switch lw.rng.IntN(5) {
	case 0, 1:
		var out *eks.DescribeAccessEntryOutput
		attempts, err := lw.call(ctx, func(ctx context.Context) (err error) {
			out, err = lw.l.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principal)})
			return err
		})
		if !lw.failed(ctx, "DescribeAccessEntry", what, attempts, err) && !slices.Equal(out.AccessEntry.KubernetesGroups, m.groups) {
			lw.l.fail("worker %d: DescribeAccessEntry %s: groups %v, want %v", lw.id, what, out.AccessEntry.KubernetesGroups, m.groups)
		}
	case 2:
		var out *eks.ListAccessEntriesOutput
		attempts, err := lw.call(ctx, func(ctx context.Context) (err error) {
			out, err = lw.l.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(c.name)})
			return err
		})
		if !lw.failed(ctx, "ListAccessEntries", c.name, attempts, err) && !slices.Contains(out.AccessEntries, principal) {
			lw.l.fail("worker %d: ListAccessEntries %s: %v lacks %s", lw.id, c.name, out.AccessEntries, principal)
		}
	case 3:
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			_, err := lw.l.eks.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(c.name),
				PrincipalArn: aws.String(principal), KubernetesGroups: groups})
			return err
		})
		if !lw.failed(ctx, "UpdateAccessEntry", what, attempts, err) {
			m.groups = groups
		}
	case 4:
		attempts, err := lw.call(ctx, func(ctx context.Context) error {
			_, err := lw.l.eks.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(principal)})
			return err
		})
		// A delete is not idempotent: when the SDK retried it, the first
		// attempt may have deleted the entry with its answer lost, and
		// the retry finds nothing. The entry is gone either way.
		var nf *types.ResourceNotFoundException
		if attempts > 1 && errors.As(err, &nf) {
			err = nil
		}
		if !lw.failed(ctx, "DeleteAccessEntry", what, attempts, err) {
			m.present = false
		}
	}
}

// verify checks, once the load has stopped, that every acknowledged write
// is what the server answers: each worker's add-ons (uid, configuration,
// pod identity associations) and access entries (groups) are there, and
// what it deleted is not; and that the keyspace keeps the invariants of
// the add-on, access-entry and pod identity transactions. It returns how
// many resources the models hold.
func (l *mixedLoad) verify(ctx context.Context, cli *clientv3.Client) (addons, entries int) {
	t := l.t
	t.Helper()
	// The load may have stopped between an acknowledged write and the
	// agent's report: report now.
	for _, lw := range l.workers {
		for _, c := range l.clusters {
			if m := lw.addons[c.name]; !m.settled {
				lw.settle(ctx, c, m)
			}
		}
	}
	for _, f := range l.failureList() {
		t.Errorf("client-visible failure: %s", f)
	}
	for _, c := range l.clusters {
		listed, err := l.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(c.name)})
		if err != nil {
			t.Fatalf("ListAddons %s: %v", c.name, err)
		}
		var want []string
		for _, lw := range l.workers {
			m := lw.addons[c.name]
			if m.present {
				want = append(want, lw.addon.name)
				addons++
			}
			out, err := l.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(c.name), AddonName: aws.String(lw.addon.name)})
			var nf *types.ResourceNotFoundException
			switch {
			case !m.present && errors.As(err, &nf):
			case !m.present:
				t.Errorf("add-on %s/%s: deleted (acknowledged), DescribeAddon = %v, %v", c.name, lw.addon.name, out, err)
			case err != nil:
				t.Errorf("add-on %s/%s: created (acknowledged), DescribeAddon: %v", c.name, lw.addon.name, err)
			case !strings.HasSuffix(aws.ToString(out.Addon.AddonArn), "/"+m.uid) || aws.ToString(out.Addon.ConfigurationValues) != m.config ||
				len(out.Addon.PodIdentityAssociations) != len(lw.addon.pods) || out.Addon.Status != types.AddonStatusActive:
				t.Errorf("add-on %s/%s: %s %s, configuration %s, %d pod identity associations; want uid %s, ACTIVE, %s, %d",
					c.name, lw.addon.name, aws.ToString(out.Addon.AddonArn), out.Addon.Status, aws.ToString(out.Addon.ConfigurationValues),
					len(out.Addon.PodIdentityAssociations), m.uid, m.config, len(lw.addon.pods))
			}
		}
		slices.Sort(want)
		got := slices.Sorted(slices.Values(listed.Addons))
		if !slices.Equal(got, want) {
			t.Errorf("ListAddons %s = %v, want %v", c.name, got, want)
		}
		ents, err := l.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(c.name)})
		if err != nil {
			t.Fatalf("ListAccessEntries %s: %v", c.name, err)
		}
		for _, lw := range l.workers {
			for _, p := range lw.principals {
				m := lw.entries[[2]string{c.name, p}]
				if m.present != slices.Contains(ents.AccessEntries, p) {
					t.Errorf("access entry %s %s: present %v (acknowledged), listed %v", c.name, p, m.present, !m.present)
				}
				if !m.present {
					continue
				}
				entries++
				out, err := l.eks.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(c.name), PrincipalArn: aws.String(p)})
				if err != nil {
					t.Errorf("access entry %s %s: DescribeAccessEntry: %v", c.name, p, err)
				} else if !slices.Equal(out.AccessEntry.KubernetesGroups, m.groups) {
					t.Errorf("access entry %s %s: groups %v, want %v (acknowledged)", c.name, p, out.AccessEntry.KubernetesGroups, m.groups)
				}
			}
		}
	}
	checkKeyspace(ctx, t, cli)
	return addons, entries
}

// checkKeyspace checks the keyspace for what the server's transactions
// promise (tests/invariants): a multi-key write is all there or not at all.
func checkKeyspace(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	t.Helper()
	report, err := invariants.Check(ctx, cli, store.DefaultPrefix, nil)
	if err != nil {
		t.Fatalf("check the keyspace: %v", err)
	}
	for _, v := range report.Violations {
		t.Errorf("keyspace: %s", v)
	}
	t.Logf("keyspace: %s", report.Summary())
}
