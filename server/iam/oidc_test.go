package iam

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

func TestNormalizeOIDCProviderURL(t *testing.T) {
	tests := []struct {
		name, raw, want string // want "" means refused
	}{
		{"host and path", "https://oidc.example.test/id/ABC", "https://oidc.example.test/id/ABC"},
		{"host only", "https://oidc.example.test", "https://oidc.example.test"},
		{"the default port, as eksctl sends it", "https://oidc.example.test:443/id/ABC", "https://oidc.example.test/id/ABC"},
		{"another port is kept", "https://oidc.example.test:8443/id", "https://oidc.example.test:8443/id"},
		{"the scheme in capitals", "HTTPS://oidc.example.test/x", "https://oidc.example.test/x"},
		{"case of host and path kept", "https://OIDC.example.test/Id/X", "https://OIDC.example.test/Id/X"},
		{"a trailing slash kept", "https://oidc.example.test/", "https://oidc.example.test/"},
		{"http", "http://oidc.example.test/id", ""},
		{"no scheme", "oidc.example.test/id", ""},
		{"no host", "https:///id", ""},
		{"nothing after the scheme", "https://", ""},
		{"a query", "https://oidc.example.test/id?x=1", ""},
		{"an empty query", "https://oidc.example.test/id?", ""},
		{"a fragment", "https://oidc.example.test/id#x", ""},
		{"user information", "https://user@oidc.example.test/id", ""},
		{"a space", "https://oidc.example.test/i d", ""},
		{"a bad port", "https://oidc.example.test:x/id", ""},
		{"a bad escape", "https://oidc.example.test/%zz", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeOIDCProviderURL(tc.raw)
			if tc.want == "" {
				if !isException(err, errdefs.InvalidParameterException) {
					t.Fatalf("NormalizeOIDCProviderURL(%q) = %q, %v; want InvalidParameterException", tc.raw, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("NormalizeOIDCProviderURL(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
			}
		})
	}
}

// TestOIDCProviderRecords: made, read, listed, changed and deleted, each
// change one transaction that a refusal leaves undone.
func TestOIDCProviderRecords(t *testing.T) {
	svc, st := newTestService(t)
	ctx := ctxT(t)
	const acct = "111122223333"
	if _, err := svc.CreateAccount(ctx, acct, "team-a"); err != nil {
		t.Fatal(err)
	}
	const u1, u2 = "https://b.example.test/id/1", "https://a.example.test"
	thumb := strings.Repeat("ab", 20)
	newRec := func(u string) *storagev1.OpenIDConnectProviderRecord {
		return &storagev1.OpenIDConnectProviderRecord{Url: u, AccountId: acct, ClientIds: []string{"sts.amazonaws.com"}, Thumbprints: []string{thumb}}
	}
	keys := func() int {
		t.Helper()
		page, err := st.List(ctx, store.ListOptions{Prefix: oidcProvidersPrefix(acct), KeysOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Items)
	}

	t.Run("create", func(t *testing.T) {
		rec, err := svc.CreateOIDCProvider(ctx, newRec(u1))
		if err != nil {
			t.Fatal(err)
		}
		if rec.GetCreatedAt() == nil {
			t.Error("no CreatedAt")
		}
		if _, err := svc.CreateOIDCProvider(ctx, newRec(u2)); err != nil {
			t.Fatal(err)
		}
	})
	refusals := []struct {
		name      string
		rec       *storagev1.OpenIDConnectProviderRecord
		exception string
	}{
		{"the same URL again", newRec(u1), errdefs.ResourceInUseException},
		{"a missing account", &storagev1.OpenIDConnectProviderRecord{Url: "https://c.example.test", AccountId: "999999999999"}, errdefs.ResourceNotFoundException},
		{"six thumbprints", func() *storagev1.OpenIDConnectProviderRecord {
			r := newRec("https://c.example.test")
			for i := range 5 {
				r.Thumbprints = append(r.Thumbprints, strings.Repeat(string(rune('0'+i)), 40))
			}
			return r
		}(), errdefs.InvalidParameterException},
		{"101 client ids", func() *storagev1.OpenIDConnectProviderRecord {
			r := newRec("https://c.example.test")
			for i := range 100 {
				r.ClientIds = append(r.ClientIds, "client-"+strings.Repeat("x", i))
			}
			return r
		}(), errdefs.ResourceLimitExceededException},
		{"a thumbprint that is not hex", func() *storagev1.OpenIDConnectProviderRecord {
			r := newRec("https://c.example.test")
			r.Thumbprints = []string{strings.Repeat("z", 40)}
			return r
		}(), errdefs.InvalidParameterException},
		{"tag keys differing in case", func() *storagev1.OpenIDConnectProviderRecord {
			r := newRec("https://c.example.test")
			r.Tags = []*storagev1.ResourceTag{{Key: "team", Value: "a"}, {Key: "Team", Value: "b"}}
			return r
		}(), errdefs.InvalidParameterException},
		{"a URL not normalized", newRec("https://c.example.test:443/x"), ""},
	}
	for _, tc := range refusals {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			_, err := svc.CreateOIDCProvider(ctx, tc.rec)
			if err == nil {
				t.Fatal("created")
			}
			if tc.exception != "" && !isException(err, tc.exception) {
				t.Fatalf("err = %v, want %s", err, tc.exception)
			}
			if n := keys(); n != 2 {
				t.Fatalf("%d records after a refused create, want 2", n)
			}
		})
	}

	t.Run("list by URL", func(t *testing.T) {
		recs, err := svc.OIDCProviders(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		var urls []string
		for _, r := range recs {
			urls = append(urls, r.GetUrl())
		}
		if !slices.Equal(urls, []string{u2, u1}) {
			t.Fatalf("URLs %v, want %v", urls, []string{u2, u1})
		}
	})

	t.Run("a change", func(t *testing.T) {
		out, err := svc.UpdateOIDCProvider(ctx, acct, u1, nil, func(r *storagev1.OpenIDConnectProviderRecord) error {
			r.ClientIds = append(r.ClientIds, "aud-2")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := svc.OIDCProvider(ctx, acct, u1)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, out) || !slices.Equal(got.GetClientIds(), []string{"sts.amazonaws.com", "aud-2"}) {
			t.Fatalf("after the change %v (returned %v)", got, out)
		}
	})
	t.Run("a change over a limit writes nothing", func(t *testing.T) {
		before, _ := svc.OIDCProvider(ctx, acct, u1)
		_, err := svc.UpdateOIDCProvider(ctx, acct, u1, nil, func(r *storagev1.OpenIDConnectProviderRecord) error {
			for i := range 99 {
				r.ClientIds = append(r.ClientIds, "more-"+strings.Repeat("y", i))
			}
			return nil
		})
		if !isException(err, errdefs.ResourceLimitExceededException) {
			t.Fatalf("err = %v, want ResourceLimitExceededException", err)
		}
		after, _ := svc.OIDCProvider(ctx, acct, u1)
		if !proto.Equal(before, after) {
			t.Fatalf("the record changed: %v -> %v", before, after)
		}
	})
	t.Run("a change of a missing provider", func(t *testing.T) {
		_, err := svc.UpdateOIDCProvider(ctx, acct, "https://missing.example.test", nil, func(*storagev1.OpenIDConnectProviderRecord) error { return nil })
		if !isException(err, errdefs.ResourceNotFoundException) {
			t.Fatalf("err = %v, want ResourceNotFoundException", err)
		}
	})

	const derived = "https://derived.example.test/id/D"
	seedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := &storagev1.OpenIDConnectProviderRecord{Url: derived, AccountId: acct, ClientIds: []string{"sts.amazonaws.com"}, CreatedAt: timestamppb.New(seedAt)}
	t.Run("a change that leaves a seed as it is writes nothing", func(t *testing.T) {
		out, err := svc.UpdateOIDCProvider(ctx, acct, derived, seed, func(r *storagev1.OpenIDConnectProviderRecord) error {
			r.ClientIds = slices.DeleteFunc(r.ClientIds, func(c string) bool { return c == "absent" })
			return nil
		})
		if err != nil || !proto.Equal(out, seed) {
			t.Fatalf("UpdateOIDCProvider = %v, %v; want the seed", out, err)
		}
		if n := keys(); n != 2 {
			t.Fatalf("%d records, want 2", n)
		}
	})
	t.Run("a change of a seed makes the record", func(t *testing.T) {
		if _, err := svc.UpdateOIDCProvider(ctx, acct, derived, seed, func(r *storagev1.OpenIDConnectProviderRecord) error {
			r.Tags = append(r.Tags, &storagev1.ResourceTag{Key: "team", Value: "a"})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got, err := svc.OIDCProvider(ctx, acct, derived)
		if err != nil {
			t.Fatal(err)
		}
		if !got.GetCreatedAt().AsTime().Equal(seedAt) || len(got.GetTags()) != 1 || got.GetClientIds()[0] != "sts.amazonaws.com" {
			t.Fatalf("made record %v", got)
		}
		// A second change with the same seed changes the record.
		if _, err := svc.UpdateOIDCProvider(ctx, acct, derived, seed, func(r *storagev1.OpenIDConnectProviderRecord) error {
			r.Tags = append(r.Tags, &storagev1.ResourceTag{Key: "env", Value: "b"})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got, _ := svc.OIDCProvider(ctx, acct, derived); len(got.GetTags()) != 2 {
			t.Fatalf("after the second change %v, want two tags", got)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := svc.DeleteOIDCProvider(ctx, acct, u1); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.OIDCProvider(ctx, acct, u1); !isException(err, errdefs.ResourceNotFoundException) {
			t.Fatalf("read after delete: %v", err)
		}
		err := svc.DeleteOIDCProvider(ctx, acct, u1)
		var e *errdefs.Error
		if !errors.As(err, &e) || e.Exception != errdefs.ResourceNotFoundException ||
			e.Message != "OpenIDConnect Provider not found for arn arn:aws:iam::"+acct+":oidc-provider/b.example.test/id/1" {
			t.Fatalf("second delete: %v", err)
		}
	})
}
