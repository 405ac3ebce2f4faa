package addon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// Report is one guest observation of one add-on generation.
type Report struct {
	ClusterUID string
	AddonName  string
	// AddonUID is the incarnation the guest rendered: a report for an
	// earlier incarnation of a recreated add-on (whose generations restart
	// at 1) must not settle the new one.
	AddonUID      string
	Generation    int64
	Phase         storagev1.AddonPhase
	Issues        []*storagev1.AddonIssue
	ExecutorEpoch int64
	InstanceID    string
}

// Fence adds the delivery path's compares (the reporter is still the
// cluster's executor at this epoch) to a report's transaction, so the
// report applies only if they hold at commit time. nil adds none.
type Fence func(txn *store.Txn)

// Why a report changed nothing (the metric's result label).
const (
	ReportAccepted         = "accepted"
	ReportStaleGeneration  = "stale_generation"
	ReportStaleIncarnation = "stale_incarnation"
	ReportUnknownAddon     = "unknown_addon"
	ReportStaleEpoch       = "stale_epoch"
)

// ReportResult says what a report did.
type ReportResult struct {
	Accepted bool
	// Reason is ReportAccepted or why the report changed nothing.
	Reason string
	// Addon is the record after the report; nil when the report removed it
	// or named no add-on.
	Addon *storagev1.AddonRecord
}

func validateReport(r Report) error {
	switch {
	case r.ClusterUID == "" || r.AddonName == "" || r.AddonUID == "":
		return errdefs.InvalidParameter("cluster uid, addon name and addon uid are required.")
	case !namePattern.MatchString(r.AddonName):
		return errdefs.InvalidParameter("addon name %q is not valid.", r.AddonName)
	case r.Generation < 1:
		return errdefs.InvalidParameter("generation must be positive, got %d.", r.Generation)
	}
	switch r.Phase {
	case storagev1.AddonPhase_ADDON_PHASE_APPLIED, storagev1.AddonPhase_ADDON_PHASE_READY,
		storagev1.AddonPhase_ADDON_PHASE_FAILED, storagev1.AddonPhase_ADDON_PHASE_REMOVED:
	default:
		return errdefs.InvalidParameter("phase %s is not a report phase.", r.Phase)
	}
	if len(r.Issues) > maxReportIssues {
		return errdefs.InvalidParameter("a report carries at most %d issues, got %d.", maxReportIssues, len(r.Issues))
	}
	for i, is := range r.Issues {
		if !slices.Contains(issueCodes, is.GetCode()) {
			return errdefs.InvalidParameter("issues[%d]: code %q is not an EKS add-on issue code (%s).",
				i, is.GetCode(), strings.Join(issueCodes, ", "))
		}
		if len(is.GetMessage()) > maxIssueMessage || len(is.GetResourceIds()) > maxReportIssues {
			return errdefs.InvalidParameter("issues[%d]: message over %d bytes or more than %d resource ids.",
				i, maxIssueMessage, maxReportIssues)
		}
	}
	return nil
}

// issueCodes are AWS's AddonIssueCode values: what DescribeAddon may show
// in health.issues, so SDK users can switch on them.
var issueCodes = []string{
	"AccessDenied", "InternalFailure", "ClusterUnreachable", "InsufficientNumberOfReplicas",
	"ConfigurationConflict", "AdmissionRequestDenied", "UnsupportedAddonModification",
	"K8sResourceNotFound", "AddonSubscriptionNeeded", "AddonPermissionFailure",
}

// Bounds on what one report may store in the record.
const (
	maxReportIssues = 50
	maxIssueMessage = 4096
)

