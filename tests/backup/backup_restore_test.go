// Package backup tests the backup and restore procedure of
// docs/operations.md ("Backup and restore") step by step: saltbush replicas
// on an external three-member etcd with TLS, guest agents connected, an
// etcd snapshot, the loss of every member's data, a restore into fresh
// members, and saltbush and its agents carrying on.
package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go/middleware"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
	"github.com/saltbush/saltbush/tlsclient"
)

// revisionBump is --bump-revision of the documented restore: far more
// revisions than any etcd commits between two snapshots.
const revisionBump = 1_000_000_000

// fillerWrites are writes made after the snapshot and before the loss
// (another client of the same etcd, or just time passing): agents then hold
// desired sets whose versions are this far past the snapshot's revision.
const fillerWrites = 300

const (
	account    = "000000000000"
	prod       = "prod"
	staging    = "staging"
	deployer   = "arn:aws:iam::000000000000:role/deployer"
	webRole    = "arn:aws:iam::000000000000:role/web"
	editPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"
	// The CreateAddon token replayed after the restore: idempotency
	// records are restored too.
	corednsToken = "backup-test-coredns"
)

var instances = []string{"i-1", "i-2", "i-3"}

// TestBackupAndRestore runs docs/operations.md, "Backup and restore", on a
// three-member etcd with client and peer TLS and two saltbush replicas,
// with three guest agents of one cluster connected:
//
//  1. clusters, add-ons, an access entry with a policy, a pod identity
//     association and tags, made through the AWS SDK; the agents converge;
//  2. a snapshot (`etcdctl snapshot save`), then changes that the restore
//     must undo: an add-on updated, one created, the association deleted,
//     an access key made, the executor drained to the next epoch, and
//     writes enough to take the agents' desired-set versions well past the
//     snapshot's revision;
//  3. every replica stopped, every member stopped and its data deleted;
//  4. a restore without --bump-revision, the negative control: the
//     restored revisions are older than what the agents applied, and every
//     agent refuses the restored desired set (docs/delivery-protocol.md,
//     rule 10); then wiped again;
//  5. the documented restore (`etcdutl snapshot restore --bump-revision
//     --mark-compacted` on every member), and before saltbush starts the
//     whole keyspace is what it was at the snapshot's revision, key by key:
//     value, create and mod revision, version and lease;
//  6. new replicas: every record answers through the SDK as before the
//     snapshot, the changes after it are gone, a clientRequestToken from
//     before is still remembered, the agents take the restored set (its
//     versions are past what they held), the restored executor's reports are
//     accepted and an update made now becomes ACTIVE;
//  7. the keys on the old replicas' leases (agent sessions, the sweeper
//     election) expire or are taken over, and a new replica leads the
//     sweeper: against the snapshot's keyspace nothing else differs but the
//     records this run changed on purpose.
func TestBackupAndRestore(t *testing.T) {
	began := time.Now()
	last := began
	phase := func(name string) {
		t.Logf("%s: %s", name, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	etcd := newEtcdCluster(t, dir, 3)
	if err := etcd.start(ctx); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	cli := etcd.client()
	tg := &targets{}
	env := &env{t: t, ctx: ctx, etcd: etcd, cli: cli}

	// 1. Records and agents.
	a0, b0 := env.replica("replica-a0"), env.replica("replica-b0")
	tg.set(a0.GRPCAddr(), b0.GRPCAddr())
	dev := a0.Dev(t) // made on the empty store: the key from before the snapshot
	api := a0.EKSAs(t, dev)
	uid := env.populate(a0, api)
	var agents []*agent
	for i, inst := range instances {
		agents = append(agents, env.agent(a0, i, uid, inst, tg))
	}
	defer func() {
		for _, a := range agents {
			a.stop() // a second stop returns at once
		}
	}()
	env.converged(a0, "before the snapshot", agents, map[string]int64{"coredns": 1, "saltbush-noop": 1})
	described := describeAll(t, ctx, api)

	phase("1 records and agents")

	// 2. The snapshot, then changes it does not hold.
	snapFile := filepath.Join(dir, "saltbush-etcd.db")
	mgr := snapshot.NewV3(zap.NewNop())
	if _, err := mgr.Save(ctx, etcd.clientConfig(etcd.members[0].clientURL), snapFile); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	st, err := mgr.Status(snapFile)
	if err != nil {
		t.Fatalf("snapshot status: %v", err)
	}
	before := dump(t, ctx, cli, clientv3.WithRev(st.Revision))
	t.Logf("snapshot at revision %d: %d keys, hash %08x", st.Revision, len(before), st.Hash)
	lateKey := a0.NewKey(t, dev.PrincipalARN)
	env.changeAfterSnapshot(a0, api)
	env.converged(a0, "after the snapshot", agents, map[string]int64{"coredns": 1, "saltbush-noop": 2, "kube-proxy": 1})
	held := map[string]int64{}
	for _, a := range agents {
		v := a.applied.Set().GetVersion()
		held[a.hello.GetInstanceId()] = v
		if v < st.Revision+fillerWrites {
			t.Fatalf("%s holds desired set version %d, want at least %d past the snapshot's revision %d",
				a.hello.GetInstanceId(), v, fillerWrites, st.Revision)
		}
	}

	phase("2 snapshot and changes")

	// 3. The loss: every replica, then every member and its data.
	tg.set()
	env.kill(a0, b0)
	etcd.wipe()

	phase("3 loss")

	// 4. The negative control: a restore that keeps the snapshot's
	// revision.
	if err := etcd.restore(snapFile, 0); err != nil {
		t.Fatal(err)
	}
	if err := etcd.start(ctx); err != nil {
		t.Fatalf("start etcd restored without a bump: %v", err)
	}
	sameKeyspace(t, ctx, cli, before)
	streams := streamCounts(agents)
	n1 := env.replica("replica-n1")
	tg.set(n1.GRPCAddr())
	env.waitFor("every agent refused the restored set (no --bump-revision)", 15*time.Second, func() (bool, string) {
		for _, a := range agents {
			s := a.snapshot()
			if s.streams <= streams[a] || len(s.refused) == 0 {
				return false, fmt.Sprintf("%s: %d streams (had %d), refused %v", a.hello.GetInstanceId(), s.streams, streams[a], s.refused)
			}
		}
		return true, ""
	})
	for _, a := range agents {
		s := a.snapshot()
		for _, v := range s.refused {
			if v >= held[a.hello.GetInstanceId()] {
				t.Errorf("%s refused version %d, not older than the %d it held", a.hello.GetInstanceId(), v, held[a.hello.GetInstanceId()])
			}
		}
		if got := a.applied.Set().GetVersion(); got != held[a.hello.GetInstanceId()] {
			t.Errorf("%s applied version %d during the negative control, want it to keep %d", a.hello.GetInstanceId(), got, held[a.hello.GetInstanceId()])
		}
	}
	tg.set()
	env.kill(n1)
	etcd.wipe()

	phase("4 negative control")

	// 5. The documented restore.
	if err := etcd.restore(snapFile, revisionBump); err != nil {
		t.Fatal(err)
	}
	if err := etcd.start(ctx); err != nil {
		t.Fatalf("start restored etcd: %v", err)
	}
	rev := sameKeyspace(t, ctx, cli, before)
	if rev < st.Revision+revisionBump {
		t.Errorf("restored revision %d, want at least the snapshot's %d + %d", rev, st.Revision, revisionBump)
	}
	if _, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(st.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("read at the snapshot's revision after --mark-compacted: %v, want %v (watches re-list)", err, rpctypes.ErrCompacted)
	}
	restoredExec := &storagev1.ExecutorRecord{}
	decodeKV(t, before, store.ExecutorKey(uid), restoredExec)

	phase("5 restore")

	// 6. saltbush again.
	a2, b2 := env.replica("replica-a2"), env.replica("replica-b2")
	tg.set(a2.GRPCAddr(), b2.GRPCAddr())
	api = a2.EKSAs(t, dev)
	if got := describeAll(t, ctx, api); !equalJSON(got, described) {
		t.Errorf("records after the restore differ from before the snapshot:\n%s", diffJSON(described, got))
	}
	_, err = api.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("kube-proxy")})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
	_, err = a2.EKSAs(t, lateKey).ListClusters(ctx, &eks.ListClustersInput{})
	wanterr.AWS(t, err, "UnrecognizedClientException", 403)
	// The same CreateAddon with its token from before the snapshot is a
	// replay, not a new add-on nor a ResourceInUseException.
	if _, err := api.CreateAddon(ctx, corednsInput()); err != nil {
		t.Errorf("CreateAddon replayed with its token after the restore: %v", err)
	}
	env.converged(a2, "after the restore", agents, map[string]int64{"coredns": 1, "saltbush-noop": 1})
	for _, a := range agents {
		if v := a.applied.Set().GetVersion(); v <= held[a.hello.GetInstanceId()] {
			t.Errorf("%s applied version %d after the restore, want past the %d it held", a.hello.GetInstanceId(), v, held[a.hello.GetInstanceId()])
		}
	}
	status := env.status(a2)
	if e := status.GetExecutor(); e.GetEpoch() < restoredExec.GetEpoch() {
		t.Errorf("executor %v after the restore, want epoch >= the restored %d", e, restoredExec.GetEpoch())
	} else {
		t.Logf("executor after the restore: %s at epoch %d (restored record: %s at %d; before the loss the drain had made epoch %d)",
			e.GetInstanceId(), e.GetEpoch(), restoredExec.GetInstanceId(), restoredExec.GetEpoch(), restoredExec.GetEpoch()+1)
	}
	for _, s := range status.GetSessions() {
		if s.GetReplica() != "replica-a2" && s.GetReplica() != "replica-b2" {
			t.Errorf("session of %s on replica %q after the agents reconnected", s.GetInstanceId(), s.GetReplica())
		}
	}
	// A change now goes through the restored executor record's fence.
	update, err := api.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("saltbush-noop"),
		ConfigurationValues: aws.String(`{"message": "after the restore"}`)})
	if err != nil {
		t.Fatalf("UpdateAddon after the restore: %v", err)
	}
	env.converged(a2, "an update after the restore", agents, map[string]int64{"coredns": 1, "saltbush-noop": 2})
	u, err := api.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(prod), AddonName: aws.String("saltbush-noop"), UpdateId: update.Update.Id})
	if err != nil || u.Update.Status != types.UpdateStatusSuccessful {
		t.Errorf("the update after the restore: %v, %v; want Successful", u, err)
	}
	executors := 0
	for _, a := range agents {
		s := a.snapshot()
		if s.executing {
			executors++
		}
		if len(s.errs) > 0 {
			t.Errorf("%s: the host broke the protocol: %v", a.hello.GetInstanceId(), s.errs)
		}
	}
	if executors != 1 {
		t.Errorf("%d agents executing after the restore, want 1", executors)
	}

	phase("6 saltbush again")

	// 7. The old replicas' leases run out; nothing else moved.
	oldLeases := env.oldReplicaLeases(before)
	env.waitFor("the old replicas' leases expired", 30*time.Second, func() (bool, string) {
		for id, keys := range oldLeases {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(id))
			if err != nil {
				return false, err.Error()
			}
			if ttl.TTL != -1 {
				return false, fmt.Sprintf("lease %x (%s) has %ds left", id, strings.Join(keys, ", "), ttl.TTL)
			}
		}
		return true, ""
	})
	env.waitFor("a new replica leads the add-on sweeper", 15*time.Second, func() (bool, string) {
		return a2.SweeperLeader(t) || b2.SweeperLeader(t), "no leader"
	})
	final := dump(t, ctx, cli)
	var expired, changed []string
	for k, kv := range before {
		now, ok := final[k]
		switch {
		case ok && bytes.Equal(now.Value, kv.Value) && now.ModRevision == kv.ModRevision:
		case kv.Lease != 0 && oldLeases[kv.Lease] != nil:
			expired = append(expired, strings.TrimPrefix(k, "/saltbush/"))
		case k == "/saltbush/"+store.AddonKey(uid, "saltbush-noop") || k == "/saltbush/"+store.ExecutorKey(uid):
			// Updated after the restore; the executor record when a
			// standby took over instead of the restored executor.
			changed = append(changed, strings.TrimPrefix(k, "/saltbush/"))
		default:
			t.Errorf("key %s changed after the restore (lease %x): %q -> %q (present %v)", k, kv.Lease, kv.Value, now.GetValue(), ok)
		}
	}
	slices.Sort(expired)
	if len(expired) == 0 {
		t.Errorf("no key of the snapshot was on an old replica's lease: the sessions and the sweeper election should be")
	}
	t.Logf("of %d keys at the snapshot: on the old replicas' leases, expired or taken over: %v; changed on purpose: %v", len(before), expired, changed)
	phase("7 old leases")
	for _, a := range agents {
		a.stop()
	}
	env.kill(a2, b2)
	t.Logf("wall time %s", time.Since(began).Round(time.Millisecond))
}

