package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Status reports a cluster's delivery as etcd holds it: executor, live
// sessions (with what each applied), the desired set's version and digest,
// and per add-on the desired generation against the last accepted report.
func (s *Service) Status(ctx context.Context, ref *controlv1.ClusterRef) (*controlv1.GetDeliveryStatusResponse, error) {
	c, _, err := s.clusters.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	sn, recs, err := s.readRecords(ctx, c.GetUid(), c.GetAccountId(), c.GetName(), nil, true)
	if err != nil {
		return nil, err
	}
	out := &controlv1.GetDeliveryStatusResponse{ClusterUid: c.GetUid(), DesiredVersion: sn.desired.GetVersion(), DesiredDigest: sn.desired.GetDigest()}
	if e := sn.executor; e != nil {
		out.Executor = executorToAPI(e)
	}
	// Sessions and add-ons with their values, from the snapshot's own
	// transaction.
	for _, q := range []struct {
		kvs  []*mvccpb.KeyValue
		each func([]byte) error
	}{
		{recs.sessions, func(b []byte) error {
			r := &storagev1.AgentSessionRecord{}
			if err := store.Decode(b, r); err != nil {
				return err
			}
			out.Sessions = append(out.Sessions, &controlv1.AgentSession{
				InstanceId: r.GetInstanceId(), Replica: r.GetReplica(), BootId: r.GetBootId(), AgentVersion: r.GetAgentVersion(),
				AgentCommit: r.GetAgentCommit(), AgentContractBaseline: r.GetAgentContractBaseline(),
				ConnectedAt: r.GetConnectedAt(), AckedVersion: r.GetAckedVersion(), AckedDigest: r.GetAckedDigest(), AckedAt: r.GetAckedAt(),
			})
			return nil
		}},
		{recs.addons, func(b []byte) error {
			r := &storagev1.AddonRecord{}
			if err := store.Decode(b, r); err != nil {
				return err
			}
			o := r.GetObserved()
			a := &controlv1.AddonDelivery{Name: r.GetName(), Generation: r.GetGeneration(), ObservedGeneration: o.GetGeneration(),
				LastReportAt: o.GetObservedAt(), ReportedEpoch: o.GetExecutorEpoch(), ReportedBy: o.GetInstanceId()}
			if o.GetPhase() != storagev1.AddonPhase_ADDON_PHASE_UNSPECIFIED {
				a.ObservedPhase = strings.TrimPrefix(o.GetPhase().String(), "ADDON_PHASE_")
			}
			out.Addons = append(out.Addons, a)
			return nil
		}},
	} {
		for _, kv := range q.kvs {
			if err := q.each(kv.Value); err != nil {
				return nil, fmt.Errorf("delivery status of cluster %q: %s: %w", c.GetName(), kv.Key, err)
			}
		}
	}
	return out, nil
}

// Drain fences a cluster's executor: its stream tells it to stop, and a
// successor is assigned once it acknowledges (or its session expires).
func (s *Service) Drain(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ExecutorRecord, error) {
	c, _, err := s.clusters.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	e := &storagev1.ExecutorRecord{}
	_, err = store.Update(ctx, s.store, store.ExecutorKey(c.GetUid()), e, func(r *storagev1.ExecutorRecord, _ *store.Txn) error {
		if !r.GetDraining() {
			r.Draining, r.FenceAcked = true, false
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.InvalidRequest("Cluster %s has no executor to drain.", c.GetName()).WithField("clusterName", c.GetName())
	}
	if err != nil {
		return nil, fmt.Errorf("drain the executor of cluster %q: %w", c.GetName(), err)
	}
	s.log.InfoContext(ctx, "executor draining", "cluster", c.GetName(), "cluster_uid", c.GetUid(), "instance", e.GetInstanceId(), "epoch", e.GetEpoch())
	return e, nil
}

func executorToAPI(e *storagev1.ExecutorRecord) *controlv1.DeliveryExecutor {
	return &controlv1.DeliveryExecutor{InstanceId: e.GetInstanceId(), Epoch: e.GetEpoch(), Since: e.GetSince(), Reason: e.GetReason(), Draining: e.GetDraining()}
}
