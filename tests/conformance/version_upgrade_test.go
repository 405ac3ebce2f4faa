package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// The catalogue's upgrade story (catalog/addons/metrics-server): the
// older version runs on 1.35 but not 1.36, the newer one on both.
const (
	upgradeAddon = "metrics-server"
	addonOld     = "v0.7.2-eksbuild.4"
	addonNew     = "v0.8.0-eksbuild.2"
	vpcCNI       = "v1.20.4-eksbuild.1"
)

// upgradeHarness is a running saltbush with one ACTIVE cluster.
type upgradeHarness struct {
	*accessHarness
	updates controlv1.ClusterUpdateControlServiceClient
}

func newUpgradeHarness(t *testing.T, name, version string) *upgradeHarness {
	t.Helper()
	return newUpgradeHarnessOn(t, servertest.Start(t), name, version)
}

// newUpgradeHarnessOn is newUpgradeHarness on a server the test started.
func newUpgradeHarnessOn(t *testing.T, srv *servertest.Server, name, version string) *upgradeHarness {
	t.Helper()
	h := &upgradeHarness{
		accessHarness: &accessHarness{srv: srv, eks: srv.EKS(t), cluster: name, account: srv.Config.DevAccount},
		updates:       controlv1.NewClusterUpdateControlServiceClient(srv.GRPC(t)),
	}
	in := createInput(name)
	in.Version = aws.String(version)
	if _, err := h.eks.CreateCluster(ctxT(t), in); err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	h.setStatus(t, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	return h
}

func (h *upgradeHarness) addon(t *testing.T, name, version string) {
	t.Helper()
	if _, err := h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{
		ClusterName: aws.String(h.cluster), AddonName: aws.String(name), AddonVersion: aws.String(version),
	}); err != nil {
		t.Fatalf("CreateAddon %s %s: %v", name, version, err)
	}
	// The guest's report makes it ACTIVE, so that it can be updated.
	a := &addonHarness{srv: h.srv, eks: h.eks, control: controlv1.NewAddonControlServiceClient(h.srv.GRPC(t)),
		cluster: h.cluster, account: h.account}
	a.report(t, name, 1, controlv1.AddonPhase_ADDON_PHASE_READY)
}

func (h *upgradeHarness) upgrade(t *testing.T, version, token string) (*types.Update, error) {
	t.Helper()
	in := &eks.UpdateClusterVersionInput{Name: aws.String(h.cluster), Version: aws.String(version)}
	if token != "" {
		in.ClientRequestToken = aws.String(token)
	}
	out, err := h.eks.UpdateClusterVersion(ctxT(t), in)
	if err != nil {
		return nil, err
	}
	return out.Update, nil
}

func (h *upgradeHarness) describe(t *testing.T) *types.Cluster {
	t.Helper()
	out, err := h.eks.DescribeCluster(ctxT(t), &eks.DescribeClusterInput{Name: aws.String(h.cluster)})
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	return out.Cluster
}

func (h *upgradeHarness) update(t *testing.T, id string) *types.Update {
	t.Helper()
	out, err := h.eks.DescribeUpdate(ctxT(t), &eks.DescribeUpdateInput{Name: aws.String(h.cluster), UpdateId: aws.String(id)})
	if err != nil {
		t.Fatalf("DescribeUpdate %s: %v", id, err)
	}
	return out.Update
}

func (h *upgradeHarness) complete(t *testing.T, id string, outcome controlv1.UpdateOutcome, platform string, errs ...*controlv1.UpdateErrorDetail) (*controlv1.CompleteUpdateResponse, error) {
	t.Helper()
	return h.updates.CompleteUpdate(ctxT(t), &controlv1.CompleteUpdateRequest{
		Cluster: h.ref(), UpdateId: id, Outcome: outcome, PlatformVersion: platform, Errors: errs,
	})
}

// compatibilityInsight lists the cluster's UPGRADE_READINESS insights,
// expects exactly the add-on version compatibility one, and describes it.
func (h *upgradeHarness) compatibilityInsight(t *testing.T) (types.InsightSummary, *types.Insight) {
	t.Helper()
	out, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{
		ClusterName: aws.String(h.cluster),
		Filter:      &types.InsightsFilter{Categories: []types.Category{types.CategoryUpgradeReadiness}},
	})
	if err != nil {
		t.Fatalf("ListInsights: %v", err)
	}
	if len(out.Insights) != 1 || aws.ToString(out.Insights[0].Name) != "Amazon EKS add-on version compatibility" {
		t.Fatalf("ListInsights = %+v, want the add-on version compatibility insight alone", out.Insights)
	}
	d, err := h.eks.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String(h.cluster), Id: out.Insights[0].Id})
	if err != nil {
		t.Fatalf("DescribeInsight: %v", err)
	}
	return out.Insights[0], d.Insight
}

