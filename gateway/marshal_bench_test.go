package gateway

import (
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
)

func BenchmarkMarshalAddon(b *testing.B) {
	resp := &eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{
		AddonName: "coredns", ClusterName: "c", Status: "ACTIVE", AddonVersion: "v1.11.4-eksbuild.2",
		Health: &eksv1.AddonHealth{}, AddonArn: "arn:aws:eks:us-east-1:000000000000:addon/c/coredns/0b9e7c1d-3f4a-4e2b-8c6d-5a1f2e3d4c5b",
		CreatedAt: 1800000000.123, ModifiedAt: 1800000000.456, Publisher: "eks", Owner: "aws",
		NamespaceConfig: &eksv1.AddonNamespaceConfigResponse{Namespace: "kube-system"},
	}}
	plain := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{}}
	aws := newAWSJSON(plain)
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_, _ = plain.Marshal(resp)
		}
	})
	b.Run("awsJSON", func(b *testing.B) {
		for b.Loop() {
			_, _ = aws.Marshal(resp)
		}
	})
}
