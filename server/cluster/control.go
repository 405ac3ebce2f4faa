package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// The control operations below are called by internal services (the
// provisioner), which name the account explicitly.

var instancePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (s *Service) checkRef(ref *controlv1.ClusterRef) error {
	if ref == nil {
		return errdefs.InvalidParameter("cluster is required.")
	}
	if err := identity.ValidateAccountID(ref.GetAccountId()); err != nil {
		return errdefs.InvalidParameter("%v.", err)
	}
	return validateName(ref.GetName())
}

// Get returns the cluster ref names (and, if ref has a uid, only that
// incarnation): a record of the caller's own.
func (s *Service) Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error) {
	return s.get(ctx, ref, store.GetRecord[*storagev1.ClusterRecord])
}

// Read is Get for answering a caller: from the replica's read view, which
// holds every write this replica made (store.ReadShared), else
// linearizable. The record may be shared with other readers: the caller
// must not change it.
func (s *Service) Read(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error) {
	return s.get(ctx, ref, store.ReadShared[*storagev1.ClusterRecord])
}

// GetSerializable is Get with a read that may be stale (the read view, or
// a serializable read of etcd): cheaper.
// A caller must confirm what it read: guard its write with the returned mod
// revision (a stale read then fails the compare and the caller retries with
// Get), and re-read a miss with Get. Like Read's, the record may be shared
// and must not be changed.
func (s *Service) GetSerializable(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error) {
	return s.get(ctx, ref, store.GetSerializableShared[*storagev1.ClusterRecord])
}

func newRecord() *storagev1.ClusterRecord { return &storagev1.ClusterRecord{} }

func (s *Service) get(ctx context.Context, ref *controlv1.ClusterRef,
	read store.RecordReader[*storagev1.ClusterRecord],
) (*storagev1.ClusterRecord, int64, error) {
	if err := s.checkRef(ref); err != nil {
		return nil, 0, err
	}
	rec, rev, err := read(ctx, s.store, store.ClusterKey(ref.GetAccountId(), ref.GetName()), newRecord)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, 0, notFound(ref.GetName()).WithCause(err)
		}
		return nil, 0, fmt.Errorf("get cluster %q: %w", ref.GetName(), err)
	}
	if ref.GetUid() != "" && ref.GetUid() != rec.GetUid() {
		return nil, 0, errdefs.NotFound("No cluster found for name: %s with id %s.", ref.GetName(), ref.GetUid()).
			WithField("clusterName", ref.GetName())
	}
	return rec, rev, nil
}

// mutate applies change to the cluster ref names with store.Update,
// enforcing ref's uid on every attempt.
func (s *Service) mutate(ctx context.Context, ref *controlv1.ClusterRef, op string,
	change func(c *storagev1.ClusterRecord) error,
) (*storagev1.ClusterRecord, error) {
	if err := s.checkRef(ref); err != nil {
		return nil, err
	}
	rec := &storagev1.ClusterRecord{}
	_, err := store.Update(ctx, s.store, store.ClusterKey(ref.GetAccountId(), ref.GetName()), rec,
		func(c *storagev1.ClusterRecord, txn *store.Txn) error {
			if ref.GetUid() != "" && ref.GetUid() != c.GetUid() {
				return errdefs.NotFound("No cluster found for name: %s with id %s.", ref.GetName(), ref.GetUid()).
					WithField("clusterName", ref.GetName())
			}
			before := proto.Clone(c).(*storagev1.ClusterRecord)
			if err := change(c); err != nil {
				return err
			}
			if !proto.Equal(before, c) {
				c.ModifiedAt = timestamppb.New(s.cfg.Now())
			}
			return s.fenceDelivery(ctx, txn, before, c)
		})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(ref.GetName()).WithCause(err)
		}
		return nil, fmt.Errorf("%s on cluster %q: %w", op, ref.GetName(), err)
	}
	s.log.InfoContext(ctx, "cluster changed", "op", op, "account", ref.GetAccountId(), "cluster", ref.GetName(),
		"uid", rec.GetUid(), "status", StatusName(rec.GetStatus()))
	return rec, nil
}

// fenceDelivery ends the cluster's delivery executor in the transaction
// that turns it DELETING or FAILED: the executor record becomes one that
// names no instance but keeps the epoch (so a cluster made ACTIVE again
// continues at a higher epoch). From that commit on no report is accepted
// (reports compare the executor record) and nobody is assigned. The
// record is read here and its revision checked in the transaction; the
// cluster record changes too, so a lost race is retried on fresh state.
func (s *Service) fenceDelivery(ctx context.Context, txn *store.Txn, before, after *storagev1.ClusterRecord) error {
	ends := func(st storagev1.ClusterStatus) bool {
		return st == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING || st == storagev1.ClusterStatus_CLUSTER_STATUS_FAILED
	}
	if !ends(after.GetStatus()) || ends(before.GetStatus()) {
		return nil
	}
	key := store.ExecutorKey(after.GetUid())
	e := &storagev1.ExecutorRecord{}
	rev, err := s.store.Get(ctx, key, e)
	switch {
	case errors.Is(err, store.ErrNotFound):
		txn.RequireAbsent(key)
		return nil
	case err != nil:
		return fmt.Errorf("fence the delivery of cluster %q: %w", after.GetName(), err)
	}
	txn.Update(key, &storagev1.ExecutorRecord{Epoch: e.GetEpoch(), Since: timestamppb.New(s.cfg.Now()),
		Reason: "cluster " + StatusName(after.GetStatus())}, rev)
	return nil
}