// env is what the test's steps share.
type env struct {
	t    *testing.T
	ctx  context.Context
	etcd *etcdCluster
	cli  *clientv3.Client
}

// Delivery timing short enough for a test (fence-after + margin +
// heartbeat < session TTL still holds).
func timing(c *server.Config) {
	c.Delivery.SessionTTL = 3 * time.Second
	c.Delivery.HeartbeatInterval = 200 * time.Millisecond
	c.Delivery.FenceAfter = 1500 * time.Millisecond
	c.Delivery.SafetyMargin = 500 * time.Millisecond
}

// replica starts a saltbush replica on the external etcd with the flags
// docs/examples/saltbush@.service gives it (--etcd-endpoints, --etcd-cacert,
// --etcd-cert, --etcd-key, --replica-name, one master key for all).
func (e *env) replica(name string) *servertest.Server {
	e.t.Helper()
	return servertest.Start(e.t, servertest.WithEtcdEndpoints(e.etcd.endpoints()), servertest.WithConfig(func(c *server.Config) {
		c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile = e.etcd.pki.File, e.etcd.clientCert, e.etcd.clientKey
		c.ReplicaName = name
		timing(c)
	}))
}

// kill stops replicas at once, as hosts lost with their etcd would be:
// every stream cut, the etcd client closed.
func (e *env) kill(replicas ...*servertest.Server) {
	e.t.Helper()
	errs := make(chan error, len(replicas))
	for _, srv := range replicas {
		go func() {
			srv.Close()
			if err := srv.Stop(); err != nil {
				errs <- fmt.Errorf("stop %s: %w", srv.Config.ReplicaName, err)
				return
			}
			errs <- nil
		}()
	}
	for range replicas {
		if err := <-errs; err != nil {
			e.t.Error(err)
		}
	}
}

