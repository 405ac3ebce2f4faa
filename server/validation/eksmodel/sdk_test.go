package eksmodel

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestReadSDK reads the SDK module go.mod requires and checks what each
// of its files gives against the module's documented model.
func TestReadSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := Locate(ctx, ".", "unused")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadSDK(src.SDKDir)
	if err != nil {
		t.Fatal(err)
	}
	op := m.Operations["CancelUpdate"]
	if op.Input == nil || op.Input.Shape != "CancelUpdateRequest" || op.HTTP.Method != "POST" ||
		op.HTTP.RequestURI != "/clusters/{name}/updates/{updateId}/cancel-update" {
		t.Errorf("CancelUpdate: %+v", op)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"a label", m.Shapes["CancelUpdateRequest"].Members["updateId"], Ref{Shape: "String", Location: "uri", LocationName: "updateId"}},
		{"a query parameter", m.Shapes["DeleteAddonRequest"].Members["preserve"], Ref{Shape: "Boolean", Location: "querystring", LocationName: "preserve"}},
		{"a body member", m.Shapes["UpdateClusterVersionRequest"].Members["rollbackConfig"], Ref{Shape: "RollbackConfig"}},
		{"required members", m.Shapes["CancelUpdateRequest"].Required, []string{"name", "updateId"}},
		{"nested required members", m.Shapes["AddonPodIdentityAssociations"].Required, []string{"roleArn", "serviceAccount"}},
		{"enum values, not member names", m.Shapes["ClusterVersionStatus"].Enum, []string{"unsupported", "standard-support", "extended-support"}},
		{"a lower-case enum shape", m.Shapes["configStatus"].Enum, []string{"CREATING", "DELETING", "ACTIVE"}},
		{"a list", *m.Shapes["CategoryList"].Member, Ref{Shape: "Category"}},
		{"a map", [2]Ref{*m.Shapes["TagMap"].Key, *m.Shapes["TagMap"].Value}, [2]Ref{{Shape: "TagKey"}, {Shape: "TagValue"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !equal(tc.got, tc.want) {
				t.Errorf("%+v, want %+v", tc.got, tc.want)
			}
		})
	}
	if !slices.Contains(m.Shapes["Category"].Enum, "ROLLBACK_READINESS") {
		t.Errorf("Category: %v", m.Shapes["Category"].Enum)
	}
}

func equal(a, b any) bool {
	switch x := a.(type) {
	case []string:
		return slices.Equal(x, b.([]string))
	}
	return a == b
}
