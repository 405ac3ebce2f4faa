package review

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
)

// fakeEntries holds access entries by canonical principal ARN.
type fakeEntries map[string]access.Binding

func (f fakeEntries) Binding(_ context.Context, _ string, p access.Principal) (access.Binding, bool, error) {
	b, ok := f[p.Canonical()]
	return b, ok, nil
}

func testService(entries fakeEntries) *Service {
	return &Service{entries: entries, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func cluster(mode string) *storagev1.ClusterRecord {
	return &storagev1.ClusterRecord{Uid: "c-1", Name: "demo", AccessConfig: &storagev1.ClusterAccessConfig{AuthenticationMode: mode}}
}

func signer(t *testing.T, arn string) identityOf {
	t.Helper()
	s, ok := access.ParseSigner(arn)
	if !ok {
		t.Fatalf("signer %s", arn)
	}
	return identityOf{signer: s, accessKeyID: "AKIAEXAMPLEKEY000001"}
}

const (
	aliceSession = "arn:aws:sts::111122223333:assumed-role/dev/alice@example.com"
	nodeSession  = "arn:aws:sts::111122223333:assumed-role/node/i-0123456789abcdef0"
	bobUser      = "arn:aws:iam::111122223333:user/bob"
	carolPath    = "arn:aws:iam::111122223333:user/ops/carol"
	rootUser     = "arn:aws:iam::111122223333:root"
	otherUser    = "arn:aws:iam::444455556666:user/dave"
)

// TestAWSAuthMapping parses aws-auth ConfigMaps and maps signers through
// them as aws-iam-authenticator's ConfigMap mapper does (CONFIG_MAP mode,
// no access entries).
func TestAWSAuthMapping(t *testing.T) {
	devRole := `
- rolearn: arn:aws:iam::111122223333:role/dev
  username: dev:{{SessionName}}
  groups: [devs, "acct-{{AccountID}}"]
`
	cases := []struct {
		name       string
		cm         *deliveryv1.AwsAuthConfigMap
		signer     string
		wantOK     bool
		wantUser   string
		wantGroups []string
	}{
		{"role session by its role", &deliveryv1.AwsAuthConfigMap{MapRoles: devRole}, aliceSession,
			true, "dev:alice-example.com", []string{"devs", "acct-111122223333"}},
		{"role ARN compared without case", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: ARN:AWS:IAM::111122223333:ROLE/DEV
  username: dev
`}, aliceSession, true, "dev", []string{}},
		{"a rolearn with a path never matches a session (which names no path)", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/team/dev
  username: dev
`}, aliceSession, false, "", nil},
		{"all templates", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/dev
  username: "{{AccountID}}/{{SessionName}}/{{SessionNameRaw}}/{{AccessKeyID}}"
  groups: ["{{SessionNameRaw}}"]
`}, aliceSession, true, "111122223333/alice-example.com/alice@example.com/AKIAEXAMPLEKEY000001", []string{"alice@example.com"}},
		{"node role: EC2PrivateDNSName is the session name", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/node
  username: system:node:{{EC2PrivateDNSName}}
  groups: [system:bootstrappers, system:nodes]
`}, nodeSession, true, "system:node:i-0123456789abcdef0", []string{"system:bootstrappers", "system:nodes"}},
		{"user by its ARN", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:user/bob
  username: bob
  groups: [system:masters]
`}, bobUser, true, "bob", []string{"system:masters"}},
		{"user ARN compared without case", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:user/BOB
  username: bob
`}, bobUser, true, "bob", []string{}},
		{"user with a path by its ARN with the path", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:user/ops/carol
  username: carol
`}, carolPath, true, "carol", []string{}},
		{"user with a path not by its ARN without it", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:user/carol
  username: carol
`}, carolPath, false, "", nil},
		{"account root in mapUsers", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:root
  username: admin
`}, rootUser, true, "admin", []string{}},
		{"mapUsers is looked up by the role ARN too", &deliveryv1.AwsAuthConfigMap{MapUsers: `
- userarn: arn:aws:iam::111122223333:role/dev
  username: from-users
`}, aliceSession, true, "from-users", []string{}},
		{"mapRoles before mapUsers", &deliveryv1.AwsAuthConfigMap{MapRoles: devRole, MapUsers: `
- userarn: arn:aws:iam::111122223333:role/dev
  username: from-users
`}, aliceSession, true, "dev:alice-example.com", []string{"devs", "acct-111122223333"}},
		{"duplicate: the later entry wins", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/dev
  username: first
- rolearn: arn:aws:iam::111122223333:role/DEV
  username: second
`}, aliceSession, true, "second", []string{}},
		{"keys in any case", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- RoleArn: arn:aws:iam::111122223333:role/dev
  UserName: dev
  Groups: [devs]
`}, aliceSession, true, "dev", []string{"devs"}},
		{"bad mapRoles YAML maps no role, mapUsers still maps", &deliveryv1.AwsAuthConfigMap{MapRoles: "- rolearn: [unclosed\n", MapUsers: `
- userarn: arn:aws:iam::111122223333:user/bob
  username: bob
`}, bobUser, true, "bob", []string{}},
		{"bad mapRoles YAML maps no role", &deliveryv1.AwsAuthConfigMap{MapRoles: "- rolearn: [unclosed\n"}, aliceSession, false, "", nil},
		{"mapRoles not a list", &deliveryv1.AwsAuthConfigMap{MapRoles: "rolearn: arn:aws:iam::111122223333:role/dev\nusername: dev\n"}, aliceSession, false, "", nil},
		{"an invalid entry is skipped, the others kept", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- username: no-arn
- rolearn: arn:aws:iam::111122223333:role/dev
  groups: 5
- rolearn: arn:aws:iam::111122223333:role/dev
  username: kept
`}, aliceSession, true, "kept", []string{}},
		{"an entry with rolearn and sso is skipped", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/dev
  sso: {permissionSetName: Admin, accountID: "111122223333"}
  username: dev
`}, aliceSession, false, "", nil},
		{"an entry without a username is skipped", &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/dev
  groups: [system:masters]
`}, aliceSession, false, "", nil},
		{"mapAccounts: a user is its ARN, no groups", &deliveryv1.AwsAuthConfigMap{MapAccounts: "- 111122223333\n"}, bobUser, true, bobUser, []string{}},
		{"mapAccounts: a session is its role's ARN", &deliveryv1.AwsAuthConfigMap{MapAccounts: "- \"111122223333\"\n"}, aliceSession, true, "arn:aws:iam::111122223333:role/dev", []string{}},
		{"mapAccounts: a user with a path keeps it", &deliveryv1.AwsAuthConfigMap{MapAccounts: "- 111122223333\n"}, carolPath, true, carolPath, []string{}},
		{"mapAccounts: another account", &deliveryv1.AwsAuthConfigMap{MapAccounts: "- 111122223333\n"}, otherUser, false, "", nil},
		{"mapAccounts: a leading zero is kept", &deliveryv1.AwsAuthConfigMap{MapAccounts: "- 011122223333\n"}, "arn:aws:iam::011122223333:user/zed", true, "arn:aws:iam::011122223333:user/zed", []string{}},
		{"mapAccounts after mapRoles", &deliveryv1.AwsAuthConfigMap{MapRoles: devRole, MapAccounts: "- 111122223333\n"}, aliceSession, true, "dev:alice-example.com", []string{"devs", "acct-111122223333"}},
		{"bad mapAccounts YAML", &deliveryv1.AwsAuthConfigMap{MapAccounts: "{not: a list}"}, bobUser, false, "", nil},
		{"empty lists", &deliveryv1.AwsAuthConfigMap{MapRoles: "``", MapUsers: `""`, MapAccounts: "  \n"}, bobUser, false, "", nil},
		{"no ConfigMap", nil, bobUser, false, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testService(fakeEntries{})
			user, groups, ok, err := s.mapSigner(context.Background(), cluster("CONFIG_MAP"), signer(t, tc.signer), tc.cm)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.wantOK || user != tc.wantUser || (ok && !slices.Equal(groups, tc.wantGroups)) {
				t.Errorf("= %q %q %v, want %q %q %v", user, groups, ok, tc.wantUser, tc.wantGroups, tc.wantOK)
			}
		})
	}
}

