package invariants

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// The fixture: one keyspace holding every key family, consistent, in which
// each case injects one violation.
const (
	acct       = "000000000000"
	region     = "us-east-1"
	uidAlpha   = "0b5e7d1c-alpha"
	uidBeta    = "0b5e7d1c-beta"
	uidCoreDNS = "a1-coredns"
	uidVPCCNI  = "a2-vpc-cni"
	uidEntry   = "e1-deployer"
	userARN    = "arn:aws:iam::" + acct + ":user/saltbush-dev"
	roleARN    = "arn:aws:iam::" + acct + ":role/ops/deployer"
	roleCanon  = "arn:aws:iam::" + acct + ":role/deployer"
	policyARN  = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
)

var deadline = time.Unix(1_900_000_000, 0)

// OIDC: a provider made in the account, and the hosted issuers of alpha
// and of a cluster that is gone (its keys stay, serving nothing).
const (
	providerURL  = "https://oidc.example/id/ABC"
	issuerAlpha  = "https://saltbush.example/id/" + uidAlpha
	issuerGone   = "https://saltbush.example/id/purged-uid"
	keySetSample = `{"keys":[{"use":"sig","kty":"EC","kid":"k1","crv":"P-256","alg":"ES256",` +
		`"x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`
)

func providerKey(account, url string) string {
	return "iam/accounts/" + account + "/oidc-providers/" + sha(url)
}

func issuerKey(issuer string) string { return "oidc/issuers/" + sha(issuer) }

// value is one key's value in a fixture: a record or raw bytes, on a
// lease or not.
type value struct {
	rec    proto.Message
	raw    []byte
	leased bool
}

type fixture map[string]value

func (f fixture) put(key string, rec proto.Message)    { f[key] = value{rec: rec} }
func (f fixture) leased(key string, rec proto.Message) { f[key] = value{rec: rec, leased: true} }

// edit changes the record at key in place; it must be a T.
func edit[T proto.Message](t *testing.T, f fixture, key string, fn func(T)) {
	t.Helper()
	v, ok := f[key]
	if !ok {
		t.Fatalf("fixture has no %s", key)
	}
	r := proto.Clone(v.rec).(T)
	fn(r)
	v.rec = r
	f[key] = v
}

func clusterARN(name string) string { return "arn:aws:eks:" + region + ":" + acct + ":cluster/" + name }
func addonARN(cluster, addon, uid string) string {
	return "arn:aws:eks:" + region + ":" + acct + ":addon/" + cluster + "/" + addon + "/" + uid
}
func assocARN(cluster, id string) string {
	return "arn:aws:eks:" + region + ":" + acct + ":podidentityassociation/" + cluster + "/" + id
}

var entryARN = "arn:aws:eks:" + region + ":" + acct + ":access-entry/alpha/role/" + acct + "/deployer/" + uidEntry

// publishedRecord is the example private add-on's v1.1.0 as
// PublishAddonVersion stores it.
func publishedRecord() *storagev1.PublishedAddonVersionRecord {
	files, err := catalog.ReadVersion(os.DirFS("../../docs/examples/private-addon/acme-agent"), "v1.1.0")
	if err != nil {
		panic(err)
	}
	p, err := catalog.ParsePublished(files, "v1.1.0")
	if err != nil {
		panic(err)
	}
	return &storagev1.PublishedAddonVersionRecord{AddonName: "acme-agent", Version: "v1.1.0", Files: p.Files, Digest: p.Digest,
		PublishedAt: timestamppb.New(time.Unix(1_700_000_000, 0)), PublishedBy: "spiffe://saltbush/service/admin"}
}

