package oidc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testIssuer is an issuer's signing key and key set, as an apiserver's.
type testIssuer struct {
	key  any
	kid  string
	alg  jose.SignatureAlgorithm
	keys *KeySet
}

func newTestIssuer(t testing.TB, kid string) *testIssuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"}}})
	keys, err := ParseKeySet(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuer{key: k, kid: kid, alg: jose.RS256, keys: keys}
}

// sign makes a token with the standard claims and a kubernetes.io claim.
func (ti *testIssuer) sign(t testing.TB, c jwt.Claims, kid string) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: ti.alg, Key: ti.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	k8s := map[string]any{"kubernetes.io": map[string]any{
		"namespace": "ns", "serviceaccount": map[string]string{"name": "sa", "uid": "u1"},
		"pod": map[string]string{"name": "p", "uid": "u2"},
	}}
	tok, err := jwt.Signed(sig).Claims(c).Claims(k8s).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerify(t *testing.T) {
	const iss = "https://saltbush.example/id/ABC"
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	good := jwt.Claims{Issuer: iss, Subject: "system:serviceaccount:ns:sa", Audience: jwt.Audience{"sts.amazonaws.com"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now)}
	ti, other := newTestIssuer(t, "k1"), newTestIssuer(t, "k1")
	with := func(f func(*jwt.Claims)) jwt.Claims {
		c := good
		f(&c)
		return c
	}
	unsigned := func() string {
		parts := strings.Split(ti.sign(t, good, "k1"), ".")
		return parts[0] + "." + parts[1] + "."
	}
	tests := []struct {
		name  string
		token string
		want  Failure
	}{
		{"valid", ti.sign(t, good, "k1"), 0},
		{"valid within the leeway", ti.sign(t, with(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-30 * time.Second)) }), "k1"), 0},
		{"expired", ti.sign(t, with(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-2 * time.Minute)) }), "k1"), Expired},
		{"no expiry", ti.sign(t, with(func(c *jwt.Claims) { c.Expiry = nil }), "k1"), Expired},
		{"not yet valid", ti.sign(t, with(func(c *jwt.Claims) { c.NotBefore = jwt.NewNumericDate(now.Add(5 * time.Minute)) }), "k1"), NotYetValid},
		{"issued in the future", ti.sign(t, with(func(c *jwt.Claims) { c.IssuedAt = jwt.NewNumericDate(now.Add(5 * time.Minute)) }), "k1"), NotYetValid},
		{"another issuer", ti.sign(t, with(func(c *jwt.Claims) { c.Issuer = "https://evil.example" }), "k1"), WrongIssuer},
		{"another audience", ti.sign(t, with(func(c *jwt.Claims) { c.Audience = jwt.Audience{"pods.eks.amazonaws.com"} }), "k1"), WrongAudience},
		{"forged: another key, same kid", other.sign(t, good, "k1"), BadSignature},
		{"unknown kid", ti.sign(t, good, "k2"), UnknownKey},
		{"unsigned: an empty signature", unsigned(), BadSignature},
		{"alg none", "eyJhbGciOiJub25lIiwia2lkIjoiazEifQ.eyJpc3MiOiJodHRwczovL3NhbHRidXNoLmV4YW1wbGUvaWQvQUJDIn0.", Malformed},
		{"not a JWT", "hello", Malformed},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), Malformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Verify(tc.token, ti.keys, Expect{Issuer: iss, Audience: "sts.amazonaws.com", Now: now})
			if got := FailureOf(err); got != tc.want || (tc.want != 0) != (err != nil) {
				t.Fatalf("Verify: %v (failure %d), want failure %d", err, got, tc.want)
			}
			if tc.want == 0 && (c.Subject != "system:serviceaccount:ns:sa" || c.Kubernetes.Namespace != "ns" ||
				c.Kubernetes.ServiceAccount.Name != "sa" || c.Kubernetes.Pod == nil || c.Kubernetes.Pod.UID != "u2") {
				t.Fatalf("claims %+v", c)
			}
		})
	}
}

func TestParseKeySet(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // G403: too small on purpose, the key set must refuse it
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := func(keys ...jose.JSONWebKey) string {
		b, _ := json.Marshal(jose.JSONWebKeySet{Keys: keys})
		return string(b)
	}
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{"an RSA and an EC key", set(jose.JSONWebKey{Key: &rsaKey.PublicKey, KeyID: "b", Use: "sig", Algorithm: "RS256"}, jose.JSONWebKey{Key: &ecKey.PublicKey, KeyID: "a", Algorithm: "ES256"}), ""},
		{"a private key", set(jose.JSONWebKey{Key: rsaKey, KeyID: "a"}), "not a valid public key"},
		{"a symmetric key", set(jose.JSONWebKey{Key: []byte("secret"), KeyID: "a"}), "not a valid public key"},
		{"a small RSA key", set(jose.JSONWebKey{Key: &small.PublicKey, KeyID: "a"}), "fewer than 2048"},
		{"no kid", set(jose.JSONWebKey{Key: &rsaKey.PublicKey}), "no kid"},
		{"a duplicate kid", set(jose.JSONWebKey{Key: &rsaKey.PublicKey, KeyID: "a"}, jose.JSONWebKey{Key: &ecKey.PublicKey, KeyID: "a"}), "appears twice"},
		{"an encryption key", set(jose.JSONWebKey{Key: &rsaKey.PublicKey, KeyID: "a", Use: "enc"}), "is not sig"},
		{"a mismatched alg", set(jose.JSONWebKey{Key: &rsaKey.PublicKey, KeyID: "a", Algorithm: "ES256"}), "not an RSA signature algorithm"},
		{"no keys", `{"keys":[]}`, "no keys"},
		{"not JSON", `{`, "not a JSON Web Key Set"},
		{"too large", `{"keys":[` + strings.Repeat(" ", MaxKeySetBytes) + `]}`, "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := ParseKeySet([]byte(tc.raw))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ParseKeySet: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ParseKeySet: %v, want an error saying %q", err, tc.wantErr)
			case tc.wantErr == "":
				if ids := ks.KeyIDs(); len(ids) != 2 || ids[0] != "a" {
					t.Fatalf("kids %v, want sorted a, b", ids)
				}
				again, err := ParseKeySet(ks.JSON())
				if err != nil || again.Digest() != ks.Digest() {
					t.Fatalf("the canonical set does not read back the same: %v", err)
				}
			}
		})
	}
}

// FuzzVerify: no token, however formed, panics the verifier or verifies
// without the issuer's key.
func FuzzVerify(f *testing.F) {
	const iss = "https://saltbush.example/id/ABC"
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ti := newTestIssuer(f, "k1")
	f.Add(ti.sign(f, jwt.Claims{Issuer: iss, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}, "k1"))
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := Verify(token, ti.keys, Expect{Issuer: iss, Now: now})
		if err == nil && c.Issuer != iss {
			t.Fatalf("verified a token of issuer %q", c.Issuer)
		}
		if err != nil && FailureOf(err) == 0 {
			t.Fatalf("an error without a failure: %v", err)
		}
		_, _ = UnverifiedIssuer(token)
	})
}

// FuzzParseKeySet: no input panics the parser, and what it accepts reads
// back as itself.
func FuzzParseKeySet(f *testing.F) {
	ti := newTestIssuer(f, "k1")
	f.Add(ti.keys.JSON())
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"","y":""}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ks, err := ParseKeySet(raw)
		if err != nil {
			return
		}
		again, err := ParseKeySet(ks.JSON())
		if err != nil || again.Digest() != ks.Digest() {
			t.Fatalf("an accepted set does not read back: %v", err)
		}
	})
}
