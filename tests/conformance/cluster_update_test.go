package conformance

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/grpc/codes"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// clusterUpdateHarness is a running saltbush whose clusters are made per
// case, each in the authentication mode and status the case needs.
type clusterUpdateHarness struct {
	srv *servertest.Server
	eks *eks.Client
}

func newClusterUpdateHarness(t *testing.T) *clusterUpdateHarness {
	t.Helper()
	srv := servertest.Start(t)
	return &clusterUpdateHarness{srv: srv, eks: srv.EKS(t)}
}

// access is an accessHarness view of cluster name (for setStatus, keyspace
// and noWrites).
func (h *clusterUpdateHarness) access(name string) *accessHarness {
	return &accessHarness{srv: h.srv, eks: h.eks, cluster: name, account: h.srv.Config.DevAccount}
}

// cluster creates cluster name in mode (the default when empty) and moves
// it to status (left CREATING when UNSPECIFIED).
func (h *clusterUpdateHarness) cluster(t *testing.T, name string, mode types.AuthenticationMode, status controlv1.ClusterStatus) {
	t.Helper()
	in := createInput(name)
	if mode != "" {
		in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: mode}
	}
	if _, err := h.eks.CreateCluster(ctxT(t), in); err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	if status != controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED {
		h.access(name).setStatus(t, status)
	}
}

func (h *clusterUpdateHarness) describe(t *testing.T, name string) *types.Cluster {
	t.Helper()
	out, err := h.eks.DescribeCluster(ctxT(t), &eks.DescribeClusterInput{Name: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeCluster %s: %v", name, err)
	}
	return out.Cluster
}

func accessUpdate(name string, mode types.AuthenticationMode) *eks.UpdateClusterConfigInput {
	return &eks.UpdateClusterConfigInput{Name: aws.String(name), AccessConfig: &types.UpdateAccessConfigRequest{AuthenticationMode: mode}}
}

// TestUpdateClusterConfigAuthenticationMode: every direction between the
// three modes, with AWS's answers: one step forward is an
// AccessConfigUpdate that DescribeCluster, DescribeUpdate and ListUpdates
// show; anything else (back, the same mode, or CONFIG_MAP straight to API,
// which AWS refuses too) is AWS's InvalidParameterException and writes
// nothing.
func TestUpdateClusterConfigAuthenticationMode(t *testing.T) {
	h := newClusterUpdateHarness(t)
	const (
		cm   = types.AuthenticationModeConfigMap
		both = types.AuthenticationModeApiAndConfigMap
		api  = types.AuthenticationModeApi
	)
	tests := []struct {
		name     string
		from, to types.AuthenticationMode
		ok       bool
	}{
		{"CONFIG_MAP to API_AND_CONFIG_MAP", cm, both, true},
		{"API_AND_CONFIG_MAP to API", both, api, true},
		{"CONFIG_MAP to API", cm, api, false},
		{"API_AND_CONFIG_MAP to CONFIG_MAP", both, cm, false},
		{"API to CONFIG_MAP", api, cm, false},
		{"API to API_AND_CONFIG_MAP", api, both, false},
		{"CONFIG_MAP to CONFIG_MAP", cm, cm, false},
		{"API_AND_CONFIG_MAP to API_AND_CONFIG_MAP", both, both, false},
		{"API to API", api, api, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			name := fmt.Sprintf("modes-%c", 'a'+i)
			h.cluster(t, name, tc.from, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
			before, keys := h.describe(t, name), h.access(name).keyspace(t)

			out, err := h.eks.UpdateClusterConfig(ctx, accessUpdate(name, tc.to))
			if !tc.ok {
				checkAWSErr(t, err, awsErr{code: "InvalidParameterException", cluster: name,
					exact: "Unsupported authentication mode update from " + string(tc.from) + " to " + string(tc.to)})
				h.access(name).noWrites(t, keys)
				if after := h.describe(t, name); !reflect.DeepEqual(after, before) {
					t.Errorf("a refused update changed the cluster:\n before %+v\n after  %+v", before, after)
				}
				ids, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(name)})
				if err != nil || len(ids.UpdateIds) != 0 {
					t.Errorf("ListUpdates after a refused update = %v, %v; want none", ids, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("UpdateClusterConfig: %v", err)
			}
			u := out.Update
			wantParams := []types.UpdateParam{{Type: types.UpdateParamTypeAuthenticationMode, Value: aws.String(`"` + string(tc.to) + `"`)}}
			if u.Type != types.UpdateTypeAccessConfigUpdate || u.Status != types.UpdateStatusSuccessful ||
				!reflect.DeepEqual(u.Params, wantParams) || len(u.Errors) != 0 || aws.ToString(u.Id) == "" {
				t.Errorf("update = %+v, want a Successful AccessConfigUpdate with params %+v", u, wantParams)
			}
			recent(t, "update createdAt", u.CreatedAt)

			c := h.describe(t, name)
			if c.AccessConfig.AuthenticationMode != tc.to || c.Status != types.ClusterStatusActive {
				t.Errorf("after the update: mode %s status %s, want %s ACTIVE", c.AccessConfig.AuthenticationMode, c.Status, tc.to)
			}
			d, err := h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(name), UpdateId: u.Id})
			if err != nil {
				t.Fatalf("DescribeUpdate: %v", err)
			}
			if !reflect.DeepEqual(d.Update, u) {
				t.Errorf("DescribeUpdate = %+v, want %+v", d.Update, u)
			}
			ids, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(name)})
			if err != nil || !reflect.DeepEqual(ids.UpdateIds, []string{aws.ToString(u.Id)}) {
				t.Errorf("ListUpdates = %v, %v; want [%s]", ids, err, aws.ToString(u.Id))
			}
			// A cluster update is not an add-on's.
			_, err = h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(name), UpdateId: u.Id, NodegroupName: aws.String("ng")})
			checkAWSErr(t, err, awsErr{code: "ResourceNotFoundException"})
		})
	}
}

