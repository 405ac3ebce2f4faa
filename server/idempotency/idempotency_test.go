package idempotency

import (
	"strings"
	"testing"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

func TestFingerprintIgnoresOnlyTheToken(t *testing.T) {
	base := func(token, version string) *eksv1.CreateAddonRequest {
		return &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "coredns", AddonVersion: version, ClientRequestToken: token}
	}
	a, b, c := base("t1", "v1"), base("t2", "v1"), base("t1", "v2")
	fa, err := Fingerprint(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := Fingerprint(b)
	fc, _ := Fingerprint(c)
	if string(fa) != string(fb) {
		t.Error("fingerprints differ for requests that differ only in token")
	}
	if string(fa) == string(fc) {
		t.Error("fingerprints equal for requests with different versions")
	}
	if a.GetClientRequestToken() != "t1" {
		t.Error("fingerprinting modified the request")
	}
}

func TestNewWithoutTokenIsZero(t *testing.T) {
	tok, err := New("111122223333", "CreateAddon", &eksv1.CreateAddonRequest{AddonName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Present() {
		t.Fatal("a request without clientRequestToken produced a token")
	}
	withTok, _ := New("111122223333", "CreateAddon", &eksv1.CreateAddonRequest{AddonName: "x", ClientRequestToken: "t"})
	if !withTok.Present() {
		t.Fatal("a request with clientRequestToken produced no token")
	}
}

func TestNewRefusesMalformedTokens(t *testing.T) {
	tests := []struct {
		name, token string
		ok          bool
	}{
		{"uuid", "3f1e2d3c-4b5a-4978-8a9b-0c1d2e3f4a5b", true},
		{"64 characters", strings.Repeat("a", 64), true},
		{"65 characters", strings.Repeat("a", 65), false},
		{"space", "a b", false},
		{"newline", "a\nb", false},
		{"non-ASCII", "tökén", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New("111122223333", "CreateAddon", &eksv1.CreateAddonRequest{AddonName: "x", ClientRequestToken: tt.token})
			if (err == nil) != tt.ok {
				t.Fatalf("New(%q) = %v, want ok %v", tt.token, err, tt.ok)
			}
		})
	}
}
