package conformance

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// clusterUpdates counts the cluster's updates and those InProgress, as
// ListUpdates and DescribeUpdate show them.
func clusterUpdates(t *testing.T, h *upgradeHarness) (all, inProgress int) {
	t.Helper()
	list, err := h.eks.ListUpdates(ctxT(t), &eks.ListUpdatesInput{Name: aws.String(h.cluster)})
	if err != nil {
		t.Fatalf("ListUpdates: %v", err)
	}
	for _, id := range list.UpdateIds {
		if h.update(t, id).Status == types.UpdateStatusInProgress {
			inProgress++
		}
	}
	return len(list.UpdateIds), inProgress
}

// TestUpgradeConcurrent: of eight concurrent UpdateClusterVersion calls
// with different tokens exactly one starts the upgrade (the cluster
// record's revision guards the transaction) and the others are
// ResourceInUseException; eight with the same token all get the one
// update.
func TestUpgradeConcurrent(t *testing.T) {
	const n = 8
	t.Run("different tokens", func(t *testing.T) {
		h := newUpgradeHarness(t, "race-1", "1.35")
		outs, errs := concurrently(n, func(i int) (*types.Update, error) { return h.upgrade(t, "1.36", fmt.Sprintf("token-%d", i)) })
		won := 0
		for i, err := range errs {
			var inUse *types.ResourceInUseException
			switch {
			case err == nil && outs[i].Status == types.UpdateStatusInProgress:
				won++
			case errors.As(err, &inUse):
			default:
				t.Errorf("call %d: %v, %v", i, outs[i], err)
			}
		}
		if all, inProgress := clusterUpdates(t, h); won != 1 || all != 1 || inProgress != 1 {
			t.Fatalf("%d calls won, %d updates recorded (%d InProgress); want exactly one", won, all, inProgress)
		}
	})
	t.Run("one token", func(t *testing.T) {
		h := newUpgradeHarness(t, "race-2", "1.35")
		outs, errs := concurrently(n, func(int) (*types.Update, error) { return h.upgrade(t, "1.36", "same-token") })
		ids := map[string]bool{}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			ids[aws.ToString(outs[i].Id)] = true
		}
		if all, _ := clusterUpdates(t, h); len(ids) != 1 || all != 1 {
			t.Fatalf("ids %v, %d updates recorded; want one", ids, all)
		}
	})
}