// TestUpdateClusterConfigChain: CONFIG_MAP to API in the two steps AWS
// allows; the access-entry API opens with the first; ListUpdates lists both
// updates in order and pages.
func TestUpdateClusterConfigChain(t *testing.T) {
	h := newClusterUpdateHarness(t)
	ctx := ctxT(t)
	h.cluster(t, "chain", "", controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	if got := h.describe(t, "chain").AccessConfig.AuthenticationMode; got != types.AuthenticationModeConfigMap {
		t.Fatalf("default mode = %s, want CONFIG_MAP", got)
	}
	_, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("chain")})
	wanterr.Like(t, err, &types.InvalidRequestException{})
	wanterr.Contains(t, err, "authentication mode must be set to one of [API, API_AND_CONFIG_MAP]")

	var ids []string
	for _, mode := range []types.AuthenticationMode{types.AuthenticationModeApiAndConfigMap, types.AuthenticationModeApi} {
		out, err := h.eks.UpdateClusterConfig(ctx, accessUpdate("chain", mode))
		if err != nil {
			t.Fatalf("UpdateClusterConfig to %s: %v", mode, err)
		}
		ids = append(ids, aws.ToString(out.Update.Id))
		if _, err := h.eks.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String("chain")}); err != nil {
			t.Errorf("ListAccessEntries in %s: %v", mode, err)
		}
	}
	if got := h.describe(t, "chain").AccessConfig.AuthenticationMode; got != types.AuthenticationModeApi {
		t.Errorf("mode = %s, want API", got)
	}
	var listed []string
	in := &eks.ListUpdatesInput{Name: aws.String("chain"), MaxResults: aws.Int32(1)}
	for page := 0; ; page++ {
		out, err := h.eks.ListUpdates(ctx, in)
		if err != nil {
			t.Fatalf("ListUpdates: %v", err)
		}
		if len(out.UpdateIds) > 1 {
			t.Errorf("page of %d ids with maxResults 1", len(out.UpdateIds))
		}
		listed = append(listed, out.UpdateIds...)
		if out.NextToken == nil || page > 3 {
			break
		}
		in.NextToken = out.NextToken
	}
	if !reflect.DeepEqual(listed, ids) {
		t.Errorf("ListUpdates = %v, want %v (creation order)", listed, ids)
	}
}