func baseFixture() fixture {
	now := timestamppb.New(time.Unix(1_800_000_000, 0))
	f := fixture{}
	f.put("meta/store", &storagev1.StoreMeta{TokenSigningKey: make([]byte, 32), CreatedAt: now})
	f.put(store.PublishedAddonVersionKey("acme-agent", "v1.1.0"), publishedRecord())
	// Identity.
	f.put("iam/bootstrap", &storagev1.AccountRecord{AccountId: acct, Name: "bootstrap", CreatedAt: now})
	f.put("iam/accounts/"+acct, &storagev1.AccountRecord{AccountId: acct, Name: "dev", CreatedAt: now})
	f.put("iam/accounts/"+acct+"/principals/"+sha(userARN), &storagev1.PrincipalRecord{Arn: userARN, AccountId: acct,
		PolicyNames: []string{"AdministratorAccess"}, CreatedAt: now})
	f.put("iam/accounts/"+acct+"/names/user/saltbush-dev", &storagev1.PrincipalNameRecord{Arn: userARN})
	f.put("iam/accounts/"+acct+"/principals/"+sha(roleARN), &storagev1.PrincipalRecord{Arn: roleARN, AccountId: acct, CreatedAt: now})
	f.put("iam/accounts/"+acct+"/names/role/deployer", &storagev1.PrincipalNameRecord{Arn: roleARN})
	f.put("iam/accounts/"+acct+"/policies/AdministratorAccess", &storagev1.PolicyRecord{AccountId: acct, Name: "AdministratorAccess",
		Document: `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`, CreatedAt: now})
	f.put("iam/keys/AKIAAAAAAAAAAAAAAAAA", &storagev1.AccessKeyRecord{AccessKeyId: "AKIAAAAAAAAAAAAAAAAA", AccountId: acct,
		PrincipalArn: userARN, SealedSecret: []byte("sealed"), Status: "Active", CreatedAt: now})
	f.put("iam/keys/AKIABBBBBBBBBBBBBBBB", &storagev1.AccessKeyRecord{AccessKeyId: "AKIABBBBBBBBBBBBBBBB", AccountId: acct,
		PrincipalArn: "arn:aws:iam::" + acct + ":root", SealedSecret: []byte("sealed"), Status: "Inactive", CreatedAt: now})
	f.put("iam/services/admin", &storagev1.ServiceRecord{Name: "admin", Document: `{"Statement":[]}`, CreatedAt: now})
	f.leased("iam/sessions/ASIAAAAAAAAAAAAAAAAA", &storagev1.SessionRecord{AccessKeyId: "ASIAAAAAAAAAAAAAAAAA", AccountId: acct,
		RoleArn: roleARN, SessionArn: "arn:aws:sts::" + acct + ":assumed-role/deployer/ci", SealedSecret: []byte("sealed"),
		SessionTokenSha256: make([]byte, 32), IssuedAt: now, ExpiresAt: now})
	f.put("pki/authorities", &storagev1.CertificateAuthorityState{IssuingSerial: "1a", Authorities: []*storagev1.CertificateAuthority{
		{Serial: "1a", CertificateDer: []byte("der"), SealedPrivateKey: []byte("sealed"), CreatedAt: now}}})
	f.put("pki/issued/2b", &storagev1.IssuedCertificateRecord{Serial: "2b", SpiffeId: "spiffe://saltbush/service/admin", IssuerSerial: "1a", IssuedAt: now})
	f.put("pki/revoked/2b", &storagev1.RevokedCertificateRecord{Serial: "2b", Reason: "rotated", RevokedAt: now})
	f["elections/addon-deadlines/694d7a1b2c3d4e5f"] = value{raw: []byte("replica-a"), leased: true}
	f.put(providerKey(acct, providerURL), &storagev1.OpenIDConnectProviderRecord{Url: providerURL, AccountId: acct,
		ClientIds: []string{"sts.amazonaws.com"}, Thumbprints: []string{strings.Repeat("ab", 20)},
		Tags: []*storagev1.ResourceTag{{Key: "team", Value: "blue"}}, CreatedAt: now})
	f.put(issuerKey(issuerAlpha), &storagev1.ServiceAccountIssuerRecord{Issuer: issuerAlpha, ClusterUid: uidAlpha, AccountId: acct,
		ClusterName: "alpha", Jwks: []byte(keySetSample), UpdatedAt: now, Epoch: 2, InstanceId: "i-a"})
	f.put(issuerKey(issuerGone), &storagev1.ServiceAccountIssuerRecord{Issuer: issuerGone, ClusterUid: "purged-uid", AccountId: acct,
		ClusterName: "gamma", Jwks: []byte(keySetSample), UpdatedAt: now, Epoch: 9, InstanceId: "i-z"})

	// Cluster alpha: ACTIVE, two add-ons (one UPDATING, one owning an
	// association), a direct association, an access entry, an executor
	// and its session, a finished cluster update.
	f.put(store.ClusterKey(acct, "alpha"), &storagev1.ClusterRecord{Uid: uidAlpha, AccountId: acct, Name: "alpha",
		Arn: clusterARN("alpha"), KubernetesVersion: "1.35", Status: storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Members: []*storagev1.ClusterMember{{InstanceId: "i-a"}, {InstanceId: "i-b"}}, CreatedAt: now,
		Tags: map[string]string{"team": "blue"}})
	f.leased(store.IdempotencyKey(acct, "CreateCluster", "token-1"), &storagev1.IdempotencyRecord{Operation: "CreateCluster",
		RequestFingerprint: make([]byte, 32), ResourceKey: store.ClusterKey(acct, "alpha"), ResourceUid: uidAlpha, CreatedAt: now})
	f.put(store.AddonKey(uidAlpha, "coredns"), &storagev1.AddonRecord{ClusterUid: uidAlpha, AccountId: acct, ClusterName: "alpha",
		Name: "coredns", Uid: uidCoreDNS, Arn: addonARN("alpha", "coredns", uidCoreDNS), Generation: 2,
		Status: storagev1.AddonStatus_ADDON_STATUS_UPDATING, UpdateId: "u-2", Deadline: timestamppb.New(deadline),
		Spec:     &storagev1.AddonSpec{Version: "v1.11.3-eksbuild.1"},
		Observed: &storagev1.AddonObserved{Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY, ExecutorEpoch: 1, InstanceId: "i-a"},
		Tags:     map[string]string{"tier": "dns"}})
	f.put(store.AddonUpdateKey(uidAlpha, "coredns", "u-1"), &storagev1.UpdateRecord{Id: "u-1", ClusterUid: uidAlpha, AddonName: "coredns",
		AddonUid: uidCoreDNS, Generation: 1, Type: "AddonUpdate", Status: storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL})
	f.put(store.AddonUpdateKey(uidAlpha, "coredns", "u-2"), &storagev1.UpdateRecord{Id: "u-2", ClusterUid: uidAlpha, AddonName: "coredns",
		AddonUid: uidCoreDNS, Generation: 2, Type: "AddonUpdate", Status: storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS})
	f.put(store.AddonDeadlineKey(deadline, uidAlpha, "coredns"), &storagev1.AddonDeadlineHint{ClusterUid: uidAlpha, AddonName: "coredns", Generation: 2})
	// A stale hint (the add-on moved on) is allowed: the sweeper drops it.
	f.put(store.AddonDeadlineKey(deadline.Add(-time.Hour), uidAlpha, "coredns"), &storagev1.AddonDeadlineHint{ClusterUid: uidAlpha, AddonName: "coredns", Generation: 1})
	f.put(store.AddonKey(uidAlpha, "vpc-cni"), &storagev1.AddonRecord{ClusterUid: uidAlpha, AccountId: acct, ClusterName: "alpha",
		Name: "vpc-cni", Uid: uidVPCCNI, Arn: addonARN("alpha", "vpc-cni", uidVPCCNI), Generation: 3,
		Status: storagev1.AddonStatus_ADDON_STATUS_ACTIVE,
		Spec: &storagev1.AddonSpec{Version: "v1.19.0-eksbuild.1", PodIdentityAssociations: []*storagev1.PodIdentityAssociation{
			{ServiceAccount: "aws-node", RoleArn: roleARN, AssociationId: "a-vpccni0000000001"}}},
		Observed: &storagev1.AddonObserved{Generation: 3, Phase: storagev1.AddonPhase_ADDON_PHASE_READY, ExecutorEpoch: 2, InstanceId: "i-a"}})
	f.put(store.PodIdentityAssociationKey(uidAlpha, "a-vpccni0000000001"), &storagev1.PodIdentityAssociationRecord{ClusterUid: uidAlpha,
		AccountId: acct, ClusterName: "alpha", AssociationId: "a-vpccni0000000001", Arn: assocARN("alpha", "a-vpccni0000000001"),
		Namespace: "kube-system", ServiceAccount: "aws-node", RoleArn: roleARN, OwnerArn: addonARN("alpha", "vpc-cni", uidVPCCNI)})
	f.put(store.PodIdentityServiceAccountKey(uidAlpha, "kube-system", "aws-node"), &storagev1.PodIdentityServiceAccountRecord{AssociationId: "a-vpccni0000000001"})
	f.put(store.PodIdentityAssociationKey(uidAlpha, "a-web0000000000001"), &storagev1.PodIdentityAssociationRecord{ClusterUid: uidAlpha,
		AccountId: acct, ClusterName: "alpha", AssociationId: "a-web0000000000001", Arn: assocARN("alpha", "a-web0000000000001"),
		Namespace: "apps", ServiceAccount: "web", RoleArn: roleARN, Tags: map[string]string{"app": "web"}})
	f.put(store.PodIdentityServiceAccountKey(uidAlpha, "apps", "web"), &storagev1.PodIdentityServiceAccountRecord{AssociationId: "a-web0000000000001"})
	f.put(store.AccessEntryKey(uidAlpha, roleCanon), &storagev1.AccessEntryRecord{ClusterUid: uidAlpha, AccountId: acct, ClusterName: "alpha",
		PrincipalArn: roleARN, Uid: uidEntry, Arn: entryARN, Type: storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD,
		Policies: []*storagev1.AssociatedPolicyRecord{{PolicyArn: policyARN, ScopeType: storagev1.AccessScopeType_ACCESS_SCOPE_TYPE_CLUSTER}}})
	f.put(store.ExecutorKey(uidAlpha), &storagev1.ExecutorRecord{InstanceId: "i-a", Epoch: 2, Reason: "session of i-b expired"})
	f.leased(store.SessionKey(uidAlpha, "i-a"), &storagev1.AgentSessionRecord{InstanceId: "i-a", BootId: "boot-1", Replica: "replica-a"})
	f.put(store.ClusterUpdateKey(uidAlpha, "c-1"), &storagev1.UpdateRecord{Id: "c-1", ClusterUid: uidAlpha, Type: "LoggingUpdate",
		Status: storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL})
	// A rollback timeout hint whose update has ended is allowed: the
	// sweeper drops it when it is due.
	f.put(store.UpdateDeadlineKey(deadline, uidAlpha, "c-1"), &storagev1.UpdateDeadlineHint{ClusterUid: uidAlpha, UpdateId: "c-1"})
	f.put(store.InsightsRefreshKey(uidAlpha), &storagev1.InsightsRefreshRecord{Status: storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_COMPLETED,
		Message: "refreshed", StartedAt: now, EndedAt: now})

	// Cluster beta: DELETING in the middle of a version update, its
	// executor fenced (naming nobody, the epoch kept).
	f.put(store.ClusterKey(acct, "beta"), &storagev1.ClusterRecord{Uid: uidBeta, AccountId: acct, Name: "beta",
		Arn: clusterARN("beta"), KubernetesVersion: "1.36", Status: storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, CreatedAt: now})
	f.put(store.ExecutorKey(uidBeta), &storagev1.ExecutorRecord{Epoch: 3, Reason: "cluster DELETING"})
	f.put(store.ClusterUpdateKey(uidBeta, "v-1"), &storagev1.UpdateRecord{Id: "v-1", ClusterUid: uidBeta, Type: "VersionUpdate",
		Status: storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS})
	return f
}

