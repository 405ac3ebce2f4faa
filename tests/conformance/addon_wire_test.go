package conformance

import (
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/google/uuid"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

var podIdentityIDPattern = regexp.MustCompile(`^a-[a-z0-9]{17}$`)

// epochField checks that m[key] is a JSON number (AWS's epoch seconds) and
// replaces it with a marker.
func epochField(t *testing.T, m map[string]any, key string) {
	t.Helper()
	if v, ok := m[key].(float64); !ok || v < 1e9 {
		t.Errorf("%s = %#v, want a JSON number of epoch seconds", key, m[key])
	}
	m[key] = "<epoch-seconds>"
}

// normalizeAddon replaces what differs between runs in an add-on body
// (timestamps, the incarnation uuid, pod identity association ids) with
// markers, after checking their shape.
func normalizeAddon(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	a, ok := body["addon"].(map[string]any)
	if !ok {
		t.Fatalf("no addon object in %v", body)
	}
	epochField(t, a, "createdAt")
	epochField(t, a, "modifiedAt")
	arn, _ := a["addonArn"].(string)
	i := strings.LastIndex(arn, "/")
	if i < 0 || uuid.Validate(arn[i+1:]) != nil {
		t.Errorf("addonArn = %q, want .../{uuid}", arn)
	} else {
		a["addonArn"] = arn[:i+1] + "<uuid>"
	}
	if pias, ok := a["podIdentityAssociations"].([]any); ok {
		for j, p := range pias {
			s, _ := p.(string)
			k := strings.LastIndex(s, "/")
			if k < 0 || !podIdentityIDPattern.MatchString(s[k+1:]) {
				t.Errorf("podIdentityAssociations[%d] = %q, want .../a-{17 alphanumerics}", j, s)
				continue
			}
			pias[j] = s[:k+1] + "<association-id>"
		}
	}
	return body
}

func normalizeUpdate(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	u, ok := body["update"].(map[string]any)
	if !ok {
		t.Fatalf("no update object in %v", body)
	}
	epochField(t, u, "createdAt")
	if id, _ := u["id"].(string); uuid.Validate(id) != nil {
		t.Errorf("update id = %#v, want a UUID", u["id"])
	}
	u["id"] = "<uuid>"
	return body
}

const addonCreateBody = `{
  "addonName": "vpc-cni",
  "addonVersion": "v1.20.4-eksbuild.1",
  "serviceAccountRoleArn": "arn:aws:iam::000000000000:role/cni",
  "resolveConflicts": "OVERWRITE",
  "clientRequestToken": "wire-addon-token-1",
  "tags": {"team": "networking"},
  "configurationValues": "{\"env\": {\"WARM_IP_TARGET\": \"5\"}}",
  "podIdentityAssociations": [{"serviceAccount": "aws-node", "roleArn": "arn:aws:iam::000000000000:role/cni-pod"}],
  "namespaceConfig": {"namespace": "kube-system"}
}`

func TestAddonWireBodies(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	base := h.srv.URL + "/clusters/" + h.cluster

	// No add-ons yet: [] rather than an absent member.
	status, _, body := rawCall(t, h.srv, "GET", base+"/addons", "")
	if status != http.StatusOK || !reflect.DeepEqual(body, map[string]any{"addons": []any{}}) {
		t.Errorf("ListAddons with no add-ons: %d %v, want {\"addons\": []}", status, body)
	}

	status, hdr, body := rawCall(t, h.srv, "POST", base+"/addons", addonCreateBody)
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("CreateAddon: %d %s %v", status, hdr.Get("Content-Type"), body)
	}
	golden(t, "addon_create.json", normalizeAddon(t, body))

	// The same request again (an SDK retry) answers the same.
	status, _, body = rawCall(t, h.srv, "POST", base+"/addons", addonCreateBody)
	if status != http.StatusOK {
		t.Fatalf("CreateAddon retry: %d %v", status, body)
	}
	golden(t, "addon_create.json", normalizeAddon(t, body))

	status, _, body = rawCall(t, h.srv, "GET", base+"/addons/vpc-cni", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddon: %d %v", status, body)
	}
	golden(t, "addon_describe.json", normalizeAddon(t, body))

	status, _, body = rawCall(t, h.srv, "GET", base+"/addons?maxResults=10", "")
	if status != http.StatusOK {
		t.Fatalf("ListAddons: %d %v", status, body)
	}
	golden(t, "addon_list.json", body)

	h.report(t, "vpc-cni", 1, controlv1.AddonPhase_ADDON_PHASE_READY,
		&controlv1.AddonIssue{Code: "InsufficientNumberOfReplicas", Message: "1 of 3 nodes not ready", ResourceIds: []string{"kube-system/aws-node"}})
	status, _, body = rawCall(t, h.srv, "GET", base+"/addons/vpc-cni", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddon: %d %v", status, body)
	}
	golden(t, "addon_describe_degraded.json", normalizeAddon(t, body))

	status, _, body = rawCall(t, h.srv, "POST", base+"/addons/vpc-cni/update", `{
  "addonVersion": "v1.20.4-eksbuild.1",
  "serviceAccountRoleArn": "arn:aws:iam::000000000000:role/cni-2",
  "resolveConflicts": "PRESERVE",
  "clientRequestToken": "wire-update-token-1",
  "configurationValues": "env:\n  WARM_IP_TARGET: \"7\"\n"
}`)
	if status != http.StatusOK {
		t.Fatalf("UpdateAddon: %d %v", status, body)
	}
	updateID, _ := body["update"].(map[string]any)["id"].(string)
	golden(t, "addon_update.json", normalizeUpdate(t, body))

	status, _, body = rawCall(t, h.srv, "GET", base+"/updates/"+updateID+"?addonName=vpc-cni", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeUpdate: %d %v", status, body)
	}
	golden(t, "addon_describe_update.json", normalizeUpdate(t, body))

	status, _, body = rawCall(t, h.srv, "GET", base+"/updates?addonName=vpc-cni", "")
	if status != http.StatusOK || !reflect.DeepEqual(body, map[string]any{"updateIds": []any{updateID}}) {
		t.Errorf("ListUpdates: %d %v, want {\"updateIds\": [%q]}", status, body, updateID)
	}

	status, _, body = rawCall(t, h.srv, "GET", h.srv.URL+"/addons/supported-versions?addonName=coredns&kubernetesVersion=1.35", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddonVersions: %d %v", status, body)
	}
	golden(t, "addon_versions_coredns_1.35.json", body)
	status, _, body = rawCall(t, h.srv, "GET", h.srv.URL+"/addons/supported-versions?addonName=saltbush-noop", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddonVersions: %d %v", status, body)
	}
	golden(t, "addon_versions_noop.json", body)
	status, _, body = rawCall(t, h.srv, "GET", h.srv.URL+"/addons/supported-versions?types=storage&types=gitops&owners=aws&owners=community&kubernetesVersion=1.33", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddonVersions: %d %v", status, body)
	}
	golden(t, "addon_versions_filtered.json", body)

	status, _, body = rawCall(t, h.srv, "GET", h.srv.URL+"/addons/configuration-schemas?addonName=vpc-cni&addonVersion=v1.20.4-eksbuild.1", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeAddonConfiguration: %d %v", status, body)
	}
	if s, ok := body["configurationSchema"].(string); !ok || !strings.HasPrefix(strings.TrimSpace(s), "{") {
		t.Errorf("configurationSchema = %#v, want the schema as a JSON string", body["configurationSchema"])
	}
	body["configurationSchema"] = "<schema>"
	golden(t, "addon_configuration.json", body)

	// DeleteAddon: preserve is sent only when true.
	h.report(t, "vpc-cni", 2, controlv1.AddonPhase_ADDON_PHASE_READY)
	status, _, body = rawCall(t, h.srv, "DELETE", base+"/addons/vpc-cni?preserve=true", "")
	if status != http.StatusOK {
		t.Fatalf("DeleteAddon: %d %v", status, body)
	}
	golden(t, "addon_delete.json", normalizeAddon(t, body))
	if a := h.get(t, "vpc-cni"); !a.GetPreserve() || !a.GetDeleting() || a.GetGeneration() != 3 {
		t.Errorf("after DELETE ?preserve=true: preserve=%v deleting=%v generation %d", a.GetPreserve(), a.GetDeleting(), a.GetGeneration())
	}

	// Without preserve, it is not set.
	if status, _, body := rawCall(t, h.srv, "POST", base+"/addons", `{"addonName": "coredns"}`); status != http.StatusOK {
		t.Fatalf("CreateAddon coredns: %d %v", status, body)
	}
	h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_READY)
	if status, _, body := rawCall(t, h.srv, "DELETE", base+"/addons/coredns", ""); status != http.StatusOK {
		t.Fatalf("DeleteAddon coredns: %d %v", status, body)
	}
	if a := h.get(t, "coredns"); a.GetPreserve() || !a.GetDeleting() {
		t.Errorf("after DELETE without preserve: preserve=%v deleting=%v", a.GetPreserve(), a.GetDeleting())
	}
}

