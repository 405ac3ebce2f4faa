package cluster

import (
	"strings"

	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// specFromRequest keeps the configuration saltbush echoes but does not act
// on, with AWS's defaults filled in where AWS fills them.
func specFromRequest(req *eksv1.CreateClusterRequest) *storagev1.ClusterSpec {
	v := req.GetResourcesVpcConfig()
	vpc := &storagev1.ClusterVpcConfig{
		SubnetIds:              v.GetSubnetIds(),
		SecurityGroupIds:       v.GetSecurityGroupIds(),
		EndpointPublicAccess:   true,
		EndpointPrivateAccess:  v.GetEndpointPrivateAccess(),
		PublicAccessCidrs:      v.GetPublicAccessCidrs(),
		ControlPlaneEgressMode: v.GetControlPlaneEgressMode(),
	}
	if v.EndpointPublicAccess != nil {
		vpc.EndpointPublicAccess = v.GetEndpointPublicAccess()
	}
	if vpc.EndpointPublicAccess && len(vpc.PublicAccessCidrs) == 0 {
		vpc.PublicAccessCidrs = []string{"0.0.0.0/0"}
	}
	nc := req.GetKubernetesNetworkConfig()
	network := &storagev1.ClusterNetworkConfig{
		ServiceIpv4Cidr: nc.GetServiceIpv4Cidr(),
		IpFamily:        nc.GetIpFamily(),
	}
	if network.IpFamily == "" {
		network.IpFamily = "ipv4"
	}
	if network.ServiceIpv4Cidr == "" && network.IpFamily == "ipv4" {
		// The clusters are K3s: this is the service CIDR K3s uses by default.
		network.ServiceIpv4Cidr = "10.43.0.0/16"
	}
	if elb := nc.GetElasticLoadBalancing(); elb != nil && elb.Enabled != nil {
		network.ElasticLoadBalancingEnabled = proto.Bool(elb.GetEnabled())
	}
	spec := &storagev1.ClusterSpec{
		RoleArn:                    req.GetRoleArn(),
		VpcConfig:                  vpc,
		NetworkConfig:              network,
		UpgradeSupportType:         req.GetUpgradePolicy().GetSupportType(),
		DeletionProtection:         req.GetDeletionProtection(),
		BootstrapSelfManagedAddons: true,
	}
	if spec.UpgradeSupportType == "" {
		spec.UpgradeSupportType = "EXTENDED"
	}
	if req.BootstrapSelfManagedAddons != nil {
		spec.BootstrapSelfManagedAddons = req.GetBootstrapSelfManagedAddons()
	}
	if zs := req.GetZonalShiftConfig(); zs != nil && zs.Enabled != nil {
		spec.ZonalShiftEnabled = proto.Bool(zs.GetEnabled())
	}
	if cc := req.GetComputeConfig(); cc != nil {
		spec.ComputeConfig = &storagev1.ClusterComputeConfig{
			Enabled: cc.Enabled, NodePools: cc.GetNodePools(), NodeRoleArn: cc.GetNodeRoleArn(),
		}
	}
	if bs := req.GetStorageConfig().GetBlockStorage(); bs != nil && bs.Enabled != nil {
		spec.BlockStorageEnabled = proto.Bool(bs.GetEnabled())
	}
	for _, n := range req.GetRemoteNetworkConfig().GetRemoteNodeNetworks() {
		spec.RemoteNodeNetworks = append(spec.RemoteNodeNetworks, &storagev1.ClusterRemoteNetwork{Cidrs: n.GetCidrs()})
	}
	for _, n := range req.GetRemoteNetworkConfig().GetRemotePodNetworks() {
		spec.RemotePodNetworks = append(spec.RemotePodNetworks, &storagev1.ClusterRemoteNetwork{Cidrs: n.GetCidrs()})
	}
	spec.ControlPlaneScalingTier = req.GetControlPlaneScalingConfig().GetTier()
	for _, l := range req.GetLogging().GetClusterLogging() {
		spec.Logging = append(spec.Logging, &storagev1.ClusterLogSetup{Types: l.GetTypes(), Enabled: l.GetEnabled()})
	}
	for _, e := range req.GetEncryptionConfig() {
		spec.EncryptionConfig = append(spec.EncryptionConfig, &storagev1.ClusterEncryptionConfig{
			Resources: e.GetResources(), KeyArn: e.GetProvider().GetKeyArn(),
		})
	}
	return spec
}

// StatusName is the AWS name of a cluster status (ACTIVE, DELETING, ...).
func StatusName(s storagev1.ClusterStatus) string {
	return strings.TrimPrefix(s.String(), "CLUSTER_STATUS_")
}

func epochSeconds(rec interface {
	GetSeconds() int64
	GetNanos() int32
}) float64 {
	// Millisecond precision, as AWS sends it.
	ms := rec.GetSeconds()*1000 + int64(rec.GetNanos())/1e6
	return float64(ms) / 1000
}

// ToAPI renders a cluster record in AWS's Cluster shape.
func ToAPI(rec *storagev1.ClusterRecord) *eksv1.Cluster {
	spec := rec.GetSpec()
	vpc := spec.GetVpcConfig()
	nc := spec.GetNetworkConfig()
	c := &eksv1.Cluster{
		Name:      rec.GetName(),
		Arn:       rec.GetArn(),
		CreatedAt: epochSeconds(rec.GetCreatedAt()),
		Version:   rec.GetKubernetesVersion(),
		RoleArn:   spec.GetRoleArn(),
		ResourcesVpcConfig: &eksv1.VpcConfigResponse{
			SubnetIds:              vpc.GetSubnetIds(),
			SecurityGroupIds:       vpc.GetSecurityGroupIds(),
			ClusterSecurityGroupId: rec.GetClusterSecurityGroupId(),
			VpcId:                  rec.GetVpcId(),
			EndpointPublicAccess:   proto.Bool(vpc.GetEndpointPublicAccess()),
			EndpointPrivateAccess:  proto.Bool(vpc.GetEndpointPrivateAccess()),
			PublicAccessCidrs:      vpc.GetPublicAccessCidrs(),
			ControlPlaneEgressMode: vpc.GetControlPlaneEgressMode(),
		},
		KubernetesNetworkConfig: &eksv1.KubernetesNetworkConfigResponse{
			ServiceIpv4Cidr: nc.GetServiceIpv4Cidr(),
			IpFamily:        nc.GetIpFamily(),
		},
		Status:             StatusName(rec.GetStatus()),
		Endpoint:           rec.GetEndpoint(),
		PlatformVersion:    rec.GetPlatformVersion(),
		ClientRequestToken: rec.GetClientRequestToken(),
		Tags:               rec.GetTags(),
		AccessConfig: &eksv1.AccessConfigResponse{
			AuthenticationMode:                      rec.GetAccessConfig().GetAuthenticationMode(),
			BootstrapClusterCreatorAdminPermissions: proto.Bool(rec.GetAccessConfig().GetBootstrapClusterCreatorAdminPermissions()),
		},
		UpgradePolicy:      &eksv1.UpgradePolicy{SupportType: spec.GetUpgradeSupportType()},
		DeletionProtection: proto.Bool(spec.GetDeletionProtection()),
		Logging:            &eksv1.Logging{},
	}
	if cc := spec.GetComputeConfig(); cc != nil {
		c.ComputeConfig = &eksv1.ComputeConfig{Enabled: cc.Enabled, NodePools: cc.GetNodePools(), NodeRoleArn: cc.GetNodeRoleArn()}
	}
	if spec.BlockStorageEnabled != nil {
		c.StorageConfig = &eksv1.StorageConfig{BlockStorage: &eksv1.BlockStorage{Enabled: proto.Bool(spec.GetBlockStorageEnabled())}}
	}
	if len(spec.GetRemoteNodeNetworks())+len(spec.GetRemotePodNetworks()) > 0 {
		c.RemoteNetworkConfig = &eksv1.RemoteNetworkConfig{}
		for _, n := range spec.GetRemoteNodeNetworks() {
			c.RemoteNetworkConfig.RemoteNodeNetworks = append(c.RemoteNetworkConfig.RemoteNodeNetworks, &eksv1.RemoteNetwork{Cidrs: n.GetCidrs()})
		}
		for _, n := range spec.GetRemotePodNetworks() {
			c.RemoteNetworkConfig.RemotePodNetworks = append(c.RemoteNetworkConfig.RemotePodNetworks, &eksv1.RemoteNetwork{Cidrs: n.GetCidrs()})
		}
	}
	if t := spec.GetControlPlaneScalingTier(); t != "" {
		c.ControlPlaneScalingConfig = &eksv1.ControlPlaneScalingConfig{Tier: t}
	}
	if ca := rec.GetCertificateAuthorityData(); ca != "" {
		c.CertificateAuthority = &eksv1.Certificate{Data: ca}
	}
	if nc.ElasticLoadBalancingEnabled != nil {
		c.KubernetesNetworkConfig.ElasticLoadBalancing = &eksv1.ElasticLoadBalancing{Enabled: proto.Bool(nc.GetElasticLoadBalancingEnabled())}
	}
	if spec.ZonalShiftEnabled != nil {
		c.ZonalShiftConfig = &eksv1.ZonalShiftConfig{Enabled: proto.Bool(spec.GetZonalShiftEnabled())}
	}
	c.Logging.ClusterLogging = normalizeLogging(spec.GetLogging())
	for _, e := range spec.GetEncryptionConfig() {
		c.EncryptionConfig = append(c.EncryptionConfig, &eksv1.EncryptionConfig{
			Resources: e.GetResources(), Provider: &eksv1.Provider{KeyArn: e.GetKeyArn()},
		})
	}
	if iss := rec.GetOidcIssuer(); iss != "" {
		c.Identity = &eksv1.Identity{Oidc: &eksv1.OIDC{Issuer: iss}}
	}
	c.Health = health(rec)
	return c
}

// health renders the recorded health issues and, for a FAILED cluster, its
// reason as an issue of code Other; nil when there is nothing to report.
func health(rec *storagev1.ClusterRecord) *eksv1.ClusterHealth {
	var issues []*eksv1.ClusterIssue
	for _, is := range rec.GetHealthIssues() {
		issues = append(issues, &eksv1.ClusterIssue{Code: is.GetCode(), Message: is.GetMessage(), ResourceIds: is.GetResourceIds()})
	}
	if rec.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_FAILED && rec.GetStatusReason() != "" {
		issues = append(issues, &eksv1.ClusterIssue{Code: "Other", Message: rec.GetStatusReason()})
	}
	if len(issues) == 0 {
		return nil
	}
	return &eksv1.ClusterHealth{Issues: issues}
}

// ToControl renders a cluster record in the internal control shape.
func ToControl(rec *storagev1.ClusterRecord) *controlv1.ClusterInfo {
	info := &controlv1.ClusterInfo{
		Uid:               rec.GetUid(),
		AccountId:         rec.GetAccountId(),
		Name:              rec.GetName(),
		Arn:               rec.GetArn(),
		Status:            controlv1.ClusterStatus(rec.GetStatus()),
		KubernetesVersion: rec.GetKubernetesVersion(),
		StatusReason:      rec.GetStatusReason(),
		Endpoint:          rec.GetEndpoint(),
		PlatformVersion:   rec.GetPlatformVersion(),
		OidcIssuer:        rec.GetOidcIssuer(),
		VpcId:             rec.GetVpcId(),

		ClusterSecurityGroupId:  rec.GetClusterSecurityGroupId(),
		HasCertificateAuthority: rec.GetCertificateAuthorityData() != "",
	}
	for _, is := range rec.GetHealthIssues() {
		info.HealthIssues = append(info.HealthIssues, &controlv1.ClusterIssue{
			Code: is.GetCode(), Message: is.GetMessage(), ResourceIds: is.GetResourceIds(),
		})
	}
	for _, m := range rec.GetMembers() {
		info.Members = append(info.Members, m.GetInstanceId())
	}
	return info
}

// normalizeLogging renders log settings as AWS does: one entry with every
// enabled type and one with every other type, disabled (the later setting
// of a type wins, as in an UpdateClusterConfig sequence).
func normalizeLogging(settings []*storagev1.ClusterLogSetup) []*eksv1.LogSetup {
	enabled := map[string]bool{}
	for _, l := range settings {
		for _, t := range l.GetTypes() {
			enabled[t] = l.GetEnabled()
		}
	}
	var on, off []string
	for _, t := range logTypes {
		if enabled[t] {
			on = append(on, t)
		} else {
			off = append(off, t)
		}
	}
	var out []*eksv1.LogSetup
	if len(on) > 0 {
		out = append(out, &eksv1.LogSetup{Types: on, Enabled: proto.Bool(true)})
	}
	if len(off) > 0 {
		out = append(out, &eksv1.LogSetup{Types: off, Enabled: proto.Bool(false)})
	}
	return out
}