// baseAcked is every acknowledged write the fixture holds.
func baseAcked() *Acked {
	a := NewAcked()
	tok := a.Begin()
	alpha := ClusterCreated(acct, "alpha")
	coredns := AddonCreated(acct, "alpha", "coredns", uidCoreDNS)
	web := PodIdentityAssociationCreated(acct, "alpha", "a-web0000000000001")
	for _, w := range []Write{
		alpha, ClusterCreated(acct, "beta"), coredns, AddonCreated(acct, "alpha", "vpc-cni", uidVPCCNI),
		AccessEntryCreated(acct, "alpha", roleARN, uidEntry), PolicyAssociated(acct, "alpha", roleARN, policyARN), web,
		AddonUpdated(acct, "alpha", "coredns", "u-2"), ClusterUpdated(acct, "alpha", "c-1"),
		Tagged(alpha, clusterARN("alpha"), "team", "blue"), Tagged(coredns, addonARN("alpha", "coredns", uidCoreDNS), "tier", "dns"),
		Tagged(web, assocARN("alpha", "a-web0000000000001"), "app", "web"),
	} {
		a.Add(tok, w)
	}
	return a
}

// env is an embedded etcd for the checker's tests, and the lease leased
// keys are attached to.
type env struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
}

func startEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), UnsafeNoFsync: true, ElectionTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	l, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	return &env{cli: cli, lease: l.ID}
}