func refusedWhileDeleting(c *storagev1.ClusterRecord, what string) error {
	if c.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING {
		return errdefs.InvalidRequest("Cannot %s: cluster %s is being deleted.", what, c.GetName()).
			WithField("clusterName", c.GetName())
	}
	return nil
}

// AddMember records instance as a control-plane member.
func (s *Service) AddMember(ctx context.Context, ref *controlv1.ClusterRef, instance string) (*storagev1.ClusterRecord, error) {
	if !instancePattern.MatchString(instance) {
		return nil, errdefs.InvalidParameter("instanceId %q must be 1 to 128 characters of A-Z a-z 0-9 . _ -.", instance)
	}
	return s.mutate(ctx, ref, "AddMember", func(c *storagev1.ClusterRecord) error {
		if err := refusedWhileDeleting(c, "add member "+instance); err != nil {
			return err
		}
		for _, m := range c.GetMembers() {
			if m.GetInstanceId() == instance {
				return nil
			}
		}
		c.Members = append(c.Members, &storagev1.ClusterMember{InstanceId: instance, AddedAt: timestamppb.New(s.cfg.Now())})
		return nil
	})
}

// RemoveMember forgets instance.
func (s *Service) RemoveMember(ctx context.Context, ref *controlv1.ClusterRef, instance string) (*storagev1.ClusterRecord, error) {
	if instance == "" {
		return nil, errdefs.InvalidParameter("instanceId is required.")
	}
	return s.mutate(ctx, ref, "RemoveMember", func(c *storagev1.ClusterRecord) error {
		c.Members = slices.DeleteFunc(c.Members, func(m *storagev1.ClusterMember) bool {
			return m.GetInstanceId() == instance
		})
		return nil
	})
}

// SetStatus marks the cluster ACTIVE or FAILED and records what the
// provisioner reports about its control plane (validateControlPlane,
// applyControlPlane). ACTIVE needs an endpoint and a CA after the call.
func (s *Service) SetStatus(ctx context.Context, req *controlv1.SetStatusRequest) (*storagev1.ClusterRecord, error) {
	ref, st, reason := req.GetCluster(), req.GetStatus(), req.GetReason()
	var target storagev1.ClusterStatus
	switch st {
	case controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE:
		target = storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE
	case controlv1.ClusterStatus_CLUSTER_STATUS_FAILED:
		target = storagev1.ClusterStatus_CLUSTER_STATUS_FAILED
	default:
		return nil, errdefs.InvalidParameter("status must be ACTIVE or FAILED, got %s.", st)
	}
	if len(reason) > 1024 {
		return nil, errdefs.InvalidParameter("reason is longer than 1024 characters.")
	}
	if err := validateControlPlane(req); err != nil {
		return nil, err
	}
	return s.mutate(ctx, ref, "SetStatus", func(c *storagev1.ClusterRecord) error {
		if err := refusedWhileDeleting(c, "set status "+StatusName(target)); err != nil {
			return err
		}
		// An UPDATING cluster has a VersionUpdate in progress: its outcome is
		// reported with CompleteUpdate, which ends the update and sets the
		// status in one transaction. SetStatus here would leave the update
		// InProgress forever.
		if c.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING {
			return errdefs.InvalidRequest("Cannot set status %s: cluster %s has a version update in progress; "+
				"report its outcome with CompleteUpdate.", StatusName(target), c.GetName()).
				WithField("clusterName", c.GetName())
		}
		c.Status = target
		c.StatusReason = ""
		if target == storagev1.ClusterStatus_CLUSTER_STATUS_FAILED {
			c.StatusReason = reason
		}
		applyControlPlane(c, req)
		if target == storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE {
			return readyToServe(c)
		}
		return nil
	})
}

// FinalizeDeletion purges a DELETING cluster: its record and every key under
// its uid go in one transaction, guarded by the record's mod revision so a
// concurrent change (or a recreated cluster) is never purged by mistake.
func (s *Service) FinalizeDeletion(ctx context.Context, ref *controlv1.ClusterRef) (int64, error) {
	for attempt := 0; attempt < 8; attempt++ {
		rec, rev, err := s.Get(ctx, ref)
		if err != nil {
			return 0, err
		}
		if rec.GetStatus() != storagev1.ClusterStatus_CLUSTER_STATUS_DELETING {
			return 0, errdefs.InvalidRequest("Cluster %s is %s; only a DELETING cluster can be finalized.",
				rec.GetName(), StatusName(rec.GetStatus())).WithField("clusterName", rec.GetName())
		}
		key := store.ClusterKey(rec.GetAccountId(), rec.GetName())
		res, err := s.store.Commit(ctx, store.NewTxn().
			Delete(key, rev).
			DeleteRange(store.ClusterChildrenPrefix(rec.GetUid())))
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("finalize deletion of cluster %q: %w", rec.GetName(), err)
		}
		s.log.InfoContext(ctx, "cluster purged", "account", rec.GetAccountId(), "cluster", rec.GetName(),
			"uid", rec.GetUid(), "keys", res.Deleted)
		return res.Deleted, nil
	}
	return 0, fmt.Errorf("finalize deletion of cluster %q: %w", ref.GetName(), store.ErrConflict)
}
