package release

import "testing"

func TestIdentityString(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   Identity
		want string
	}{
		{name: "stamped", id: Identity{Version: "v0.0.0-20261207135301-20a1711c0ffe", Commit: "20a1711c0ffee0ddba11ad0be5ca1ab1e0ddba11", ContractBaseline: 7},
			want: "v0.0.0-20261207135301-20a1711c0ffe (commit 20a1711c0ffe, contract baseline 7)"},
		{name: "modified tree", id: Identity{Version: "v0.0.0-20261207135301-20a1711c0ffe+dirty", Commit: "20a1711c0ffee0ddba11ad0be5ca1ab1e0ddba11", Modified: true, ContractBaseline: 7},
			want: "v0.0.0-20261207135301-20a1711c0ffe+dirty (commit 20a1711c0ffe+dirty, contract baseline 7)"},
		{name: "no build information", id: Identity{Version: "(devel)", ContractBaseline: 7},
			want: "(devel) (commit unknown, contract baseline 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.id.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCurrentNamesTheBaseline: whatever the build recorded, the identity
// carries the package's baseline and a version.
func TestCurrentNamesTheBaseline(t *testing.T) {
	id := Current()
	if id.ContractBaseline != ContractBaseline || id.Version == "" {
		t.Errorf("Current() = %+v, want baseline %d and a version", id, ContractBaseline)
	}
}