func (e *env) ref(name string) *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: account, Name: name}
}

// publish publishes a version of the example private add-on
// (docs/operators.md) through srv.
func publish(t *testing.T, ctx context.Context, srv *servertest.Server, version string) {
	t.Helper()
	files, err := catalog.ReadVersion(os.DirFS("../../docs/examples/private-addon/acme-agent"), version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlv1.NewCatalogControlServiceClient(srv.GRPC(t)).PublishAddonVersion(ctx,
		&controlv1.PublishAddonVersionRequest{Files: files, Version: version}); err != nil {
		t.Fatalf("publish acme-agent %s: %v", version, err)
	}
}

func corednsInput() *eks.CreateAddonInput {
	return &eks.CreateAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("coredns"),
		ClientRequestToken: aws.String(corednsToken)}
}

// populate makes the records of step 1 and returns prod's uid.
func (e *env) populate(srv *servertest.Server, api *eks.Client) string {
	t, ctx := e.t, e.ctx
	t.Helper()
	for _, in := range []*eks.CreateClusterInput{
		{Name: aws.String(prod), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
			AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
			Tags:               map[string]string{"env": "prod"}},
		{Name: aws.String(staging), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-c"}},
			Tags:               map[string]string{"env": "staging"}},
	} {
		if _, err := api.CreateCluster(ctx, in); err != nil {
			t.Fatalf("CreateCluster %s: %v", aws.ToString(in.Name), err)
		}
	}
	admin := srv.GRPC(t)
	publish(t, ctx, srv, "v1.1.0")
	cc := controlv1.NewClusterControlServiceClient(admin)
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{Cluster: e.ref(prod), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t)}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	var uid string
	for _, inst := range instances {
		out, err := cc.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: e.ref(prod), InstanceId: inst})
		if err != nil {
			t.Fatalf("AddMember %s: %v", inst, err)
		}
		uid = out.GetCluster().GetUid()
	}
	cluster, err := api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(prod)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.TagResource(ctx, &eks.TagResourceInput{ResourceArn: cluster.Cluster.Arn, Tags: map[string]string{"tier": "gold"}}); err != nil {
		t.Fatalf("TagResource %s: %v", aws.ToString(cluster.Cluster.Arn), err)
	}
	if _, err := srv.IAM().CreatePrincipal(ctx, deployer); err != nil {
		t.Fatalf("CreatePrincipal %s: %v", deployer, err)
	}
	if _, err := api.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(prod), PrincipalArn: aws.String(deployer),
		KubernetesGroups: []string{"deployers"}, Tags: map[string]string{"team": "platform"}}); err != nil {
		t.Fatalf("CreateAccessEntry: %v", err)
	}
	if _, err := api.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(prod), PrincipalArn: aws.String(deployer),
		PolicyArn: aws.String(editPolicy), AccessScope: &types.AccessScope{Type: types.AccessScopeTypeNamespace, Namespaces: []string{"dev"}}}); err != nil {
		t.Fatalf("AssociateAccessPolicy: %v", err)
	}
	if _, err := api.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(prod),
		Namespace: aws.String("apps"), ServiceAccount: aws.String("web"), RoleArn: aws.String(webRole),
		Tags: map[string]string{"app": "web"}}); err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	if _, err := api.CreateAddon(ctx, corednsInput()); err != nil {
		t.Fatalf("CreateAddon coredns: %v", err)
	}
	if _, err := api.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("saltbush-noop"),
		ConfigurationValues: aws.String(`{"message": "before the snapshot"}`), Tags: map[string]string{"owner": "ops"}}); err != nil {
		t.Fatalf("CreateAddon saltbush-noop: %v", err)
	}
	return uid
}

