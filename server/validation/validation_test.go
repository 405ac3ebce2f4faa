package validation

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
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
			ctx := context.Background()
			if tc.body != "" {
				ctx = WithBody(ctx, []byte(tc.body))
			}
			err := Check(ctx, tc.req)
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
// (with the body in the context).
func BenchmarkCheck(b *testing.B) {
	req := &eksv1.CreateAddonRequest{ClusterName: "c", AddonName: "vpc-cni", Tags: map[string]string{"team": "net"},
		PodIdentityAssociations: []*eksv1.AddonPodIdentityAssociations{{ServiceAccount: "aws-node", RoleArn: "arn:aws:iam::000000000000:role/x"}}}
	ctx := WithBody(context.Background(), []byte(`{"addonName":"vpc-cni","tags":{"team":"net"},`+
		`"podIdentityAssociations":[{"serviceAccount":"aws-node","roleArn":"arn:aws:iam::000000000000:role/x"}]}`))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