// TestUpdateClusterConfigRefusals: what AWS refuses before or instead of a
// change, and that a refused call changes nothing.
func TestUpdateClusterConfigRefusals(t *testing.T) {
	h := newClusterUpdateHarness(t)
	h.cluster(t, "active", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	h.cluster(t, "creating", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED)
	h.cluster(t, "failed", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_FAILED)
	h.cluster(t, "deleting", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	if _, err := h.eks.DeleteCluster(ctxT(t), &eks.DeleteClusterInput{Name: aws.String("deleting")}); err != nil {
		t.Fatal(err)
	}
	toBoth := &types.UpdateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap}
	unsupported := func(member string) awsErr {
		return awsErr{code: "InvalidParameterException", cluster: "active",
			msg: []string{"saltbush does not support changing " + member + " with UpdateClusterConfig"}}
	}

	tests := []struct {
		name string
		in   *eks.UpdateClusterConfigInput
		want awsErr
	}{
		{"unknown mode", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: &types.UpdateAccessConfigRequest{AuthenticationMode: "OIDC"}},
			awsErr{code: "InvalidParameterException", cluster: "active", exact: "1 validation error detected: Value 'OIDC' at 'accessConfig.authenticationMode' " +
				"failed to satisfy constraint: Member must satisfy enum value set: [API, API_AND_CONFIG_MAP, CONFIG_MAP]"}},
		{"access config without a mode", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: &types.UpdateAccessConfigRequest{}},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"accessConfig authenticationMode is required"}}},
		{"nothing to change", &eks.UpdateClusterConfigInput{Name: aws.String("active")},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"No changes were specified"}}},
		{"access config and logging", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: toBoth,
			Logging: &types.Logging{ClusterLogging: []types.LogSetup{{Types: []types.LogType{types.LogTypeApi}, Enabled: aws.Bool(true)}}}},
			awsErr{code: "InvalidParameterException", cluster: "active", exact: "Only one type of update can be allowed."}},
		{"access config and deletion protection", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: toBoth, DeletionProtection: aws.Bool(true)},
			awsErr{code: "InvalidParameterException", cluster: "active", exact: "Only one type of update can be allowed."}},
		{"unsupported member with access config", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: toBoth,
			ZonalShiftConfig: &types.ZonalShiftConfigRequest{Enabled: aws.Bool(true)}},
			awsErr{code: "InvalidParameterException", cluster: "active", exact: "Only one type of update can be allowed."}},
		{"resourcesVpcConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), ResourcesVpcConfig: &types.VpcConfigRequest{EndpointPrivateAccess: aws.Bool(true)}},
			unsupported("resourcesVpcConfig")},
		{"zonalShiftConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), ZonalShiftConfig: &types.ZonalShiftConfigRequest{Enabled: aws.Bool(true)}},
			unsupported("zonalShiftConfig")},
		{"computeConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), ComputeConfig: &types.ComputeConfigRequest{Enabled: aws.Bool(true)}},
			unsupported("computeConfig")},
		{"Auto Mode members together", &eks.UpdateClusterConfigInput{Name: aws.String("active"),
			ComputeConfig:           &types.ComputeConfigRequest{Enabled: aws.Bool(true)},
			StorageConfig:           &types.StorageConfigRequest{BlockStorage: &types.BlockStorage{Enabled: aws.Bool(true)}},
			KubernetesNetworkConfig: &types.KubernetesNetworkConfigRequest{ElasticLoadBalancing: &types.ElasticLoadBalancing{Enabled: aws.Bool(true)}}},
			unsupported("computeConfig, kubernetesNetworkConfig, storageConfig")},
		{"kubernetesNetworkConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), KubernetesNetworkConfig: &types.KubernetesNetworkConfigRequest{IpFamily: types.IpFamilyIpv4}},
			unsupported("kubernetesNetworkConfig")},
		{"storageConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), StorageConfig: &types.StorageConfigRequest{BlockStorage: &types.BlockStorage{Enabled: aws.Bool(true)}}},
			unsupported("storageConfig")},
		{"remoteNetworkConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), RemoteNetworkConfig: &types.RemoteNetworkConfigRequest{}},
			unsupported("remoteNetworkConfig")},
		{"controlPlaneScalingConfig", &eks.UpdateClusterConfigInput{Name: aws.String("active"), ControlPlaneScalingConfig: &types.ControlPlaneScalingConfig{Tier: types.ProvisionedControlPlaneTierTierXl}},
			unsupported("controlPlaneScalingConfig")},
		{"unknown log type", &eks.UpdateClusterConfigInput{Name: aws.String("active"),
			Logging: &types.Logging{ClusterLogging: []types.LogSetup{{Types: []types.LogType{"kubelet"}, Enabled: aws.Bool(true)}}}},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{
				"Value 'kubelet' at 'logging.clusterLogging.1.member.types.1.member' failed to satisfy constraint: Member must satisfy enum value set"}}},
		{"logging already so", &eks.UpdateClusterConfigInput{Name: aws.String("active"),
			Logging: &types.Logging{ClusterLogging: []types.LogSetup{{Types: []types.LogType{types.LogTypeApi}, Enabled: aws.Bool(false)}}}},
			awsErr{code: "InvalidParameterException", cluster: "active", exact: "No changes needed for the logging config provided"}},
		{"deletion protection already off", &eks.UpdateClusterConfigInput{Name: aws.String("active"), DeletionProtection: aws.Bool(false)},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"already at the desired configuration with deletionProtection: false"}}},
		{"unknown support type", &eks.UpdateClusterConfigInput{Name: aws.String("active"), UpgradePolicy: &types.UpgradePolicyRequest{SupportType: "FOREVER"}},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"'upgradePolicy.supportType'"}}},
		{"support type already so", &eks.UpdateClusterConfigInput{Name: aws.String("active"), UpgradePolicy: &types.UpgradePolicyRequest{SupportType: types.SupportTypeExtended}},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"already at the desired configuration with upgradePolicy supportType: EXTENDED"}}},
		{"bad client token", &eks.UpdateClusterConfigInput{Name: aws.String("active"), AccessConfig: toBoth, ClientRequestToken: aws.String(strings.Repeat("t", 65))},
			awsErr{code: "InvalidParameterException", cluster: "active", msg: []string{"clientRequestToken"}}},
		{"no such cluster", accessUpdate("missing", types.AuthenticationModeApiAndConfigMap),
			awsErr{code: "ResourceNotFoundException", cluster: "missing", exact: "No cluster found for name: missing."}},
		{"bad cluster name", accessUpdate("a.b", types.AuthenticationModeApiAndConfigMap),
			awsErr{code: "InvalidParameterException", msg: []string{"at 'name' failed to satisfy constraint"}}},
		{"CREATING cluster", accessUpdate("creating", types.AuthenticationModeApiAndConfigMap),
			awsErr{code: "ResourceInUseException", cluster: "creating", exact: "Cannot AccessConfigUpdate because cluster creating is currently in CREATING state; it must be ACTIVE"}},
		{"FAILED cluster", accessUpdate("failed", types.AuthenticationModeApiAndConfigMap),
			awsErr{code: "ResourceInUseException", cluster: "failed", exact: "Cannot AccessConfigUpdate because cluster failed is currently in FAILED state; it must be ACTIVE"}},
		{"DELETING cluster", accessUpdate("deleting", types.AuthenticationModeApiAndConfigMap),
			awsErr{code: "ResourceInUseException", cluster: "deleting", exact: "Cannot AccessConfigUpdate because cluster deleting is currently in DELETING state; it must be ACTIVE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := aws.ToString(tc.in.Name)
			var before *types.Cluster
			if name != "missing" && name != "a.b" {
				before = h.describe(t, name)
			}
			keys := h.access(name).keyspace(t)
			_, err := h.eks.UpdateClusterConfig(ctxT(t), tc.in)
			checkAWSErr(t, err, tc.want)
			h.access(name).noWrites(t, keys)
			if before != nil {
				if after := h.describe(t, name); !reflect.DeepEqual(after, before) {
					t.Errorf("a refused update changed the cluster:\n before %+v\n after  %+v", before, after)
				}
			}
		})
	}
}