// write replaces everything under prefix with f.
func (e *env) write(t *testing.T, prefix string, f fixture) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(f)) {
		v := f[k]
		b := v.raw
		if v.rec != nil {
			var err error
			if b, err = store.Encode(v.rec); err != nil {
				t.Fatal(err)
			}
		}
		var opts []clientv3.OpOption
		if v.leased {
			opts = append(opts, clientv3.WithLease(e.lease))
		}
		if _, err := e.cli.Put(ctx, prefix+k, string(b), opts...); err != nil {
			t.Fatal(err)
		}
	}
}

func encoded(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := store.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func invariantsOf(vs []Violation) []string {
	set := map[string]bool{}
	for _, v := range vs {
		set[v.Invariant] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// TestCheckCleanKeyspace: the fixture breaks nothing, holds every key
// family, and every acknowledged write in it is found.
func TestCheckCleanKeyspace(t *testing.T) {
	e := startEnv(t)
	e.write(t, "/clean/", baseFixture())
	acked := baseAcked()
	rep, err := Check(context.Background(), e.cli, "/clean/", acked)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("clean fixture: %s", v)
	}
	for _, f := range families {
		if rep.Checked[f.name] == 0 {
			t.Errorf("the fixture has no %s key: the cases cannot prove the checker reads that family", f.name)
		}
	}
	if rep.AckedVerified != acked.Len() || acked.Len() != 12 {
		t.Errorf("verified %d of %d acknowledged writes, want all 12", rep.AckedVerified, acked.Len())
	}
	t.Log(rep.Summary())
}

// TestCheckCatchesEachViolation injects one violation per case into the
// fixture and wants exactly the invariants it breaks reported: the checker
// can fail, for each invariant, and says which.
func TestCheckCatchesEachViolation(t *testing.T) {
	e := startEnv(t)
	alphaAddon := func(name string) string { return store.AddonKey(uidAlpha, name) }
	tests := []struct {
		name string
		// history: each step edits the fixture and is checked (with the
		// previous step's snapshot); every step but the last must be
		// clean, and the last must break exactly want.
		history []func(t *testing.T, f fixture)
		acked   func(a *Acked)
		want    []string
		detail  string
	}{
		{
			name:    "unknown key family",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) { f["clusters/"+uidAlpha+"/widgets/w"] = value{raw: []byte("x")} }},
			want:    []string{InvUnknownKey}, detail: "new family must be added",
		},
		{
			name: "another record type's bytes under an add-on key",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				f[alphaAddon("kube-proxy")] = value{raw: encoded(t, f[store.ClusterKey(acct, "alpha")].rec)}
			}},
			want: []string{InvDecode}, detail: "fields unknown",
		},
		{
			name: "a published version whose files are not what its digest says",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				r := publishedRecord()
				r.Files["v1.1.0/bundle/10-config.yaml"] = append([]byte("# changed\n"), r.Files["v1.1.0/bundle/10-config.yaml"]...)
				f[store.PublishedAddonVersionKey("acme-agent", "v1.1.0")] = value{rec: r}
			}},
			want: []string{InvKey}, detail: "is not the files'",
		},
		{
			name: "a published version under another version's key",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f[store.PublishedAddonVersionKey("acme-agent", "v1.2.0")] = value{rec: publishedRecord()}
			}},
			want: []string{InvKey}, detail: "published record of add-on acme-agent version v1.1.0",
		},
		{
			name:    "bytes that are no protobuf",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) { f["pki/revoked/2b"] = value{raw: []byte{0xff, 0xff, 0xff}} }},
			want:    []string{InvDecode}, detail: "corrupt record",
		},
		{
			name: "a record not in the store's canonical encoding",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				// A field twice: protobuf keeps the last, the store never
				// writes that.
				b := append(encoded(t, &storagev1.IssuedCertificateRecord{Serial: "2b"}), encoded(t, f["pki/issued/2b"].rec)...)
				f["pki/issued/2b"] = value{raw: b}
			}},
			want: []string{InvDecode}, detail: "canonical encoding",
		},
		{
			name: "add-on record that names another add-on",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Name = "kube-proxy" })
			}},
			// Its acknowledged create names vpc-cni: not this case's point.
			acked: func(a *Acked) { a.Forget(AddonScope(acct, "alpha", "vpc-cni"))() },
			want:  []string{InvKey}, detail: "names kube-proxy",
		},
		{
			name: "add-on of a purged cluster incarnation",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				f.put(store.AddonKey("purged-uid", "coredns"), &storagev1.AddonRecord{ClusterUid: "purged-uid", AccountId: acct, ClusterName: "gamma",
					Name: "coredns", Uid: "a9", Arn: addonARN("gamma", "coredns", "a9"), Generation: 1, Status: storagev1.AddonStatus_ADDON_STATUS_ACTIVE})
			}},
			want: []string{InvOrphan}, detail: "which no cluster record has",
		},
		{
			name: "session of a purged cluster incarnation",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.leased(store.SessionKey("purged-uid", "i-a"), &storagev1.AgentSessionRecord{InstanceId: "i-a", Replica: "replica-a"})
			}},
			want: []string{InvOrphan}, detail: "agent-session under cluster uid purged-uid",
		},
		{
			name: "insights refresh of a purged cluster incarnation",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put(store.InsightsRefreshKey("purged-uid"), &storagev1.InsightsRefreshRecord{Status: storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_COMPLETED})
			}},
			want: []string{InvOrphan}, detail: "insights-refresh under cluster uid purged-uid",
		},
		{
			name: "access entry not at its canonical principal's hash",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				v := f[store.AccessEntryKey(uidAlpha, roleCanon)]
				delete(f, store.AccessEntryKey(uidAlpha, roleCanon))
				f[store.AccessEntryKey(uidAlpha, roleARN)] = v
			}},
			// The policy is then not found where the principal's entry
			// must be: not this case's point.
			acked: func(a *Acked) { a.Forget(PolicyScope(acct, "alpha", roleARN, policyARN))() },
			want:  []string{InvKey}, detail: "canonical principal",
		},
		{
			name: "agent session without a lease",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				v := f[store.SessionKey(uidAlpha, "i-a")]
				v.leased = false
				f[store.SessionKey(uidAlpha, "i-a")] = v
			}},
			want: []string{InvLease}, detail: "must live on an etcd lease",
		},
		{
			name: "cluster record on a lease",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				v := f[store.ClusterKey(acct, "alpha")]
				v.leased = true
				f[store.ClusterKey(acct, "alpha")] = v
			}},
			want: []string{InvLease}, detail: "would vanish",
		},
		{
			name: "association without its exclusivity key",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.PodIdentityServiceAccountKey(uidAlpha, "apps", "web"))
			}},
			want: []string{InvIndex}, detail: "exclusivity key",
		},
		{
			name: "exclusivity key naming an association that does not hold it",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put(store.PodIdentityServiceAccountKey(uidAlpha, "apps", "worker"), &storagev1.PodIdentityServiceAccountRecord{AssociationId: "a-web0000000000001"})
			}},
			want: []string{InvIndex}, detail: "does not hold apps/worker",
		},
		{
			name: "association owned by an add-on that does not list it",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.PodIdentityAssociationKey(uidAlpha, "a-web0000000000001"), func(r *storagev1.PodIdentityAssociationRecord) {
					r.OwnerArn = addonARN("alpha", "vpc-cni", uidVPCCNI)
				})
			}},
			want: []string{InvIndex}, detail: "does not list it",
		},
		{
			name: "add-on listing an association that is not its own",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.PodIdentityAssociationKey(uidAlpha, "a-vpccni0000000001"), func(r *storagev1.PodIdentityAssociationRecord) { r.OwnerArn = "" })
			}},
			want: []string{InvIndex}, detail: "not there as its own",
		},
		{
			name: "update deadline hint naming another update",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put(store.UpdateDeadlineKey(deadline, uidAlpha, "c-9"), &storagev1.UpdateDeadlineHint{ClusterUid: uidAlpha, UpdateId: "c-1"})
			}},
			want: []string{InvKey}, detail: "deadline hint names update c-1",
		},
		{
			name: "in-flight add-on without its deadline hint",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.AddonDeadlineKey(deadline, uidAlpha, "coredns"))
			}},
			want: []string{InvIndex}, detail: "without its deadline hint",
		},
		{
			name: "settled add-on that kept its deadline",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Deadline = timestamppb.New(deadline) })
			}},
			want: []string{InvIndex}, detail: "still has a deadline",
		},
		{
			name: "UPDATING add-on without its update record",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.AddonUpdateKey(uidAlpha, "coredns", "u-2"))
			}},
			acked: func(a *Acked) { a.Forget(AddonScope(acct, "alpha", "coredns"))() },
			want:  []string{InvLifecycle}, detail: "without its update record",
		},
		{
			name: "InProgress update of a settled add-on",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.AddonUpdateKey(uidAlpha, "coredns", "u-1"), func(r *storagev1.UpdateRecord) {
					r.Status = storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS
				})
			}},
			want: []string{InvLifecycle}, detail: "is InProgress but add-on coredns",
		},
		{
			name: "update of an add-on incarnation that is gone",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				f.put(store.AddonUpdateKey(uidAlpha, "vpc-cni", "u-9"), &storagev1.UpdateRecord{Id: "u-9", ClusterUid: uidAlpha, AddonName: "vpc-cni",
					AddonUid: "an-earlier-incarnation", Generation: 1, Type: "AddonUpdate", Status: storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL})
			}},
			want: []string{InvOrphan}, detail: "which is gone",
		},
		{
			name: "UPDATING cluster without its InProgress update",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.ClusterKey(acct, "alpha"), func(r *storagev1.ClusterRecord) { r.Status = storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING })
			}},
			want: []string{InvLifecycle}, detail: "UPDATING without an InProgress update",
		},
		{
			name: "InProgress cluster update of an ACTIVE cluster",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.ClusterUpdateKey(uidAlpha, "c-1"), func(r *storagev1.UpdateRecord) { r.Status = storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS })
			}},
			want: []string{InvLifecycle}, detail: "InProgress but cluster alpha is CLUSTER_STATUS_ACTIVE",
		},
		{
			name: "two InProgress updates of one cluster",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put(store.ClusterUpdateKey(uidBeta, "v-2"), &storagev1.UpdateRecord{Id: "v-2", ClusterUid: uidBeta, Type: "VersionUpdate",
					Status: storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS})
			}},
			want: []string{InvLifecycle}, detail: "2 updates InProgress",
		},
		{
			name: "executor of a DELETING cluster not fenced",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.ExecutorKey(uidBeta), func(r *storagev1.ExecutorRecord) { r.InstanceId = "i-c" })
			}},
			want: []string{InvExecutor}, detail: "is not fenced",
		},
		{
			name: "report accepted from an epoch later than the executor's",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Observed.ExecutorEpoch = 3 })
			}},
			want: []string{InvExecutor}, detail: "later than the executor's 2",
		},
		{
			name: "report at the executor's epoch from another instance",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Observed.InstanceId = "i-b" })
			}},
			want: []string{InvExecutor}, detail: "which is i-a's",
		},
		{
			name: "delivery report in a cluster that never had an executor",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.ExecutorKey(uidAlpha))
			}},
			want: []string{InvExecutor}, detail: "never had an executor",
		},
		{
			name: "principal without its name index entry",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, "iam/accounts/"+acct+"/names/role/deployer")
			}},
			want: []string{InvIndex}, detail: "name index entry names \"\"",
		},
		{
			name: "name index entry naming no principal",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put("iam/accounts/"+acct+"/names/user/alice", &storagev1.PrincipalNameRecord{Arn: "arn:aws:iam::" + acct + ":user/alice"})
			}},
			want: []string{InvIndex}, detail: "which is no principal",
		},
		{
			name: "access key of a principal that does not exist",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, "iam/keys/AKIAAAAAAAAAAAAAAAAA", func(r *storagev1.AccessKeyRecord) { r.PrincipalArn = "arn:aws:iam::" + acct + ":user/ghost" })
			}},
			want: []string{InvOrphan}, detail: "which is no principal",
		},
		{
			name: "OIDC provider not at the hash of its URL",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, providerKey(acct, providerURL), func(r *storagev1.OpenIDConnectProviderRecord) { r.Url = providerURL + "/other" })
			}},
			want: []string{InvKey}, detail: "not at the hash of its URL",
		},
		{
			name: "OIDC provider beyond IAM's limits",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, providerKey(acct, providerURL), func(r *storagev1.OpenIDConnectProviderRecord) {
					r.Tags = append(r.Tags, &storagev1.ResourceTag{Key: "Team", Value: "red"})
				})
			}},
			want: []string{InvKey}, detail: `tag key "Team" twice`,
		},
		{
			name: "OIDC provider of an account that does not exist",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				f.put(providerKey("111122223333", providerURL), &storagev1.OpenIDConnectProviderRecord{Url: providerURL,
					AccountId: "111122223333", CreatedAt: timestamppb.Now()})
			}},
			want: []string{InvOrphan}, detail: "OIDC provider " + providerURL + " of account 111122223333",
		},
		{
			name: "another record type's bytes under an issuer key",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				f[issuerKey(issuerAlpha)] = value{raw: encoded(t, f[store.ClusterKey(acct, "alpha")].rec)}
			}},
			want: []string{InvDecode}, detail: "fields unknown",
		},
		{
			name: "issuer keys not at the hash of their issuer",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, issuerKey(issuerAlpha), func(r *storagev1.ServiceAccountIssuerRecord) { r.Issuer = issuerAlpha + "/" })
			}},
			want: []string{InvKey}, detail: "not at the hash of their issuer",
		},
		{
			name: "issuer keys that are no key set",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, issuerKey(issuerAlpha), func(r *storagev1.ServiceAccountIssuerRecord) { r.Jwks = []byte(`{"keys":[]}`) })
			}},
			want: []string{InvKey}, detail: "the key set has no keys",
		},
		{
			name: "issuer keys naming their cluster incarnation by another name",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, issuerKey(issuerAlpha), func(r *storagev1.ServiceAccountIssuerRecord) { r.ClusterName = "beta" })
			}},
			want: []string{InvKey}, detail: "the keys of issuer " + issuerAlpha + " names cluster beta",
		},
		{
			name: "issuer keys sent from an epoch later than the executor's",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, issuerKey(issuerAlpha), func(r *storagev1.ServiceAccountIssuerRecord) { r.Epoch = 3 })
			}},
			want: []string{InvExecutor}, detail: "later than the executor's 2",
		},
		{
			name: "issuer keys sent at the executor's epoch by another instance",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, issuerKey(issuerAlpha), func(r *storagev1.ServiceAccountIssuerRecord) { r.InstanceId = "i-b" })
			}},
			want: []string{InvExecutor}, detail: "which is i-a's",
		},
		{
			name: "CA state whose issuer is none of its authorities",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, "pki/authorities", func(r *storagev1.CertificateAuthorityState) { r.IssuingSerial = "3c" })
			}},
			want: []string{InvIndex}, detail: "issuing serial",
		},
		{
			name: "idempotency record of another operation",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.IdempotencyKey(acct, "CreateCluster", "token-1"), func(r *storagev1.IdempotencyRecord) { r.Operation = "CreateAddon" })
			}},
			want: []string{InvKey}, detail: "of operation CreateAddon",
		},
		{
			name: "add-on generation goes back",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Generation, r.Observed.Generation = 3, 2 })
				},
			},
			want: []string{InvMonotonic}, detail: "observed generation went back from 3 to 2",
		},
		{
			name: "add-on generation goes back with its observation",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Generation, r.Observed.Generation = 2, 2 })
				},
			},
			want: []string{InvMonotonic}, detail: "generation went back from 3 to 2",
		},
		{
			name: "executor epoch goes back",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, store.ExecutorKey(uidBeta), func(r *storagev1.ExecutorRecord) { r.Epoch = 2 })
				},
			},
			want: []string{InvExecutor}, detail: "epoch went back from 3",
		},
		{
			name: "one epoch handed to a second instance",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, store.ExecutorKey(uidAlpha), func(r *storagev1.ExecutorRecord) { r.InstanceId = "i-b" })
					edit(t, f, alphaAddon("vpc-cni"), func(r *storagev1.AddonRecord) { r.Observed.InstanceId = "i-b" })
					edit(t, f, alphaAddon("coredns"), func(r *storagev1.AddonRecord) { r.Observed.InstanceId = "i-b" })
				},
			},
			want: []string{InvExecutor}, detail: `epoch 2 named "i-a" and now names i-b`,
		},
		{
			name: "DELETING cluster no longer DELETING",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, store.ClusterKey(acct, "beta"), func(r *storagev1.ClusterRecord) { r.Status = storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING })
				},
			},
			want: []string{InvMonotonic}, detail: "was DELETING",
		},
		{
			name: "Kubernetes version goes back",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, store.ClusterKey(acct, "alpha"), func(r *storagev1.ClusterRecord) { r.KubernetesVersion = "1.34" })
				},
			},
			want: []string{InvMonotonic}, detail: "from 1.35 to 1.34",
		},
		{
			name: "ended update changes its outcome",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(t *testing.T, f fixture) {
					edit(t, f, store.AddonUpdateKey(uidAlpha, "coredns", "u-1"), func(r *storagev1.UpdateRecord) { r.Status = storagev1.UpdateStatus_UPDATE_STATUS_FAILED })
				},
			},
			want: []string{InvMonotonic}, detail: "ended UPDATE_STATUS_SUCCESSFUL",
		},
		{
			name: "purged association comes back",
			history: []func(*testing.T, fixture){
				func(*testing.T, fixture) {},
				func(_ *testing.T, f fixture) {
					delete(f, store.PodIdentityAssociationKey(uidAlpha, "a-web0000000000001"))
					delete(f, store.PodIdentityServiceAccountKey(uidAlpha, "apps", "web"))
				},
				func(*testing.T, fixture) {}, // restored: every step starts from the base fixture
			},
			acked: func(a *Acked) { a.Forget(PodIdentityScope(acct, "alpha", "a-web0000000000001"))() },
			want:  []string{InvMonotonic}, detail: "was gone and is back",
		},
		{
			name: "acknowledged add-on lost",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				for _, k := range []string{alphaAddon("coredns"), store.AddonUpdateKey(uidAlpha, "coredns", "u-1"),
					store.AddonUpdateKey(uidAlpha, "coredns", "u-2")} {
					delete(f, k)
				}
			}},
			acked: func(a *Acked) { a.Forget(TagScope(addonARN("alpha", "coredns", uidCoreDNS), "tier"))() },
			want:  []string{InvAcked}, detail: "add-on coredns " + uidCoreDNS,
		},
		{
			name: "acknowledged cluster lost",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				for _, k := range []string{store.ClusterKey(acct, "beta"), store.ExecutorKey(uidBeta), store.ClusterUpdateKey(uidBeta, "v-1")} {
					delete(f, k)
				}
			}},
			want: []string{InvAcked}, detail: "cluster beta",
		},
		{
			name: "acknowledged access entry lost",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.AccessEntryKey(uidAlpha, roleCanon))
			}},
			acked: func(a *Acked) { a.Forget(PolicyScope(acct, "alpha", roleARN, policyARN))() },
			want:  []string{InvAcked}, detail: "access entry " + uidEntry,
		},
		{
			name: "acknowledged policy association lost",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.AccessEntryKey(uidAlpha, roleCanon), func(r *storagev1.AccessEntryRecord) { r.Policies = nil })
			}},
			want: []string{InvAcked}, detail: "policy " + policyARN,
		},
		{
			name: "acknowledged pod identity association lost",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.PodIdentityAssociationKey(uidAlpha, "a-web0000000000001"))
				delete(f, store.PodIdentityServiceAccountKey(uidAlpha, "apps", "web"))
			}},
			acked: func(a *Acked) { a.Forget(TagScope(assocARN("alpha", "a-web0000000000001"), "app"))() },
			want:  []string{InvAcked}, detail: "pod identity association a-web0000000000001",
		},
		{
			name: "acknowledged cluster update lost",
			history: []func(*testing.T, fixture){func(_ *testing.T, f fixture) {
				delete(f, store.ClusterUpdateKey(uidAlpha, "c-1"))
			}},
			want: []string{InvAcked}, detail: "update c-1 of cluster alpha",
		},
		{
			name: "acknowledged add-on update lost with its add-on's history",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				delete(f, store.AddonUpdateKey(uidAlpha, "coredns", "u-2"))
				edit(t, f, alphaAddon("coredns"), func(r *storagev1.AddonRecord) {
					r.Status, r.UpdateId, r.Deadline = storagev1.AddonStatus_ADDON_STATUS_ACTIVE, "", nil
				})
			}},
			want: []string{InvAcked}, detail: "update u-2 of add-on coredns",
		},
		{
			name: "acknowledged tag with another value",
			history: []func(*testing.T, fixture){func(t *testing.T, f fixture) {
				edit(t, f, store.ClusterKey(acct, "alpha"), func(r *storagev1.ClusterRecord) { r.Tags["team"] = "red" })
			}},
			want: []string{InvAcked}, detail: `tag team is "red"`,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("/case-%d/", i)
			acked := baseAcked()
			if tc.acked != nil {
				tc.acked(acked)
			}
			var prev *Snapshot
			for step, edit := range tc.history {
				f := baseFixture()
				edit(t, f)
				e.write(t, prefix, f)
				var opts []Option
				if prev != nil {
					opts = append(opts, Previous(prev))
				}
				rep, err := Check(context.Background(), e.cli, prefix, acked, opts...)
				if err != nil {
					t.Fatal(err)
				}
				prev = rep.Snapshot
				if step < len(tc.history)-1 {
					for _, v := range rep.Violations {
						t.Errorf("step %d of %d: %s; want none before the last step", step+1, len(tc.history), v)
					}
					continue
				}
				if got := invariantsOf(rep.Violations); !slices.Equal(got, tc.want) {
					t.Errorf("invariants broken = %v, want %v; violations:\n%s", got, tc.want, joinViolations(rep.Violations))
				}
				if !slices.ContainsFunc(rep.Violations, func(v Violation) bool { return strings.Contains(v.Detail, tc.detail) }) {
					t.Errorf("no violation says %q:\n%s", tc.detail, joinViolations(rep.Violations))
				}
			}
		})
	}
}

