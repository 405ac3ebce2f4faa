package access

import (
	"slices"
	"strings"
	"testing"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

func TestParsePrincipal(t *testing.T) {
	cases := []struct {
		name, arn, canonical, kind, entryName string
		bad                                   string
	}{
		{name: "user", arn: "arn:aws:iam::123456789012:user/alice", canonical: "arn:aws:iam::123456789012:user/alice", kind: "user", entryName: "alice"},
		{name: "user with path", arn: "arn:aws:iam::123456789012:user/eng/alice", canonical: "arn:aws:iam::123456789012:user/alice", kind: "user", entryName: "alice"},
		{name: "role with a deep path", arn: "arn:aws:iam::123456789012:role/a/b/deployer", canonical: "arn:aws:iam::123456789012:role/deployer", kind: "role", entryName: "deployer"},
		{name: "root", arn: "arn:aws:iam::123456789012:root", canonical: "arn:aws:iam::123456789012:root", kind: "root", entryName: "root"},
		{name: "assumed-role session", arn: "arn:aws:sts::123456789012:assumed-role/team/alice", bad: "STS session"},
		{name: "group", arn: "arn:aws:iam::123456789012:group/devs", bad: "invalid principal"},
		{name: "short account", arn: "arn:aws:iam::12345:user/alice", bad: "invalid principal"},
		{name: "other partition", arn: "arn:aws-cn:iam::123456789012:user/alice", bad: "invalid principal"},
		{name: "empty", arn: "", bad: "invalid principal"},
		{name: "too long", arn: "arn:aws:iam::123456789012:user/" + strings.Repeat("p/", 1100) + "alice", bad: "invalid principal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePrincipal(tc.arn)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("ParsePrincipal(%q) = %+v, %v; want an error saying %q", tc.arn, p, err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Canonical() != tc.canonical || p.Kind != tc.kind || p.Name != tc.entryName || p.ARN != tc.arn {
				t.Errorf("ParsePrincipal(%q) = %+v (canonical %s)", tc.arn, p, p.Canonical())
			}
		})
	}
}

func TestParseSigner(t *testing.T) {
	s, ok := ParseSigner("arn:aws:sts::123456789012:assumed-role/team/alice@example.com")
	if !ok || s.Principal.Canonical() != "arn:aws:iam::123456789012:role/team" || s.SessionName != "alice@example.com" {
		t.Errorf("session signer = %+v, %v", s, ok)
	}
	if s, ok := ParseSigner("arn:aws:iam::123456789012:user/x/bob"); !ok || s.Principal.Canonical() != "arn:aws:iam::123456789012:user/bob" || s.SessionName != "" {
		t.Errorf("user signer = %+v, %v", s, ok)
	}
	if _, ok := ParseSigner("spiffe://saltbush/service/admin"); ok {
		t.Error("a SPIFFE id parsed as a signer")
	}
}

func TestPrincipalID(t *testing.T) {
	user, _ := ParsePrincipal("arn:aws:iam::123456789012:user/alice")
	pathed, _ := ParsePrincipal("arn:aws:iam::123456789012:user/eng/alice")
	role, _ := ParsePrincipal("arn:aws:iam::123456789012:role/alice")
	root, _ := ParsePrincipal("arn:aws:iam::123456789012:root")
	if id := user.ID(); !strings.HasPrefix(id, "AIDA") || len(id) != 21 || id != pathed.ID() {
		t.Errorf("user id %s (with path %s)", id, pathed.ID())
	}
	if id := role.ID(); !strings.HasPrefix(id, "AROA") || id[4:] == user.ID()[4:] {
		t.Errorf("role id %s is not distinct from the user's %s", id, user.ID())
	}
	if root.ID() != "123456789012" {
		t.Errorf("root id %s", root.ID())
	}
}

func TestValidateUsername(t *testing.T) {
	cases := []struct{ name, username, bad string }{
		{"plain", "alice", ""},
		{"arn", "arn:aws:iam::123456789012:user/alice", ""},
		{"session template after a colon", "team:{{SessionName}}", ""},
		{"raw session and account", "acct-{{AccountID}}:{{SessionNameRaw}}", ""},
		{"access key", "key:{{AccessKeyID}}", ""},
		{"system:", "system:admin", "cannot start with system:"},
		{"eks:", "eks:x", "cannot start with eks:"},
		{"aws:", "aws:x", "aws:"},
		{"amazon:", "amazon:x", "amazon:"},
		{"iam:", "iam:x", "iam:"},
		{"session without colon", "{{SessionName}}", "colon"},
		{"raw session without colon", "x-{{SessionNameRaw}}", "colon"},
		{"unknown template", "u:{{Who}}", "unsupported template"},
		{"EC2 DNS name is AWS's", "u:{{EC2PrivateDNSName}}", "unsupported template"},
		{"unterminated", "u:{{SessionName", "unterminated"},
		{"control character", "a\nb", "control"},
		{"too long", strings.Repeat("a", 129), "at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateUsername("c", tc.username)
			switch {
			case tc.bad == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Errorf("err = %v, want one saying %q", err, tc.bad)
			}
		})
	}
}

func TestValidateGroups(t *testing.T) {
	got, err := validateGroups("c", []string{"a", "b", "a"})
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("duplicates: %v, %v", got, err)
	}
	for _, bad := range [][]string{{"system:masters"}, {"ok", "eks:x"}, {""}, {strings.Repeat("g", 129)}, make([]string, 101)} {
		if _, err := validateGroups("c", bad); err == nil {
			t.Errorf("validateGroups(%.40q) accepted", bad)
		}
	}
}

func TestGeneratedUsername(t *testing.T) {
	role, _ := ParsePrincipal("arn:aws:iam::123456789012:role/path/nodes")
	user, _ := ParsePrincipal("arn:aws:iam::123456789012:user/path/alice")
	cases := []struct {
		name string
		t    storagev1.AccessEntryType
		p    Principal
		want string
	}{
		{"standard role: its session, path removed", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD, role, "arn:aws:sts::123456789012:assumed-role/nodes/{{SessionName}}"},
		{"standard user: the ARN", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD, user, "arn:aws:iam::123456789012:user/path/alice"},
		{"EC2_LINUX", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_LINUX, role, "system:node:{{EC2PrivateDNSName}}"},
		{"EC2_WINDOWS", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_WINDOWS, role, "system:node:{{EC2PrivateDNSName}}"},
		{"EC2 (Auto Mode)", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2, role, "system:node:{{EC2PrivateDNSName}}"},
		{"FARGATE_LINUX", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_FARGATE_LINUX, role, "system:node:{{SessionName}}"},
		{"HYBRID_LINUX", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYBRID_LINUX, role, "system:node:{{SessionName}}"},
		{"HYPERPOD_LINUX", storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYPERPOD_LINUX, role, "system:node:{{SessionName}}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := generatedUsername(tc.t, tc.p); got != tc.want {
				t.Errorf("= %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEntryTypesRoundTrip(t *testing.T) {
	for name, v := range entryTypes {
		if TypeName(v) != name {
			t.Errorf("TypeName(%v) = %s, want %s", v, TypeName(v), name)
		}
	}
	if len(entryTypes) != 7 {
		t.Errorf("%d entry types, want AWS's 7", len(entryTypes))
	}
}
