package cluster

import (
	"slices"
	"strings"
	"testing"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
)

func TestValidateControlPlane(t *testing.T) {
	ca := clustertest.CertificateAuthorityData(t)
	tests := []struct {
		name   string
		req    *controlv1.SetStatusRequest
		member string // named in the message; "" when valid
	}{
		{"nothing", &controlv1.SetStatusRequest{}, ""},
		{"everything", &controlv1.SetStatusRequest{
			Endpoint: "https://10.0.0.1:6443", CertificateAuthorityData: ca, PlatformVersion: "eks.1",
			OidcIssuer: "https://oidc.example/id/ABC", VpcId: "vpc-0a1b", ClusterSecurityGroupId: "sg-0a1b",
			SubnetIds: []string{"subnet-1", "subnet-2"}, SecurityGroupIds: []string{"sg-1"},
			HealthIssues: []*controlv1.ClusterIssue{{Code: "Other", Message: "m", ResourceIds: []string{"r"}}},
		}, ""},
		{"clear alone", &controlv1.SetStatusRequest{ClearHealthIssues: true}, ""},
		{"endpoint with a path", &controlv1.SetStatusRequest{Endpoint: "https://h/x"}, "endpoint"},
		{"CA not base64", &controlv1.SetStatusRequest{CertificateAuthorityData: "%%"}, "certificateAuthorityData"},
		{"issuer over http", &controlv1.SetStatusRequest{OidcIssuer: "http://oidc.example"}, "oidcIssuer"},
		{"issuer with a fragment", &controlv1.SetStatusRequest{OidcIssuer: "https://oidc.example/#x"}, "oidcIssuer"},
		{"issuer with user info", &controlv1.SetStatusRequest{OidcIssuer: "https://u@oidc.example/"}, "oidcIssuer"},
		{"issuer too long", &controlv1.SetStatusRequest{OidcIssuer: "https://o.example/" + strings.Repeat("a", 2048)}, "oidcIssuer"},
		{"vpc id without prefix", &controlv1.SetStatusRequest{VpcId: "0a1b"}, "vpcId"},
		{"security group of a vpc", &controlv1.SetStatusRequest{ClusterSecurityGroupId: "vpc-1"}, "clusterSecurityGroupId"},
		{"subnet twice", &controlv1.SetStatusRequest{SubnetIds: []string{"subnet-1", "subnet-1"}}, "subnetIds"},
		{"too many subnets", &controlv1.SetStatusRequest{SubnetIds: slices.Repeat([]string{"subnet-1"}, 17)}, "subnetIds"},
		{"unknown issue code", &controlv1.SetStatusRequest{HealthIssues: []*controlv1.ClusterIssue{{Code: "other", Message: "m"}}}, "healthIssues[0].code"},
		{"empty resource id", &controlv1.SetStatusRequest{HealthIssues: []*controlv1.ClusterIssue{{Code: "Other", Message: "m", ResourceIds: []string{""}}}}, "healthIssues[0].resourceIds[0]"},
		{"too many issues", &controlv1.SetStatusRequest{HealthIssues: slices.Repeat([]*controlv1.ClusterIssue{{Code: "Other", Message: "m"}}, 101)}, "healthIssues"},
		{"clear and issues", &controlv1.SetStatusRequest{ClearHealthIssues: true,
			HealthIssues: []*controlv1.ClusterIssue{{Code: "Other", Message: "m"}}}, "clearHealthIssues"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateControlPlane(tc.req)
			if tc.member == "" {
				if err != nil {
					t.Fatalf("validateControlPlane = %v, want nil", err)
				}
				return
			}
			if !errdefs.IsException(err, errdefs.InvalidParameterException) || !strings.Contains(err.Error(), tc.member) {
				t.Fatalf("validateControlPlane = %v, want an InvalidParameterException naming %s", err, tc.member)
			}
		})
	}
}

func TestApplyControlPlane(t *testing.T) {
	rec := &storagev1.ClusterRecord{
		Endpoint: "https://old:6443", VpcId: "vpc-old",
		Spec:         &storagev1.ClusterSpec{VpcConfig: &storagev1.ClusterVpcConfig{SubnetIds: []string{"subnet-a"}}},
		HealthIssues: []*storagev1.ClusterHealthIssue{{Code: "Other", Message: "old"}},
	}
	applyControlPlane(rec, &controlv1.SetStatusRequest{OidcIssuer: "https://oidc.example"})
	if rec.GetEndpoint() != "https://old:6443" || rec.GetVpcId() != "vpc-old" || len(rec.GetHealthIssues()) != 1 ||
		!slices.Equal(rec.GetSpec().GetVpcConfig().GetSubnetIds(), []string{"subnet-a"}) || rec.GetOidcIssuer() != "https://oidc.example" {
		t.Errorf("empty members changed the record: %v", rec)
	}
	applyControlPlane(rec, &controlv1.SetStatusRequest{SubnetIds: []string{"subnet-b"},
		HealthIssues: []*controlv1.ClusterIssue{{Code: "VpcNotFound", Message: "new"}}})
	if !slices.Equal(rec.GetSpec().GetVpcConfig().GetSubnetIds(), []string{"subnet-b"}) ||
		len(rec.GetHealthIssues()) != 1 || rec.GetHealthIssues()[0].GetCode() != "VpcNotFound" {
		t.Errorf("lists not replaced: %v", rec)
	}
	applyControlPlane(rec, &controlv1.SetStatusRequest{ClearHealthIssues: true})
	if len(rec.GetHealthIssues()) != 0 {
		t.Errorf("clear kept %v", rec.GetHealthIssues())
	}
}

func TestReadyToServe(t *testing.T) {
	tests := []struct {
		name    string
		rec     *storagev1.ClusterRecord
		missing string
	}{
		{"both", &storagev1.ClusterRecord{Name: "c", Endpoint: "https://h", CertificateAuthorityData: "x"}, ""},
		{"no endpoint", &storagev1.ClusterRecord{Name: "c", CertificateAuthorityData: "x"}, "endpoint"},
		{"no CA", &storagev1.ClusterRecord{Name: "c", Endpoint: "https://h"}, "certificateAuthorityData"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := readyToServe(tc.rec)
			if tc.missing == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errdefs.IsException(err, errdefs.InvalidRequestException) || !strings.Contains(err.Error(), tc.missing) {
				t.Fatalf("readyToServe = %v, want an InvalidRequestException naming %s", err, tc.missing)
			}
		})
	}
}
