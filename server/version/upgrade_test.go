package version

import (
	"context"
	"testing"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// TestUpgradable: the rules UpdateClusterVersion applies to a cluster
// record, with the exception AWS answers (an UPDATING cluster reads the
// store for the update in progress; tests/conformance covers it).
func TestUpgradable(t *testing.T) {
	s := &Service{cfg: Config{Versions: []string{"1.34", "1.35", "1.36"}, Default: "1.35"}}
	active := storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE
	tests := []struct {
		name      string
		status    storagev1.ClusterStatus
		from, to  string
		kind      string
		exception string
	}{
		{"the next minor", active, "1.35", "1.36", TypeVersionUpdate, ""},
		{"the previous minor is a rollback", active, "1.36", "1.35", TypeVersionRollback, ""},
		{"skipping a minor", active, "1.34", "1.36", "", errdefs.InvalidParameterException},
		{"a downgrade of two minors", active, "1.36", "1.34", "", errdefs.InvalidParameterException},
		{"the same version", active, "1.35", "1.35", "", errdefs.InvalidParameterException},
		{"CREATING", storagev1.ClusterStatus_CLUSTER_STATUS_CREATING, "1.35", "1.36", "", errdefs.ResourceInUseException},
		{"DELETING", storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, "1.35", "1.36", "", errdefs.ResourceInUseException},
		{"FAILED", storagev1.ClusterStatus_CLUSTER_STATUS_FAILED, "1.35", "1.36", "", errdefs.ResourceInUseException},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &storagev1.ClusterRecord{Name: "c", Status: tt.status, KubernetesVersion: tt.from}
			kind, err := s.upgradable(context.Background(), c, tt.to)
			if tt.exception == "" {
				if err != nil || kind != tt.kind {
					t.Fatalf("%q, %v; want %s", kind, err, tt.kind)
				}
				return
			}
			if !errdefs.IsException(err, tt.exception) {
				t.Fatalf("error %v, want %s", err, tt.exception)
			}
		})
	}
}

// TestValidateUpgrade: what is refused before the cluster is read.
func TestValidateUpgrade(t *testing.T) {
	s := &Service{cfg: Config{Versions: []string{"1.35", "1.36"}, Default: "1.35"}}
	tests := []struct {
		name    string
		req     *eksv1.UpdateClusterVersionRequest
		message string
	}{
		{"valid", &eksv1.UpdateClusterVersionRequest{Name: "c", Version: "1.36"}, ""},
		{"no version", &eksv1.UpdateClusterVersionRequest{Name: "c"}, "version is required."},
		{"a version not offered", &eksv1.UpdateClusterVersionRequest{Name: "c", Version: "1.99"}, "unsupported Kubernetes version"},
		{"a bad name", &eksv1.UpdateClusterVersionRequest{Name: "-c", Version: "1.36"},
			"1 validation error detected: Value '-c' at 'name' failed to satisfy constraint: Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]* and be 1 to 100 characters long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.validateUpgrade(tt.req)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			e := errdefs.Classify(err)
			if e.Exception != errdefs.InvalidParameterException || e.Message != tt.message {
				t.Fatalf("error %s %q, want InvalidParameterException %q", e.Exception, e.Message, tt.message)
			}
		})
	}
}

// TestRollbackTimeout: rollbackConfig.timeoutMinutes within AWS's bounds,
// 720 when the config names none.
func TestRollbackTimeout(t *testing.T) {
	minutes := func(v int32) *eksv1.RollbackConfig { return &eksv1.RollbackConfig{TimeoutMinutes: &v} }
	tests := []struct {
		name    string
		config  *eksv1.RollbackConfig
		want    int32
		refused bool
	}{
		{"no config", nil, 0, false},
		{"no timeout", &eksv1.RollbackConfig{}, 720, false},
		{"the least", minutes(120), 120, false},
		{"the most", minutes(10080), 10080, false},
		{"too short", minutes(119), 0, true},
		{"too long", minutes(10081), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rollbackTimeout(&eksv1.UpdateClusterVersionRequest{Name: "c", Version: "1.35", RollbackConfig: tt.config})
			if tt.refused {
				if !errdefs.IsException(err, errdefs.InvalidParameterException) {
					t.Fatalf("%d, %v; want InvalidParameterException", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
