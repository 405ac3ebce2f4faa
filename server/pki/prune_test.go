package pki

import (
	"errors"
	"testing"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

func TestPruneExpired(t *testing.T) {
	a, st := startedAuthority(t)
	ctx := ctxT(t)
	issue := func(ttl time.Duration) string {
		t.Helper()
		_, _, serial, err := a.IssueLocal(ctx, identity.ServiceID("svc"), ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Revoke(ctx, serial, "test"); err != nil {
			t.Fatal(err)
		}
		return serial
	}
	short, long := issue(time.Hour), issue(72*time.Hour)
	// Revoke returns once the store has the record; the view learns of it
	// from its watch.
	eventually(t, "the view sees both revocations", func() bool { return a.Revoked(short) && a.Revoked(long) })

	// Now: nothing has expired.
	if n, err := a.PruneExpired(ctx); err != nil || n != 0 {
		t.Fatalf("prune with nothing expired: %d %v", n, err)
	}
	// Two days on: the 1-hour certificate expired more than a day ago, the
	// 72-hour one has not.
	later := newAuthority(t, st, Config{Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	n, err := later.PruneExpired(ctx)
	if err != nil || n != 2 {
		t.Fatalf("prune two days on: %d %v, want the issued and revoked records of one certificate", n, err)
	}
	for _, k := range []string{issuedKey(short), revokedKey(short)} {
		if _, err := st.Get(ctx, k, &storagev1.IssuedCertificateRecord{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s kept: %v", k, err)
		}
	}
	if _, err := st.Get(ctx, revokedKey(long), &storagev1.RevokedCertificateRecord{}); err != nil {
		t.Errorf("revocation of an unexpired certificate pruned: %v", err)
	}
	// The view follows the store's deletes too; the live certificate stays
	// revoked.
	eventually(t, "the view drops the pruned revocation", func() bool { return !a.Revoked(short) })
	if !a.Revoked(long) {
		t.Error("unexpired certificate no longer revoked")
	}
}