// TestUpdateClusterConfigIdempotency: a retry with the same
// clientRequestToken and parameters returns the first update (though the
// same change would now be refused) and writes nothing; the same token with
// other parameters is refused.
func TestUpdateClusterConfigIdempotency(t *testing.T) {
	h := newClusterUpdateHarness(t)
	ctx := ctxT(t)
	h.cluster(t, "retry", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	in := accessUpdate("retry", types.AuthenticationModeApiAndConfigMap)
	in.ClientRequestToken = aws.String("update-config-token-1")
	first, err := h.eks.UpdateClusterConfig(ctx, in)
	if err != nil {
		t.Fatalf("UpdateClusterConfig: %v", err)
	}
	keys := h.access("retry").keyspace(t)

	tests := []struct {
		name string
		in   *eks.UpdateClusterConfigInput
		want *awsErr
	}{
		{"same token, same parameters", in, nil},
		{"same token, other parameters", &eks.UpdateClusterConfigInput{Name: aws.String("retry"), ClientRequestToken: in.ClientRequestToken,
			AccessConfig: &types.UpdateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}},
			&awsErr{code: "InvalidParameterException", cluster: "retry", msg: []string{"clientRequestToken was already used"}}},
		{"a new token (the SDK fills one in), same parameters", accessUpdate("retry", types.AuthenticationModeApiAndConfigMap),
			&awsErr{code: "InvalidParameterException", cluster: "retry", exact: "Unsupported authentication mode update from API_AND_CONFIG_MAP to API_AND_CONFIG_MAP"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.eks.UpdateClusterConfig(ctx, tc.in)
			if tc.want != nil {
				checkAWSErr(t, err, *tc.want)
			} else if err != nil {
				t.Fatalf("retry: %v", err)
			} else if !reflect.DeepEqual(out.Update, first.Update) {
				t.Errorf("retry = %+v, want the first update %+v", out.Update, first.Update)
			}
			h.access("retry").noWrites(t, keys)
		})
	}
	ids, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String("retry")})
	if err != nil || len(ids.UpdateIds) != 1 {
		t.Errorf("ListUpdates = %v, %v; want one update", ids, err)
	}

	t.Run("token of a deleted incarnation", func(t *testing.T) {
		if _, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("retry")}); err != nil {
			t.Fatal(err)
		}
		cc := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t))
		if _, err := cc.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: h.access("retry").ref()}); err != nil {
			t.Fatalf("FinalizeDeletion: %v", err)
		}
		h.cluster(t, "retry", types.AuthenticationModeConfigMap, controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
		_, err := h.eks.UpdateClusterConfig(ctx, in)
		checkAWSErr(t, err, awsErr{code: "ResourceInUseException", cluster: "retry", msg: []string{"no longer exists"}})
		if got := h.describe(t, "retry").AccessConfig.AuthenticationMode; got != types.AuthenticationModeConfigMap {
			t.Errorf("mode of the new incarnation = %s, want CONFIG_MAP", got)
		}
	})
}