// TestCheckRevisionGoesBack: a keyspace behind an earlier check's revision
// lost history (a data directory rolled back): the same records copied
// into a younger etcd are caught.
func TestCheckRevisionGoesBack(t *testing.T) {
	old := startEnv(t)
	for range 3 {
		old.write(t, "/r/", baseFixture()) // each write moves the revision on
	}
	rep, err := Check(context.Background(), old.cli, "/r/", nil)
	if err != nil {
		t.Fatal(err)
	}
	young := startEnv(t)
	young.write(t, "/r/", baseFixture())
	again, err := Check(context.Background(), young.cli, "/r/", nil, Previous(rep.Snapshot))
	if err != nil {
		t.Fatal(err)
	}
	if got := invariantsOf(again.Violations); !slices.Equal(got, []string{InvMonotonic}) ||
		!strings.Contains(again.Violations[0].Detail, "behind the previous check's") {
		t.Errorf("revision %d after %d: violations\n%s", again.Revision, rep.Revision, joinViolations(again.Violations))
	}
}

func joinViolations(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("  " + v.String() + "\n")
	}
	return b.String()
}

// TestAcked: what Forget and a Forget racing an acknowledgement leave in
// the set.
func TestAcked(t *testing.T) {
	alpha := ClusterCreated(acct, "alpha")
	coredns := AddonCreated(acct, "alpha", "coredns", "u1")
	entry := AccessEntryCreated(acct, "alpha", roleARN, "e1")
	policy := PolicyAssociated(acct, "alpha", roleARN, policyARN)
	tag := Tagged(coredns, "arn:coredns", "k", "v1")
	tests := []struct {
		name string
		run  func(a *Acked)
		want []string
	}{
		{"recorded", func(a *Acked) {
			tok := a.Begin()
			a.Add(tok, alpha)
			a.Add(tok, coredns)
		}, []string{alpha.String(), coredns.String()}},
		{"forgetting a cluster forgets what is under it", func(a *Acked) {
			tok := a.Begin()
			a.Add(tok, alpha)
			a.Add(tok, coredns)
			a.Add(tok, tag)
			a.Add(tok, ClusterCreated(acct, "beta"))
			a.Forget(ClusterScope(acct, "alpha"))()
		}, []string{ClusterCreated(acct, "beta").String()}},
		{"forgetting an entry forgets its policies, not other entries", func(a *Acked) {
			tok := a.Begin()
			a.Add(tok, entry)
			a.Add(tok, policy)
			a.Add(tok, AccessEntryCreated(acct, "alpha", userARN, "e2"))
			a.Forget(AccessEntryScope(acct, "alpha", roleARN))()
		}, []string{AccessEntryCreated(acct, "alpha", userARN, "e2").String()}},
		{"an answer to a request begun before a deletion was asked is dropped", func(a *Acked) {
			tok := a.Begin()
			a.Forget(AddonScope(acct, "alpha", "coredns"))()
			if a.Add(tok, coredns) {
				a.Add(a.Begin(), ClusterCreated(acct, "add-reported-true"))
			}
		}, nil},
		{"an answer to a request begun while a deletion is pending is dropped", func(a *Acked) {
			done := a.Forget(AccessEntryScope(acct, "alpha", roleARN))
			tok := a.Begin()
			a.Add(tok, policy)
			done()
			a.Add(tok, entry)
		}, nil},
		{"an answer to a request begun after the deletion returned is kept", func(a *Acked) {
			a.Forget(AddonScope(acct, "alpha", "coredns"))()
			a.Add(a.Begin(), coredns)
		}, []string{coredns.String()}},
		{"of two pending deletions of one scope, the first returning leaves it pending", func(a *Acked) {
			first := a.Forget(AddonScope(acct, "alpha", "coredns"))
			second := a.Forget(AddonScope(acct, "alpha", "coredns"))
			first()
			first() // returns once
			a.Add(a.Begin(), coredns)
			second()
			a.Add(a.Begin(), AddonCreated(acct, "alpha", "coredns", "u2"))
		}, []string{AddonCreated(acct, "alpha", "coredns", "u2").String()}},
		{"an unrelated deletion drops nothing", func(a *Acked) {
			tok := a.Begin()
			done := a.Forget(AddonScope(acct, "alpha", "kube-proxy"))
			a.Add(tok, coredns)
			done()
		}, []string{coredns.String()}},
		{"a new tag value replaces the old", func(a *Acked) {
			a.Add(a.Begin(), tag)
			a.Forget(TagScope("arn:coredns", "k"))()
			a.Add(a.Begin(), Tagged(coredns, "arn:coredns", "k", "v2"))
		}, []string{Tagged(coredns, "arn:coredns", "k", "v2").String()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAcked()
			tc.run(a)
			var got []string
			for _, w := range a.Writes() {
				got = append(got, w.String())
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("set = %q, want %q", got, want)
			}
		})
	}
}
