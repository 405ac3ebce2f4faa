package review

import (
	"testing"

	"github.com/saltbush/saltbush/server/access"
)

func TestUsernameTemplates(t *testing.T) {
	session, _ := access.ParseSigner("arn:aws:sts::123456789012:assumed-role/team/alice@example.com")
	user, _ := access.ParseSigner("arn:aws:iam::123456789012:user/bob")
	cases := []struct {
		name     string
		signer   access.Signer
		template string
		want     string
	}{
		{"no template", user, "arn:aws:iam::123456789012:user/bob", "arn:aws:iam::123456789012:user/bob"},
		{"session name with @ replaced", session, "arn:aws:sts::123456789012:assumed-role/team/{{SessionName}}", "arn:aws:sts::123456789012:assumed-role/team/alice-example.com"},
		{"raw session name", session, "u:{{SessionNameRaw}}", "u:alice@example.com"},
		{"account and key", session, "{{AccountID}}:{{AccessKeyID}}", "123456789012:AKIAEXAMPLE"},
		{"node DNS name is the session name", session, "system:node:{{EC2PrivateDNSName}}", "system:node:alice@example.com"},
		{"repeated", session, "{{SessionName}}:{{SessionName}}", "alice-example.com:alice-example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			who := identityOf{signer: tc.signer, accessKeyID: "AKIAEXAMPLE"}
			if got := who.render(tc.template); got != tc.want {
				t.Errorf("= %q, want %q", got, tc.want)
			}
		})
	}
}
