package cluster

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/url"
	"regexp"
	"slices"
	"unicode/utf8"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// What a provisioner may report about a cluster's control plane
// (SetStatus), checked before any of it is stored.
var (
	vpcIDPattern    = regexp.MustCompile(`^vpc-[0-9A-Za-z]{1,64}$`)
	sgIDPattern     = regexp.MustCompile(`^sg-[0-9A-Za-z]{1,64}$`)
	subnetIDPattern = regexp.MustCompile(`^subnet-[0-9A-Za-z]{1,64}$`)

	// clusterIssueCodes is AWS's ClusterIssueCode enum.
	clusterIssueCodes = []string{
		"AccessDenied", "ClusterUnreachable", "ConfigurationConflict", "InternalFailure",
		"ResourceLimitExceeded", "ResourceNotFound", "IamRoleNotFound", "VpcNotFound",
		"InsufficientFreeAddresses", "Ec2ServiceNotSubscribed", "Ec2SubnetNotFound",
		"Ec2SecurityGroupNotFound", "KmsGrantRevoked", "KmsKeyNotFound", "KmsKeyMarkedForDeletion",
		"KmsKeyDisabled", "StsRegionalEndpointDisabled", "UnsupportedVersion", "Other",
	}
)

const (
	maxURLLength        = 2048
	maxHealthIssues     = 100
	maxIssueMessage     = 1024
	maxIssueResourceIDs = 100
	maxResourceIDLength = 1024
	maxNetworkIDs       = 16
)

// validateControlPlane checks what a provisioner reports about a cluster's
// control plane before any of it is stored.
func validateControlPlane(req *controlv1.SetStatusRequest) error {
	if ep := req.GetEndpoint(); ep != "" && !isHTTPSURL(ep, false) {
		return errdefs.InvalidParameter("endpoint %q must be an https URL of a host (and port).", ep)
	}
	if ca := req.GetCertificateAuthorityData(); ca != "" {
		if err := validateCertificateAuthority(ca); err != nil {
			return err
		}
	}
	if pv := req.GetPlatformVersion(); len(pv) > 64 {
		return errdefs.InvalidParameter("platformVersion is longer than 64 characters.")
	}
	if iss := req.GetOidcIssuer(); iss != "" && !isHTTPSURL(iss, true) {
		return errdefs.InvalidParameter("oidcIssuer %q must be an https URL without query or fragment.", iss)
	}
	if v := req.GetVpcId(); v != "" && !vpcIDPattern.MatchString(v) {
		return errdefs.InvalidParameter("vpcId %q must look like vpc-0123456789abcdef0.", v)
	}
	if v := req.GetClusterSecurityGroupId(); v != "" && !sgIDPattern.MatchString(v) {
		return errdefs.InvalidParameter("clusterSecurityGroupId %q must look like sg-0123456789abcdef0.", v)
	}
	if err := validateIDs("subnetIds", "subnet-0123456789abcdef0", subnetIDPattern, req.GetSubnetIds()); err != nil {
		return err
	}
	if err := validateIDs("securityGroupIds", "sg-0123456789abcdef0", sgIDPattern, req.GetSecurityGroupIds()); err != nil {
		return err
	}
	if req.GetClearHealthIssues() && len(req.GetHealthIssues()) > 0 {
		return errdefs.InvalidParameter("healthIssues and clearHealthIssues cannot both be set.")
	}
	return validateHealthIssues(req.GetHealthIssues())
}

