package pki

import (
	"context"
	"fmt"
	"time"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// pruneGrace is how long after a certificate's NotAfter its issued and
// revoked records are kept: past it Go's verification refuses the
// certificate on its own, so the records decide nothing (the grace covers
// clock skew between replicas).
const pruneGrace = 24 * time.Hour

// PruneExpired deletes the issued and revoked records of certificates that
// expired more than a day ago, so neither list grows forever. Each delete
// compares the record's revision; any replica may run it at any time.
func (a *Authority) PruneExpired(ctx context.Context) (int, error) {
	cutoff := a.now().Add(-pruneGrace)
	pruned := 0
	for _, p := range []struct {
		prefix   string
		notAfter func([]byte) (time.Time, error)
	}{
		{issuedPrefix, func(b []byte) (time.Time, error) {
			rec := &storagev1.IssuedCertificateRecord{}
			err := store.Decode(b, rec)
			return rec.GetNotAfter().AsTime(), err
		}},
		{revokedPrefix, func(b []byte) (time.Time, error) {
			rec := &storagev1.RevokedCertificateRecord{}
			err := store.Decode(b, rec)
			return rec.GetNotAfter().AsTime(), err
		}},
	} {
		token := ""
		for {
			page, err := a.store.List(ctx, store.ListOptions{Prefix: p.prefix, Scope: "pki-prune", Token: token})
			if err != nil {
				return pruned, fmt.Errorf("prune %s: %w", p.prefix, err)
			}
			for _, kv := range page.Items {
				notAfter, err := p.notAfter(kv.Value)
				if err != nil {
					return pruned, fmt.Errorf("prune %s: %w", kv.Key, err)
				}
				if notAfter.Before(cutoff) {
					// One key per txn: a record changed meanwhile fails
					// only its own compare.
					if _, err := a.store.Commit(ctx, store.NewTxn().Delete(kv.Key, kv.ModRev)); err == nil {
						pruned++
					}
				}
			}
			if page.NextToken == "" {
				break
			}
			token = page.NextToken
		}
	}
	return pruned, nil
}
