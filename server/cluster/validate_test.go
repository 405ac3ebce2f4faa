package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
)

func validRequest() *eksv1.CreateClusterRequest {
	return &eksv1.CreateClusterRequest{
		Name:               "c1",
		RoleArn:            "arn:aws:iam::000000000000:role/eks",
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a"}},
	}
}

func TestValidateCreate(t *testing.T) {
	s := &Service{cfg: DefaultConfig()}
	tests := []struct {
		name   string
		mutate func(r *eksv1.CreateClusterRequest)
		ok     bool
	}{
		{"minimal", func(*eksv1.CreateClusterRequest) {}, true},
		{"name of 100 characters", func(r *eksv1.CreateClusterRequest) { r.Name = strings.Repeat("a", 100) }, true},
		{"name with dash and underscore", func(r *eksv1.CreateClusterRequest) { r.Name = "0a-b_c" }, true},
		{"empty name", func(r *eksv1.CreateClusterRequest) { r.Name = "" }, false},
		{"name of 101 characters", func(r *eksv1.CreateClusterRequest) { r.Name = strings.Repeat("a", 101) }, false},
		{"name starting with underscore", func(r *eksv1.CreateClusterRequest) { r.Name = "_a" }, false},
		{"name with a dot", func(r *eksv1.CreateClusterRequest) { r.Name = "a.b" }, false},
		{"name with a slash", func(r *eksv1.CreateClusterRequest) { r.Name = "a/b" }, false},
		{"supported version", func(r *eksv1.CreateClusterRequest) { r.Version = "1.32" }, true},
		{"unsupported version", func(r *eksv1.CreateClusterRequest) { r.Version = "1.20" }, false},
		{"missing role", func(r *eksv1.CreateClusterRequest) { r.RoleArn = "" }, false},
		{"user instead of role", func(r *eksv1.CreateClusterRequest) { r.RoleArn = "arn:aws:iam::000000000000:user/u" }, false},
		{"role with path", func(r *eksv1.CreateClusterRequest) { r.RoleArn = "arn:aws:iam::000000000000:role/svc/eks" }, true},
		{"missing VPC config", func(r *eksv1.CreateClusterRequest) { r.ResourcesVpcConfig = nil }, false},
		{"both endpoints off", func(r *eksv1.CreateClusterRequest) {
			r.ResourcesVpcConfig.EndpointPublicAccess, r.ResourcesVpcConfig.EndpointPrivateAccess = proto.Bool(false), proto.Bool(false)
		}, false},
		{"bad public CIDR", func(r *eksv1.CreateClusterRequest) { r.ResourcesVpcConfig.PublicAccessCidrs = []string{"10.0.0.0/33"} }, false},
		{"public CIDR not a network address", func(r *eksv1.CreateClusterRequest) {
			r.ResourcesVpcConfig.PublicAccessCidrs = []string{"203.0.113.7/24"}
		}, false},
		{"public CIDR", func(r *eksv1.CreateClusterRequest) {
			r.ResourcesVpcConfig.PublicAccessCidrs = []string{"203.0.113.0/24"}
		}, true},
		{"only public access turned off", func(r *eksv1.CreateClusterRequest) {
			r.ResourcesVpcConfig.EndpointPublicAccess = proto.Bool(false)
		}, false},
		{"public off, private on", func(r *eksv1.CreateClusterRequest) {
			r.ResourcesVpcConfig.EndpointPublicAccess, r.ResourcesVpcConfig.EndpointPrivateAccess = proto.Bool(false), proto.Bool(true)
		}, true},
		{"service CIDR", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "172.20.0.0/16"}
		}, true},
		{"service CIDR IPv6", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "fd00::/108"}
		}, false},
		{"service CIDR public", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "8.8.0.0/16"}
		}, false},
		{"service CIDR too small", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "10.100.0.0/25"}
		}, false},
		{"service CIDR not a network address", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "10.100.0.1/16"}
		}, false},
		{"bad service CIDR", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{ServiceIpv4Cidr: "nope"}
		}, false},
		{"ip family ipv6", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{IpFamily: "ipv6"}
		}, true},
		{"ip family unknown", func(r *eksv1.CreateClusterRequest) {
			r.KubernetesNetworkConfig = &eksv1.KubernetesNetworkConfigRequest{IpFamily: "ipx"}
		}, false},
		{"log types", func(r *eksv1.CreateClusterRequest) {
			r.Logging = &eksv1.Logging{ClusterLogging: []*eksv1.LogSetup{{Types: []string{"api", "scheduler"}}}}
		}, true},
		{"unknown log type", func(r *eksv1.CreateClusterRequest) {
			r.Logging = &eksv1.Logging{ClusterLogging: []*eksv1.LogSetup{{Types: []string{"kubelet"}}}}
		}, false},
		{"encryption of secrets", func(r *eksv1.CreateClusterRequest) {
			r.EncryptionConfig = []*eksv1.EncryptionConfig{{Resources: []string{"secrets"}, Provider: &eksv1.Provider{KeyArn: "arn:aws:kms:us-east-1:000000000000:key/k"}}}
		}, true},
		{"encryption without key", func(r *eksv1.CreateClusterRequest) {
			r.EncryptionConfig = []*eksv1.EncryptionConfig{{Resources: []string{"secrets"}}}
		}, false},
		{"auth mode API", func(r *eksv1.CreateClusterRequest) {
			r.AccessConfig = &eksv1.CreateAccessConfigRequest{AuthenticationMode: "API"}
		}, true},
		{"auth mode unknown", func(r *eksv1.CreateClusterRequest) {
			r.AccessConfig = &eksv1.CreateAccessConfigRequest{AuthenticationMode: "OIDC"}
		}, false},
		{"support type unknown", func(r *eksv1.CreateClusterRequest) { r.UpgradePolicy = &eksv1.UpgradePolicy{SupportType: "FOREVER"} }, false},
		{"reserved tag", func(r *eksv1.CreateClusterRequest) { r.Tags = map[string]string{"aws:x": "y"} }, false},
		{"auto mode compute", func(r *eksv1.CreateClusterRequest) {
			r.ComputeConfig = &eksv1.ComputeConfig{Enabled: proto.Bool(true), NodeRoleArn: "arn:aws:iam::000000000000:role/node"}
		}, true},
		{"compute node role that is not a role", func(r *eksv1.CreateClusterRequest) {
			r.ComputeConfig = &eksv1.ComputeConfig{NodeRoleArn: "arn:aws:iam::000000000000:user/node"}
		}, false},
		{"remote node network CIDR", func(r *eksv1.CreateClusterRequest) {
			r.RemoteNetworkConfig = &eksv1.RemoteNetworkConfig{RemoteNodeNetworks: []*eksv1.RemoteNetwork{{Cidrs: []string{"10.200.0.0/16"}}}}
		}, true},
		{"remote pod network bad CIDR", func(r *eksv1.CreateClusterRequest) {
			r.RemoteNetworkConfig = &eksv1.RemoteNetworkConfig{RemotePodNetworks: []*eksv1.RemoteNetwork{{Cidrs: []string{"10.200.0.0"}}}}
		}, false},
		{"scaling tier", func(r *eksv1.CreateClusterRequest) {
			r.ControlPlaneScalingConfig = &eksv1.ControlPlaneScalingConfig{Tier: "tier-xl"}
		}, true},
		{"scaling tier unknown", func(r *eksv1.CreateClusterRequest) {
			r.ControlPlaneScalingConfig = &eksv1.ControlPlaneScalingConfig{Tier: "huge"}
		}, false},
		{"token of 64 characters", func(r *eksv1.CreateClusterRequest) { r.ClientRequestToken = strings.Repeat("t", 64) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := validRequest()
			tc.mutate(r)
			err := s.validateCreate(r)
			if tc.ok {
				if err != nil {
					t.Errorf("validateCreate = %v, want nil", err)
				}
				return
			}
			var e *errdefs.Error
			if !errors.As(err, &e) || e.Exception != errdefs.InvalidParameterException {
				t.Errorf("validateCreate = %v, want InvalidParameterException", err)
			}
		})
	}
}