// ApplyReport applies r in one transaction that checks, at commit time,
// that the add-on record is the one read (same incarnation, same
// generation) and that fence holds. A report for another incarnation or
// generation, or from a fenced reporter, changes nothing; it is counted by
// reason and answered with Accepted false. A repeat of the observation
// already recorded writes nothing (agents re-send reports level-triggered),
// but its fence is still checked.
func (s *Service) ApplyReport(ctx context.Context, r Report, fence Fence) (ReportResult, error) {
	if err := validateReport(r); err != nil {
		return ReportResult{}, err
	}
	key := store.AddonKey(r.ClusterUID, r.AddonName)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return ReportResult{}, err
		}
		rec := &storagev1.AddonRecord{}
		rev, err := s.store.Get(ctx, key, rec)
		if errors.Is(err, store.ErrNotFound) {
			return s.rejected(ReportUnknownAddon, nil), nil
		}
		if err != nil {
			return ReportResult{}, fmt.Errorf("report for add-on %q of cluster %s: %w", r.AddonName, r.ClusterUID, err)
		}
		switch {
		case rec.GetUid() != r.AddonUID:
			return s.rejected(ReportStaleIncarnation, rec), nil
		case rec.GetGeneration() != r.Generation:
			return s.rejected(ReportStaleGeneration, rec), nil
		}

		obs := &storagev1.AddonObserved{
			Generation:    r.Generation,
			Phase:         r.Phase,
			Issues:        cloneIssues(r.Issues),
			ExecutorEpoch: r.ExecutorEpoch,
			InstanceId:    r.InstanceID,
			ObservedAt:    timestamppb.New(s.cfg.Now()),
		}
		txn := store.NewTxn()
		next := proto.Clone(rec).(*storagev1.AddonRecord)
		erased := false
		if sameObservation(rec, obs) {
			if fence == nil {
				// Nothing to write and nothing to check.
				s.reports.WithLabelValues(ReportAccepted).Inc()
				return ReportResult{Accepted: true, Reason: ReportAccepted, Addon: rec}, nil
			}
			txn.RequireModRevision(key, rev)
		} else {
			tr := applyReport(next, obs)
			next.ModifiedAt = timestamppb.New(s.cfg.Now())
			if tr.erase {
				erased = true
				txn.Delete(key, rev).DeleteRange(store.AddonUpdatesPrefix(r.ClusterUID, r.AddonName))
			} else {
				txn.Update(key, next, rev)
				if err := s.settleUpdate(ctx, txn, next, tr.update); err != nil {
					return ReportResult{}, err
				}
			}
		}
		if fence != nil {
			fence(txn)
		}
		_, err = s.store.Commit(ctx, txn)
		switch {
		case err == nil:
			s.reports.WithLabelValues(ReportAccepted).Inc()
			if erased {
				s.log.InfoContext(ctx, "add-on removed", "cluster_uid", r.ClusterUID, "addon", r.AddonName, "uid", r.AddonUID)
				return ReportResult{Accepted: true, Reason: ReportAccepted}, nil
			}
			return ReportResult{Accepted: true, Reason: ReportAccepted, Addon: next}, nil
		case !errors.Is(err, store.ErrConflict):
			return ReportResult{}, fmt.Errorf("report for add-on %q of cluster %s: %w", r.AddonName, r.ClusterUID, err)
		}
		// Either the record changed under us (read again and re-judge) or
		// the fence failed (the record did not change).
		cur := &storagev1.AddonRecord{}
		curRev, err := s.store.Get(ctx, key, cur)
		if err == nil && curRev == rev {
			return s.rejected(ReportStaleEpoch, rec), nil
		}
		if attempt >= 50 {
			return ReportResult{}, fmt.Errorf("report for add-on %q of cluster %s: %w", r.AddonName, r.ClusterUID, store.ErrConflict)
		}
	}
}

func (s *Service) rejected(reason string, rec *storagev1.AddonRecord) ReportResult {
	s.reports.WithLabelValues(reason).Inc()
	return ReportResult{Reason: reason, Addon: rec}
}

// settleUpdate adds to txn the outcome of rec's current update, if rec has
// one in progress.
func (s *Service) settleUpdate(ctx context.Context, txn *store.Txn, rec *storagev1.AddonRecord, o outcome) error {
	if o == outcomeNone || rec.GetUpdateId() == "" {
		return nil
	}
	key := store.AddonUpdateKey(rec.GetClusterUid(), rec.GetName(), rec.GetUpdateId())
	u := &storagev1.UpdateRecord{}
	if _, err := s.store.Get(ctx, key, u); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("read update %s of add-on %q: %w", rec.GetUpdateId(), rec.GetName(), err)
	}
	if u.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS || u.GetGeneration() != rec.GetGeneration() {
		return nil
	}
	settleUpdate(u, o, rec.GetIssues(), s.cfg.Now())
	// Update records change only together with their add-on record, whose
	// revision this txn checks, so a plain put cannot lose a write.
	txn.Put(key, u)
	return nil
}
