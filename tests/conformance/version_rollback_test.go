package conformance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// kube-proxy's newest catalogue version runs on 1.37 only
// (catalog/addons/kube-proxy): installed on a 1.37 cluster, it blocks a
// rollback to 1.36.
const kubeProxy137 = "v1.37.2-eksbuild.1"

func (h *upgradeHarness) rollback(t *testing.T, version string, force bool, timeout *int32) (*types.Update, error) {
	t.Helper()
	in := &eks.UpdateClusterVersionInput{Name: aws.String(h.cluster), Version: aws.String(version), Force: force}
	if timeout != nil {
		in.RollbackConfig = &types.RollbackConfig{TimeoutMinutes: timeout}
	}
	out, err := h.eks.UpdateClusterVersion(ctxT(t), in)
	if err != nil {
		return nil, err
	}
	return out.Update, nil
}

func (h *upgradeHarness) cancel(t *testing.T, id string) (*types.Update, error) {
	t.Helper()
	out, err := h.eks.CancelUpdate(ctxT(t), &eks.CancelUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(id)})
	if err != nil {
		return nil, err
	}
	return out.Update, nil
}

// upgradeTo upgrades the cluster one minor version and completes it.
func (h *upgradeHarness) upgradeTo(t *testing.T, version string) *types.Update {
	t.Helper()
	u, err := h.upgrade(t, version, "")
	if err != nil {
		t.Fatalf("UpdateClusterVersion %s: %v", version, err)
	}
	if _, err := h.complete(t, aws.ToString(u.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL, ""); err != nil {
		t.Fatalf("CompleteUpdate %s: %v", aws.ToString(u.Id), err)
	}
	return u
}

// TestVersionRollback is a rollback's story through the unmodified SDK,
// with the newest model's members: UpdateClusterVersion to the previous
// minor version is a VersionRollback (only after an upgrade brought the
// cluster to its version, only with rollbackConfig's timeout in AWS's
// bounds, not while an installed add-on is not compatible with the
// version rolled back to unless force); CancelUpdate cancels it on a
// best-effort basis, and the provisioner's report decides the
// cancellation.
func TestVersionRollback(t *testing.T) {
	h := newUpgradeHarness(t, "rb-1", "1.36")
	minutes := func(v int32) *int32 { return &v }

	// Created at 1.36: nothing to roll back to.
	if _, err := h.rollback(t, "1.35", false, nil); err == nil || !strings.Contains(err.Error(), "no upgrade brought it from 1.35 to 1.36") {
		t.Fatalf("rollback of a cluster created at its version: %v", err)
	} else {
		wanterr.AWS(t, err, "InvalidParameterException", 400)
	}
	// rollbackConfig with an upgrade.
	_, err := h.rollback(t, "1.37", false, minutes(240))
	wanterr.AWS(t, err, "InvalidParameterException", 400)

	upgrade := h.upgradeTo(t, "1.37")
	h.addon(t, "kube-proxy", kubeProxy137)

	tests := []struct {
		name      string
		force     bool
		timeout   *int32
		exception string
		message   string
	}{
		{"timeout under AWS's least", true, minutes(119), "InvalidParameterException", "at 'rollbackConfig.timeoutMinutes'"},
		{"timeout over AWS's most", true, minutes(10081), "InvalidParameterException", "at 'rollbackConfig.timeoutMinutes'"},
		{"an add-on not compatible with 1.36", false, minutes(240), "InvalidRequestException", "kube-proxy (" + kubeProxy137 + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.rollback(t, "1.36", tt.force, tt.timeout)
			_, msg := wanterr.AWS(t, err, tt.exception, 400)
			if !strings.Contains(msg, tt.message) {
				t.Fatalf("message %q, want it to hold %q", msg, tt.message)
			}
			if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.37" {
				t.Fatalf("a refused rollback changed the cluster: %s %s", c.Status, aws.ToString(c.Version))
			}
		})
	}

	// Forced past the add-on: a VersionRollback InProgress, the cluster
	// UPDATING.
	rb, err := h.rollback(t, "1.36", true, minutes(240))
	if err != nil {
		t.Fatalf("forced rollback: %v", err)
	}
	if rb.Type != types.UpdateTypeVersionRollback || rb.Status != types.UpdateStatusInProgress || params(rb)["Version"] != "1.36" ||
		rb.Cancellation != nil {
		t.Fatalf("rollback update %+v, want an InProgress VersionRollback to 1.36 without cancellation", rb)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusUpdating {
		t.Fatalf("cluster %s during the rollback, want UPDATING", c.Status)
	}
	id := aws.ToString(rb.Id)

	cancels := []struct {
		name      string
		id        string
		exception string
	}{
		{"an unknown update", "00000000-0000-0000-0000-000000000000", "ResourceNotFoundException"},
		{"an upgrade, not a rollback", aws.ToString(upgrade.Id), "InvalidRequestException"},
	}
	for _, tt := range cancels {
		t.Run("CancelUpdate of "+tt.name, func(t *testing.T) {
			_, err := h.cancel(t, tt.id)
			status := 400
			if tt.exception == "ResourceNotFoundException" {
				status = 404
			}
			wanterr.AWS(t, err, tt.exception, status)
		})
	}
	// CompleteUpdate CANCELLED without a cancellation asked for.
	_, err = h.complete(t, id, controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED, "")
	wanterr.Status(t, err, codes.FailedPrecondition, "InvalidRequestException")

	for i := range 2 { // asking twice changes nothing
		u, err := h.cancel(t, id)
		if err != nil {
			t.Fatalf("CancelUpdate #%d: %v", i+1, err)
		}
		if u.Status != types.UpdateStatusInProgress || u.Cancellation == nil || u.Cancellation.Status != types.CancellationStatusInProgress {
			t.Fatalf("CancelUpdate #%d: %+v, want InProgress with its cancellation InProgress", i+1, u)
		}
	}
	if u := h.update(t, id); u.Cancellation == nil || u.Cancellation.Status != types.CancellationStatusInProgress {
		t.Fatalf("DescribeUpdate: cancellation %+v, want InProgress", u.Cancellation)
	}
	if _, err := h.complete(t, id, controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED, ""); err != nil {
		t.Fatalf("CompleteUpdate CANCELLED: %v", err)
	}
	u := h.update(t, id)
	if u.Status != types.UpdateStatusCancelled || u.Cancellation == nil || u.Cancellation.Status != types.CancellationStatusSuccessful ||
		aws.ToString(u.Cancellation.Reason) == "" {
		t.Fatalf("after the provisioner stopped it: %+v %+v, want Cancelled with a Successful cancellation", u.Status, u.Cancellation)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.37" {
		t.Fatalf("after a cancelled rollback: %s %s, want ACTIVE on 1.37", c.Status, aws.ToString(c.Version))
	}
	// An ended update cannot be cancelled.
	_, err = h.cancel(t, id)
	wanterr.AWS(t, err, "InvalidRequestException", 400)

	// A second rollback completes before its cancellation: the
	// cancellation Failed, the cluster on 1.36.
	rb2, err := h.rollback(t, "1.36", true, nil)
	if err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	if _, err := h.cancel(t, aws.ToString(rb2.Id)); err != nil {
		t.Fatalf("CancelUpdate: %v", err)
	}
	if _, err := h.complete(t, aws.ToString(rb2.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL, ""); err != nil {
		t.Fatalf("CompleteUpdate SUCCESSFUL: %v", err)
	}
	u = h.update(t, aws.ToString(rb2.Id))
	if u.Status != types.UpdateStatusSuccessful || u.Cancellation == nil || u.Cancellation.Status != types.CancellationStatusFailed {
		t.Fatalf("rollback completed first: %+v %+v, want Successful with a Failed cancellation", u.Status, u.Cancellation)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.36" {
		t.Fatalf("after the rollback: %s %s, want ACTIVE on 1.36", c.Status, aws.ToString(c.Version))
	}
	// The version the rollback left is not one an upgrade brought the
	// cluster to: no second rollback.
	_, err = h.rollback(t, "1.35", true, nil)
	var ipe *types.InvalidParameterException
	if !errors.As(err, &ipe) {
		t.Fatalf("rollback past the upgrade: %v, want InvalidParameterException", err)
	}
}

// TestRollbackTimeout: a rollback still in progress when its
// rollbackConfig.timeoutMinutes pass gets a cancellation from the elected
// deadline sweeper, as CancelUpdate would ask for it; a rollback that
// ended first gets none. The server's clock is moved past the timeout,
// never slept on; the test waits for the sweeper's write with a deadline.
func TestRollbackTimeout(t *testing.T) {
	clk := &servertest.Clock{}
	srv := servertest.Start(t, servertest.WithConfig(func(c *server.Config) {
		c.Cluster.Now = clk.Now
		c.Addon.SweepInterval = 50 * time.Millisecond
	}))
	h := newUpgradeHarnessOn(t, srv, "rb-timeout", "1.36")
	h.upgradeTo(t, "1.37")
	minutes := int32(120)

	ended, err := h.rollback(t, "1.36", true, &minutes)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if _, err := h.complete(t, aws.ToString(ended.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED, ""); err != nil {
		t.Fatalf("CompleteUpdate FAILED: %v", err)
	}
	late, err := h.rollback(t, "1.36", true, &minutes)
	if err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	id := aws.ToString(late.Id)
	// One deadline hint: the first rollback's went when it ended.
	hints, err := srv.Etcd(t).Get(ctxT(t), srv.Store(t).Key(store.UpdateDeadlinesPrefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(hints.Kvs) != 1 || !strings.HasSuffix(string(hints.Kvs[0].Key), "/"+id) {
		t.Fatalf("update deadline hints %v, %v; want the second rollback's alone", hints, err)
	}

	clk.Advance(121 * time.Minute)
	ctx := ctxT(t)
	for {
		u := h.update(t, id)
		if u.Cancellation != nil {
			if u.Cancellation.Status != types.CancellationStatusInProgress || u.Status != types.UpdateStatusInProgress ||
				!strings.Contains(aws.ToString(u.Cancellation.Reason), "timeoutMinutes (120)") {
				t.Fatalf("after the timeout: %s, cancellation %+v; want InProgress asked for by the timeout", u.Status, u.Cancellation)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no cancellation %v after the timeout passed", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if u := h.update(t, aws.ToString(ended.Id)); u.Cancellation != nil {
		t.Fatalf("a rollback that ended before its timeout got a cancellation: %+v", u.Cancellation)
	}
	// The provisioner stops it: Cancelled, as after CancelUpdate.
	if _, err := h.complete(t, id, controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED, ""); err != nil {
		t.Fatalf("CompleteUpdate CANCELLED: %v", err)
	}
	if u := h.update(t, id); u.Status != types.UpdateStatusCancelled || u.Cancellation.Status != types.CancellationStatusSuccessful {
		t.Fatalf("after the provisioner stopped it: %s %+v", u.Status, u.Cancellation)
	}
}