// changeAfterSnapshot makes what the restore must undo.
func (e *env) changeAfterSnapshot(srv *servertest.Server, api *eks.Client) {
	t, ctx := e.t, e.ctx
	t.Helper()
	for i := range fillerWrites {
		if _, err := e.cli.Put(ctx, "/backup-test/filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("saltbush-noop"),
		ConfigurationValues: aws.String(`{"message": "after the snapshot"}`)}); err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	if _, err := api.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(prod), AddonName: aws.String("kube-proxy")}); err != nil {
		t.Fatalf("CreateAddon kube-proxy: %v", err)
	}
	publish(t, ctx, srv, "v1.0.0")
	list, err := api.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(prod)})
	if err != nil || len(list.Associations) != 1 {
		t.Fatalf("ListPodIdentityAssociations: %v, %v", list, err)
	}
	if _, err := api.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{ClusterName: aws.String(prod),
		AssociationId: list.Associations[0].AssociationId}); err != nil {
		t.Fatalf("DeletePodIdentityAssociation: %v", err)
	}
	dc := controlv1.NewDeliveryControlServiceClient(srv.GRPC(t))
	drained, err := dc.DrainExecutor(ctx, &controlv1.DrainExecutorRequest{Cluster: e.ref(prod)})
	if err != nil {
		t.Fatalf("DrainExecutor: %v", err)
	}
	from := drained.GetExecutor().GetEpoch()
	e.waitFor("a standby took over from the drained executor", 15*time.Second, func() (bool, string) {
		s := e.status(srv)
		return s.GetExecutor().GetEpoch() > from && !s.GetExecutor().GetDraining(), fmt.Sprint(s.GetExecutor())
	})
}

