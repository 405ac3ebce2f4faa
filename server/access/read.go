package access

import (
	"context"
	"errors"
	"fmt"
	"slices"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/store"
)

// entryKey returns the key of the entry of principalArn on cluster c; a
// malformed ARN names no entry.
func entryKey(c *storagev1.ClusterRecord, principalArn string) (string, bool) {
	p, err := ParsePrincipal(principalArn)
	if err != nil {
		return "", false
	}
	return store.AccessEntryKey(c.GetUid(), p.Canonical()), true
}

// get reads the entry for principalArn on cluster c and its mod revision,
// linearizably: a record of the caller's own.
func (s *Service) get(ctx context.Context, c *storagev1.ClusterRecord, principalArn string) (*storagev1.AccessEntryRecord, int64, error) {
	return s.getWith(ctx, store.GetRecord[*storagev1.AccessEntryRecord], c, principalArn)
}

func newRecord() *storagev1.AccessEntryRecord { return &storagev1.AccessEntryRecord{} }

func (s *Service) getWith(ctx context.Context, read store.RecordReader[*storagev1.AccessEntryRecord],
	c *storagev1.ClusterRecord, principalArn string,
) (*storagev1.AccessEntryRecord, int64, error) {
	key, ok := entryKey(c, principalArn)
	if !ok {
		return nil, 0, entryNotFound(c.GetName())
	}
	rec, rev, err := read(ctx, s.store, key, newRecord)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, entryNotFound(c.GetName()).WithCause(err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("cluster %q access entry %q: %w", c.GetName(), principalArn, err)
	}
	if rec.GetPrincipalArn() != principalArn {
		// The same user or role under another path is another ARN: it
		// names no entry (the key is path-free so that one role cannot
		// have two entries).
		return nil, 0, entryNotFound(c.GetName())
	}
	return rec, rev, nil
}

// sameEntry refuses an update of the entry stored at a principal's key
// when the request named it by another path.
func sameEntry(cluster string, r *storagev1.AccessEntryRecord, principalArn string) error {
	if r.GetPrincipalArn() != principalArn {
		return entryNotFound(cluster)
	}
	return nil
}

// Describe returns one entry of the caller's cluster.
func (s *Service) Describe(ctx context.Context, cluster, principalArn string) (*storagev1.AccessEntryRecord, error) {
	_, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return nil, err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.FromView)
	if err != nil {
		return nil, err
	}
	c := sc.Cluster
	// From the read view: the record may be shared with other readers and
	// is only converted or copied from, never changed.
	rec, _, err := s.getWith(ctx, store.ReadShared[*storagev1.AccessEntryRecord], c, principalArn)
	return rec, err
}

// List returns one page of the principal ARNs of the caller's cluster's
// entries, only those with policyArn associated when it is set. A filtered
// page may hold fewer than maxResults entries (even none) and still have a
// nextToken: the filter runs over one page of the store.
func (s *Service) List(ctx context.Context, cluster, policyArn string, maxResults *int32, nextToken string) ([]string, string, error) {
	_, ref, err := clusterscope.Ref(ctx, cluster)
	if err != nil {
		return nil, "", err
	}
	sc, err := s.scopes.Read(ctx, ref, clusterscope.FromView)
	if err != nil {
		return nil, "", err
	}
	c := sc.Cluster
	if policyArn != "" {
		if _, ok := s.policies.Lookup(policyArn); !ok {
			return nil, "", invalid(cluster, "The associatedPolicyArn %s is not an access policy.", clip(policyArn))
		}
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", errdefs.WithField(err, "clusterName", cluster)
	}
	page, err := s.store.ReadList(ctx, store.ListOptions{
		Prefix: store.AccessEntriesPrefix(c.GetUid()),
		// The filter is part of the scope: a token of a filtered listing
		// does not continue another.
		Scope: "ListAccessEntries/" + c.GetUid() + "/" + policyArn,
		Limit: limit,
		Token: nextToken,
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return nil, "", paging.InvalidToken(err).WithField("clusterName", cluster)
		}
		return nil, "", fmt.Errorf("list access entries of cluster %q: %w", cluster, err)
	}
	arns := make([]string, 0, len(page.Items))
	for _, kv := range page.Items {
		rec := &storagev1.AccessEntryRecord{}
		if err := store.Decode(kv.Value, rec); err != nil {
			return nil, "", fmt.Errorf("list access entries of cluster %q: %s: %w", cluster, kv.Key, err)
		}
		if policyArn != "" && !slices.ContainsFunc(rec.GetPolicies(), func(p *storagev1.AssociatedPolicyRecord) bool {
			return p.GetPolicyArn() == policyArn
		}) {
			continue
		}
		arns = append(arns, rec.GetPrincipalArn())
	}
	return arns, page.NextToken, nil
}
