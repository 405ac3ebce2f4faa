package gateway

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// newBenchMarshaler is the façade's marshaler, configured as New does.
func newBenchMarshaler() awsJSON {
	return newAWSJSON(protojson.UnmarshalOptions{DiscardUnknown: false})
}

// benchAddonResponse is a DescribeAddon response as the add-on service
// returns it for an ACTIVE add-on: no tags and no issues, so the
// always-present members have to be added.
func benchAddonResponse() *eksv1.DescribeAddonResponse {
	return &eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{
		AddonName: "coredns", ClusterName: "c", Status: "ACTIVE", AddonVersion: "v1.11.4-eksbuild.2",
		Health: &eksv1.AddonHealth{}, AddonArn: "arn:aws:eks:us-east-1:000000000000:addon/c/coredns/0b9e7c1d-3f4a-4e2b-8c6d-5a1f2e3d4c5b",
		CreatedAt: 1800000000.123, ModifiedAt: 1800000000.456, Publisher: "eks", Owner: "aws",
		NamespaceConfig: &eksv1.AddonNamespaceConfigResponse{Namespace: "kube-system"},
	}}
}

// benchClusterResponse is a DescribeCluster response shaped like
// server/cluster/convert.go's ToAPI of an ACTIVE cluster with tags,
// logging and an OIDC issuer.
func benchClusterResponse() *eksv1.DescribeClusterResponse {
	return &eksv1.DescribeClusterResponse{Cluster: &eksv1.Cluster{
		Name: "prod-eu", Arn: "arn:aws:eks:us-east-1:000000000000:cluster/prod-eu", CreatedAt: 1800000000.123,
		Version: "1.33", Endpoint: "https://0F1E2D3C4B5A69788796A5B4C3D2E1F0.gr7.us-east-1.eks.amazonaws.com",
		RoleArn: "arn:aws:iam::000000000000:role/eks-cluster",
		ResourcesVpcConfig: &eksv1.VpcConfigResponse{
			SubnetIds:        []string{"subnet-0a1b2c3d4e5f60718", "subnet-1a2b3c4d5e6f70819"},
			SecurityGroupIds: []string{"sg-0123456789abcdef0"}, ClusterSecurityGroupId: "sg-0fedcba9876543210",
			VpcId: "vpc-0123456789abcdef0", EndpointPublicAccess: proto.Bool(true), EndpointPrivateAccess: proto.Bool(false),
			PublicAccessCidrs: []string{"0.0.0.0/0"},
		},
		KubernetesNetworkConfig: &eksv1.KubernetesNetworkConfigResponse{ServiceIpv4Cidr: "10.100.0.0/16", IpFamily: "ipv4"},
		Logging: &eksv1.Logging{ClusterLogging: []*eksv1.LogSetup{
			{Types: []string{"api", "audit"}, Enabled: proto.Bool(true)},
			{Types: []string{"authenticator", "controllerManager", "scheduler"}, Enabled: proto.Bool(false)},
		}},
		Status:               "ACTIVE",
		CertificateAuthority: &eksv1.Certificate{Data: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUREQmhyTTNNdGMyVnkK"},
		ClientRequestToken:   "5e0f3c9a-8b7d-4c6e-9f1a-2b3c4d5e6f70", PlatformVersion: "eks.1",
		Tags:               map[string]string{"team": "platform", "env": "prod", "cost-centre": "42"},
		AccessConfig:       &eksv1.AccessConfigResponse{BootstrapClusterCreatorAdminPermissions: proto.Bool(true), AuthenticationMode: "API_AND_CONFIG_MAP"},
		UpgradePolicy:      &eksv1.UpgradePolicy{SupportType: "STANDARD"},
		DeletionProtection: proto.Bool(false),
		Identity:           &eksv1.Identity{Oidc: &eksv1.OIDC{Issuer: "https://oidc.eks.us-east-1.amazonaws.com/id/0F1E2D3C4B5A69788796A5B4C3D2E1F0"}},
	}}
}

// benchListAddonsResponse is one page of BenchmarkAddonList's listing
// (tests/bench/addon_test.go): ten names and a continuation token.
func benchListAddonsResponse() *eksv1.ListAddonsResponse {
	resp := &eksv1.ListAddonsResponse{NextToken: "eyJrIjoiYmVuY2gtYWRkb24tMDA5IiwidiI6MX0"}
	for i := range 10 {
		resp.Addons = append(resp.Addons, fmt.Sprintf("bench-addon-%03d", i))
	}
	return resp
}

// BenchmarkMarshal measures the façade's response marshaler on the
// responses the façade benchmarks (tests/bench) send most: awsJSON is the
// marshaler, legacy the one it replaced (marshal_legacy_test.go), and
// protojson alone, without the always-present members, what both were
// measured against.
func BenchmarkMarshal(b *testing.B) {
	responses := []struct {
		name string
		msg  proto.Message
	}{
		{"DescribeAddon", benchAddonResponse()},
		{"DescribeCluster", benchClusterResponse()},
		{"ListAddons", benchListAddonsResponse()},
	}
	m := newBenchMarshaler()
	for _, r := range responses {
		b.Run(r.name+"/protojson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.JSONPb.Marshal(r.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(r.name+"/legacy", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := legacyMarshal(m.JSONPb, r.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(r.name+"/awsJSON", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Marshal(r.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode measures the request decoder on a CreateAddon body as
// the AWS SDK sends it, read from the body ServeHTTP hands on: legacy is
// the decoder it replaced (marshal_legacy_test.go), from the reader
// ServeHTTP used to hand on.
func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"addonName":"coredns","addonVersion":"v1.11.4-eksbuild.2","clientRequestToken":"5e0f3c9a-8b7d-4c6e-9f1a-2b3c4d5e6f70",` +
		`"resolveConflicts":"OVERWRITE","tags":{"team":"platform","env":"prod"}}`)
	m := newBenchMarshaler()
	b.Run("CreateAddon/legacy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req eksv1.CreateAddonRequest
			if err := legacyDecode(m, io.NopCloser(bytes.NewReader(body)), &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CreateAddon/awsJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req eksv1.CreateAddonRequest
			if err := m.NewDecoder(newRequestBody(body)).Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