// agent issues instance's certificate from the replica's CA (the restore
// keeps the CA: certificates issued before the snapshot stay valid) and
// starts it.
func (e *env) agent(srv *servertest.Server, idx int, uid, instance string, tg *targets) *agent {
	e.t.Helper()
	certPEM, keyPEM, _, err := srv.Authority().IssueLocal(e.ctx, identity.AgentID(uid, instance), time.Hour)
	if err != nil {
		e.t.Fatalf("agent certificate %s: %v", instance, err)
	}
	bundle, _ := srv.Authority().Bundle()
	tlsCfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		e.t.Fatal(err)
	}
	return startAgent(idx, &deliveryv1.Hello{Cluster: &deliveryv1.ClusterName{AccountId: account, Name: prod},
		InstanceId: instance, BootId: "boot-1", AgentVersion: "backup-test"}, tlsCfg, tg)
}

func (e *env) status(srv *servertest.Server) *controlv1.GetDeliveryStatusResponse {
	e.t.Helper()
	s, err := controlv1.NewDeliveryControlServiceClient(srv.GRPC(e.t)).GetDeliveryStatus(e.ctx, &controlv1.GetDeliveryStatusRequest{Cluster: e.ref(prod)})
	if err != nil {
		e.t.Fatalf("GetDeliveryStatus: %v", err)
	}
	return s
}

