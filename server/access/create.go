package access

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/clusterscope"
	"github.com/saltbush/saltbush/server/idempotency"
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
	cn := req.GetClusterName()
	who, ref, err := clusterscope.Ref(ctx, cn)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opCreateAccessEntry, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", cn)
	}
	var rec *storagev1.AccessEntryRecord
	err = s.scopes.Create(ctx, s.store, ref, clusterscope.Creation{
		Build: func(ctx context.Context, sc clusterscope.Scope) (*store.Txn, error) {
			r, p, err := s.newRecord(ctx, who, sc.Cluster, req)
			if err != nil {
				return nil, err
			}
			rec = r
			key := store.AccessEntryKey(sc.UID(), p.Canonical())
			txn := store.NewTxn().Create(key, rec)
			tok.Remember(txn, key, rec.GetUid(), s.cfg.IdempotencyTTL, s.cfg.Now())
			return txn, nil
		},
		Replay: func(ctx context.Context, _ clusterscope.Scope) (bool, error) {
			rec = &storagev1.AccessEntryRecord{}
			return s.replay(ctx, tok, cn, rec)
		},
		Exists: func(_ context.Context, _ clusterscope.Scope, err error) error {
			return errdefs.ResourceInUse("The specified access entry resource is already in use on this cluster.").
				WithField("clusterName", cn).WithCause(err)
		},
	})
	if err != nil {
		return nil, errdefs.Wrap(err, "create access entry for %q on cluster %q", req.GetPrincipalArn(), cn)
	}
	s.log.InfoContext(ctx, "access entry created", "account", who.AccountID, "cluster", cn,
		"principal", rec.GetPrincipalArn(), "type", TypeName(rec.GetType()), "uid", rec.GetUid())
	return rec, nil
}

// replay reads into rec the entry an earlier request with tok created or
// changed (idempotency.Replay): found false for an unknown token.
func (s *Service) replay(ctx context.Context, tok idempotency.Token, cluster string, rec *storagev1.AccessEntryRecord) (bool, error) {
	found, err := idempotency.Replay(ctx, s.store, tok, rec, (*storagev1.AccessEntryRecord).GetUid,
		errdefs.ResourceInUse("The clientRequestToken was already used for an access entry that no longer exists."))
	return found, errdefs.WithField(err, "clusterName", cluster)
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
