package access

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/saltbush/saltbush/errdefs"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/server/paging"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

const (
	opCreateAccessEntry = "CreateAccessEntry"
	opUpdateAccessEntry = "UpdateAccessEntry"
)

// Create records a new access entry, exclusively: of concurrent creates
// for one principal exactly one wins (the others get
// ResourceInUseException), and the write is guarded by the cluster
// record's revision. With a clientRequestToken the request is idempotent.
func (s *Service) Create(ctx context.Context, req *eksv1.CreateAccessEntryRequest) (*storagev1.AccessEntryRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	cn := req.GetClusterName()
	tok, err := idempotency.New(who.AccountID, opCreateAccessEntry, req)
	if err != nil {
		return nil, withCluster(err, cn)
	}
	var rec *storagev1.AccessEntryRecord
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cn, true)
		if err != nil {
			return err
		}
		var p Principal
		if rec, p, err = s.newRecord(ctx, who, c, req); err != nil {
			return err
		}
		key := store.AccessEntryKey(c.GetUid(), p.Canonical())
		txn := store.NewTxn().
			Create(key, rec).
			RequireModRevision(store.ClusterKey(who.AccountID, cn), clusterRev)
		tok.Remember(txn, key, rec.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
		_, err = s.store.Commit(ctx, txn)
		if errors.Is(err, store.ErrExists) {
			if prior, rerr := s.replay(ctx, tok, cn); prior != nil || rerr != nil {
				rec = prior
				return rerr
			}
			return errdefs.ResourceInUse("The specified access entry resource is already in use on this cluster.").
				WithField("clusterName", cn).WithCause(err)
		}
		return err
	})
	if err != nil {
		return nil, wrapUnlessAPI(err, "create access entry for %q on cluster %q", req.GetPrincipalArn(), cn)
	}
	s.log.InfoContext(ctx, "access entry created", "account", who.AccountID, "cluster", cn,
		"principal", rec.GetPrincipalArn(), "type", TypeName(rec.GetType()), "uid", rec.GetUid())
	return rec, nil
}

// replay answers a request whose token was used before: the entry it
// created or changed, if that entry still exists; an error for a token
// used with different parameters; nil, nil for an unknown token.
func (s *Service) replay(ctx context.Context, tok idempotency.Token, cluster string) (*storagev1.AccessEntryRecord, error) {
	prior, err := tok.Lookup(ctx, s.store)
	if err != nil {
		return nil, withCluster(err, cluster)
	}
	if prior == nil {
		return nil, nil
	}
	rec := &storagev1.AccessEntryRecord{}
	_, err = s.store.Get(ctx, prior.GetResourceKey(), rec)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the access entry of an earlier request: %w", err)
	}
	if err != nil || rec.GetUid() != prior.GetResourceUid() {
		return nil, errdefs.ResourceInUse(
			"The clientRequestToken was already used for an access entry that no longer exists.").
			WithField("clusterName", cluster)
	}
	return rec, nil
}

// newRecord validates a CreateAccessEntry request and builds its record.
func (s *Service) newRecord(ctx context.Context, who identity.Caller, c *storagev1.ClusterRecord, req *eksv1.CreateAccessEntryRequest) (*storagev1.AccessEntryRecord, Principal, error) {
	cn := c.GetName()
	p, err := ParsePrincipal(req.GetPrincipalArn())
	if err != nil {
		return nil, p, invalid(cn, "%v", err)
	}
	t, err := parseType(cn, req.GetType())
	if err != nil {
		return nil, p, err
	}
	groups := req.GetKubernetesGroups()
	username := req.GetUsername()
	if t == storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD {
		if username != "" {
			if err := validateUsername(cn, username); err != nil {
				return nil, p, err
			}
		}
		if groups, err = validateGroups(cn, groups); err != nil {
			return nil, p, err
		}
	} else {
		// Nodes authenticate as nodes: AWS sets their username and groups.
		if username != "" || len(groups) > 0 {
			return nil, p, invalid(cn, "The username and kubernetesGroups can only be set on access entries of type STANDARD.")
		}
		if p.Kind != "role" || p.Account != who.AccountID {
			return nil, p, invalid(cn, "The principalArn of a %s access entry must be an IAM role of account %s.", TypeName(t), who.AccountID)
		}
		groups = generatedGroups(t)
	}
	if username == "" {
		username = generatedUsername(t, p)
	}
	if err := tagging.Validate(req.GetTags()); err != nil {
		return nil, p, invalid(cn, "%v.", err)
	}
	if p.Kind != "root" {
		ok, err := s.principals.PrincipalExists(ctx, p.ARN)
		if err != nil {
			return nil, p, fmt.Errorf("look up principal %s: %w", p.ARN, err)
		}
		if !ok {
			return nil, p, invalid(cn, "The specified principalArn is invalid: invalid principal.")
		}
	}
	now := timestamppb.New(s.cfg.Now())
	uid := uuid.NewString()
	return &storagev1.AccessEntryRecord{
		ClusterUid:         c.GetUid(),
		AccountId:          who.AccountID,
		ClusterName:        cn,
		PrincipalArn:       p.ARN,
		Uid:                uid,
		Arn:                s.ARN(who.AccountID, cn, p, uid),
		Type:               t,
		Username:           username,
		KubernetesGroups:   groups,
		Tags:               req.GetTags(),
		CreatedAt:          now,
		ModifiedAt:         now,
		ClientRequestToken: req.GetClientRequestToken(),
	}, p, nil
}

// entryKey returns the key of the entry of principalArn on cluster c; a
// malformed ARN names no entry.
func entryKey(c *storagev1.ClusterRecord, principalArn string) (string, bool) {
	p, err := ParsePrincipal(principalArn)
	if err != nil {
		return "", false
	}
	return store.AccessEntryKey(c.GetUid(), p.Canonical()), true
}