// TestUpdateClusterConfigStoredSettings: logging, deletionProtection and
// upgradePolicy are configuration saltbush stores and echoes; each change
// is its own update and DescribeCluster shows it.
func TestUpdateClusterConfigStoredSettings(t *testing.T) {
	h := newClusterUpdateHarness(t)
	ctx := ctxT(t)
	h.cluster(t, "settings", "", controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	name := aws.String("settings")
	tests := []struct {
		name   string
		in     *eks.UpdateClusterConfigInput
		typ    types.UpdateType
		params []types.UpdateParam
		check  func(c *types.Cluster) bool
	}{
		{"enable two log types", &eks.UpdateClusterConfigInput{Name: name, Logging: &types.Logging{ClusterLogging: []types.LogSetup{
			{Types: []types.LogType{types.LogTypeAudit, types.LogTypeApi}, Enabled: aws.Bool(true)}}}},
			types.UpdateTypeLoggingUpdate,
			[]types.UpdateParam{{Type: types.UpdateParamTypeClusterLogging, Value: aws.String(`[{"types":["audit","api"],"enabled":true}]`)}},
			func(c *types.Cluster) bool {
				return reflect.DeepEqual(c.Logging.ClusterLogging, []types.LogSetup{
					{Types: []types.LogType{types.LogTypeApi, types.LogTypeAudit}, Enabled: aws.Bool(true)},
					{Types: []types.LogType{types.LogTypeAuthenticator, types.LogTypeControllerManager, types.LogTypeScheduler}, Enabled: aws.Bool(false)},
				})
			}},
		{"disable one of them", &eks.UpdateClusterConfigInput{Name: name, Logging: &types.Logging{ClusterLogging: []types.LogSetup{
			{Types: []types.LogType{types.LogTypeApi}, Enabled: aws.Bool(false)}}}},
			types.UpdateTypeLoggingUpdate,
			[]types.UpdateParam{{Type: types.UpdateParamTypeClusterLogging, Value: aws.String(`[{"types":["api"],"enabled":false}]`)}},
			func(c *types.Cluster) bool {
				return len(c.Logging.ClusterLogging) == 2 && reflect.DeepEqual(c.Logging.ClusterLogging[0].Types, []types.LogType{types.LogTypeAudit})
			}},
		{"deletion protection on", &eks.UpdateClusterConfigInput{Name: name, DeletionProtection: aws.Bool(true)},
			types.UpdateTypeDeletionProtectionUpdate,
			[]types.UpdateParam{{Type: types.UpdateParamTypeDeletionProtection, Value: aws.String("true")}},
			func(c *types.Cluster) bool { return aws.ToBool(c.DeletionProtection) }},
		{"standard support", &eks.UpdateClusterConfigInput{Name: name, UpgradePolicy: &types.UpgradePolicyRequest{SupportType: types.SupportTypeStandard}},
			types.UpdateTypeUpgradePolicyUpdate,
			[]types.UpdateParam{{Type: types.UpdateParamTypeUpgradePolicy, Value: aws.String(`{"supportType":"STANDARD"}`)}},
			func(c *types.Cluster) bool { return c.UpgradePolicy.SupportType == types.SupportTypeStandard }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.eks.UpdateClusterConfig(ctx, tc.in)
			if err != nil {
				t.Fatalf("UpdateClusterConfig: %v", err)
			}
			if out.Update.Type != tc.typ || out.Update.Status != types.UpdateStatusSuccessful || !reflect.DeepEqual(out.Update.Params, tc.params) {
				t.Errorf("update = %+v %+v, want Successful %s %+v", out.Update, out.Update.Params, tc.typ, tc.params)
			}
			if c := h.describe(t, "settings"); !tc.check(c) {
				t.Errorf("DescribeCluster does not show the change: logging %+v deletionProtection %v upgradePolicy %+v",
					c.Logging, aws.ToBool(c.DeletionProtection), c.UpgradePolicy)
			}
		})
	}
	// Deletion protection, now on, is honoured.
	_, err := h.eks.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: name})
	checkAWSErr(t, err, awsErr{code: "InvalidRequestException", cluster: "settings", msg: []string{"deletion protection is enabled"}})
}

