package clients

import (
	"reflect"
	"testing"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
)

// TestClusterFieldsWithBotocore: what the provisioner reports through
// SetStatus (OIDC issuer, VPC and cluster security group, health issues, the
// CA) is parsed by botocore, by AWS's EKS model, into AWS's shapes.
func TestClusterFieldsWithBotocore(t *testing.T) {
	requireBotocore(t)
	h := newHarness(t, "boto-fields")
	ca := clustertest.CertificateAuthorityData(t)
	const issuer = "https://oidc.saltbush.example/id/B0B0B0B0B0B0B0B0"
	if _, err := controlv1.NewClusterControlServiceClient(h.srv.GRPC(t)).SetStatus(ctxT(t), &controlv1.SetStatusRequest{
		Cluster: h.ref(), Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		CertificateAuthorityData: ca, OidcIssuer: issuer, VpcId: "vpc-0fedcba987654321f",
		ClusterSecurityGroupId: "sg-0fedcba987654321f", SubnetIds: []string{"subnet-0c1", "subnet-0c2"},
		HealthIssues: []*controlv1.ClusterIssue{{Code: "VpcNotFound", Message: "The VPC is gone.", ResourceIds: []string{"vpc-0fedcba987654321f"}}},
	}); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
	type issue struct {
		Code, Message string
		ResourceIds   []string
	}
	var got struct {
		Status, Endpoint, CertificateAuthority, Issuer, VpcID, ClusterSecurityGroupID string
		SubnetIds                                                                     []string
		Issues                                                                        []issue
		Types                                                                         map[string]string
	}
	lastJSON(t, runEnv(t, h.keys(t), "python3", "botocore_cluster.py", "--endpoint", h.srv.URL, "--cluster", h.cluster), &got)
	checks := []struct {
		name      string
		got, want any
	}{
		{"status", got.Status, "ACTIVE"},
		{"endpoint (kept from the first SetStatus)", got.Endpoint, "https://10.0.0.1:6443"},
		{"certificateAuthority.data", got.CertificateAuthority, ca},
		{"identity.oidc.issuer", got.Issuer, issuer},
		{"resourcesVpcConfig.vpcId", got.VpcID, "vpc-0fedcba987654321f"},
		{"resourcesVpcConfig.clusterSecurityGroupId", got.ClusterSecurityGroupID, "sg-0fedcba987654321f"},
		{"resourcesVpcConfig.subnetIds", got.SubnetIds, []string{"subnet-0c1", "subnet-0c2"}},
		{"health.issues", got.Issues, []issue{{"VpcNotFound", "The VPC is gone.", []string{"vpc-0fedcba987654321f"}}}},
		{"parsed types", got.Types, map[string]string{"identity": "dict", "oidc": "dict", "health": "dict", "createdAt": "datetime"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}
