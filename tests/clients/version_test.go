package clients

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// TestUpgradeWithBotocore: DescribeClusterVersions (paged, filtered),
// the add-on compatibility insight, DescribeAddonVersions for the target
// version and UpdateClusterVersion, through botocore's serializer and
// parser (botocore_version.py); then the provisioner's report, and the AWS
// CLI's describe-update and describe-cluster-versions.
func TestUpgradeWithBotocore(t *testing.T) {
	requireBotocore(t)
	h := newHarness(t, "boto-upgrade")
	if _, err := h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{
		ClusterName: aws.String(h.cluster), AddonName: aws.String("metrics-server"), AddonVersion: aws.String("v0.7.2-eksbuild.4"),
	}); err != nil {
		t.Fatalf("CreateAddon: %v", err)
	}
	var got struct {
		Versions, Chosen []string
		Default          [][]any
		DateTypes        []string
		Insights         [][]string
		Reason           string
		Details          [][]any
		ToMoveTo         [][]any
		Skipped, Second  *struct{ Code, Message string }
		Update           struct {
			ID, Status, Type string
			Params           map[string]string
		}
		ClusterStatus, ClusterVersion string
	}
	lastJSON(t, runEnv(t, h.keys(t), "python3", "botocore_version.py", "--endpoint", h.srv.URL, "--cluster", h.cluster), &got)

	if want := []string{"1.37", "1.36", "1.35", "1.34", "1.33", "1.32"}; !slices.Equal(got.Versions, want) {
		t.Errorf("paged versions = %v, want %v", got.Versions, want)
	}
	if !slices.Equal(got.Chosen, []string{"1.36", "1.35"}) {
		t.Errorf("clusterVersions=1.35,1.36 listed %v", got.Chosen)
	}
	if len(got.Default) != 1 || got.Default[0][0] != "1.36" || got.Default[0][1] != true {
		t.Errorf("defaultOnly listed %v", got.Default)
	}
	if !slices.Equal(got.DateTypes, []string{"datetime"}) {
		t.Errorf("botocore parsed releaseDate as %v, want datetime", got.DateTypes)
	}
	if len(got.Insights) != 1 || !reflect.DeepEqual(got.Insights[0],
		[]string{"Amazon EKS add-on version compatibility", "UPGRADE_READINESS", "1.36", "ERROR"}) {
		t.Errorf("insights = %v", got.Insights)
	}
	if !strings.Contains(got.Reason, "metrics-server") {
		t.Errorf("insight reason %q does not name metrics-server", got.Reason)
	}
	if !reflect.DeepEqual(got.Details, [][]any{{"metrics-server", []any{"v0.8.0-eksbuild.2"}}}) {
		t.Errorf("addonCompatibilityDetails = %v", got.Details)
	}
	if !reflect.DeepEqual(got.ToMoveTo, [][]any{{"v0.8.0-eksbuild.2", "1.36", true}}) {
		t.Errorf("DescribeAddonVersions for 1.36 = %v", got.ToMoveTo)
	}
	if got.Skipped == nil || got.Skipped.Code != "InvalidParameterException" ||
		got.Skipped.Message != "Unsupported Kubernetes minor version update from 1.35 to 1.37" {
		t.Errorf("skipping a minor answered %+v", got.Skipped)
	}
	if u := got.Update; u.Status != "InProgress" || u.Type != "VersionUpdate" || u.Params["Version"] != "1.36" {
		t.Errorf("update = %+v", u)
	}
	if got.Second == nil || got.Second.Code != "ResourceInUseException" || !strings.Contains(got.Second.Message, got.Update.ID) {
		t.Errorf("a second upgrade answered %+v", got.Second)
	}
	if got.ClusterStatus != "UPDATING" || got.ClusterVersion != "1.35" {
		t.Errorf("cluster %s on %s, want UPDATING on 1.35", got.ClusterStatus, got.ClusterVersion)
	}

	if _, err := controlv1.NewClusterUpdateControlServiceClient(h.srv.GRPC(t)).CompleteUpdate(ctxT(t), &controlv1.CompleteUpdateRequest{
		Cluster: h.ref(), UpdateId: got.Update.ID, Outcome: controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL,
	}); err != nil {
		t.Fatalf("CompleteUpdate: %v", err)
	}
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not on PATH (%v)", err)
	}
	cli := func(args ...string) string {
		return runEnv(t, h.keys(t), "aws", append([]string{"eks", "--endpoint-url", h.srv.URL, "--output", "json"}, args...)...)
	}
	var du struct{ Update struct{ Status, Type string } }
	if err := json.Unmarshal([]byte(cli("describe-update", "--name", h.cluster, "--update-id", got.Update.ID)), &du); err != nil {
		t.Fatalf("describe-update: %v", err)
	}
	if du.Update.Status != "Successful" || du.Update.Type != "VersionUpdate" {
		t.Errorf("describe-update printed %+v", du.Update)
	}
	var dv struct {
		ClusterVersions []struct{ ClusterVersion string }
	}
	if err := json.Unmarshal([]byte(cli("describe-cluster-versions", "--cluster-versions", "1.36", "1.37")), &dv); err != nil {
		t.Fatalf("describe-cluster-versions: %v", err)
	}
	if len(dv.ClusterVersions) != 2 || dv.ClusterVersions[0].ClusterVersion != "1.37" {
		t.Errorf("describe-cluster-versions printed %+v", dv.ClusterVersions)
	}
	var dc struct {
		Cluster struct{ Status, Version string }
	}
	if err := json.Unmarshal([]byte(cli("describe-cluster", "--name", h.cluster)), &dc); err != nil {
		t.Fatalf("describe-cluster: %v", err)
	}
	if dc.Cluster.Status != "ACTIVE" || dc.Cluster.Version != "1.36" {
		t.Errorf("describe-cluster printed %+v", dc.Cluster)
	}
}
