package token

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzVerify throws arbitrary tokens at Verify. It must never panic, must
// refuse with an *Error (the key store never fails here) whose message is
// bounded and free of secrets, and must accept only tokens that carry a
// signature the seed key made for testCluster: anything else accepted
// would be a forgery, or a token replayed against another cluster.
//
// Each input is tried twice: as a token, and as the URL inside a token.
// Mutating the base64 form rarely yields a URL that reaches the signature
// check; mutating the URL itself does.
func FuzzVerify(f *testing.F) {
	// Tokens are signed at the fixed signTime, so every fuzz worker
	// derives the same seeds and the cached corpus stays meaningful.
	valid := makeToken(f, gen{})
	regional := makeToken(f, gen{region: "eu-west-1", expires: "0"})
	signed := map[string]bool{signatureOf(f, valid): true, signatureOf(f, regional): true}
	sig := signatureOf(f, valid)
	rawURL := func(tok string) string {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, Prefix))
		if err != nil {
			f.Fatal(err)
		}
		return string(b)
	}
	for _, s := range []string{
		valid,
		regional,
		rawURL(valid),
		rawURL(regional),
		editURL(f, valid, sig, flipLastHex(sig)),
		editURL(f, valid, "Action=GetCallerIdentity", "Action=GetSessionToken"),
		editURL(f, valid, "X-Amz-Signature=", "x-amz-date=20261130T061500Z&X-Amz-Signature="),
		editURL(f, valid, "https://", "http://"),
		editURL(f, valid, "sts.us-east-1.amazonaws.com", "sts.us-west-2.amazonaws.com"),
		rawURL(editURL(f, valid, "X-Amz-Expires=60", "X-Amz-Expires=0")),
		rawURL(editURL(f, valid, "X-Amz-Signature=", "X-Amz-Security-Token=x&X-Amz-Signature=")),
		rawURL(editURL(f, valid, "x-k8s-aws-id", "x-k8s-aws-ie")),
		makeToken(f, gen{cluster: "prod-green"}),
		Prefix + "!!",
		"",
	} {
		f.Add(s)
	}

	v := verifierAt(signTime.Add(time.Minute))
	ctx := context.Background()
	check := func(t *testing.T, tok string) {
		id, err := v.Verify(ctx, tok, testCluster)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("refusal is not an *Error: %v", err)
			}
			switch e.Reason {
			case Malformed, Expired, WrongHost, BadSignature, UnknownKey:
			default:
				t.Fatalf("unknown reason %q", e.Reason)
			}
			if len(e.Message) > 512 || strings.Contains(e.Message, testSecret) {
				t.Fatalf("message unbounded or leaks the secret: %q", e.Message)
			}
			if body := strings.TrimPrefix(tok, Prefix); len(body) > 100 && strings.Contains(e.Message, body) {
				t.Fatalf("message echoes the token: %q", e.Message)
			}
			return
		}
		if id.AccessKeyID != testKey {
			t.Fatalf("accepted for key %q", id.AccessKeyID)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, Prefix))
		if err != nil {
			t.Fatalf("accepted a token that does not decode: %v", err)
		}
		u, err := url.Parse(string(raw))
		if err != nil {
			t.Fatalf("accepted a URL that does not parse: %v", err)
		}
		if got := u.Query().Get("X-Amz-Signature"); !signed[got] {
			t.Fatalf("accepted signature %q that the seed key never made: %q", got, raw)
		}
		if _, err := v.Verify(ctx, tok, "prod-green"); err == nil {
			t.Fatalf("token for %s also accepted for another cluster: %q", testCluster, raw)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		check(t, s)
		check(t, encode(s))
	})
}
