package insight

import (
	"slices"
	"strings"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
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
			v := s.verdict(addonRecord(tt.addon, tt.version), tt.next)
			if v.compatible != tt.compatible || !slices.Equal(v.versions, tt.versions) {
				t.Fatalf("verdict = %t %v, want %t %v", v.compatible, v.versions, tt.compatible, tt.versions)
			}
		})
	}
}

// TestRender: the insight's status and what it lists follow the verdicts.
func TestRender(t *testing.T) {
	c := &storagev1.ClusterRecord{Uid: "uid-1", Name: "c", KubernetesVersion: "1.35"}
	now, transition := time.Unix(2000, 0), time.Unix(1000, 0)
	ok := addonVerdict{rec: addonRecord("vpc-cni", "v1.20.4-eksbuild.1"), compatible: true, versions: []string{"v1.20.4-eksbuild.1"}}
	bad := addonVerdict{rec: addonRecord("metrics-server", "v0.7.2-eksbuild.4"), versions: []string{"v0.8.0-eksbuild.2"}}
	tests := []struct {
		name     string
		verdicts []addonVerdict
		status   string
		details  []string
	}{
		{"no add-ons", nil, StatusPassing, nil},
		{"all compatible", []addonVerdict{ok}, StatusPassing, nil},
		{"one not compatible", []addonVerdict{bad, ok}, StatusError, []string{"metrics-server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := render(c, "1.36", tt.verdicts, now, transition)
			if in.GetInsightStatus().GetStatus() != tt.status || in.GetKubernetesVersion() != "1.36" ||
				in.GetCategory() != CategoryUpgradeReadiness || in.GetName() != "Amazon EKS add-on version compatibility" {
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
	if insightID("uid-2", checkAddonCompatibility) == a || insightID("uid-1", "other") == a {
		t.Fatal("another cluster or check gave the same id")
	}
}
