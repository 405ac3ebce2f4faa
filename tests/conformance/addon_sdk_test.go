package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

// addonHarness is a running saltbush with one ACTIVE cluster, the SDK
// client, and the internal add-on control API standing in for the guest
// agent's reports (the delivery path that carries them lands separately).
type addonHarness struct {
	srv     *servertest.Server
	eks     *eks.Client
	control controlv1.AddonControlServiceClient
	cluster string
	account string
}

func newAddonHarness(t *testing.T, opts ...servertest.Option) *addonHarness {
	t.Helper()
	srv := servertest.Start(t, opts...)
	h := &addonHarness{
		srv:     srv,
		eks:     srv.EKS(t),
		control: controlv1.NewAddonControlServiceClient(srv.GRPC(t)),
		cluster: "addons-1",
		account: srv.Config.DevAccount,
	}
	ctx := ctxT(t)
	in := createInput(h.cluster)
	in.Version = aws.String("1.35")
	if _, err := h.eks.CreateCluster(ctx, in); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	cc := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: h.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	return h
}

func (h *addonHarness) ref() *controlv1.ClusterRef {
	return &controlv1.ClusterRef{AccountId: h.account, Name: h.cluster}
}

// get returns the internal view of an add-on (uid, generation).
func (h *addonHarness) get(t *testing.T, name string) *controlv1.AddonInfo {
	t.Helper()
	out, err := h.control.GetAddon(ctxT(t), &controlv1.GetAddonRequest{Cluster: h.ref(), AddonName: name})
	if err != nil {
		t.Fatalf("GetAddon %s: %v", name, err)
	}
	return out.GetAddon()
}

// report sends a guest report for generation gen of the add-on's current
// incarnation.
func (h *addonHarness) report(t *testing.T, name string, gen int64, phase controlv1.AddonPhase, issues ...*controlv1.AddonIssue) *controlv1.ApplyAddonReportResponse {
	t.Helper()
	a := h.get(t, name)
	out, err := h.control.ApplyAddonReport(ctxT(t), &controlv1.ApplyAddonReportRequest{
		ClusterUid: a.GetClusterUid(), AddonName: name, AddonUid: a.GetUid(),
		Generation: gen, Phase: phase, Issues: issues, InstanceId: "i-0123456789abcdef0",
	})
	if err != nil {
		t.Fatalf("ApplyAddonReport %s gen %d %s: %v", name, gen, phase, err)
	}
	return out
}

func (h *addonHarness) describe(t *testing.T, name string) *types.Addon {
	t.Helper()
	out, err := h.eks.DescribeAddon(ctxT(t), &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeAddon %s: %v", name, err)
	}
	return out.Addon
}

// reportAsync sends a report after a short delay, while a waiter polls.
func (h *addonHarness) reportAsync(t *testing.T, name string, gen int64, phase controlv1.AddonPhase, issues ...*controlv1.AddonIssue) <-chan error {
	t.Helper()
	a := h.get(t, name)
	done := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := h.control.ApplyAddonReport(context.Background(), &controlv1.ApplyAddonReportRequest{
			ClusterUid: a.GetClusterUid(), AddonName: name, AddonUid: a.GetUid(),
			Generation: gen, Phase: phase, Issues: issues,
		})
		done <- err
	}()
	return done
}

func fastWaiter[T any](o *T) {
	switch w := any(o).(type) {
	case *eks.AddonActiveWaiterOptions:
		w.MinDelay, w.MaxDelay = 100*time.Millisecond, 200*time.Millisecond
	case *eks.AddonDeletedWaiterOptions:
		w.MinDelay, w.MaxDelay = 100*time.Millisecond, 200*time.Millisecond
	}
}

