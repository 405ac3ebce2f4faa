package conformance

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// refreshMessage is what saltbush says of every insights refresh
// (server/insight/refresh.go).
const refreshMessage = "Insights are computed on every read, so the refresh completed at once."

// wireJSON sends a raw signed façade request and decodes its JSON
// answer, failing unless the status is want.
func (h *upgradeHarness) wireJSON(t *testing.T, method, path string, body []byte, want int) map[string]any {
	t.Helper()
	resp := h.srv.Do(t, method, path, body)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s answered %q: %v", method, path, raw, err)
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestInsightsRefresh: StartInsightsRefresh and DescribeInsightsRefresh
// through the unmodified SDK and on the wire. Before any refresh Describe
// is ResourceNotFoundException; a refresh is COMPLETED at once, recorded
// under the cluster incarnation, and the latest one is described; an
// unknown cluster is ResourceNotFoundException and writes nothing; each
// operation is authorized on the cluster's ARN; a cluster recreated with
// the same name has no refresh.
func TestInsightsRefresh(t *testing.T) {
	h := newUpgradeHarness(t, "refresh-1", "1.35")

	_, err := h.eks.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
	e := wanterr.As[*types.ResourceNotFoundException](t, err)
	if aws.ToString(e.Message) != "No insights refresh found for cluster: refresh-1." || aws.ToString(e.ClusterName) != h.cluster {
		t.Errorf("never refreshed: message %q, clusterName %q", aws.ToString(e.Message), aws.ToString(e.ClusterName))
	}

	before := h.keyspace(t)
	start, err := h.eks.StartInsightsRefresh(ctxT(t), &eks.StartInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
	if err != nil {
		t.Fatalf("StartInsightsRefresh: %v", err)
	}
	if start.Status != types.InsightsRefreshStatusCompleted || aws.ToString(start.Message) != refreshMessage {
		t.Fatalf("StartInsightsRefresh = %s %q, want COMPLETED %q", start.Status, aws.ToString(start.Message), refreshMessage)
	}
	var written []string
	for k := range h.keyspace(t) {
		if _, ok := before[k]; !ok {
			written = append(written, k)
		}
	}
	if len(written) != 1 || !strings.HasPrefix(written[0], "clusters/") || !strings.HasSuffix(written[0], "/insights/refresh") {
		t.Fatalf("StartInsightsRefresh wrote %v, want the one key clusters/{uid}/insights/refresh", written)
	}

	first, err := h.eks.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
	if err != nil {
		t.Fatalf("DescribeInsightsRefresh: %v", err)
	}
	if first.Status != types.InsightsRefreshStatusCompleted || aws.ToString(first.Message) != refreshMessage {
		t.Errorf("DescribeInsightsRefresh = %s %q, want COMPLETED %q", first.Status, aws.ToString(first.Message), refreshMessage)
	}
	recent(t, "startedAt", first.StartedAt)
	recent(t, "endedAt", first.EndedAt)
	if first.StartedAt != nil && first.EndedAt != nil && first.EndedAt.Before(*first.StartedAt) {
		t.Errorf("endedAt %v before startedAt %v", *first.EndedAt, *first.StartedAt)
	}

	t.Run("wire shapes", func(t *testing.T) {
		got := h.wireJSON(t, http.MethodGet, "/clusters/refresh-1/insights-refresh", nil, http.StatusOK)
		if !slices.Equal(keys(got), []string{"endedAt", "message", "startedAt", "status"}) || got["status"] != "COMPLETED" {
			t.Errorf("DescribeInsightsRefresh answered %v", got)
		}
		for _, k := range []string{"startedAt", "endedAt"} {
			if v, ok := got[k].(float64); !ok || v <= 0 {
				t.Errorf("%s = %v (%T), want epoch seconds", k, got[k], got[k])
			}
		}
		for _, body := range [][]byte{nil, []byte(`{}`)} {
			got := h.wireJSON(t, http.MethodPost, "/clusters/refresh-1/insights-refresh", body, http.StatusOK)
			if !slices.Equal(keys(got), []string{"message", "status"}) || got["status"] != "COMPLETED" || got["message"] != refreshMessage {
				t.Errorf("StartInsightsRefresh with body %q answered %v", body, got)
			}
		}
	})

	t.Run("the latest refresh is described", func(t *testing.T) {
		if _, err := h.eks.StartInsightsRefresh(ctxT(t), &eks.StartInsightsRefreshInput{ClusterName: aws.String(h.cluster)}); err != nil {
			t.Fatalf("StartInsightsRefresh: %v", err)
		}
		latest, err := h.eks.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
		if err != nil {
			t.Fatalf("DescribeInsightsRefresh: %v", err)
		}
		if latest.StartedAt == nil || first.StartedAt == nil || latest.StartedAt.Before(*first.StartedAt) {
			t.Errorf("latest startedAt %v, before the first refresh's %v", latest.StartedAt, first.StartedAt)
		}
	})

	t.Run("unknown cluster", func(t *testing.T) {
		before := h.keyspace(t)
		_, err := h.eks.StartInsightsRefresh(ctxT(t), &eks.StartInsightsRefreshInput{ClusterName: aws.String("absent")})
		wanterr.Type[*types.ResourceNotFoundException](t, err)
		_, err = h.eks.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String("absent")})
		wanterr.Type[*types.ResourceNotFoundException](t, err)
		h.noWrites(t, before)
	})

	t.Run("authorized on the cluster's ARN", func(t *testing.T) {
		srv := h.srv
		acct, region := srv.Config.DevAccount, srv.Config.Cluster.Region
		clusterARN := "arn:aws:eks:" + region + ":" + acct + ":cluster/" + h.cluster
		readerARN := "arn:aws:iam::" + acct + ":user/refresh-reader"
		reader := srv.EKSAs(t, srv.NewUser(t, readerARN, policyReadOnly), authOneAttempt)
		otherARN := "arn:aws:iam::" + acct + ":user/refresh-team-b"
		other := srv.EKSAs(t, srv.NewUser(t, otherARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*",
			"Resource":"arn:aws:eks:`+region+`:`+acct+`:cluster/team-b-*"}]}`), authOneAttempt)
		before := h.keyspace(t)
		if _, err := reader.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)}); err != nil {
			t.Errorf("DescribeInsightsRefresh as a reader: %v", err)
		}
		_, err := reader.StartInsightsRefresh(ctxT(t), &eks.StartInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
		checkDenied(t, err, readerARN, denied{action: "eks:StartInsightsRefresh", resource: clusterARN})
		_, err = other.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
		checkDenied(t, err, otherARN, denied{action: "eks:DescribeInsightsRefresh", resource: clusterARN})
		h.noWrites(t, before)
	})

	t.Run("a recreated cluster has no refresh", func(t *testing.T) {
		if _, err := h.eks.DeleteCluster(ctxT(t), &eks.DeleteClusterInput{Name: aws.String(h.cluster)}); err != nil {
			t.Fatalf("DeleteCluster: %v", err)
		}
		if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).FinalizeDeletion(ctxT(t),
			&controlv1.FinalizeDeletionRequest{Cluster: h.ref()}); err != nil {
			t.Fatalf("FinalizeDeletion: %v", err)
		}
		for k := range h.keyspace(t) {
			if strings.HasSuffix(k, "/insights/refresh") {
				t.Errorf("refresh %s outlived its cluster", k)
			}
		}
		in := createInput(h.cluster)
		in.Version = aws.String("1.35")
		if _, err := h.eks.CreateCluster(ctxT(t), in); err != nil {
			t.Fatalf("CreateCluster: %v", err)
		}
		_, err := h.eks.DescribeInsightsRefresh(ctxT(t), &eks.DescribeInsightsRefreshInput{ClusterName: aws.String(h.cluster)})
		wanterr.Type[*types.ResourceNotFoundException](t, err)
	})
}

// listInsights lists the cluster's insights through filter.
func (h *upgradeHarness) listInsights(t *testing.T, cluster string, filter *types.InsightsFilter) []types.InsightSummary {
	t.Helper()
	out, err := h.eks.ListInsights(ctxT(t), &eks.ListInsightsInput{ClusterName: aws.String(cluster), Filter: filter})
	if err != nil {
		t.Fatalf("ListInsights %s: %v", cluster, err)
	}
	return out.Insights
}

// rollbackInsight lists the cluster's ROLLBACK_READINESS insights,
// expects exactly the add-on version compatibility one, and describes it.
func (h *upgradeHarness) rollbackInsight(t *testing.T) (types.InsightSummary, *types.Insight) {
	t.Helper()
	list := h.listInsights(t, h.cluster, &types.InsightsFilter{Categories: []types.Category{types.CategoryRollbackReadiness}})
	if len(list) != 1 || aws.ToString(list[0].Name) != "Amazon EKS add-on version compatibility" ||
		list[0].Category != types.CategoryRollbackReadiness {
		t.Fatalf("ListInsights ROLLBACK_READINESS = %+v, want the add-on version compatibility insight alone", list)
	}
	d, err := h.eks.DescribeInsight(ctxT(t), &eks.DescribeInsightInput{ClusterName: aws.String(h.cluster), Id: list[0].Id})
	if err != nil {
		t.Fatalf("DescribeInsight: %v", err)
	}
	if d.Insight.Category != types.CategoryRollbackReadiness || aws.ToString(d.Insight.Id) != aws.ToString(list[0].Id) {
		t.Fatalf("DescribeInsight = %+v, want the ROLLBACK_READINESS insight %s", d.Insight, aws.ToString(list[0].Id))
	}
	return list[0], d.Insight
}

// TestRollbackReadinessInsight: a cluster created at 1.33 has no
// ROLLBACK_READINESS insight (nothing to roll back to); upgraded to 1.34,
// its insight is about 1.33, PASSING while every installed add-on runs a version
// compatible with 1.33 and ERROR, naming the add-on and the versions that
// are, once one does not (vpc-cni v1.20.4-eksbuild.1 runs on 1.34-1.37
// only, metrics-server v0.7.2-eksbuild.4 on 1.32-1.35: catalog/addons);
// the upgrade insight about 1.35 judges the same add-ons on its own. The
// categories filter selects it; its id stays when the status changes (an
// add-on being deleted is not judged); a cluster on the oldest version
// offered has none.
func TestRollbackReadinessInsight(t *testing.T) {
	h := newUpgradeHarness(t, "rollback-1", "1.33")
	if got := h.listInsights(t, h.cluster, &types.InsightsFilter{Categories: []types.Category{types.CategoryRollbackReadiness}}); len(got) != 0 {
		t.Fatalf("a cluster created at its version has rollback insights %+v, want none", got)
	}
	h.upgradeTo(t, "1.34")

	sum, in := h.rollbackInsight(t)
	if sum.InsightStatus == nil || sum.InsightStatus.Status != types.InsightStatusValuePassing ||
		aws.ToString(sum.KubernetesVersion) != "1.33" || len(in.Resources) != 0 ||
		aws.ToString(in.Description) == "" || aws.ToString(in.Recommendation) == "" {
		t.Fatalf("rollback insight without add-ons = %+v, %+v; want PASSING for 1.33 with nothing listed", sum, in)
	}
	upgrade, _ := h.compatibilityInsight(t)
	if aws.ToString(upgrade.Id) == aws.ToString(sum.Id) || aws.ToString(upgrade.KubernetesVersion) != "1.35" {
		t.Fatalf("upgrade insight %s about %s; want its own id, about 1.35", aws.ToString(upgrade.Id), aws.ToString(upgrade.KubernetesVersion))
	}

	h.addon(t, upgradeAddon, addonOld)
	if sum, in := h.rollbackInsight(t); sum.InsightStatus.Status != types.InsightStatusValuePassing || len(in.Resources) != 1 {
		t.Fatalf("with %s %s: %+v, %d resources; want PASSING with one", upgradeAddon, addonOld, sum.InsightStatus, len(in.Resources))
	}

	h.addon(t, "vpc-cni", vpcCNI)
	sum, in = h.rollbackInsight(t)
	reason := aws.ToString(sum.InsightStatus.Reason)
	if sum.InsightStatus.Status != types.InsightStatusValueError || !strings.Contains(reason, "vpc-cni ("+vpcCNI+")") ||
		strings.Contains(reason, upgradeAddon) || aws.ToString(sum.KubernetesVersion) != "1.33" {
		t.Errorf("rollback insight = %+v about %s; want ERROR about 1.33 naming vpc-cni alone", sum.InsightStatus, aws.ToString(sum.KubernetesVersion))
	}
	details := in.CategorySpecificSummary.AddonCompatibilityDetails
	if len(details) != 1 || aws.ToString(details[0].Name) != "vpc-cni" || !slices.Equal(details[0].CompatibleVersions, []string{"v1.19.6-eksbuild.1"}) {
		t.Errorf("addonCompatibilityDetails = %+v, want vpc-cni with [v1.19.6-eksbuild.1]", details)
	}
	for _, r := range in.Resources {
		want := types.InsightStatusValuePassing
		if strings.Contains(aws.ToString(r.Arn), "/vpc-cni/") {
			want = types.InsightStatusValueError
		}
		if r.InsightStatus == nil || r.InsightStatus.Status != want {
			t.Errorf("resource %s: status %+v, want %s", aws.ToString(r.Arn), r.InsightStatus, want)
		}
	}
	if upgrade, _ := h.compatibilityInsight(t); upgrade.InsightStatus.Status != types.InsightStatusValuePassing {
		t.Errorf("upgrade insight = %+v, want PASSING: both add-ons run on 1.35", upgrade.InsightStatus)
	}

	rollback, upgradeReadiness := types.CategoryRollbackReadiness, types.CategoryUpgradeReadiness
	filters := []struct {
		name   string
		filter *types.InsightsFilter
		want   []types.Category
	}{
		{"ROLLBACK_READINESS", &types.InsightsFilter{Categories: []types.Category{rollback}}, []types.Category{rollback}},
		{"UPGRADE_READINESS", &types.InsightsFilter{Categories: []types.Category{upgradeReadiness}}, []types.Category{upgradeReadiness}},
		{"both categories", &types.InsightsFilter{Categories: []types.Category{rollback, upgradeReadiness}},
			[]types.Category{rollback, upgradeReadiness}},
		{"MISCONFIGURATION", &types.InsightsFilter{Categories: []types.Category{types.CategoryMisconfiguration}}, nil},
		{"ROLLBACK_READINESS and ERROR", &types.InsightsFilter{Categories: []types.Category{rollback},
			Statuses: []types.InsightStatusValue{types.InsightStatusValueError}}, []types.Category{rollback}},
		{"ROLLBACK_READINESS and PASSING", &types.InsightsFilter{Categories: []types.Category{rollback},
			Statuses: []types.InsightStatusValue{types.InsightStatusValuePassing}}, nil},
		{"version 1.33", &types.InsightsFilter{KubernetesVersions: []string{"1.33"}}, []types.Category{rollback}},
		{"none", nil, []types.Category{rollback, upgradeReadiness}},
	}
	for _, tt := range filters {
		t.Run("filter "+tt.name, func(t *testing.T) {
			var got []types.Category
			for _, s := range h.listInsights(t, h.cluster, tt.filter) {
				got = append(got, s.Category)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Fatalf("categories %v, want %v", got, want)
			}
		})
	}

	// UpdateAddon refuses to move vpc-cni back to a version for 1.33, so
	// the way out is deleting it: an add-on being deleted is not judged.
	t.Run("deleting the add-on makes it pass, same id", func(t *testing.T) {
		if _, err := h.eks.DeleteAddon(ctxT(t), &eks.DeleteAddonInput{
			ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
		}); err != nil {
			t.Fatalf("DeleteAddon: %v", err)
		}
		after, in := h.rollbackInsight(t)
		if aws.ToString(after.Id) != aws.ToString(sum.Id) || after.InsightStatus.Status != types.InsightStatusValuePassing ||
			len(in.Resources) != 1 {
			t.Fatalf("rollback insight = %s %+v, %d resources; want %s PASSING with metrics-server alone",
				aws.ToString(after.Id), after.InsightStatus, len(in.Resources), aws.ToString(sum.Id))
		}
	})

	t.Run("the oldest version offered has none", func(t *testing.T) {
		in := createInput("rollback-oldest")
		in.Version = aws.String("1.32")
		if _, err := h.eks.CreateCluster(ctxT(t), in); err != nil {
			t.Fatalf("CreateCluster: %v", err)
		}
		var got []string
		for _, s := range h.listInsights(t, "rollback-oldest", nil) {
			got = append(got, string(s.Category)+" "+aws.ToString(s.KubernetesVersion))
		}
		if !slices.Equal(got, []string{"UPGRADE_READINESS 1.33"}) {
			t.Fatalf("insights of a 1.32 cluster: %v, want the upgrade insight alone", got)
		}
	})
}