// TestAuthenticationModes: which of the access entry and aws-auth maps a
// signer, by the cluster's authentication mode.
func TestAuthenticationModes(t *testing.T) {
	cm := &deliveryv1.AwsAuthConfigMap{MapRoles: `
- rolearn: arn:aws:iam::111122223333:role/dev
  username: from-aws-auth
  groups: [system:masters]
`}
	entry := fakeEntries{"arn:aws:iam::111122223333:role/dev": {Username: "from-entry", Groups: []string{"entry-group"}}}
	cases := []struct {
		name     string
		mode     string
		entries  fakeEntries
		wantOK   bool
		wantUser string
	}{
		{"API: entry", "API", entry, true, "from-entry"},
		{"API: aws-auth ignored", "API", fakeEntries{}, false, ""},
		{"no mode: aws-auth ignored", "", fakeEntries{}, false, ""},
		{"API_AND_CONFIG_MAP: the entry wins", "API_AND_CONFIG_MAP", entry, true, "from-entry"},
		{"API_AND_CONFIG_MAP: aws-auth without an entry", "API_AND_CONFIG_MAP", fakeEntries{}, true, "from-aws-auth"},
		{"CONFIG_MAP: aws-auth", "CONFIG_MAP", fakeEntries{}, true, "from-aws-auth"},
		{"CONFIG_MAP: the creator's entry first", "CONFIG_MAP", entry, true, "from-entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			user, _, ok, err := testService(tc.entries).mapSigner(context.Background(), cluster(tc.mode), signer(t, aliceSession), cm)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.wantOK || user != tc.wantUser {
				t.Errorf("= %q %v, want %q %v", user, ok, tc.wantUser, tc.wantOK)
			}
		})
	}
}