// converged waits until prod's add-ons are ACTIVE at the given
// generations (and no other add-on exists), every agent has a live
// session and has acknowledged the current desired digest, and an
// executor holds its epoch; then every agent's applied set carries it.
func (e *env) converged(srv *servertest.Server, when string, agents []*agent, want map[string]int64) {
	e.t.Helper()
	e.waitFor("converged "+when, 20*time.Second, func() (bool, string) {
		s := e.status(srv)
		if s.GetExecutor().GetInstanceId() == "" || len(s.GetSessions()) != len(agents) {
			return false, fmt.Sprintf("executor %v, %d sessions", s.GetExecutor(), len(s.GetSessions()))
		}
		for _, ss := range s.GetSessions() {
			if ss.GetAckedDigest() != s.GetDesiredDigest() {
				return false, fmt.Sprintf("%s acknowledged %s, desired %s", ss.GetInstanceId(), ss.GetAckedDigest(), s.GetDesiredDigest())
			}
		}
		if len(s.GetAddons()) != len(want) {
			return false, fmt.Sprintf("add-ons %v, want %v", s.GetAddons(), want)
		}
		for _, ad := range s.GetAddons() {
			if ad.GetGeneration() != want[ad.GetName()] || ad.GetObservedGeneration() != ad.GetGeneration() || ad.GetObservedPhase() != "READY" {
				return false, fmt.Sprintf("add-on %v, want generation %d READY", ad, want[ad.GetName()])
			}
		}
		for _, a := range agents {
			if a.applied.Set().GetDigest() != s.GetDesiredDigest() {
				return false, fmt.Sprintf("%s applied %s", a.hello.GetInstanceId(), a.applied.Set().GetDigest())
			}
		}
		return true, ""
	})
	for name := range want {
		out, err := srv.EKS(e.t).DescribeAddon(e.ctx, &eks.DescribeAddonInput{ClusterName: aws.String(prod), AddonName: aws.String(name)})
		if err != nil || out.Addon.Status != types.AddonStatusActive {
			e.t.Fatalf("%s: DescribeAddon %s: %v, %v; want ACTIVE", when, name, out, err)
		}
	}
}

// oldReplicaLeases are the leases of the snapshot's keys that the replicas
// running at the snapshot held (their delivery lease with the agents'
// sessions, their election sessions), with their keys: nothing renews
// them after the restore. The idempotency records' lease is not one: it
// is not renewed either, but it lasts the idempotency TTL (8 h).
func (e *env) oldReplicaLeases(before map[string]*mvccpb.KeyValue) map[int64][]string {
	out := map[int64][]string{}
	for k, kv := range before {
		rel := strings.TrimPrefix(k, "/saltbush/")
		if kv.Lease != 0 && (strings.Contains(rel, "/sessions/") || strings.HasPrefix(rel, "elections/")) {
			out[kv.Lease] = append(out[kv.Lease], rel)
		}
	}
	return out
}

func (e *env) waitFor(what string, within time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("%s: not within %s: %s", what, within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func streamCounts(agents []*agent) map[*agent]int {
	out := map[*agent]int{}
	for _, a := range agents {
		out[a] = a.snapshot().streams
	}
	return out
}

// dump reads the whole keyspace.
func dump(t *testing.T, ctx context.Context, cli *clientv3.Client, opts ...clientv3.OpOption) map[string]*mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(ctx, "\x00", append([]clientv3.OpOption{clientv3.WithFromKey()}, opts...)...)
	if err != nil {
		t.Fatalf("read the keyspace: %v", err)
	}
	out := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv
	}
	return out
}

// sameKeyspace checks that the restored keyspace is the snapshot's, key by
// key: the same keys, values, create and mod revisions, versions and
// leases (a key whose lease already ran out since the restored members
// elected a leader is allowed to be missing: etcd restores leases with a
// fresh TTL). It returns the restored store's revision.
func sameKeyspace(t *testing.T, ctx context.Context, cli *clientv3.Client, before map[string]*mvccpb.KeyValue) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatalf("read the restored keyspace: %v", err)
	}
	after := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		after[string(kv.Key)] = kv
	}
	for k, want := range before {
		got, ok := after[k]
		if !ok {
			if want.Lease != 0 {
				if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(want.Lease)); err == nil && ttl.TTL == -1 {
					continue
				}
			}
			t.Errorf("restored keyspace lacks %s", k)
			continue
		}
		if !bytes.Equal(got.Value, want.Value) || got.CreateRevision != want.CreateRevision || got.ModRevision != want.ModRevision ||
			got.Version != want.Version || got.Lease != want.Lease {
			t.Errorf("restored %s = {create %d mod %d version %d lease %x}, snapshot {create %d mod %d version %d lease %x}, values equal %v",
				k, got.CreateRevision, got.ModRevision, got.Version, got.Lease, want.CreateRevision, want.ModRevision, want.Version, want.Lease,
				bytes.Equal(got.Value, want.Value))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("restored keyspace has %s, which the snapshot had not", k)
		}
	}
	return resp.Header.Revision
}

