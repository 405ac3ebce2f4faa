package delivery

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"sigs.k8s.io/yaml"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
)

func testService(t *testing.T) *Service {
	t.Helper()
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	return &Service{catalog: cat, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func addonKV(t *testing.T, rec *storagev1.AddonRecord) *mvccpb.KeyValue {
	t.Helper()
	b, err := store.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return &mvccpb.KeyValue{Key: []byte(store.AddonKey("uid-1", rec.GetName())), Value: b}
}

func noopRecord(t *testing.T, generation int64, values string) *storagev1.AddonRecord {
	t.Helper()
	a, ok, err := testService(t).catalog.Lookup(t.Context(), "111122223333", "saltbush-noop")
	if err != nil || !ok || len(a.Versions) == 0 {
		t.Fatal("saltbush-noop is not in the catalogue")
	}
	return &storagev1.AddonRecord{Name: "saltbush-noop", Uid: "addon-uid-1", Generation: generation,
		Spec: &storagev1.AddonSpec{Version: a.Versions[0].Version, Namespace: a.DefaultNamespace, ConfigurationValues: values}}
}

// The desired set renders an add-on again only when its uid or generation
// changes; writes that change neither (reports, acknowledgements) reuse the
// rendered add-on and the digest, while the version follows the read.
func TestDesiredSetRendersOnlyChangedAddons(t *testing.T) {
	s := testService(t)
	cluster := &storagev1.ClusterRecord{Uid: "uid-1", Name: "prod"}
	rec := noopRecord(t, 1, "")

	first, _, err := s.desiredSet(t.Context(), cluster, []*mvccpb.KeyValue{addonKV(t, rec)}, nil, 10, nil, nil)
	if err != nil || len(first.GetAddons()) != 1 || first.GetDigest() == "" {
		t.Fatalf("first set: %v %v", first, err)
	}

	reported := noopRecord(t, 1, "")
	reported.Observed = &storagev1.AddonObserved{Generation: 1, Phase: storagev1.AddonPhase_ADDON_PHASE_READY}
	same, _, err := s.desiredSet(t.Context(), cluster, []*mvccpb.KeyValue{addonKV(t, reported)}, nil, 11, first, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if same.GetVersion() != 11 || same.GetDigest() != first.GetDigest() || same.GetAddons()[0] != first.GetAddons()[0] {
		t.Errorf("a report re-rendered the add-on: version %d digest %s (was %s), same object %v",
			same.GetVersion(), same.GetDigest(), first.GetDigest(), same.GetAddons()[0] == first.GetAddons()[0])
	}

	tests := []struct {
		name string
		rec  *storagev1.AddonRecord
		want func(t *testing.T, got *deliveryv1.DesiredSet)
	}{
		{"a new generation is rendered again", func() *storagev1.AddonRecord {
			r := noopRecord(t, 2, "")
			return r
		}(), func(t *testing.T, got *deliveryv1.DesiredSet) {
			if got.GetAddons()[0] == first.GetAddons()[0] || got.GetAddons()[0].GetGeneration() != 2 {
				t.Errorf("generation 2 reused generation 1's rendering")
			}
		}},
		{"a new incarnation is rendered again", func() *storagev1.AddonRecord {
			r := noopRecord(t, 1, "")
			r.Uid = "addon-uid-2"
			return r
		}(), func(t *testing.T, got *deliveryv1.DesiredSet) {
			if got.GetAddons()[0] == first.GetAddons()[0] || got.GetAddons()[0].GetUid() != "addon-uid-2" {
				t.Errorf("a recreated add-on reused the old incarnation's rendering")
			}
		}},
		{"a deletion is a tombstone with a new digest", func() *storagev1.AddonRecord {
			r := noopRecord(t, 2, "")
			r.Spec.Deleted = true
			return r
		}(), func(t *testing.T, got *deliveryv1.DesiredSet) {
			if a := got.GetAddons()[0]; !a.GetDeleting() || len(a.GetManifest()) != 0 {
				t.Errorf("tombstone = %v", a)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := s.desiredSet(t.Context(), cluster, []*mvccpb.KeyValue{addonKV(t, tc.rec)}, nil, 12, first, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if got.GetDigest() == first.GetDigest() {
				t.Errorf("digest unchanged by a content change")
			}
			tc.want(t, got)
			// The digest is the content's: computed from scratch it is the same.
			fresh, _, err := s.desiredSet(t.Context(), cluster, []*mvccpb.KeyValue{addonKV(t, tc.rec)}, nil, 12, nil, nil)
			if err != nil || fresh.GetDigest() != got.GetDigest() {
				t.Errorf("digest %s with a previous set, %s without (%v)", got.GetDigest(), fresh.GetDigest(), err)
			}
		})
	}

	// Removing the add-on (REMOVED accepted, record purged) empties the set.
	empty, _, err := s.desiredSet(t.Context(), cluster, nil, nil, 13, first, cluster)
	if err != nil || len(empty.GetAddons()) != 0 || empty.GetDigest() == first.GetDigest() {
		t.Errorf("set without add-ons: %v %v", empty, err)
	}
}

// factsCatalogue holds two add-ons: "facts", whose bundle prints every
// cluster fact and cannot do without the endpoint (as kube-proxy's cannot),
// and "plain", which needs none.
func factsCatalogue(t *testing.T) *catalog.Catalog {
	t.Helper()
	addon := func(name string) string {
		return "name: " + name + "\ntype: testing\npublisher: saltbush\nowner: saltbush\ndefaultNamespace: demo\nversions:\n" +
			"  - version: v1.0.0-eksbuild.1\n    compatibilities: [{clusterVersion: \"1.37\", defaultVersion: true}]\n" +
			"    architecture: [amd64]\n    computeTypes: [ec2]\n"
	}
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: {{ quote .Namespace }}}\ndata:\n"
	cat, err := catalog.LoadFS(fstest.MapFS{
		"facts/addon.yaml":                       {Data: []byte(addon("facts"))},
		"facts/v1.0.0-eksbuild.1/schema.json":    {Data: []byte(`{"type": "object"}`)},
		"facts/v1.0.0-eksbuild.1/bundle/cm.yaml": {Data: []byte(fmt.Sprintf(cm, "facts") + "  cluster: {{ quote .ClusterName }}\n  endpoint: {{ quote (required \"endpoint\" .Endpoint) }}\n  ca: {{ quote .CertificateAuthorityData }}\n  cidr: {{ quote .ServiceIPv4CIDR }}\n  dns: {{ quote .ClusterDNSIP }}\n  region: {{ quote .Region }}\n")},
		"plain/addon.yaml":                       {Data: []byte(addon("plain"))},
		"plain/v1.0.0-eksbuild.1/schema.json":    {Data: []byte(`{"type": "object"}`)},
		"plain/v1.0.0-eksbuild.1/bundle/cm.yaml": {Data: []byte(fmt.Sprintf(cm, "plain") + "  cluster: {{ quote .ClusterName }}\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func factsRecord(name string) *storagev1.AddonRecord {
	return &storagev1.AddonRecord{Name: name, Uid: "addon-uid-" + name, Generation: 1,
		Spec: &storagev1.AddonSpec{Version: "v1.0.0-eksbuild.1", Namespace: "demo"}}
}

// activeCluster is a cluster record as the provisioner leaves it once the
// control plane is up.
func activeCluster(endpoint string) *storagev1.ClusterRecord {
	return &storagev1.ClusterRecord{Uid: "uid-1", Name: "prod", Arn: "arn:aws:eks:eu-west-1:111122223333:cluster/prod",
		Status: storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: endpoint, CertificateAuthorityData: testCA,
		Spec: &storagev1.ClusterSpec{NetworkConfig: &storagev1.ClusterNetworkConfig{ServiceIpv4Cidr: "172.20.0.0/16"}}}
}

var testCA = base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("prod-ca")}))

// The desired set renders add-ons with the cluster record's facts: one
// whose bundle needs a fact the cluster lacks (the endpoint before the
// cluster is ACTIVE) waits outside the set, and a change of the facts
// renders every add-on again even though no generation changed.
func TestDesiredSetRendersWithTheClusterFacts(t *testing.T) {
	s := testService(t)
	s.catalog = factsCatalogue(t)
	kvs := []*mvccpb.KeyValue{addonKV(t, factsRecord("facts")), addonKV(t, factsRecord("plain"))}
	creating := &storagev1.ClusterRecord{Uid: "uid-1", Name: "prod", Status: storagev1.ClusterStatus_CLUSTER_STATUS_CREATING,
		Spec: &storagev1.ClusterSpec{NetworkConfig: &storagev1.ClusterNetworkConfig{ServiceIpv4Cidr: "10.43.0.0/16"}}}

	early, _, err := s.desiredSet(t.Context(), creating, kvs, nil, 10, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(early.GetAddons()) != 1 || early.GetAddons()[0].GetName() != "plain" {
		t.Fatalf("before the endpoint is known the set holds %v, want only plain", early.GetAddons())
	}

	active := activeCluster("https://10.0.0.1:6443")
	first, _, err := s.desiredSet(t.Context(), active, kvs, nil, 11, early, creating)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetAddons()) != 2 || first.GetDigest() == early.GetDigest() {
		t.Fatalf("once ACTIVE: %d add-ons, digest changed %v", len(first.GetAddons()), first.GetDigest() != early.GetDigest())
	}
	data := configMapData(t, first.GetAddons()[0].GetManifest())
	for k, want := range map[string]string{"cluster": "prod", "endpoint": "https://10.0.0.1:6443", "ca": testCA, "cidr": "172.20.0.0/16",
		"dns": "172.20.0.10", "region": "eu-west-1"} {
		if got := data[k]; got != want {
			t.Errorf("manifest's ConfigMap: %s = %q, want %q", k, got, want)
		}
	}

	tests := []struct {
		name    string
		cluster *storagev1.ClusterRecord
		reused  bool
		want    string // in the facts add-on's manifest
	}{
		{"unchanged facts reuse the renderings", activeCluster("https://10.0.0.1:6443"), true, "https://10.0.0.1:6443"},
		{"a members-only change reuses them", func() *storagev1.ClusterRecord {
			c := activeCluster("https://10.0.0.1:6443")
			c.Members = []*storagev1.ClusterMember{{InstanceId: "i-1"}}
			return c
		}(), true, "https://10.0.0.1:6443"},
		{"a new endpoint renders again", activeCluster("https://10.0.0.2:6443"), false, "https://10.0.0.2:6443"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := s.desiredSet(t.Context(), tc.cluster, kvs, nil, 12, first, active)
			if err != nil || len(got.GetAddons()) != 2 {
				t.Fatalf("set %v, %v", got, err)
			}
			for i, a := range got.GetAddons() {
				if reused := a == first.GetAddons()[i]; reused != tc.reused {
					t.Errorf("%s reused %v, want %v", a.GetName(), reused, tc.reused)
				}
			}
			if m := string(got.GetAddons()[0].GetManifest()); !strings.Contains(m, tc.want) {
				t.Errorf("manifest lacks %s", tc.want)
			}
			// Only the facts add-on's content can change.
			if (got.GetDigest() == first.GetDigest()) != tc.reused {
				t.Errorf("digest unchanged = %v, want %v", got.GetDigest() == first.GetDigest(), tc.reused)
			}
		})
	}
}

func TestArnRegion(t *testing.T) {
	tests := []struct {
		name, arn, want string
	}{
		{"cluster", "arn:aws:eks:eu-west-1:111122223333:cluster/prod", "eu-west-1"},
		// saltbush makes ARNs of the aws partition only (server/tagging).
		{"other partition", "arn:aws-cn:eks:cn-north-1:111122223333:cluster/prod", ""},
		{"none", "", ""},
		{"not an ARN", "eu-west-1:cluster/prod", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := arnRegion(tc.arn); got != tc.want {
				t.Fatalf("arnRegion(%q) = %q, want %q", tc.arn, got, tc.want)
			}
		})
	}
}

func associationKV(t *testing.T, rec *storagev1.PodIdentityAssociationRecord) *mvccpb.KeyValue {
	t.Helper()
	b, err := store.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	return &mvccpb.KeyValue{Key: []byte(store.PodIdentityAssociationKey("uid-1", rec.GetAssociationId())), Value: b}
}

func association(id, sa, role, owner string) *storagev1.PodIdentityAssociationRecord {
	return &storagev1.PodIdentityAssociationRecord{ClusterUid: "uid-1", AssociationId: id,
		Arn: "arn:aws:eks:us-east-1:111122223333:podidentityassociation/prod/" + id, Namespace: "kube-system",
		ServiceAccount: sa, RoleArn: role, OwnerArn: owner}
}

// Pod identity associations are part of the desired set: each change to
// them is a new digest, an unchanged one keeps it, and an add-on-owned one
// names its add-on.
func TestDesiredSetCarriesPodIdentityAssociations(t *testing.T) {
	s := testService(t)
	cluster := &storagev1.ClusterRecord{Uid: "uid-1", Name: "prod"}
	addon := noopRecord(t, 1, "")
	addon.Arn = "arn:aws:eks:us-east-1:111122223333:addon/prod/saltbush-noop/addon-uid-1"
	addons := []*mvccpb.KeyValue{addonKV(t, addon)}
	owned := association("a-00000000000000001", "noop", "arn:aws:iam::111122223333:role/noop", addon.Arn)
	standalone := association("a-00000000000000002", "app", "arn:aws:iam::111122223333:role/app", "")

	without, _, err := s.desiredSet(t.Context(), cluster, addons, nil, 10, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, _, err := s.desiredSet(t.Context(), cluster, addons, []*mvccpb.KeyValue{associationKV(t, owned), associationKV(t, standalone)}, 11, without, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if base.GetDigest() == without.GetDigest() {
		t.Fatal("adding associations left the digest unchanged")
	}
	got := base.GetPodIdentityAssociations()
	if len(got) != 2 || got[0].GetOwnerAddon() != "saltbush-noop" || got[0].GetOwnerArn() != addon.Arn ||
		got[1].GetOwnerAddon() != "" || got[1].GetServiceAccount() != "app" || got[1].GetAssociationArn() != standalone.Arn {
		t.Fatalf("associations = %v", got)
	}

	tests := []struct {
		name         string
		associations []*storagev1.PodIdentityAssociationRecord
		sameDigest   bool
	}{
		{"unchanged", []*storagev1.PodIdentityAssociationRecord{owned, standalone}, true},
		{"a new role", []*storagev1.PodIdentityAssociationRecord{owned,
			association("a-00000000000000002", "app", "arn:aws:iam::111122223333:role/other", "")}, false},
		{"a target role", func() []*storagev1.PodIdentityAssociationRecord {
			r := association("a-00000000000000002", "app", "arn:aws:iam::111122223333:role/app", "")
			r.TargetRoleArn, r.ExternalId = "arn:aws:iam::444455556666:role/target", "ext"
			return []*storagev1.PodIdentityAssociationRecord{owned, r}
		}(), false},
		{"session tags disabled", func() []*storagev1.PodIdentityAssociationRecord {
			r := association("a-00000000000000002", "app", "arn:aws:iam::111122223333:role/app", "")
			r.DisableSessionTags = true
			return []*storagev1.PodIdentityAssociationRecord{owned, r}
		}(), false},
		{"one deleted", []*storagev1.PodIdentityAssociationRecord{owned}, false},
		{"all deleted", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var kvs []*mvccpb.KeyValue
			for _, r := range tc.associations {
				kvs = append(kvs, associationKV(t, r))
			}
			next, _, err := s.desiredSet(t.Context(), cluster, addons, kvs, 12, base, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if (next.GetDigest() == base.GetDigest()) != tc.sameDigest {
				t.Errorf("digest %s after %s, %s before; want same %v", next.GetDigest(), tc.name, base.GetDigest(), tc.sameDigest)
			}
			fresh, _, err := s.desiredSet(t.Context(), cluster, addons, kvs, 12, nil, nil)
			if err != nil || fresh.GetDigest() != next.GetDigest() {
				t.Errorf("digest %s with a previous set, %s without (%v)", next.GetDigest(), fresh.GetDigest(), err)
			}
			if len(tc.associations) == 0 && fresh.GetDigest() != without.GetDigest() {
				t.Errorf("a set whose associations are all gone has digest %s, one that never had any %s", fresh.GetDigest(), without.GetDigest())
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	tests := []struct {
		name   string
		change func(*Config)
		valid  bool
	}{
		{"defaults", func(*Config) {}, true},
		{"TTL not whole seconds", func(c *Config) { c.SessionTTL = 1500 * time.Millisecond }, false},
		{"TTL below a second", func(c *Config) { c.SessionTTL = 0 }, false},
		{"fence-after + margin + heartbeat reach the TTL", func(c *Config) { c.FenceAfter = 10 * time.Second }, false},
		{"heartbeat more than half of fence-after", func(c *Config) { c.HeartbeatInterval = 5 * time.Second }, false},
		{"no margin", func(c *Config) { c.SafetyMargin = 0 }, false},
		{"no hello timeout", func(c *Config) { c.HelloTimeout = 0 }, false},
		{"fast test timing", func(c *Config) {
			c.SessionTTL, c.HeartbeatInterval, c.FenceAfter, c.SafetyMargin = 3*time.Second, 200*time.Millisecond, 1500*time.Millisecond, 500*time.Millisecond
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			if err := c.Validate(); (err == nil) != tc.valid {
				t.Errorf("Validate() = %v, want valid %v", err, tc.valid)
			}
		})
	}
}

// configMapData is the data of the ConfigMap in a rendered manifest
// (multi-document YAML).
func configMapData(t *testing.T, manifest []byte) map[string]string {
	t.Helper()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("manifest document: %v\n%s", err, doc)
		}
		if obj.Kind == "ConfigMap" {
			return obj.Data
		}
	}
	t.Fatalf("no ConfigMap in the manifest:\n%s", manifest)
	return nil
}