// TestAddonWireEmptyMembers: AWS renders an add-on's empty health issues,
// empty tags and an update's empty errors as present and empty
// (`"health": {"issues": []}`, `"tags": {}`, `"errors": []`; see the AWS CLI
// examples for create-addon, delete-addon, update-addon and
// describe-update). Scripts index them without checking.
func TestAddonWireEmptyMembers(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	base := h.srv.URL + "/clusters/" + h.cluster
	status, _, body := rawCall(t, h.srv, "POST", base+"/addons", `{"addonName": "coredns"}`)
	if status != http.StatusOK {
		t.Fatalf("CreateAddon: %d %v", status, body)
	}
	check := func(op string, body map[string]any) {
		t.Helper()
		a, _ := body["addon"].(map[string]any)
		health, _ := a["health"].(map[string]any)
		if issues, ok := health["issues"].([]any); !ok || len(issues) != 0 {
			t.Errorf("%s: health = %#v, want {\"issues\": []}", op, a["health"])
		}
		if tags, ok := a["tags"].(map[string]any); !ok || len(tags) != 0 {
			t.Errorf("%s: tags = %#v, want {}", op, a["tags"])
		}
	}
	check("CreateAddon", body)
	_, _, body = rawCall(t, h.srv, "GET", base+"/addons/coredns", "")
	check("DescribeAddon", body)

	h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_READY)
	status, _, body = rawCall(t, h.srv, "POST", base+"/addons/coredns/update", `{"configurationValues": "{}"}`)
	if status != http.StatusOK {
		t.Fatalf("UpdateAddon: %d %v", status, body)
	}
	u, _ := body["update"].(map[string]any)
	if errs, ok := u["errors"].([]any); !ok || len(errs) != 0 {
		t.Errorf("UpdateAddon: errors = %#v, want []", u["errors"])
	}
	if params, ok := u["params"].([]any); !ok || len(params) != 1 {
		t.Errorf("UpdateAddon: params = %#v, want one ConfigurationValues param", u["params"])
	}
	h.report(t, "coredns", 2, controlv1.AddonPhase_ADDON_PHASE_READY)
	status, _, body = rawCall(t, h.srv, "DELETE", base+"/addons/coredns", "")
	if status != http.StatusOK {
		t.Fatalf("DeleteAddon: %d %v", status, body)
	}
	check("DeleteAddon", body)

	// ListTagsForResource of an untagged resource: {"tags": {}}.
	arn := url.PathEscape("arn:aws:eks:us-east-1:" + h.account + ":cluster/" + h.cluster)
	status, _, body = rawCall(t, h.srv, "GET", h.srv.URL+"/tags/"+arn, "")
	if tags, ok := body["tags"].(map[string]any); status != http.StatusOK || !ok || len(tags) != 0 {
		t.Errorf("ListTagsForResource of an untagged cluster: %d %v, want {\"tags\": {}}", status, body)
	}
}