func params(u *types.Update) map[string]string {
	out := map[string]string{}
	for _, p := range u.Params {
		out[string(p.Type)] = aws.ToString(p.Value)
	}
	return out
}

// TestUpgradeWithIncompatibleAddon is the upgrade story end to end through
// the unmodified SDK: a 1.35 cluster whose metrics-server runs a version that is
// not compatible with 1.36. The insight flags it, naming the versions
// compatible with 1.36; DescribeAddonVersions for 1.36 names the version
// to move to; the upgrade is not blocked (as in AWS); UpdateClusterVersion
// starts a VersionUpdate (cluster UPDATING, a second call refused) that
// the provisioner's report ends (cluster ACTIVE on 1.36).
func TestUpgradeWithIncompatibleAddon(t *testing.T) {
	h := newUpgradeHarness(t, "up-1", "1.35")
	h.addon(t, upgradeAddon, addonOld)
	h.addon(t, "vpc-cni", vpcCNI)

	sum, in := h.compatibilityInsight(t)
	if sum.InsightStatus == nil || sum.InsightStatus.Status != types.InsightStatusValueError ||
		!strings.Contains(aws.ToString(sum.InsightStatus.Reason), upgradeAddon) ||
		strings.Contains(aws.ToString(sum.InsightStatus.Reason), "vpc-cni") {
		t.Errorf("insight status = %+v, want ERROR naming %s only", sum.InsightStatus, upgradeAddon)
	}
	if aws.ToString(sum.KubernetesVersion) != "1.36" || sum.Category != types.CategoryUpgradeReadiness ||
		sum.LastRefreshTime == nil || sum.LastTransitionTime == nil {
		t.Errorf("summary = %+v, want UPGRADE_READINESS for 1.36 with both times", sum)
	}
	details := in.CategorySpecificSummary.AddonCompatibilityDetails
	if len(details) != 1 || aws.ToString(details[0].Name) != upgradeAddon || !slices.Equal(details[0].CompatibleVersions, []string{addonNew}) {
		t.Errorf("addonCompatibilityDetails = %+v, want %s with [%s]", details, upgradeAddon, addonNew)
	}
	if len(in.Resources) != 2 || aws.ToString(in.Recommendation) == "" || aws.ToString(in.Description) == "" {
		t.Errorf("insight = %+v, want two resources, a description and a recommendation", in)
	}
	for _, r := range in.Resources {
		want := types.InsightStatusValuePassing
		if strings.Contains(aws.ToString(r.Arn), "/"+upgradeAddon+"/") {
			want = types.InsightStatusValueError
		}
		if r.InsightStatus == nil || r.InsightStatus.Status != want {
			t.Errorf("resource %s: status %+v, want %s", aws.ToString(r.Arn), r.InsightStatus, want)
		}
	}

	filters := []struct {
		name   string
		filter *types.InsightsFilter
		want   int
	}{
		{"status ERROR", &types.InsightsFilter{Statuses: []types.InsightStatusValue{types.InsightStatusValueError}}, 1},
		{"status PASSING", &types.InsightsFilter{Statuses: []types.InsightStatusValue{types.InsightStatusValuePassing}}, 0},
		{"version 1.36", &types.InsightsFilter{KubernetesVersions: []string{"1.36"}}, 1},
		{"version 1.37", &types.InsightsFilter{KubernetesVersions: []string{"1.37"}}, 0},
		{"MISCONFIGURATION", &types.InsightsFilter{Categories: []types.Category{types.CategoryMisconfiguration}}, 0},
		{"none", nil, 1},
	}
	for _, tt := range filters {
		t.Run("filter "+tt.name, func(t *testing.T) {
			out, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster), Filter: tt.filter})
			if err != nil {
				t.Fatalf("ListInsights: %v", err)
			}
			if len(out.Insights) != tt.want {
				t.Fatalf("%d insights, want %d", len(out.Insights), tt.want)
			}
		})
	}

	t.Run("DescribeAddonVersions names the version to move to", func(t *testing.T) {
		out, err := h.eks.DescribeAddonVersions(ctxT(t), &eks.DescribeAddonVersionsInput{
			AddonName: aws.String(upgradeAddon), KubernetesVersion: aws.String("1.36"),
		})
		if err != nil {
			t.Fatalf("DescribeAddonVersions: %v", err)
		}
		if len(out.Addons) != 1 || len(out.Addons[0].AddonVersions) != 1 {
			t.Fatalf("DescribeAddonVersions = %+v, want %s with one version", out.Addons, upgradeAddon)
		}
		v := out.Addons[0].AddonVersions[0]
		if aws.ToString(v.AddonVersion) != addonNew || len(v.Compatibilities) != 1 ||
			aws.ToString(v.Compatibilities[0].ClusterVersion) != "1.36" || !v.Compatibilities[0].DefaultVersion {
			t.Fatalf("version = %s %+v, want %s, the default for 1.36", aws.ToString(v.AddonVersion), v.Compatibilities, addonNew)
		}
	})

	before := h.keyspace(t)
	refused := []struct {
		name, version, message string
	}{
		{"skipping a minor", "1.37", "Unsupported Kubernetes minor version update from 1.35 to 1.37"},
		{"a downgrade of two minor versions", "1.33", "Unsupported Kubernetes minor version update from 1.35 to 1.33"},
		// One minor down is a rollback, which needs an upgrade to have
		// brought the cluster to its version (TestVersionRollback).
		{"a rollback no upgrade led to", "1.34", "Cannot roll back cluster up-1 to 1.34: no upgrade brought it from 1.34 to 1.35."},
		{"the same version", "1.35", "Unsupported Kubernetes minor version update from 1.35 to 1.35"},
		{"a version not offered", "1.99", "unsupported Kubernetes version"},
	}
	for _, tt := range refused {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			_, err := h.upgrade(t, tt.version, "")
			e := wanterr.As[*types.InvalidParameterException](t, err)
			if aws.ToString(e.Message) != tt.message || aws.ToString(e.ClusterName) != h.cluster {
				t.Fatalf("message %q, clusterName %q; want %q", aws.ToString(e.Message), aws.ToString(e.ClusterName), tt.message)
			}
		})
	}
	h.noWrites(t, before)

	u, err := h.upgrade(t, "1.36", "upgrade-1")
	if err != nil {
		t.Fatalf("UpdateClusterVersion: %v (an incompatible add-on does not block it)", err)
	}
	if u.Status != types.UpdateStatusInProgress || u.Type != types.UpdateTypeVersionUpdate ||
		params(u)["Version"] != "1.36" || params(u)["PlatformVersion"] == "" || u.CreatedAt == nil {
		t.Fatalf("update = %+v %v, want an InProgress VersionUpdate to 1.36", u, params(u))
	}
	if c := h.describe(t); c.Status != types.ClusterStatusUpdating || aws.ToString(c.Version) != "1.35" {
		t.Fatalf("cluster %s on %s, want UPDATING on 1.35", c.Status, aws.ToString(c.Version))
	}
	again, err := h.upgrade(t, "1.36", "upgrade-1")
	if err != nil || aws.ToString(again.Id) != aws.ToString(u.Id) {
		t.Fatalf("retry with the same token = %v, %v; want update %s", again, err, aws.ToString(u.Id))
	}
	_, err = h.upgrade(t, "1.36", "upgrade-2")
	e := wanterr.As[*types.ResourceInUseException](t, err)
	if !strings.Contains(aws.ToString(e.Message), aws.ToString(u.Id)) {
		t.Errorf("ResourceInUseException %q does not name update %s", aws.ToString(e.Message), aws.ToString(u.Id))
	}
	_, err = h.upgrade(t, "1.36", "")
	wanterr.Type[*types.ResourceInUseException](t, err)
	// The provisioner ends a version update with CompleteUpdate; SetStatus
	// would leave the update InProgress under an ACTIVE cluster.
	_, err = controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).SetStatus(ctxT(t), &controlv1.SetStatusRequest{
		Cluster: h.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
	})
	wanterr.Status(t, err, codes.FailedPrecondition, "InvalidRequestException")
	if c := h.describe(t); c.Status != types.ClusterStatusUpdating {
		t.Fatalf("cluster %s after a refused SetStatus, want UPDATING", c.Status)
	}

	list, err := h.eks.ListUpdates(ctxT(t), &eks.ListUpdatesInput{Name: aws.String(h.cluster)})
	if err != nil || !slices.Contains(list.UpdateIds, aws.ToString(u.Id)) {
		t.Fatalf("ListUpdates = %v, %v; want %s among them", list, err, aws.ToString(u.Id))
	}
	if got := h.update(t, aws.ToString(u.Id)); got.Status != types.UpdateStatusInProgress {
		t.Fatalf("DescribeUpdate status %s, want InProgress", got.Status)
	}

	res, err := h.complete(t, aws.ToString(u.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL, "eks.2")
	if err != nil {
		t.Fatalf("CompleteUpdate: %v", err)
	}
	if res.GetUpdateStatus() != "Successful" || res.GetKubernetesVersion() != "1.36" ||
		res.GetCluster().GetStatus() != controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE {
		t.Fatalf("CompleteUpdate = %v", res)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.36" || aws.ToString(c.PlatformVersion) != "eks.2" {
		t.Fatalf("cluster %s on %s (%s), want ACTIVE on 1.36 (eks.2)", c.Status, aws.ToString(c.Version), aws.ToString(c.PlatformVersion))
	}
	if got := h.update(t, aws.ToString(u.Id)); got.Status != types.UpdateStatusSuccessful || len(got.Errors) != 0 {
		t.Fatalf("DescribeUpdate = %s %v, want Successful", got.Status, got.Errors)
	}
	if _, err := h.complete(t, aws.ToString(u.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL, "eks.2"); err != nil {
		t.Fatalf("repeating the report: %v", err)
	}
	_, err = h.complete(t, aws.ToString(u.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED, "")
	wanterr.Status(t, err, codes.FailedPrecondition, "")

	// The same check, now about 1.37, keeps its id; moving metrics-server to the
	// version compatible with the next minor makes it pass.
	if _, err := h.eks.UpdateAddon(ctxT(t), &eks.UpdateAddonInput{
		ClusterName: aws.String(h.cluster), AddonName: aws.String(upgradeAddon), AddonVersion: aws.String(addonNew),
	}); err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	after, _ := h.compatibilityInsight(t)
	if aws.ToString(after.Id) != aws.ToString(sum.Id) || aws.ToString(after.KubernetesVersion) != "1.37" ||
		after.InsightStatus.Status != types.InsightStatusValuePassing {
		t.Fatalf("insight after the upgrade = %s %s %+v; want id %s, 1.37, PASSING",
			aws.ToString(after.Id), aws.ToString(after.KubernetesVersion), after.InsightStatus, aws.ToString(sum.Id))
	}
}

// TestUpgradeFailed: a Failed report keeps the version, records its
// errors on the update, and makes the cluster ACTIVE again, so another
// upgrade can be started.
func TestUpgradeFailed(t *testing.T) {
	h := newUpgradeHarness(t, "up-2", "1.34")
	u, err := h.upgrade(t, "1.35", "")
	if err != nil {
		t.Fatalf("UpdateClusterVersion: %v", err)
	}
	if _, err := h.complete(t, aws.ToString(u.Id), controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED, "",
		&controlv1.UpdateErrorDetail{ErrorCode: "ClusterUnreachable", ErrorMessage: "the control plane did not come back",
			ResourceIds: []string{"i-0abc"}}); err != nil {
		t.Fatalf("CompleteUpdate: %v", err)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.34" {
		t.Fatalf("cluster %s on %s, want ACTIVE on 1.34", c.Status, aws.ToString(c.Version))
	}
	got := h.update(t, aws.ToString(u.Id))
	if got.Status != types.UpdateStatusFailed || len(got.Errors) != 1 || got.Errors[0].ErrorCode != types.ErrorCodeClusterUnreachable ||
		!slices.Equal(got.Errors[0].ResourceIds, []string{"i-0abc"}) {
		t.Fatalf("DescribeUpdate = %s %+v, want Failed with the reported error", got.Status, got.Errors)
	}
	if _, err := h.upgrade(t, "1.35", ""); err != nil {
		t.Fatalf("a new upgrade after a failed one: %v", err)
	}
}

// TestUpgradeRefusedUnlessActive: a cluster that is not ACTIVE is not
// upgraded, and nothing is written; an unknown cluster is
// ResourceNotFoundException; the provisioner's report is checked.
func TestUpgradeRefusedUnlessActive(t *testing.T) {
	srv := servertest.Start(t)
	h := &upgradeHarness{
		accessHarness: &accessHarness{srv: srv, eks: srv.EKS(t), cluster: "creating-1", account: srv.Config.DevAccount},
		updates:       controlv1.NewClusterUpdateControlServiceClient(srv.GRPC(t)),
	}
	in := createInput(h.cluster)
	in.Version = aws.String("1.35")
	if _, err := h.eks.CreateCluster(ctxT(t), in); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	before := h.keyspace(t)
	_, err := h.upgrade(t, "1.36", "")
	wanterr.Type[*types.ResourceInUseException](t, err)
	h.noWrites(t, before)

	_, err = h.eks.UpdateClusterVersion(ctxT(t), &eks.UpdateClusterVersionInput{Name: aws.String("absent"), Version: aws.String("1.36")})
	wanterr.Type[*types.ResourceNotFoundException](t, err)

	reports := []struct {
		name string
		req  *controlv1.CompleteUpdateRequest
		code codes.Code
	}{
		{"no update id", &controlv1.CompleteUpdateRequest{Cluster: h.ref(), Outcome: controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL}, codes.InvalidArgument},
		{"no outcome", &controlv1.CompleteUpdateRequest{Cluster: h.ref(), UpdateId: "u"}, codes.InvalidArgument},
		{"errors with success", &controlv1.CompleteUpdateRequest{Cluster: h.ref(), UpdateId: "u",
			Outcome: controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL, Errors: []*controlv1.UpdateErrorDetail{{ErrorCode: "Unknown"}}}, codes.InvalidArgument},
		{"unknown update", &controlv1.CompleteUpdateRequest{Cluster: h.ref(), UpdateId: "u", Outcome: controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL}, codes.NotFound},
	}
	for _, tt := range reports {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.updates.CompleteUpdate(ctxT(t), tt.req)
			wanterr.Status(t, err, tt.code, "")
		})
	}
	h.noWrites(t, before)
}

