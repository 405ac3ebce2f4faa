package store_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// fill creates n clusters named prefix+"k00".. in one transaction.
func fill(t testing.TB, s *store.Store, prefix string, n int) []string {
	t.Helper()
	txn := store.NewTxn()
	var names []string
	for i := range n {
		name := fmt.Sprintf("k%03d", i)
		names = append(names, name)
		txn.Put(prefix+name, cluster(name))
	}
	mustCommit(t, s, txn)
	return names
}

// listAll pages through a listing and returns the page sizes and names.
func listAll(t testing.TB, s *store.Store, opts store.ListOptions) ([]int, []string) {
	t.Helper()
	var sizes []int
	var names []string
	for {
		page, err := s.List(testContext(t), opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", opts, err)
		}
		sizes = append(sizes, len(page.Items))
		for _, kv := range page.Items {
			names = append(names, kv.Name)
		}
		if page.NextToken == "" {
			return sizes, names
		}
		if len(sizes) > 1000 {
			t.Fatal("listing does not end")
		}
		opts.Token = page.NextToken
	}
}

// firstToken lists one page of size limit and returns its token.
func firstToken(t testing.TB, s *store.Store, opts store.ListOptions) string {
	t.Helper()
	page, err := s.List(testContext(t), opts)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if page.NextToken == "" {
		t.Fatal("first page has no token")
	}
	return page.NextToken
}

