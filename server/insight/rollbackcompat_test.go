package insight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
)

// TestRollbackVerdict: the ROLLBACK_READINESS insight judges the installed
// add-ons (from etcd) against the previous minor version with the
// embedded catalogue, and RollbackBlockers names exactly the add-ons the
// insight finds in ERROR. Catalogue facts used: metrics-server
// v0.7.2-eksbuild.4 runs on 1.32-1.35 and v0.8.0-eksbuild.2 on 1.34-1.37;
// vpc-cni v1.19.6-eksbuild.1 on 1.32-1.35 and v1.20.4-eksbuild.1 on
// 1.34-1.37 (catalog/addons).
func TestRollbackVerdict(t *testing.T) {
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.New(t)
	s := &Service{store: st, versions: fakeVersions{}, catalog: cat}
	type addon struct {
		name, version string
		deleting      bool
	}
	tests := []struct {
		name    string
		cluster string
		addons  []addon
		// target is the insight's kubernetesVersion; "" when the cluster
		// has no rollback insight.
		target   string
		status   string
		blockers []string
		// details are the addonCompatibilityDetails: name and the
		// versions compatible with target.
		details map[string][]string
	}{
		{name: "no add-ons", cluster: "1.34", target: "1.33", status: StatusPassing, blockers: []string{}},
		{name: "compatible with the previous version", cluster: "1.34",
			addons: []addon{{"metrics-server", "v0.7.2-eksbuild.4", false}},
			target: "1.33", status: StatusPassing, blockers: []string{}},
		{name: "one not compatible", cluster: "1.34",
			addons: []addon{{"metrics-server", "v0.7.2-eksbuild.4", false}, {"vpc-cni", "v1.20.4-eksbuild.1", false}},
			target: "1.33", status: StatusError, blockers: []string{"vpc-cni (v1.20.4-eksbuild.1)"},
			details: map[string][]string{"vpc-cni": {"v1.19.6-eksbuild.1"}}},
		{name: "every one not compatible, by name", cluster: "1.34",
			addons: []addon{{"vpc-cni", "v1.20.4-eksbuild.1", false}, {"metrics-server", "v0.8.0-eksbuild.2", false}},
			target: "1.33", status: StatusError, blockers: []string{"metrics-server (v0.8.0-eksbuild.2)", "vpc-cni (v1.20.4-eksbuild.1)"},
			details: map[string][]string{"metrics-server": {"v0.7.2-eksbuild.4"}, "vpc-cni": {"v1.19.6-eksbuild.1"}}},
		{name: "an add-on being deleted does not count", cluster: "1.34",
			addons: []addon{{"vpc-cni", "v1.20.4-eksbuild.1", true}},
			target: "1.33", status: StatusPassing, blockers: []string{}},
		{name: "an add-on the catalogue does not list", cluster: "1.34",
			addons: []addon{{"gone", "v1.0.0-eksbuild.1", false}},
			target: "1.33", status: StatusError, blockers: []string{"gone (v1.0.0-eksbuild.1)"},
			details: map[string][]string{"gone": {}}},
		{name: "the previous minor, not the next", cluster: "1.35",
			addons: []addon{{"metrics-server", "v0.7.2-eksbuild.4", false}},
			target: "1.34", status: StatusPassing, blockers: []string{}},
		{name: "the oldest version offered has no rollback insight", cluster: "1.33",
			addons: []addon{{"vpc-cni", "v1.20.4-eksbuild.1", false}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := &storagev1.ClusterRecord{Uid: fmt.Sprintf("uid-%d", i), Name: "c", KubernetesVersion: tt.cluster}
			for _, a := range tt.addons {
				rec := addonRecord(a.name, a.version)
				rec.Status = storagev1.AddonStatus_ADDON_STATUS_ACTIVE
				if a.deleting {
					rec.Status = storagev1.AddonStatus_ADDON_STATUS_DELETING
				}
				if _, err := st.Create(ctx, store.AddonKey(c.GetUid(), a.name), rec); err != nil {
					t.Fatal(err)
				}
			}
			addons, err := s.addons(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			in, err := s.compatibility(ctx, c, addons, s.rollbackCheck(), time.Unix(2000, 0))
			if err != nil {
				t.Fatal(err)
			}
			if tt.target == "" {
				if in != nil {
					t.Fatalf("insight = %v, want none", in)
				}
				return
			}
			if in == nil || in.GetCategory() != CategoryRollbackReadiness || in.GetKubernetesVersion() != tt.target ||
				in.GetInsightStatus().GetStatus() != tt.status || in.GetId() != insightID(c.GetUid(), checkRollbackAddonCompatibility) {
				t.Fatalf("insight = %v, want ROLLBACK_READINESS %s about %s", in, tt.status, tt.target)
			}
			details := map[string][]string{}
			for _, d := range in.GetCategorySpecificSummary().GetAddonCompatibilityDetails() {
				details[d.GetName()] = d.GetCompatibleVersions()
			}
			if len(details) != len(tt.details) {
				t.Fatalf("addonCompatibilityDetails = %v, want %v", details, tt.details)
			}
			for name, want := range tt.details {
				if got, ok := details[name]; !ok || !slices.Equal(got, want) {
					t.Fatalf("addonCompatibilityDetails = %v, want %v", details, tt.details)
				}
			}
			blockers, err := s.RollbackBlockers(ctx, c, tt.target)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(blockers, tt.blockers) {
				t.Fatalf("RollbackBlockers = %q, want %q", blockers, tt.blockers)
			}
			for _, b := range blockers {
				if !strings.Contains(in.GetInsightStatus().GetReason(), b) {
					t.Errorf("insight reason %q does not name blocker %s", in.GetInsightStatus().GetReason(), b)
				}
			}
		})
	}
}