// TestAWSAuthMemo: a ConfigMap version is parsed once; the same name with
// other text, or for another cluster, is parsed on its own; the memo is
// bounded.
func TestAWSAuthMemo(t *testing.T) {
	cm := func(rv, user string) *deliveryv1.AwsAuthConfigMap {
		return &deliveryv1.AwsAuthConfigMap{Uid: "cm-1", ResourceVersion: rv,
			MapUsers: "- userarn: " + bobUser + "\n  username: " + user + "\n"}
	}
	bob := signer(t, bobUser).signer
	cases := []struct {
		name    string
		run     func(m *awsAuthMemo) (first, second *awsAuth)
		same    bool
		wantSec string
	}{
		{"same version: parsed once", func(m *awsAuthMemo) (*awsAuth, *awsAuth) {
			a, _ := m.get("c-1", cm("1", "bob"))
			b, _ := m.get("c-1", cm("1", "bob"))
			return a, b
		}, true, "bob"},
		{"same name, other text: parsed", func(m *awsAuthMemo) (*awsAuth, *awsAuth) {
			a, _ := m.get("c-1", cm("1", "bob"))
			b, _ := m.get("c-1", cm("1", "mallory"))
			return a, b
		}, false, "mallory"},
		{"another cluster: parsed", func(m *awsAuthMemo) (*awsAuth, *awsAuth) {
			a, _ := m.get("c-1", cm("1", "bob"))
			b, _ := m.get("c-2", cm("1", "bob"))
			return a, b
		}, false, "bob"},
		{"new version: parsed", func(m *awsAuthMemo) (*awsAuth, *awsAuth) {
			a, _ := m.get("c-1", cm("1", "bob"))
			b, _ := m.get("c-1", cm("2", "robert"))
			return a, b
		}, false, "robert"},
		{"unnamed: parsed every time", func(m *awsAuthMemo) (*awsAuth, *awsAuth) {
			a, _ := m.get("c-1", &deliveryv1.AwsAuthConfigMap{MapUsers: cm("", "bob").GetMapUsers()})
			b, _ := m.get("c-1", &deliveryv1.AwsAuthConfigMap{MapUsers: cm("", "bob").GetMapUsers()})
			return a, b
		}, false, "bob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m awsAuthMemo
			a, b := tc.run(&m)
			if (a == b) != tc.same {
				t.Errorf("same parse = %v, want %v", a == b, tc.same)
			}
			if got, _ := b.lookup(bob); got.username != tc.wantSec {
				t.Errorf("second maps bob to %q, want %q", got.username, tc.wantSec)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		var m awsAuthMemo
		for i := range 2 * awsAuthMemoSize {
			if _, err := m.get(fmt.Sprintf("c-%d", i), cm("1", "bob")); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(m.entries); n > awsAuthMemoSize {
			t.Errorf("%d entries kept, bound %d", n, awsAuthMemoSize)
		}
	})
	t.Run("errors reported when parsed", func(t *testing.T) {
		var m awsAuthMemo
		bad := &deliveryv1.AwsAuthConfigMap{Uid: "cm-1", ResourceVersion: "9", MapRoles: "- username: x\n"}
		if _, err := m.get("c-1", bad); err == nil || !strings.Contains(err.Error(), "no rolearn") {
			t.Errorf("first parse: %v", err)
		}
		if _, err := m.get("c-1", bad); err != nil {
			t.Errorf("memoised: %v, want no error (reported once)", err)
		}
	})
}