func TestList(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	const prefix = "accounts/1/clusters/"
	names := fill(t, s, prefix, 25)
	// Siblings that share a string prefix but are not under prefix.
	mustCommit(t, s, store.NewTxn().
		Put("accounts/1/clusters", cluster("parent")).
		Put("accounts/1/clusters-archive/k000", cluster("sibling")).
		Put("accounts/1/clustersX", cluster("sibling")).
		Put("accounts/10/clusters/k000", cluster("other account")))
	scope := "ListClusters/1"
	opts := store.ListOptions{Prefix: prefix, Scope: scope}

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		o := opts
		o.Limit = 10
		var got []string
		for i, want := range []int{10, 10, 5} {
			page, err := s.List(testContext(t), o)
			if err != nil {
				t.Fatalf("page %d: %v", i, err)
			}
			if len(page.Items) != want {
				t.Fatalf("page %d has %d items, want %d", i, len(page.Items), want)
			}
			if (page.NextToken == "") != (i == 2) {
				t.Fatalf("page %d NextToken %q", i, page.NextToken)
			}
			if page.Revision == 0 {
				t.Fatalf("page %d has no revision", i)
			}
			for _, kv := range page.Items {
				if kv.Key != prefix+kv.Name {
					t.Fatalf("Key %q, Name %q", kv.Key, kv.Name)
				}
				rec := &storagev1.ClusterRecord{}
				if err := store.Decode(kv.Value, rec); err != nil || rec.GetName() != kv.Name {
					t.Fatalf("value of %s: %v %v", kv.Name, rec, err)
				}
				if kv.ModRev == 0 {
					t.Fatalf("%s has no mod revision", kv.Name)
				}
				got = append(got, kv.Name)
			}
			o.Token = page.NextToken
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Fatalf("names %q, want %q", got, names)
		}
	})

	pageSizes := []struct {
		limit int
		want  []int
	}{
		{1, repeat(1, 25)},
		{5, []int{5, 5, 5, 5, 5}}, // an exact multiple has no empty last page
		{24, []int{24, 1}},
		{25, []int{25}},
		{26, []int{25}},
		{0, []int{25}},
		{store.MaxPageSize, []int{25}},
	}
	for _, tc := range pageSizes {
		t.Run(fmt.Sprintf("Limit%d", tc.limit), func(t *testing.T) {
			t.Parallel()
			o := opts
			o.Limit = tc.limit
			sizes, got := listAll(t, s, o)
			if fmt.Sprint(sizes) != fmt.Sprint(tc.want) {
				t.Fatalf("page sizes %v, want %v", sizes, tc.want)
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Fatalf("names %q, want %q", got, names)
			}
		})
	}

	t.Run("LimitZeroMeansMax", func(t *testing.T) {
		t.Parallel()
		big := newStore(t)
		fill(t, big, "many/", 120)
		sizes, got := listAll(t, big, store.ListOptions{Prefix: "many/"})
		if fmt.Sprint(sizes) != "[100 20]" {
			t.Fatalf("page sizes %v, want [100 20]", sizes)
		}
		if len(got) != 120 {
			t.Fatalf("%d names", len(got))
		}
	})

	for _, limit := range []int{store.MaxPageSize + 1, -1, 1 << 30} {
		t.Run(fmt.Sprintf("LimitOutOfRange%d", limit), func(t *testing.T) {
			t.Parallel()
			o := opts
			o.Limit = limit
			if _, err := s.List(testContext(t), o); err == nil {
				t.Fatalf("List with Limit %d succeeded", limit)
			}
		})
	}

	t.Run("KeysOnly", func(t *testing.T) {
		t.Parallel()
		o := opts
		o.KeysOnly, o.Limit = true, 3
		page, err := s.List(testContext(t), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 3 || page.NextToken == "" {
			t.Fatalf("got %d items, token %q", len(page.Items), page.NextToken)
		}
		for _, kv := range page.Items {
			if kv.Value != nil || kv.Name == "" {
				t.Fatalf("keys-only item %+v", kv)
			}
		}
	})

	t.Run("EmptyPrefix", func(t *testing.T) {
		t.Parallel()
		page, err := s.List(testContext(t), store.ListOptions{Prefix: "accounts/2/clusters/", Limit: 10})
		if err != nil || len(page.Items) != 0 || page.NextToken != "" {
			t.Fatalf("empty listing: %+v, %v", page, err)
		}
	})

	t.Run("ResumeAfterDeletedKey", func(t *testing.T) {
		// The token names the last key returned; the next page starts
		// strictly after it even when that key is gone by then.
		t.Parallel()
		d := newStore(t)
		fill(t, d, "d/", 6)
		page, err := d.List(testContext(t), store.ListOptions{Prefix: "d/", Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		last := page.Items[2]
		mustCommit(t, d, store.NewTxn().Delete(last.Key, last.ModRev))
		next, err := d.List(testContext(t), store.ListOptions{Prefix: "d/", Limit: 3, Token: page.NextToken})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range next.Items {
			got = append(got, kv.Name)
		}
		if strings.Join(got, ",") != "k003,k004,k005" || next.NextToken != "" {
			t.Fatalf("second page %q, token %q", got, next.NextToken)
		}
	})

	// Tokens that were never sealed by this store for this listing.
	o := opts
	o.Limit = 10
	token := firstToken(t, s, o)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		t.Fatalf("token is not base64url: %v", err)
	}
	random := make([]byte, len(raw))
	rand.Read(random)
	tampered := map[string]string{
		"Truncated1":      token[:len(token)-1],
		"Truncated2":      token[:len(token)-2],
		"TruncatedHalf":   token[:len(token)/2],
		"Appended":        token + "A",
		"Doubled":         token + token,
		"RandomBase64":    base64.RawURLEncoding.EncodeToString(random),
		"PaddedBase64":    base64.URLEncoding.EncodeToString(raw),
		"StdBase64":       base64.RawStdEncoding.EncodeToString(append(raw, 0xff, 0xfe)),
		"Newline":         token[:5] + "\n" + token[5:],
		"CarriageReturn":  token[:5] + "\r" + token[5:],
		"Space":           " " + token,
		"Garbage":         "garbage!!",
		"Equals":          "====",
		"OneChar":         "a",
		"NUL":             "\x00",
		"Huge":            strings.Repeat("A", 5000),
		"MACOnly":         base64.RawURLEncoding.EncodeToString(raw[len(raw)-16:]),
		"PayloadOnly":     base64.RawURLEncoding.EncodeToString(raw[:len(raw)-16]),
		"ForgedPayload":   forge(raw, `{"v":1,"s":"x","a":"k000"}`),
		"UnsignedJSON":    base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"s":"","a":"k000"}` + strings.Repeat("\x00", 16))),
		"InvalidUTF8":     "\xff\xfe" + token,
		"OtherAlphabet+/": strings.NewReplacer("-", "+", "_", "/").Replace(token) + "+/",
	}
	for i := range token {
		// Flip every character to another of the alphabet: none may pass
		// (base64 keeps spare bits in the last character, which a lax
		// decoder ignores).
		c := token[i]
		for _, r := range []byte{c ^ 1, c ^ 2, c ^ 4} {
			if !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", rune(r)) {
				continue
			}
			tampered[fmt.Sprintf("Flip%02d-%c", i, r)] = token[:i] + string(r) + token[i+1:]
		}
	}
	t.Run("TamperedToken", func(t *testing.T) {
		t.Parallel()
		for name, tok := range tampered {
			o := o
			o.Token = tok
			_, err := s.List(testContext(t), o)
			if !errors.Is(err, store.ErrInvalidToken) {
				t.Errorf("%s: List(token %q) = %v, want ErrInvalidToken", name, tok, err)
			}
		}
	})

	t.Run("TokenFromAnotherScope", func(t *testing.T) {
		t.Parallel()
		o := o
		o.Token, o.Scope = token, "ListClusters/2"
		_, err := s.List(testContext(t), o)
		wanterr.Is(t, err, store.ErrInvalidToken)
	})

	t.Run("TokenFromAnotherPrefix", func(t *testing.T) {
		t.Parallel()
		other := store.ListOptions{Prefix: "accounts/2/clusters/", Scope: scope, Limit: 10, Token: token}
		_, err := s.List(testContext(t), other)
		wanterr.Is(t, err, store.ErrInvalidToken)
		// And the other way round: a token of a listing whose names look
		// alike, used on this one.
		o2 := newStore(t)
		fill(t, o2, "accounts/2/clusters/", 12)
		tok2 := firstToken(t, o2, store.ListOptions{Prefix: "accounts/2/clusters/", Scope: scope, Limit: 10})
		o := o
		o.Token = tok2
		_, err = s.List(testContext(t), o)
		wanterr.Is(t, err, store.ErrInvalidToken)
	})

	t.Run("TokenFromAnotherKeyspace", func(t *testing.T) {
		// Another root prefix has its own signing key: the same listing's
		// token does not transfer.
		t.Parallel()
		other := newStore(t)
		fill(t, other, prefix, 25)
		foreign := firstToken(t, other, o)
		if foreign == token {
			t.Fatal("two keyspaces sealed equal tokens")
		}
		o := o
		o.Token = foreign
		_, err := s.List(testContext(t), o)
		wanterr.Is(t, err, store.ErrInvalidToken)
	})

	t.Run("ReplicasShareSigningKey", func(t *testing.T) {
		t.Parallel()
		replica := newStoreAt(t, clientFor(t, shared.srv.Endpoints()...), s.Prefix())
		o := o
		o.Token = token
		page, err := replica.List(testContext(t), o)
		if err != nil {
			t.Fatalf("replica refused the token: %v", err)
		}
		if len(page.Items) != 10 || page.Items[0].Name != names[10] {
			t.Fatalf("replica's page starts at %q", page.Items[0].Name)
		}
		// And back: the replica's token on the original.
		o.Token = page.NextToken
		page, err = s.List(testContext(t), o)
		if err != nil {
			t.Fatalf("original refused the replica's token: %v", err)
		}
		if len(page.Items) != 5 || page.Items[0].Name != names[20] {
			t.Fatalf("original's page starts at %q", page.Items[0].Name)
		}
	})
}

func TestNewRace(t *testing.T) {
	// Replicas starting together on an empty keyspace agree on one signing
	// key: any replica continues any other's listing.
	t.Parallel()
	prefix := uniquePrefix(t)
	const n = 6
	stores := make([]*store.Store, n)
	errs := make([]error, n)
	clients := make([]*clientv3.Client, n)
	for i := range clients {
		clients[i] = clientFor(t, shared.srv.Endpoints()...)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = store.New(testContext(t), clients[i], store.Options{Prefix: prefix})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("New %d: %v", i, err)
		}
	}
	fill(t, stores[0], "x/", 3)
	opts := store.ListOptions{Prefix: "x/", Scope: "race", Limit: 1}
	for i, a := range stores {
		tok := firstToken(t, a, opts)
		for j, b := range stores {
			o := opts
			o.Token = tok
			page, err := b.List(testContext(t), o)
			if err != nil {
				t.Fatalf("token of replica %d refused by replica %d: %v", i, j, err)
			}
			if len(page.Items) != 1 || page.Items[0].Name != "k001" {
				t.Fatalf("replica %d continued replica %d's listing at %v", j, i, page.Items)
			}
		}
	}
}

// FuzzListToken: whatever the token, List either refuses it with
// ErrInvalidToken or, for a token this store sealed for this very listing
// (its scope and prefix), continues the listing exactly where that token
// left off: the next items after the one it names, as many as the page
// size asked for now, and a next token only when more remain. A token of
// another listing (another scope, another prefix) is refused. It never
// panics or fails otherwise.
func FuzzListToken(f *testing.F) {
	s := newStore(f)
	names := fill(f, s, "f/", 7)
	fill(f, s, "g/", 7)
	listings := []store.ListOptions{
		{Prefix: "f/", Scope: "fuzz"},
		{Prefix: "f/", Scope: "other"},
		{Prefix: "g/", Scope: "fuzz"},
	}
	// genuine is, for every token a listing's pages sealed, that listing
	// and the index of the name it resumes after.
	type sealed struct{ listing, after int }
	genuine := map[string]sealed{}
	for li, opts := range listings {
		tok, seen := "", 0
		for {
			o := opts
			o.Limit, o.Token = 2, tok
			page, err := s.List(testContext(f), o)
			if err != nil {
				f.Fatal(err)
			}
			seen += len(page.Items)
			if page.NextToken == "" {
				break
			}
			tok = page.NextToken
			genuine[tok] = sealed{li, seen - 1}
			for _, v := range []uint8{0, 1, 2, 3, 4, 5} { // each listing, each page size
				f.Add(tok, v)
			}
		}
	}
	for tok := range genuine {
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		for _, bad := range []string{
			tok[:len(tok)-1], tok + "A", tok[:len(tok)-1] + string(tok[len(tok)-1]^1), tok[:3] + "\n" + tok[3:],
			base64.RawURLEncoding.EncodeToString(raw[:len(raw)-16]), base64.StdEncoding.EncodeToString(raw),
			forge(raw, `{"v":1,"s":"","a":"k003"}`),
		} {
			f.Add(bad, uint8(0))
		}
		break
	}
	for _, tok := range []string{"", "=", "AAAA", strings.Repeat("_", 4097)} {
		f.Add(tok, uint8(0))
	}

	f.Fuzz(func(t *testing.T, token string, variant uint8) {
		li := int(variant) % len(listings)
		o := listings[li]
		o.Limit, o.Token = 2+(int(variant)/len(listings))%2, token
		page, err := s.List(testContext(t), o)
		g, ok := genuine[token]
		switch {
		case err != nil && !errors.Is(err, store.ErrInvalidToken):
			t.Fatalf("List(token %q) = %v, want ErrInvalidToken", token, err)
		case err != nil && token != "" && ok && g.listing == li:
			t.Fatalf("List refused a token it sealed for this listing: %q: %v", token, err)
		case err != nil:
			return
		case token == "":
			g = sealed{li, -1}
		case !ok:
			t.Fatalf("List accepted a token it never sealed: %q", token)
		case g.listing != li:
			t.Fatalf("List (%s %q) accepted a token of listing %s %q: %q", o.Scope, o.Prefix, listings[g.listing].Scope, listings[g.listing].Prefix, token)
		}
		want := names[g.after+1 : min(g.after+1+o.Limit, len(names))]
		var got []string
		for _, kv := range page.Items {
			got = append(got, kv.Name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("token %q (page size %d) continued with %v, want %v", token, o.Limit, got, want)
		}
		if more := g.after+1+o.Limit < len(names); more != (page.NextToken != "") {
			t.Fatalf("token %q (page size %d): next token %q, want one: %v", token, o.Limit, page.NextToken, more)
		}
	})
}

// forge replaces a token's payload and keeps its MAC.
func forge(raw []byte, payload string) string {
	mac := raw[len(raw)-16:]
	return base64.RawURLEncoding.EncodeToString(append([]byte(payload), mac...))
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}