func TestValidateUpdateConfig(t *testing.T) {
	access := func(mode string) *eksv1.UpdateClusterConfigRequest {
		return &eksv1.UpdateClusterConfigRequest{Name: "c1", AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: mode}}
	}
	logging := &eksv1.Logging{ClusterLogging: []*eksv1.LogSetup{{Types: []string{"api"}, Enabled: proto.Bool(true)}}}
	tests := []struct {
		name string
		req  *eksv1.UpdateClusterConfigRequest
		kind configKind
		// msg is a substring of the InvalidParameterException's message;
		// "" when the request is valid.
		msg string
	}{
		{"authentication mode", access("API_AND_CONFIG_MAP"), kindAccess, ""},
		{"unknown authentication mode", access("OIDC"), configKind{}, "Value 'OIDC' at 'accessConfig.authenticationMode'"},
		{"lower-case authentication mode", access("api"), configKind{}, "Value 'api' at 'accessConfig.authenticationMode'"},
		{"access config without a mode", access(""), configKind{}, "accessConfig authenticationMode is required"},
		{"bad name", &eksv1.UpdateClusterConfigRequest{Name: "a/b", AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: "API"}}, configKind{}, "at 'name'"},
		{"nothing", &eksv1.UpdateClusterConfigRequest{Name: "c1"}, configKind{}, "No changes were specified"},
		{"logging", &eksv1.UpdateClusterConfigRequest{Name: "c1", Logging: logging}, kindLogging, ""},
		{"empty logging", &eksv1.UpdateClusterConfigRequest{Name: "c1", Logging: &eksv1.Logging{}}, configKind{}, "at least one log type"},
		{"unknown log type", &eksv1.UpdateClusterConfigRequest{Name: "c1", Logging: &eksv1.Logging{ClusterLogging: []*eksv1.LogSetup{{Types: []string{"kubelet"}}}}}, configKind{}, `"kubelet"`},
		{"deletion protection off", &eksv1.UpdateClusterConfigRequest{Name: "c1", DeletionProtection: proto.Bool(false)}, kindDeletionProtection, ""},
		{"support type", &eksv1.UpdateClusterConfigRequest{Name: "c1", UpgradePolicy: &eksv1.UpgradePolicy{SupportType: "STANDARD"}}, kindUpgradePolicy, ""},
		{"unknown support type", &eksv1.UpdateClusterConfigRequest{Name: "c1", UpgradePolicy: &eksv1.UpgradePolicy{SupportType: "FOREVER"}}, configKind{}, "'upgradePolicy.supportType'"},
		{"empty upgrade policy", &eksv1.UpdateClusterConfigRequest{Name: "c1", UpgradePolicy: &eksv1.UpgradePolicy{}}, configKind{}, "upgradePolicy supportType is required"},
		{"two kinds", &eksv1.UpdateClusterConfigRequest{Name: "c1", Logging: logging, DeletionProtection: proto.Bool(true)}, configKind{}, "Only one type of update can be allowed."},
		{"access and an unsupported kind", &eksv1.UpdateClusterConfigRequest{Name: "c1", AccessConfig: &eksv1.UpdateAccessConfigRequest{AuthenticationMode: "API"},
			ResourcesVpcConfig: &eksv1.VpcConfigRequest{}}, configKind{}, "Only one type of update can be allowed."},
		{"Auto Mode is one kind", &eksv1.UpdateClusterConfigRequest{Name: "c1", ComputeConfig: &eksv1.ComputeConfig{}, StorageConfig: &eksv1.StorageConfig{},
			KubernetesNetworkConfig: &eksv1.KubernetesNetworkConfigRequest{}}, configKind{}, "does not support changing computeConfig, kubernetesNetworkConfig, storageConfig"},
		{"resourcesVpcConfig", &eksv1.UpdateClusterConfigRequest{Name: "c1", ResourcesVpcConfig: &eksv1.VpcConfigRequest{}}, configKind{}, "does not support changing resourcesVpcConfig"},
		{"zonalShiftConfig", &eksv1.UpdateClusterConfigRequest{Name: "c1", ZonalShiftConfig: &eksv1.ZonalShiftConfig{}}, configKind{}, "does not support changing zonalShiftConfig"},
		{"remoteNetworkConfig", &eksv1.UpdateClusterConfigRequest{Name: "c1", RemoteNetworkConfig: &eksv1.RemoteNetworkConfig{}}, configKind{}, "does not support changing remoteNetworkConfig"},
		{"controlPlaneScalingConfig", &eksv1.UpdateClusterConfigRequest{Name: "c1", ControlPlaneScalingConfig: &eksv1.ControlPlaneScalingConfig{}}, configKind{}, "does not support changing controlPlaneScalingConfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := validateUpdateConfig(tc.req)
			if tc.msg == "" {
				if err != nil || k != tc.kind {
					t.Errorf("validateUpdateConfig = %v, %v; want %v, nil", k, err, tc.kind)
				}
				return
			}
			var e *errdefs.Error
			if !errors.As(err, &e) || e.Exception != errdefs.InvalidParameterException || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("validateUpdateConfig = %v, want InvalidParameterException saying %q", err, tc.msg)
			}
		})
	}
}

func TestAuthModeChangeAllowed(t *testing.T) {
	modes := []string{"CONFIG_MAP", "API_AND_CONFIG_MAP", "API"}
	allowed := map[[2]string]bool{
		{"CONFIG_MAP", "API_AND_CONFIG_MAP"}: true,
		{"API_AND_CONFIG_MAP", "API"}:        true,
	}
	for _, from := range modes {
		for _, to := range append(slices.Clone(modes), "", "OIDC") {
			t.Run(from+" to "+to, func(t *testing.T) {
				if got := authModeChangeAllowed(from, to); got != allowed[[2]string{from, to}] {
					t.Errorf("authModeChangeAllowed(%s, %s) = %v", from, to, got)
				}
			})
		}
	}
}
