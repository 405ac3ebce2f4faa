package insight

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// The insights refresh statuses, as AWS names them.
const (
	RefreshInProgress = "IN_PROGRESS"
	RefreshFailed     = "FAILED"
	RefreshCompleted  = "COMPLETED"
)

// refreshMessage is the message of every refresh saltbush records.
const refreshMessage = "Insights are computed on every read, so the refresh completed at once."

var refreshStatusNames = map[storagev1.InsightsRefreshStatus]string{
	storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_IN_PROGRESS: RefreshInProgress,
	storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_FAILED:      RefreshFailed,
	storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_COMPLETED:   RefreshCompleted,
}

// StartRefresh records an insights refresh of the caller's cluster name and
// returns it. Insights are computed on every read, so there is nothing to
// refresh or wait for: the record is COMPLETED, started and ended at the
// call's time. It replaces the cluster incarnation's previous one at
// store.InsightsRefreshKey in one transaction guarded by the cluster
// record's mod revision, so a refresh never outlives a purged cluster.
func (s *Service) StartRefresh(ctx context.Context, name string) (*storagev1.InsightsRefreshRecord, error) {
	var rec *storagev1.InsightsRefreshRecord
	err := store.RetryOnConflict(ctx, func(bool) error {
		c, rev, err := s.cluster(ctx, name)
		if err != nil {
			return err
		}
		now := timestamppb.New(s.now())
		rec = &storagev1.InsightsRefreshRecord{
			Status:    storagev1.InsightsRefreshStatus_INSIGHTS_REFRESH_STATUS_COMPLETED,
			Message:   refreshMessage,
			StartedAt: now,
			EndedAt:   now,
		}
		_, err = s.store.Commit(ctx, store.NewTxn().
			Put(store.InsightsRefreshKey(c.GetUid()), rec).
			RequireModRevision(store.ClusterKey(c.GetAccountId(), c.GetName()), rev))
		return err
	})
	if err != nil {
		// An API error (an unknown cluster) stays one: errdefs.Classify
		// unwraps.
		return nil, fmt.Errorf("cluster %q: record an insights refresh: %w", name, err)
	}
	return rec, nil
}

// DescribeRefresh returns the latest insights refresh of the caller's
// cluster name: ResourceNotFoundException when it has never been
// refreshed.
func (s *Service) DescribeRefresh(ctx context.Context, name string) (*eksv1.DescribeInsightsRefreshResponse, error) {
	c, _, err := s.cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	rec := &storagev1.InsightsRefreshRecord{}
	if _, err := s.store.Read(ctx, store.InsightsRefreshKey(c.GetUid()), rec); errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.NotFound("No insights refresh found for cluster: %s.", name).WithField("clusterName", name)
	} else if err != nil {
		return nil, fmt.Errorf("cluster %q: read its insights refresh: %w", name, err)
	}
	return &eksv1.DescribeInsightsRefreshResponse{
		Status:    refreshStatusName(rec.GetStatus()),
		Message:   rec.GetMessage(),
		StartedAt: epoch(rec.GetStartedAt().AsTime()),
		EndedAt:   epoch(rec.GetEndedAt().AsTime()),
	}, nil
}

// refreshStatusName is a stored refresh status as AWS names it; "" for
// one saltbush does not know.
func refreshStatusName(st storagev1.InsightsRefreshStatus) string { return refreshStatusNames[st] }