func decodeKV(t *testing.T, kvs map[string]*mvccpb.KeyValue, key string, into proto.Message) {
	t.Helper()
	kv, ok := kvs["/saltbush/"+key]
	if !ok {
		t.Fatalf("no %s in the snapshot", key)
	}
	if err := store.Decode(kv.Value, into); err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
}

// describeAll is every record of step 1 as the SDK describes and lists
// it, as JSON by name (response metadata dropped).
func describeAll(t *testing.T, ctx context.Context, api *eks.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	put := func(name string, v any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	for _, c := range []string{prod, staging} {
		o, err := api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(c)})
		if err == nil {
			o.ResultMetadata = middleware.Metadata{}
			tags, terr := api.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: o.Cluster.Arn})
			put("tags of cluster "+c, tags.Tags, terr)
		}
		put("cluster "+c, o, err)
	}
	lc, err := api.ListClusters(ctx, &eks.ListClustersInput{})
	put("clusters", lc.Clusters, err)
	pv, err := api.DescribeAddonVersions(ctx, &eks.DescribeAddonVersionsInput{AddonName: aws.String("acme-agent")})
	put("published add-on acme-agent", pv.Addons, err)
	la, err := api.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(prod)})
	put("add-ons", la.Addons, err)
	for _, name := range la.Addons {
		o, err := api.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(prod), AddonName: aws.String(name)})
		if err == nil {
			o.ResultMetadata = middleware.Metadata{}
			tags, terr := api.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: o.Addon.AddonArn})
			put("tags of add-on "+name, tags.Tags, terr)
		}
		put("add-on "+name, o, err)
	}
	le, err := api.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(prod)})
	put("access entries", le.AccessEntries, err)
	for _, p := range le.AccessEntries {
		o, err := api.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(prod), PrincipalArn: aws.String(p)})
		if err == nil {
			o.ResultMetadata = middleware.Metadata{}
			tags, terr := api.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: o.AccessEntry.AccessEntryArn})
			put("tags of access entry "+p, tags.Tags, terr)
		}
		put("access entry "+p, o, err)
		ap, err := api.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(prod), PrincipalArn: aws.String(p)})
		put("policies of "+p, ap.AssociatedAccessPolicies, err)
	}
	lp, err := api.ListPodIdentityAssociations(ctx, &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(prod)})
	put("pod identity associations", lp.Associations, err)
	for _, s := range lp.Associations {
		o, err := api.DescribePodIdentityAssociation(ctx, &eks.DescribePodIdentityAssociationInput{ClusterName: aws.String(prod), AssociationId: s.AssociationId})
		if err == nil {
			o.ResultMetadata = middleware.Metadata{}
			tags, terr := api.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: o.Association.AssociationArn})
			put("tags of association "+aws.ToString(s.AssociationId), tags.Tags, terr)
		}
		put("association "+aws.ToString(s.AssociationId), o, err)
	}
	if len(la.Addons) != 2 || len(le.AccessEntries) != 2 || len(lp.Associations) != 1 || len(lc.Clusters) != 2 {
		t.Fatalf("records: clusters %v, add-ons %v, access entries %v, associations %d; want 2, 2, 2 (the creator's and deployer's), 1",
			lc.Clusters, la.Addons, le.AccessEntries, len(lp.Associations))
	}
	return out
}

func equalJSON(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func diffJSON(want, got map[string]string) string {
	var sb strings.Builder
	for k, v := range want {
		if got[k] != v {
			fmt.Fprintf(&sb, "%s:\n  before: %s\n  after:  %s\n", k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&sb, "%s: only after: %s\n", k, v)
		}
	}
	return sb.String()
}