// TestUpdateClusterConfigWire: AWS's REST-JSON route and body shapes, and
// the authorization action.
func TestUpdateClusterConfigWire(t *testing.T) {
	h := newClusterUpdateHarness(t)
	h.cluster(t, "wire", "", controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	base := h.srv.URL + "/clusters/wire"

	status, _, body := rawCall(t, h.srv, "POST", base+"/update-config", `{"accessConfig":{"authenticationMode":"API_AND_CONFIG_MAP"},"clientRequestToken":"wire-1"}`)
	if status != http.StatusOK {
		t.Fatalf("UpdateClusterConfig: %d %v", status, body)
	}
	u, _ := body["update"].(map[string]any)
	id, _ := u["id"].(string)
	want := map[string]any{"id": id, "status": "Successful", "type": "AccessConfigUpdate",
		"params": []any{map[string]any{"type": "AuthenticationMode", "value": `"API_AND_CONFIG_MAP"`}}, "errors": []any{}}
	epochField(t, u, "createdAt")
	delete(u, "createdAt")
	if !reflect.DeepEqual(u, want) {
		t.Errorf("update body = %v, want %v", u, want)
	}
	status, _, body = rawCall(t, h.srv, "GET", base+"/updates/"+id, "")
	if d, _ := body["update"].(map[string]any); status != http.StatusOK || d["type"] != "AccessConfigUpdate" {
		t.Errorf("DescribeUpdate: %d %v", status, body)
	}
	status, _, body = rawCall(t, h.srv, "GET", base+"/updates", "")
	if status != http.StatusOK || !reflect.DeepEqual(body["updateIds"], []any{id}) {
		t.Errorf("ListUpdates: %d %v", status, body)
	}

	for _, tc := range []struct{ name, body string }{
		{"unknown member", `{"accessConfig":{"authenticationMode":"API"},"version":"1.36"}`},
		{"name in the body", `{"name":"other","accessConfig":{"authenticationMode":"API"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := rawCall(t, h.srv, "POST", base+"/update-config", tc.body)
			if status != http.StatusBadRequest {
				t.Errorf("%s: %d %s %v, want 400", tc.name, status, hdr.Get("X-Amzn-ErrorType"), body)
			}
		})
	}

	t.Run("denied without eks:UpdateClusterConfig", func(t *testing.T) {
		const user = "arn:aws:iam::000000000000:user/describer"
		creds := h.srv.NewUser(t, user, policyReadOnly)
		client := h.srv.EKSAs(t, creds)
		before := h.access("wire").keyspace(t)
		_, err := client.UpdateClusterConfig(ctxT(t), accessUpdate("wire", types.AuthenticationModeApi))
		checkDenied(t, err, user, denied{action: "eks:UpdateClusterConfig", resource: "arn:aws:eks:us-east-1:000000000000:cluster/wire"})
		h.access("wire").noWrites(t, before)
	})
}

// TestUpdateClusterConfigOverGRPC: the same RPC on the gRPC port, its
// errors carrying the AWS exception as ErrorInfo, its update visible on the
// façade.
func TestUpdateClusterConfigOverGRPC(t *testing.T) {
	h := newClusterUpdateHarness(t)
	ctx := ctxT(t)
	h.cluster(t, "grpc", "", controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE)
	clusters := eksv1.NewClusterServiceClient(h.srv.GRPC(t))

	_, err := clusters.UpdateClusterConfig(ctx, &eksv1.UpdateClusterConfigRequest{Name: "grpc",
		AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: "API"}})
	if code, reason := errorReason(err); code != codes.InvalidArgument || reason != "InvalidParameterException" {
		t.Errorf("CONFIG_MAP to API over gRPC = %v/%q, want InvalidArgument/InvalidParameterException", code, reason)
	}
	_, err = clusters.UpdateClusterConfig(ctx, &eksv1.UpdateClusterConfigRequest{Name: "nope",
		AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: "API"}})
	if code, reason := errorReason(err); code != codes.NotFound || reason != "ResourceNotFoundException" {
		t.Errorf("UpdateClusterConfig(nope) over gRPC = %v/%q, want NotFound/ResourceNotFoundException", code, reason)
	}
	out, err := clusters.UpdateClusterConfig(ctx, &eksv1.UpdateClusterConfigRequest{Name: "grpc",
		AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: "API_AND_CONFIG_MAP"}})
	if err != nil {
		t.Fatalf("UpdateClusterConfig over gRPC: %v", err)
	}
	if u := out.GetUpdate(); u.GetType() != "AccessConfigUpdate" || u.GetStatus() != "Successful" {
		t.Errorf("update over gRPC = %v", u)
	}
	d, err := h.eks.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String("grpc"), UpdateId: aws.String(out.GetUpdate().GetId())})
	if err != nil || d.Update.Type != types.UpdateTypeAccessConfigUpdate {
		t.Errorf("DescribeUpdate on the façade = %v, %v", d, err)
	}
	if got := h.describe(t, "grpc").AccessConfig.AuthenticationMode; got != types.AuthenticationModeApiAndConfigMap {
		t.Errorf("mode = %s, want API_AND_CONFIG_MAP", got)
	}
}