// TestUpgradeCompletedByAdminCLI: `saltbush admin cluster complete-update`
// is the provisioner's report from the command line (the real binary).
func TestUpgradeCompletedByAdminCLI(t *testing.T) {
	h := newUpgradeHarness(t, "up-cli", "1.36")
	u, err := h.upgrade(t, "1.37", "")
	if err != nil {
		t.Fatalf("UpdateClusterVersion: %v", err)
	}
	cli := newAIDCLI(t, h.srv)
	if _, stderr, err := cli.run(t, "", "--account", h.account, "cluster", "complete-update", h.cluster, aws.ToString(u.Id), "Sometimes"); err == nil {
		t.Fatalf("an unknown outcome was accepted: %s", stderr)
	}
	out := cli.ok(t, "", "--account", h.account, "cluster", "complete-update", h.cluster, aws.ToString(u.Id), "Successful",
		"--platform-version", "eks.3")
	if out["updateStatus"] != "Successful" || out["kubernetesVersion"] != "1.37" {
		t.Fatalf("complete-update printed %v", out)
	}
	if c := h.describe(t); c.Status != types.ClusterStatusActive || aws.ToString(c.Version) != "1.37" || aws.ToString(c.PlatformVersion) != "eks.3" {
		t.Fatalf("cluster %s on %s (%s), want ACTIVE on 1.37 (eks.3)", c.Status, aws.ToString(c.Version), aws.ToString(c.PlatformVersion))
	}
	// The newest version has no next one: no upgrade insight, and no
	// upgrade; the upgrade that brought the cluster there gives it a
	// rollback insight about 1.36.
	list, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(h.cluster)})
	if err != nil || len(list.Insights) != 1 || list.Insights[0].Category != types.CategoryRollbackReadiness ||
		aws.ToString(list.Insights[0].KubernetesVersion) != "1.36" {
		t.Fatalf("ListInsights on the newest version = %+v, %v; want the ROLLBACK_READINESS insight about 1.36 alone", list, err)
	}
	_, err = h.upgrade(t, "1.38", "")
	wanterr.Type[*types.InvalidParameterException](t, err)
}
