package validation

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/presence"
)

func TestCheck(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	long := strings.Repeat("a", 256)
	tests := []struct {
		name string
		req  proto.Message
		// body is what the façade received, when the request came through it.
		body      string
		exception string
		message   string
	}{
		{name: "valid create", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni"}},
		{
			name: "empty role ARN in the body", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni"},
			body: `{"addonName":"vpc-cni","serviceAccountRoleArn":""}`, exception: errdefs.InvalidParameterException,
			message: "1 validation error detected: Value '' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "empty role ARN on gRPC is absent", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni"},
		},
		{
			name: "role ARN too long", req: &eksv1.UpdateAddonRequest{ClusterName: "c", AddonName: "a", ServiceAccountRoleArn: &long},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value '" + long + "' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length less than or equal to 255",
		},
		{
			// Not required: taken as absent, as AWS takes it.
			name: "empty optional tags in the body", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni"},
			body: `{"addonName":"vpc-cni","tags":{}}`,
		},
		{
			name: "empty required tags in the body", req: &eksv1.TagResourceRequest{ResourceArn: "arn"},
			body: `{"tags":{}}`, exception: errdefs.BadRequestException,
			message: "1 validation error detected: Value '{}' at 'tags' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "tag key too long", req: &eksv1.TagResourceRequest{ResourceArn: "arn", Tags: map[string]string{strings.Repeat("k", 129): "v"}},
			exception: errdefs.BadRequestException,
			message: "1 validation error detected: Value '{" + strings.Repeat("k", 129) + "=v}' at 'tags' failed to satisfy constraint: " +
				"Map keys must satisfy constraint: [Member must have length less than or equal to 128, Member must have length greater than or equal to 1]",
		},
		{
			name: "cluster name label not UTF-8", req: &eksv1.ListAddonsRequest{ClusterName: "c\xff"},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value at 'clusterName' failed to satisfy constraint: Member must be valid UTF-8",
		},
		{
			name: "tag value not UTF-8, in a map", req: &eksv1.TagResourceRequest{ResourceArn: "arn", Tags: map[string]string{"k": "\xfe"}},
			exception: errdefs.BadRequestException,
			message:   "1 validation error detected: Value at 'tags' failed to satisfy constraint: Member must be valid UTF-8",
		},
		{
			name: "nested list member not UTF-8", req: &eksv1.CreateClusterRequest{
				Name: "c", RoleArn: "r", ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-\xff"}},
			},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value at 'resourcesVpcConfig.subnetIds' failed to satisfy constraint: Member must be valid UTF-8",
		},
		{
			name: "max results over 100", req: &eksv1.ListAddonsRequest{ClusterName: "c", MaxResults: i32(101)},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value '101' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100",
		},
		{
			name: "two remote node networks", req: &eksv1.CreateClusterRequest{
				Name: "c", RoleArn: "r", ResourcesVpcConfig: &eksv1.VpcConfigRequest{},
				RemoteNetworkConfig: &eksv1.RemoteNetworkConfig{RemoteNodeNetworks: []*eksv1.RemoteNetwork{
					{Cidrs: []string{"10.0.0.0/8"}}, {Cidrs: []string{"172.16.0.0/12"}},
				}},
			},
			exception: errdefs.InvalidParameterException,
			message: "1 validation error detected: Value '[{cidrs=[10.0.0.0/8]}, {cidrs=[172.16.0.0/12]}]' at 'remoteNetworkConfig.remoteNodeNetworks' " +
				"failed to satisfy constraint: Member must have length less than or equal to 1",
		},
		{
			name: "cluster name pattern and missing members", req: &eksv1.CreateClusterRequest{Name: "-bad"},
			exception: errdefs.InvalidParameterException,
			message: "3 validation errors detected: " +
				"Value '-bad' at 'name' failed to satisfy constraint: Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]*; " +
				"Value null at 'resourcesVpcConfig' failed to satisfy constraint: Member must not be null; " +
				"Value null at 'roleArn' failed to satisfy constraint: Member must not be null",
		},
		{
			name: "enum", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "a", ResolveConflicts: "KEEP"},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value 'KEEP' at 'resolveConflicts' failed to satisfy constraint: Member must satisfy enum value set: [OVERWRITE, NONE, PRESERVE]",
		},
		{
			name: "nested required member of a list element", req: &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "a",
				PodIdentityAssociations: []*eksv1.AddonPodIdentityAssociations{{RoleArn: "r"}}},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value null at 'podIdentityAssociations.1.member.serviceAccount' failed to satisfy constraint: Member must not be null",
		},
		{
			name: "tag keys over 50", req: &eksv1.UntagResourceRequest{ResourceArn: "arn", TagKeys: make([]string, 51)},
			exception: errdefs.BadRequestException,
		},
		{
			name: "operation with only a server exception answers InvalidParameterException", req: &eksv1.ListAccessPoliciesRequest{MaxResults: i32(0)},
			exception: errdefs.InvalidParameterException,
			message:   "1 validation error detected: Value '0' at 'maxResults' failed to satisfy constraint: Member must have value greater than or equal to 1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.body != "" {
				// As the façade's decoder leaves the message it decoded.
				if err := presence.Record(tc.req, []byte(tc.body)); err != nil {
					t.Fatalf("presence.Record: %v", err)
				}
			}
			err := Check(context.Background(), tc.req)
			if tc.exception == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var e *errdefs.Error
			if !errors.As(err, &e) {
				t.Fatalf("Check: %v, want an *errdefs.Error", err)
			}
			if e.Exception != tc.exception {
				t.Errorf("exception %s, want %s", e.Exception, tc.exception)
			}
			if tc.message != "" && e.Message != tc.message {
				t.Errorf("message\n%s\nwant\n%s", e.Message, tc.message)
			}
		})
	}
}