// TestAddonUpdateClearsPodIdentityAssociations: AWS's documented way to
// remove an add-on's pod identity associations is UpdateAddon with an
// empty list (`aws eks update-addon --pod-identity-associations "[]"`,
// EKS User Guide "Remove Pod Identity associations from an Amazon EKS
// add-on"); an absent member leaves them as they are. The Go SDK sends
// `[]` for a non-nil empty slice.
func TestAddonUpdateClearsPodIdentityAssociations(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	pia := []types.AddonPodIdentityAssociations{{ServiceAccount: aws.String("aws-node"), RoleArn: aws.String("arn:aws:iam::000000000000:role/cni")}}
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni"), PodIdentityAssociations: pia})
	if got := h.describe(t, "vpc-cni").PodIdentityAssociations; len(got) != 1 {
		t.Fatalf("after create: podIdentityAssociations %v", got)
	}

	// Absent: kept.
	if _, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
		ConfigurationValues: aws.String(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if got := h.describe(t, "vpc-cni").PodIdentityAssociations; len(got) != 1 {
		t.Errorf("an update without podIdentityAssociations dropped them: %v", got)
	}
	h.report(t, "vpc-cni", 2, controlv1.AddonPhase_ADDON_PHASE_READY)

	// Empty: removed.
	out, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.describe(t, "vpc-cni").PodIdentityAssociations; len(got) != 0 {
		t.Errorf("UpdateAddon with podIdentityAssociations [] kept %v", got)
	}
	found := false
	for _, p := range out.Update.Params {
		found = found || p.Type == types.UpdateParamTypePodIdentityAssociations
	}
	if !found {
		t.Errorf("update params %+v do not record the PodIdentityAssociations change", out.Update.Params)
	}
}

func TestAddonWireErrors(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	base := h.srv.URL + "/clusters/" + h.cluster
	if status, _, body := rawCall(t, h.srv, "POST", base+"/addons", `{"addonName": "coredns"}`); status != http.StatusOK {
		t.Fatalf("CreateAddon: %d %v", status, body)
	}
	c := h.cluster

	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantType   string
		wantBody   map[string]any // exact, when set
		wantFields map[string]any // members besides message, when set
	}{
		{
			name: "describe unknown add-on", method: "GET", path: "/clusters/" + c + "/addons/nope",
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantBody: map[string]any{"message": "No addon: nope found in cluster: " + c, "clusterName": c, "addonName": "nope"},
		},
		{
			name: "describe on unknown cluster", method: "GET", path: "/clusters/nope/addons/coredns",
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantBody: map[string]any{"message": "No cluster found for name: nope.", "clusterName": "nope"},
		},
		{
			name: "create duplicate", method: "POST", path: "/clusters/" + c + "/addons", body: `{"addonName": "coredns"}`,
			wantStatus: 409, wantType: "ResourceInUseException",
			wantBody: map[string]any{"message": "Addon already exists.", "clusterName": c, "addonName": "coredns"},
		},
		{
			name: "create on unknown cluster", method: "POST", path: "/clusters/nope/addons", body: `{"addonName": "coredns"}`,
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantBody: map[string]any{"message": "No cluster found for name: nope.", "clusterName": "nope"},
		},
		{
			name: "create unknown add-on", method: "POST", path: "/clusters/" + c + "/addons", body: `{"addonName": "nope"}`,
			wantStatus: 400, wantType: "InvalidParameterException",
			wantFields: map[string]any{"clusterName": c, "addonName": "nope"},
		},
		{
			name: "create without addonName", method: "POST", path: "/clusters/" + c + "/addons", body: `{}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "create with a schema violation", method: "POST", path: "/clusters/" + c + "/addons",
			body:       `{"addonName": "kube-proxy", "configurationValues": "{\"mode\": 7}"}`,
			wantStatus: 400, wantType: "InvalidParameterException",
			wantFields: map[string]any{"clusterName": c, "addonName": "kube-proxy"},
		},
		{
			name: "create with an unknown body member", method: "POST", path: "/clusters/" + c + "/addons",
			body:       `{"addonName": "kube-proxy", "bogus": true}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "create with a wrongly typed member", method: "POST", path: "/clusters/" + c + "/addons",
			body:       `{"addonName": "kube-proxy", "configurationValues": {"mode": "ipvs"}}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "update while CREATING", method: "POST", path: "/clusters/" + c + "/addons/coredns/update", body: `{"configurationValues": "{}"}`,
			wantStatus: 409, wantType: "ResourceInUseException",
			wantBody: map[string]any{"message": "Addon coredns cannot be updated as it is currently in CREATING state", "clusterName": c, "addonName": "coredns"},
		},
		{
			name: "update unknown add-on", method: "POST", path: "/clusters/" + c + "/addons/vpc-cni/update", body: `{}`,
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantFields: map[string]any{"clusterName": c, "addonName": "vpc-cni"},
		},
		{
			name: "delete unknown add-on", method: "DELETE", path: "/clusters/" + c + "/addons/vpc-cni",
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantFields: map[string]any{"clusterName": c, "addonName": "vpc-cni"},
		},
		{
			name: "ListAddons maxResults=0", method: "GET", path: "/clusters/" + c + "/addons?maxResults=0",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "ListAddons forged nextToken", method: "GET", path: "/clusters/" + c + "/addons?nextToken=forged",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "DescribeAddonVersions maxResults=101", method: "GET", path: "/addons/supported-versions?maxResults=101",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "DescribeAddonVersions maxResults not a number", method: "GET", path: "/addons/supported-versions?maxResults=lots",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "DescribeAddonConfiguration unknown version", method: "GET",
			path:       "/addons/configuration-schemas?addonName=coredns&addonVersion=v0.0.1",
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantFields: map[string]any{"addonName": "coredns"},
		},
		{
			name: "DescribeUpdate without addonName", method: "GET", path: "/clusters/" + c + "/updates/" + uuid.NewString(),
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantFields: map[string]any{"clusterName": c},
		},
		{
			name: "ListUpdates maxResults=101", method: "GET", path: "/clusters/" + c + "/updates?addonName=coredns&maxResults=101",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "tag an unknown add-on ARN", method: "POST",
			path:       "/tags/arn%3Aaws%3Aeks%3Aus-east-1%3A000000000000%3Aaddon%2F" + c + "%2Fvpc-cni%2F" + uuid.NewString(),
			body:       `{"tags": {"a": "b"}}`,
			wantStatus: 404, wantType: "NotFoundException",
		},
		{
			name: "tag with a malformed ARN", method: "GET", path: "/tags/not-an-arn",
			wantStatus: 400, wantType: "BadRequestException",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			status, hdr, body := rawCall(t, h.srv, tc.method, h.srv.URL+tc.path, tc.body)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %v)", status, tc.wantStatus, body)
			}
			if got := hdr.Get("X-Amzn-ErrorType"); got != tc.wantType {
				t.Errorf("X-Amzn-ErrorType = %q, want %q", got, tc.wantType)
			}
			if hdr.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", hdr.Get("Content-Type"))
			}
			if msg, _ := body["message"].(string); msg == "" {
				t.Errorf("body %v has no message", body)
			}
			for _, bad := range []string{"code", "__type", "Message"} {
				if _, ok := body[bad]; ok {
					t.Errorf("body %v has a %s member", body, bad)
				}
			}
			if tc.wantBody != nil && !reflect.DeepEqual(body, tc.wantBody) {
				t.Errorf("body = %v, want %v", body, tc.wantBody)
			}
			for k, v := range tc.wantFields {
				if body[k] != v {
					t.Errorf("body member %s = %#v, want %#v (body %v)", k, body[k], v, body)
				}
			}
			addonNoWrites(t, h, before)
		})
	}
}