// get reads the entry for principalArn on cluster c and its mod revision.
func (s *Service) get(ctx context.Context, c *storagev1.ClusterRecord, principalArn string) (*storagev1.AccessEntryRecord, int64, error) {
	key, ok := entryKey(c, principalArn)
	if !ok {
		return nil, 0, entryNotFound(c.GetName())
	}
	rec := &storagev1.AccessEntryRecord{}
	rev, err := s.store.Get(ctx, key, rec)
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
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	c, _, err := s.cluster(ctx, who, cluster, false)
	if err != nil {
		return nil, err
	}
	rec, _, err := s.get(ctx, c, principalArn)
	return rec, err
}

// List returns one page of the principal ARNs of the caller's cluster's
// entries, only those with policyArn associated when it is set. A filtered
// page may hold fewer than maxResults entries (even none) and still have a
// nextToken: the filter runs over one page of the store.
func (s *Service) List(ctx context.Context, cluster, policyArn string, maxResults *int32, nextToken string) ([]string, string, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, "", err
	}
	c, _, err := s.cluster(ctx, who, cluster, false)
	if err != nil {
		return nil, "", err
	}
	if policyArn != "" {
		if _, ok := s.policies.Lookup(policyArn); !ok {
			return nil, "", invalid(cluster, "The associatedPolicyArn %s is not an access policy.", clip(policyArn))
		}
	}
	limit, err := paging.Limit(maxResults)
	if err != nil {
		return nil, "", withCluster(err, cluster)
	}
	page, err := s.store.List(ctx, store.ListOptions{
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

// Update changes a STANDARD entry's username and groups by compare and
// swap. modifiedAt moves only when something changed; an absent field is
// left as it is, and an empty group list removes every group.
func (s *Service) Update(ctx context.Context, req *eksv1.UpdateAccessEntryRequest) (*storagev1.AccessEntryRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	cn := req.GetClusterName()
	var groups []string
	setGroups := req.GetKubernetesGroups() != nil
	if setGroups {
		for _, v := range req.GetKubernetesGroups().GetValues() {
			if _, isString := v.GetKind().(*structpb.Value_StringValue); !isString {
				return nil, invalid(cn, "kubernetesGroups must be a list of strings.")
			}
			groups = append(groups, v.GetStringValue())
		}
		if groups, err = validateGroups(cn, groups); err != nil {
			return nil, err
		}
	}
	if req.Username != nil {
		if req.GetUsername() == "" {
			// Kubernetes needs a name for every user; "" is not "keep".
			return nil, invalid(cn, "The username must be 1 to %d characters.", maxUsernameLen)
		}
		if err := validateUsername(cn, req.GetUsername()); err != nil {
			return nil, err
		}
	}
	tok, err := idempotency.New(who.AccountID, opUpdateAccessEntry, req)
	if err != nil {
		return nil, withCluster(err, cn)
	}
	if prior, err := s.replay(ctx, tok, cn); prior != nil || err != nil {
		return prior, err
	}
	rec := &storagev1.AccessEntryRecord{}
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cn, true)
		if err != nil {
			return err
		}
		key, ok := entryKey(c, req.GetPrincipalArn())
		if !ok {
			return entryNotFound(cn)
		}
		_, err = store.Update(ctx, s.store, key, rec, func(r *storagev1.AccessEntryRecord, txn *store.Txn) error {
			if err := sameEntry(cn, r, req.GetPrincipalArn()); err != nil {
				return err
			}
			if r.GetType() != storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD && (setGroups || req.Username != nil) {
				return standardOnly(cn)
			}
			changed := false
			if setGroups && !slices.Equal(groups, r.GetKubernetesGroups()) {
				r.KubernetesGroups, changed = groups, true
			}
			if req.Username != nil && req.GetUsername() != r.GetUsername() {
				r.Username, changed = req.GetUsername(), true
			}
			if changed {
				r.ModifiedAt = timestamppb.New(s.cfg.Now())
			}
			txn.RequireModRevision(store.ClusterKey(who.AccountID, cn), clusterRev)
			tok.Remember(txn, key, r.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
			return nil
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return entryNotFound(cn).WithCause(err)
		case errors.Is(err, store.ErrExists):
			// The token was used a moment ago by a concurrent request.
			prior, rerr := s.replay(ctx, tok, cn)
			if prior != nil {
				proto.Reset(rec)
				proto.Merge(rec, prior)
			}
			if rerr != nil || prior != nil {
				return rerr
			}
		}
		return err
	})
	if err != nil {
		return nil, wrapUnlessAPI(err, "update access entry %q of cluster %q", req.GetPrincipalArn(), cn)
	}
	return rec, nil
}

// Delete removes an entry and its associations, guarded by the entry's
// and the cluster's revisions.
func (s *Service) Delete(ctx context.Context, cluster, principalArn string) error {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return err
	}
	err = store.RetryOnConflict(ctx, func(bool) error {
		c, clusterRev, err := s.cluster(ctx, who, cluster, true)
		if err != nil {
			return err
		}
		rec, rev, err := s.get(ctx, c, principalArn)
		if err != nil {
			return err
		}
		key, _ := entryKey(c, principalArn)
		_, err = s.store.Commit(ctx, store.NewTxn().
			Delete(key, rev).
			RequireModRevision(store.ClusterKey(who.AccountID, cluster), clusterRev))
		if err == nil {
			s.log.InfoContext(ctx, "access entry deleted", "account", who.AccountID, "cluster", cluster,
				"principal", rec.GetPrincipalArn(), "uid", rec.GetUid())
		}
		return err
	})
	return wrapUnlessAPI(err, "delete access entry %q of cluster %q", principalArn, cluster)
}