func TestCheckRefusesAnOperationOutsideTheModel(t *testing.T) {
	if err := Check(context.Background(), &eksv1.AddonHealth{}); err == nil {
		t.Fatal("Check of a message that is no operation's input: nil error")
	}
}

// BenchmarkCheck measures one CreateAddon check as the façade makes it
// (the message its decoder made of a body whose members it all shows).
func BenchmarkCheck(b *testing.B) {
	req := &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni", Tags: map[string]string{"team": "net"},
		PodIdentityAssociations: []*eksv1.AddonPodIdentityAssociations{{ServiceAccount: "aws-node", RoleArn: "arn:aws:iam::000000000000:role/x"}}}
	if err := presence.Record(req, []byte(`{"addonName":"vpc-cni","tags":{"team":"net"},`+
		`"podIdentityAssociations":[{"serviceAccount":"aws-node","roleArn":"arn:aws:iam::000000000000:role/x"}]}`)); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestModelForTheFacade: the answers the façade words its messages about a
// request it could not decode with (gateway.Model; gateway/parse_test.go
// assumes the same answers).
func TestModelForTheFacade(t *testing.T) {
	var m Model
	members := []struct {
		op       string
		path     []any
		name, ty string
	}{
		{op: "CreateCluster", path: []any{"resourcesVpcConfig"}, name: "resourcesVpcConfig", ty: "a structure"},
		{op: "UpdateAddon", path: []any{"configurationValues"}, name: "configurationValues", ty: "a string"},
		{op: "ListInsights", path: []any{"maxResults"}, name: "maxResults", ty: "an integer"},
		{op: "CreateAddon", path: []any{"podIdentityAssociations", 0, "roleArn"}, name: "podIdentityAssociations.1.member.roleArn", ty: "a string"},
		{op: "TagResource", path: []any{"tags", "a"}, name: "tags", ty: "a map of strings"},
	}
	for _, c := range members {
		if name, ty, ok := m.Member(c.op, c.path); !ok || name != c.name || ty != c.ty {
			t.Errorf("Member(%s, %v) = %q %q %v, want %q %q", c.op, c.path, name, ty, ok, c.name, c.ty)
		}
	}
	for _, op := range []string{"ListAddons", "ListInsights"} {
		minV, maxV, ok := m.MemberConstraint(op, "maxResults")
		if !ok || minV == nil || *minV != 1 || maxV == nil || *maxV != 100 {
			t.Errorf("MemberConstraint(%s, maxResults) = %v %v %v, want 1 100", op, minV, maxV, ok)
		}
	}
	if exc, ok := m.Exception("TagResource"); !ok || exc != errdefs.BadRequestException {
		t.Errorf("Exception(TagResource) = %q %v, want %s", exc, ok, errdefs.BadRequestException)
	}
	if got := m.Render([]any{"a", json.Number("1")}); got != "[a, 1]" {
		t.Errorf("Render(list) = %q", got)
	}
	if got := m.Render(map[string]any{"b": json.Number("2"), "a": json.Number("1")}); got != "{a=1, b=2}" {
		t.Errorf("Render(object) = %q", got)
	}
}

// TestCheckSeesTheRecordWhicheverPortSentIt: Check's one input is the
// message; a record in it is read the same whoever put it there, and
// taken out of it. A service account sent as "" is present (the model
// gives it no minimum); without the record it is absent, and required.
func TestCheckSeesTheRecordWhicheverPortSentIt(t *testing.T) {
	newReq := func() *eksv1.CreateAddonRequest {
		return &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni",
			PodIdentityAssociations: []*eksv1.AddonPodIdentityAssociations{{RoleArn: "r"}}}
	}
	absent := "1 validation error detected: Value null at 'podIdentityAssociations.1.member.serviceAccount' failed to satisfy constraint: " +
		"Member must not be null"
	err := Check(context.Background(), newReq())
	if e := (*errdefs.Error)(nil); !errors.As(err, &e) || e.Message != absent {
		t.Fatalf("Check without a record = %v, want %q", err, absent)
	}

	req := newReq()
	if err := presence.Record(req, []byte(`{"addonName":"vpc-cni","podIdentityAssociations":[{"serviceAccount":"","roleArn":"r"}]}`)); err != nil {
		t.Fatal(err)
	}
	// Over the wire, as a gRPC caller would send it.
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	received := &eksv1.CreateAddonRequest{}
	if err := proto.Unmarshal(b, received); err != nil {
		t.Fatal(err)
	}
	for name, msg := range map[string]*eksv1.CreateAddonRequest{"decoded": req, "received": received} {
		if err := Check(context.Background(), msg); err != nil {
			t.Errorf("%s: Check = %v, want nil", name, err)
		}
		if len(msg.ProtoReflect().GetUnknown()) != 0 {
			t.Errorf("%s: the record is still in the message after Check", name)
		}
	}
}