func TestAddonLifecycleWithSDKWaiters(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)

	out, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{
		ClusterName: aws.String(h.cluster),
		AddonName:   aws.String("coredns"),
		Tags:        map[string]string{"team": "platform"},
	})
	if err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	a := out.Addon
	if a.Status != types.AddonStatusCreating {
		t.Errorf("status = %s, want CREATING", a.Status)
	}
	prefix := "arn:aws:eks:us-east-1:" + h.account + ":addon/" + h.cluster + "/coredns/"
	if arn := aws.ToString(a.AddonArn); !strings.HasPrefix(arn, prefix) || len(arn) != len(prefix)+36 {
		t.Errorf("addonArn = %q, want %s{uuid}", arn, prefix)
	}
	if aws.ToString(a.AddonVersion) == "" || aws.ToString(a.Publisher) == "" || a.CreatedAt == nil {
		t.Errorf("create response lacks version/publisher/createdAt: %+v", a)
	}

	// Describable at once: the AddonActive waiter's first poll must not 404.
	waitErr := make(chan error, 1)
	go func() {
		waitErr <- eks.NewAddonActiveWaiter(h.eks, fastWaiter).Wait(context.Background(),
			&eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")}, 30*time.Second)
	}()
	if r := h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_APPLIED); !r.GetAccepted() {
		t.Fatalf("APPLIED for generation 1 not accepted: %v", r)
	}
	if got := h.describe(t, "coredns").Status; got != types.AddonStatusCreating {
		t.Errorf("after APPLIED status = %s, want CREATING", got)
	}
	h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_READY)
	if err := <-waitErr; err != nil {
		t.Fatalf("AddonActive waiter: %v", err)
	}

	// Update: generation 2, an InProgress update with its own id.
	up, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{
		ClusterName:         aws.String(h.cluster),
		AddonName:           aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 3}`),
	})
	if err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	if up.Update.Status != types.UpdateStatusInProgress || up.Update.Type != types.UpdateTypeAddonUpdate {
		t.Errorf("update = %s/%s, want InProgress/AddonUpdate", up.Update.Status, up.Update.Type)
	}
	if id := aws.ToString(up.Update.Id); id == "" || strings.HasPrefix(id, "arn:") {
		t.Errorf("update id = %q, want a UUID of its own", id)
	}
	// A READY for generation 1 settles nothing now.
	if r := h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_READY); r.GetAccepted() || r.GetReason() != "stale_generation" {
		t.Errorf("stale READY: accepted=%v reason=%q, want rejected stale_generation", r.GetAccepted(), r.GetReason())
	}
	if got := h.describe(t, "coredns").Status; got != types.AddonStatusUpdating {
		t.Errorf("after stale READY status = %s, want UPDATING", got)
	}
	du := func() *types.Update {
		out, err := h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{
			Name: aws.String(h.cluster), UpdateId: up.Update.Id, AddonName: aws.String("coredns"),
		})
		if err != nil {
			t.Fatalf("DescribeUpdate: %v", err)
		}
		return out.Update
	}
	if got := du().Status; got != types.UpdateStatusInProgress {
		t.Errorf("update after stale READY = %s, want InProgress", got)
	}
	h.report(t, "coredns", 2, controlv1.AddonPhase_ADDON_PHASE_READY)
	if got := du().Status; got != types.UpdateStatusSuccessful {
		t.Errorf("update after READY gen 2 = %s, want Successful", got)
	}
	if got := h.describe(t, "coredns"); got.Status != types.AddonStatusActive || aws.ToString(got.ConfigurationValues) != `{"replicaCount": 3}` {
		t.Errorf("after update: status %s config %q", got.Status, aws.ToString(got.ConfigurationValues))
	}

	// Delete: DELETING, still describable, gone only after REMOVED.
	del, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")})
	if err != nil {
		t.Fatalf("DeleteAddon: %v", err)
	}
	if del.Addon.Status != types.AddonStatusDeleting {
		t.Errorf("delete status = %s, want DELETING", del.Addon.Status)
	}
	if got := h.describe(t, "coredns").Status; got != types.AddonStatusDeleting {
		t.Errorf("describe after delete = %s, want DELETING", got)
	}
	done := h.reportAsync(t, "coredns", 3, controlv1.AddonPhase_ADDON_PHASE_REMOVED)
	if err := eks.NewAddonDeletedWaiter(h.eks, fastWaiter).Wait(ctx,
		&eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")}, 30*time.Second); err != nil {
		t.Fatalf("AddonDeleted waiter: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("REMOVED report: %v", err)
	}
	_, err = h.eks.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("describe after REMOVED: %v, want ResourceNotFoundException", err)
	}
}

func TestAddonWaitersFailOnFailedStates(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	in := &eks.DescribeAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("kube-proxy")}
	if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName}); err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	done := h.reportAsync(t, "kube-proxy", 1, controlv1.AddonPhase_ADDON_PHASE_FAILED,
		&controlv1.AddonIssue{Code: "ConfigurationConflict", Message: "conflicts with an existing DaemonSet", ResourceIds: []string{"kube-system/kube-proxy"}})
	err := eks.NewAddonActiveWaiter(h.eks, fastWaiter).Wait(ctx, in, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "transitioned to Failure") {
		t.Fatalf("AddonActive waiter on CREATE_FAILED: %v, want a waiter failure", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a := h.describe(t, "kube-proxy")
	if a.Status != types.AddonStatusCreateFailed || a.Health == nil || len(a.Health.Issues) != 1 ||
		a.Health.Issues[0].Code != types.AddonIssueCodeConfigurationConflict {
		t.Fatalf("after FAILED: status %s health %+v", a.Status, a.Health)
	}
	// CREATE_FAILED is terminal for its generation: a late READY does not lift it.
	h.report(t, "kube-proxy", 1, controlv1.AddonPhase_ADDON_PHASE_READY)
	if got := h.describe(t, "kube-proxy").Status; got != types.AddonStatusCreateFailed {
		t.Fatalf("READY lifted CREATE_FAILED to %s", got)
	}

	// DELETE_FAILED fails the AddonDeleted waiter.
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName}); err != nil {
		t.Fatalf("DeleteAddon: %v", err)
	}
	done = h.reportAsync(t, "kube-proxy", 2, controlv1.AddonPhase_ADDON_PHASE_FAILED)
	err = eks.NewAddonDeletedWaiter(h.eks, fastWaiter).Wait(ctx, in, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "transitioned to Failure") {
		t.Fatalf("AddonDeleted waiter on DELETE_FAILED: %v, want a waiter failure", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.describe(t, "kube-proxy").Status; got != types.AddonStatusDeleteFailed {
		t.Fatalf("status = %s, want DELETE_FAILED", got)
	}
}