func isHTTPSURL(raw string, pathAllowed bool) bool {
	if len(raw) > maxURLLength {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		u.Opaque != "" {
		return false
	}
	return pathAllowed || u.Path == "" || u.Path == "/"
}

func validateCertificateAuthority(ca string) error {
	pemBytes, err := base64.StdEncoding.DecodeString(ca)
	if err != nil || len(ca) > 64<<10 {
		return errdefs.InvalidParameter("certificateAuthorityData must be base64-encoded PEM.")
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return errdefs.InvalidParameter("certificateAuthorityData must hold a PEM CERTIFICATE block.")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return errdefs.InvalidParameter("certificateAuthorityData does not hold a parsable X.509 certificate.")
	}
	return nil
}

func validateIDs(member, example string, pattern *regexp.Regexp, ids []string) error {
	if len(ids) > maxNetworkIDs {
		return errdefs.InvalidParameter("%s has %d entries; at most %d are allowed.", member, len(ids), maxNetworkIDs)
	}
	for i, id := range ids {
		if !pattern.MatchString(id) {
			return errdefs.InvalidParameter("%s[%d] %q must look like %s.", member, i, id, example)
		}
		if slices.Contains(ids[:i], id) {
			return errdefs.InvalidParameter("%s lists %q twice.", member, id)
		}
	}
	return nil
}

func validateHealthIssues(issues []*controlv1.ClusterIssue) error {
	if len(issues) > maxHealthIssues {
		return errdefs.InvalidParameter("healthIssues has %d entries; at most %d are allowed.", len(issues), maxHealthIssues)
	}
	for i, is := range issues {
		if !slices.Contains(clusterIssueCodes, is.GetCode()) {
			return errdefs.InvalidParameter("healthIssues[%d].code %q is not a ClusterIssueCode (one of %v).",
				i, is.GetCode(), clusterIssueCodes)
		}
		if is.GetMessage() == "" || utf8.RuneCountInString(is.GetMessage()) > maxIssueMessage {
			return errdefs.InvalidParameter("healthIssues[%d].message must be 1 to %d characters.", i, maxIssueMessage)
		}
		if n := len(is.GetResourceIds()); n > maxIssueResourceIDs {
			return errdefs.InvalidParameter("healthIssues[%d].resourceIds has %d entries; at most %d are allowed.",
				i, n, maxIssueResourceIDs)
		}
		for j, id := range is.GetResourceIds() {
			if id == "" || len(id) > maxResourceIDLength {
				return errdefs.InvalidParameter("healthIssues[%d].resourceIds[%d] must be 1 to %d characters.",
					i, j, maxResourceIDLength)
			}
		}
	}
	return nil
}

// applyControlPlane records what req reports: empty members keep what is
// recorded.
func applyControlPlane(c *storagev1.ClusterRecord, req *controlv1.SetStatusRequest) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Endpoint, req.GetEndpoint())
	set(&c.CertificateAuthorityData, req.GetCertificateAuthorityData())
	set(&c.PlatformVersion, req.GetPlatformVersion())
	set(&c.OidcIssuer, req.GetOidcIssuer())
	set(&c.VpcId, req.GetVpcId())
	set(&c.ClusterSecurityGroupId, req.GetClusterSecurityGroupId())
	if ids := req.GetSubnetIds(); len(ids) > 0 {
		vpcConfig(c).SubnetIds = slices.Clone(ids)
	}
	if ids := req.GetSecurityGroupIds(); len(ids) > 0 {
		vpcConfig(c).SecurityGroupIds = slices.Clone(ids)
	}
	switch {
	case req.GetClearHealthIssues():
		c.HealthIssues = nil
	case len(req.GetHealthIssues()) > 0:
		c.HealthIssues = nil
		for _, is := range req.GetHealthIssues() {
			c.HealthIssues = append(c.HealthIssues, &storagev1.ClusterHealthIssue{
				Code: is.GetCode(), Message: is.GetMessage(), ResourceIds: slices.Clone(is.GetResourceIds()),
			})
		}
	}
}

func vpcConfig(c *storagev1.ClusterRecord) *storagev1.ClusterVpcConfig {
	if c.Spec == nil {
		c.Spec = &storagev1.ClusterSpec{}
	}
	if c.Spec.VpcConfig == nil {
		c.Spec.VpcConfig = &storagev1.ClusterVpcConfig{}
	}
	return c.Spec.VpcConfig
}

// readyToServe refuses an ACTIVE cluster that clients could not reach: AWS
// never returns an ACTIVE cluster without an endpoint and a certificate
// authority, and clients (eksctl, update-kubeconfig) depend on both. It is
// the provisioner's bug, hence InvalidRequest (gRPC FailedPrecondition).
func readyToServe(c *storagev1.ClusterRecord) error {
	var missing string
	switch {
	case c.GetEndpoint() == "":
		missing = "endpoint"
	case c.GetCertificateAuthorityData() == "":
		missing = "certificateAuthorityData"
	default:
		return nil
	}
	return errdefs.InvalidRequest("Cluster %s cannot be ACTIVE without %s: report it in the SetStatus call.",
		c.GetName(), missing).WithField("clusterName", c.GetName())
}
