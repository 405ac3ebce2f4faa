package insight

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
)

func addonRecord(name, version string) *storagev1.AddonRecord {
	return &storagev1.AddonRecord{Name: name, Arn: "arn:aws:eks:us-east-1:000000000000:addon/c/" + name + "/u",
		Spec: &storagev1.AddonSpec{Version: version}}
}

// TestVerdict judges add-ons of the embedded catalogue against a target
// Kubernetes version.
func TestVerdict(t *testing.T) {
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{catalog: cat}
	tests := []struct {
		name, addon, version, next string
		compatible                 bool
		versions                   []string
	}{
		{"compatible", "metrics-server", "v0.8.0-eksbuild.2", "1.36", true, []string{"v0.8.0-eksbuild.2"}},
		{"not compatible, a newer version is", "metrics-server", "v0.7.2-eksbuild.4", "1.36", false, []string{"v0.8.0-eksbuild.2"}},
		{"compatible with both on 1.35", "metrics-server", "v0.7.2-eksbuild.4", "1.35", true,
			[]string{"v0.8.0-eksbuild.2", "v0.7.2-eksbuild.4"}},
		{"a version the catalogue does not list", "metrics-server", "v0.0.1-eksbuild.1", "1.36", false, []string{"v0.8.0-eksbuild.2"}},
		{"an add-on the catalogue does not list", "gone", "v1.0.0-eksbuild.1", "1.36", false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entry, ok, err := s.catalog.Lookup(t.Context(), "111122223333", tt.addon)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				entry = nil
			}
			v := verdict(entry, addonRecord(tt.addon, tt.version), tt.next)
			if v.compatible != tt.compatible || !slices.Equal(v.versions, tt.versions) {
				t.Fatalf("verdict = %t %v, want %t %v", v.compatible, v.versions, tt.compatible, tt.versions)
			}
		})
	}
}

// TestRender: the insight's status and what it lists follow the verdicts,
// its category, id and texts the check's.
func TestRender(t *testing.T) {
	c := &storagev1.ClusterRecord{Uid: "uid-1", Name: "c", KubernetesVersion: "1.35"}
	now, transition := time.Unix(2000, 0), time.Unix(1000, 0)
	s := &Service{versions: fakeVersions{}}
	ok := addonVerdict{rec: addonRecord("vpc-cni", "v1.20.4-eksbuild.1"), compatible: true, versions: []string{"v1.20.4-eksbuild.1"}}
	bad := addonVerdict{rec: addonRecord("metrics-server", "v0.7.2-eksbuild.4"), versions: []string{"v0.8.0-eksbuild.2"}}
	tests := []struct {
		name     string
		check    compatCheck
		verdicts []addonVerdict
		status   string
		details  []string
	}{
		{"upgrade, no add-ons", s.upgradeCheck(), nil, StatusPassing, nil},
		{"upgrade, all compatible", s.upgradeCheck(), []addonVerdict{ok}, StatusPassing, nil},
		{"upgrade, one not compatible", s.upgradeCheck(), []addonVerdict{bad, ok}, StatusError, []string{"metrics-server"}},
		{"rollback, all compatible", s.rollbackCheck(), []addonVerdict{ok}, StatusPassing, nil},
		{"rollback, one not compatible", s.rollbackCheck(), []addonVerdict{ok, bad}, StatusError, []string{"metrics-server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := render(c, tt.check, "1.36", tt.verdicts, now, transition)
			if in.GetInsightStatus().GetStatus() != tt.status || in.GetKubernetesVersion() != "1.36" ||
				in.GetCategory() != tt.check.category || in.GetName() != "Amazon EKS add-on version compatibility" ||
				in.GetId() != insightID("uid-1", tt.check.check) || in.GetDescription() != tt.check.description ||
				in.GetRecommendation() != tt.check.recommendation {
				t.Fatalf("insight = %v", in)
			}
			var names []string
			for _, d := range in.GetCategorySpecificSummary().GetAddonCompatibilityDetails() {
				names = append(names, d.GetName())
				if !strings.Contains(in.GetInsightStatus().GetReason(), d.GetName()) {
					t.Errorf("reason %q does not name %s", in.GetInsightStatus().GetReason(), d.GetName())
				}
			}
			if !slices.Equal(names, tt.details) || len(in.GetResources()) != len(tt.verdicts) {
				t.Fatalf("details %v, %d resources; want %v, %d", names, len(in.GetResources()), tt.details, len(tt.verdicts))
			}
			if in.GetLastRefreshTime() != 2000 || in.GetLastTransitionTime() != 1000 {
				t.Fatalf("times %v, %v", in.GetLastRefreshTime(), in.GetLastTransitionTime())
			}
		})
	}
}

func TestInsightIDIsStablePerClusterAndCheck(t *testing.T) {
	a, b := insightID("uid-1", checkAddonCompatibility), insightID("uid-1", checkAddonCompatibility)
	if a != b {
		t.Fatalf("the same cluster and check gave %s and %s", a, b)
	}
	if insightID("uid-2", checkAddonCompatibility) == a || insightID("uid-1", checkRollbackAddonCompatibility) == a {
		t.Fatal("another cluster or check gave the same id")
	}
}

// fakeVersions offers the minors 1.33 to 1.36 (version.Service's rule,
// which tests/conformance checks against the real calendar).
type fakeVersions struct{}

var fakeOffered = []string{"1.33", "1.34", "1.35", "1.36"}

func (fakeVersions) NextOffered(minor string) (string, bool) {
	i := slices.Index(fakeOffered, minor)
	if i < 0 || i+1 == len(fakeOffered) {
		return "", false
	}
	return fakeOffered[i+1], true
}

// RollbackTarget treats every cluster as upgraded to its version: the
// previous minor offered (version.Service also asks the update history).
func (fakeVersions) RollbackTarget(_ context.Context, c *storagev1.ClusterRecord) (string, bool, error) {
	i := slices.Index(fakeOffered, c.GetKubernetesVersion())
	if i <= 0 {
		return "", false, nil
	}
	return fakeOffered[i-1], true, nil
}
