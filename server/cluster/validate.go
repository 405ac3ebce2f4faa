package cluster

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/tagging"
)

// AWS's constraints on CreateCluster members.
var (
	namePattern    = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9\-_]*$`)
	roleARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$`)
	keyARNPattern  = regexp.MustCompile(`^arn:aws[a-z-]*:kms:[a-z0-9-]*:[0-9]{12}:(key|alias)/.+$`)

	logTypes            = []string{"api", "audit", "authenticator", "controllerManager", "scheduler"}
	ipFamilies          = []string{"ipv4", "ipv6"}
	authenticationModes = []string{"API", "API_AND_CONFIG_MAP", "CONFIG_MAP"}
	supportTypes        = []string{"STANDARD", "EXTENDED"}
	scalingTiers        = []string{"standard", "tier-xl", "tier-2xl", "tier-4xl", "tier-8xl"}
)

const maxNameLength = 100

// validateName checks a cluster name as AWS does.
func validateName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > maxNameLength || !namePattern.MatchString(name) {
		return errdefs.InvalidParameter(
			"1 validation error detected: Value '%s' at 'name' failed to satisfy constraint: "+
				"Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]* and be 1 to %d characters long",
			name, maxNameLength).WithField("clusterName", name)
	}
	return nil
}

func invalid(name, format string, args ...any) *errdefs.Error {
	return errdefs.InvalidParameter(format, args...).WithField("clusterName", name)
}

func (s *Service) validateCreate(req *eksv1.CreateClusterRequest) error {
	name := req.GetName()
	if err := validateName(name); err != nil {
		return err
	}
	if v := req.GetVersion(); v != "" && !slices.Contains(s.cfg.KubernetesVersions, v) {
		return invalid(name, "Unsupported Kubernetes minor version %s; supported versions are %s.",
			v, strings.Join(s.cfg.KubernetesVersions, ", "))
	}
	if req.GetRoleArn() == "" {
		return invalid(name, "roleArn is required.")
	}
	if !roleARNPattern.MatchString(req.GetRoleArn()) {
		return invalid(name, "roleArn %q is not an IAM role ARN.", req.GetRoleArn())
	}
	if req.GetResourcesVpcConfig() == nil {
		return invalid(name, "resourcesVpcConfig is required.")
	}
	if err := tagging.Validate(req.GetTags()); err != nil {
		return invalid(name, "Invalid tags: %v.", err)
	}
	if err := validateVPC(req.GetResourcesVpcConfig()); err != nil {
		return invalid(name, "%v", err)
	}
	if nc := req.GetKubernetesNetworkConfig(); nc != nil {
		if f := nc.GetIpFamily(); f != "" && !slices.Contains(ipFamilies, f) {
			return invalid(name, "ipFamily %q is not one of %s.", f, strings.Join(ipFamilies, ", "))
		}
		if c := nc.GetServiceIpv4Cidr(); c != "" {
			if err := validateServiceCIDR(c); err != nil {
				return invalid(name, "serviceIpv4Cidr %q: %v.", c, err)
			}
		}
	}
	for _, ls := range req.GetLogging().GetClusterLogging() {
		for _, t := range ls.GetTypes() {
			if !slices.Contains(logTypes, t) {
				return invalid(name, "Logging type %q is not one of %s.", t, strings.Join(logTypes, ", "))
			}
		}
	}
	for _, ec := range req.GetEncryptionConfig() {
		if k := ec.GetProvider().GetKeyArn(); !keyARNPattern.MatchString(k) {
			return invalid(name, "encryptionConfig provider keyArn %q is not a KMS key ARN.", k)
		}
		for _, r := range ec.GetResources() {
			if r != "secrets" {
				return invalid(name, "encryptionConfig resource %q is not supported; only secrets is.", r)
			}
		}
	}
	if m := req.GetAccessConfig().GetAuthenticationMode(); m != "" && !slices.Contains(authenticationModes, m) {
		return invalid(name, "authenticationMode %q is not one of %s.", m, strings.Join(authenticationModes, ", "))
	}
	if t := req.GetUpgradePolicy().GetSupportType(); t != "" && !slices.Contains(supportTypes, t) {
		return invalid(name, "upgradePolicy supportType %q is not one of %s.", t, strings.Join(supportTypes, ", "))
	}
	if r := req.GetComputeConfig().GetNodeRoleArn(); r != "" && !roleARNPattern.MatchString(r) {
		return invalid(name, "computeConfig nodeRoleArn %q is not an IAM role ARN.", r)
	}
	rn := req.GetRemoteNetworkConfig()
	for _, n := range append(slices.Clone(rn.GetRemoteNodeNetworks()), rn.GetRemotePodNetworks()...) {
		for _, c := range n.GetCidrs() {
			if p, err := netip.ParsePrefix(c); err != nil || !p.Addr().Is4() || p != p.Masked() {
				return invalid(name, "remoteNetworkConfig CIDR %q is not an IPv4 CIDR block.", c)
			}
		}
	}
	if t := req.GetControlPlaneScalingConfig().GetTier(); t != "" && !slices.Contains(scalingTiers, t) {
		return invalid(name, "controlPlaneScalingConfig tier %q is not one of %s.", t, strings.Join(scalingTiers, ", "))
	}
	return nil
}

func validateVPC(v *eksv1.VpcConfigRequest) error {
	for _, c := range v.GetPublicAccessCidrs() {
		if p, err := netip.ParsePrefix(c); err != nil || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("publicAccessCidrs entry %q is not an IPv4 CIDR block", c)
		}
	}
	// With AWS's defaults applied: public access on, private access off.
	public := v.EndpointPublicAccess == nil || v.GetEndpointPublicAccess()
	if !public && !v.GetEndpointPrivateAccess() {
		return fmt.Errorf("endpointPublicAccess and endpointPrivateAccess cannot both be false")
	}
	for _, id := range append(slices.Clone(v.GetSubnetIds()), v.GetSecurityGroupIds()...) {
		if id == "" || len(id) > 255 {
			return fmt.Errorf("subnet and security group ids must be 1 to 255 characters")
		}
	}
	return nil
}

// privateRanges are the blocks AWS allows a service CIDR in.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// validateServiceCIDR applies AWS's rules for serviceIpv4Cidr: an IPv4
// network address inside a private range, with a prefix of /12 to /24.
func validateServiceCIDR(c string) error {
	p, err := netip.ParsePrefix(c)
	switch {
	case err != nil || !p.Addr().Is4():
		return fmt.Errorf("not an IPv4 CIDR block")
	case p != p.Masked():
		return fmt.Errorf("not a network address (did you mean %s?)", p.Masked())
	case p.Bits() < 12 || p.Bits() > 24:
		return fmt.Errorf("prefix length must be between /12 and /24")
	}
	for _, r := range privateRanges {
		if r.Contains(p.Addr()) && r.Bits() <= p.Bits() {
			return nil
		}
	}
	return fmt.Errorf("must be within 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16")
}
