package addon

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/catalog"
)

// Add-on names are catalogue names; the pattern only keeps anything that is
// not one (a "/" above all) out of the key space before the lookup.
var namePattern = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9-_]{0,99}$`)

// roleARNPattern is an IAM role ARN: arn:aws:iam::{account}:role/{path}{name}.
var roleARNPattern = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):role/((?:[\x21-\x7e]*/)?)([\w+=,.@-]{1,64})$`)

// namespacePattern is a Kubernetes namespace (DNS-1123 label).
var namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// referencePattern names an owner by reference, e.g. "nodegroup/gpu-a".
var referencePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$`)

func invalid(clusterName, addonName, format string, args ...any) *errdefs.Error {
	e := errdefs.InvalidParameter(format, args...).WithField("clusterName", clusterName)
	if addonName != "" {
		e = e.WithField("addonName", addonName)
	}
	return e
}

// lookupAddon finds a catalogue add-on as the cluster's account sees it
// (published versions included); hidden ones are creatable by name.
func (s *Service) lookupAddon(ctx context.Context, c *storagev1.ClusterRecord, name string) (*catalog.Addon, error) {
	clusterName := c.GetName()
	if name == "" {
		return nil, invalid(clusterName, "", "addonName is required.")
	}
	if !namePattern.MatchString(name) {
		return nil, invalid(clusterName, name, "Addon %q specified is not supported.", name)
	}
	a, ok, err := s.catalog.Lookup(ctx, c.GetAccountId(), name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, invalid(clusterName, name, "Addon %s specified is not supported.", name)
	}
	return a, nil
}

// lookupVersion resolves a requested version (or the default for the
// cluster's Kubernetes version) and checks compatibility. A retired
// version is refused unless it is current, the version the add-on is on.
func lookupVersion(c *storagev1.ClusterRecord, a *catalog.Addon, version, current string) (*catalog.Version, error) {
	k8s := c.GetKubernetesVersion()
	if version == "" {
		v, ok := a.DefaultVersion(k8s)
		if !ok {
			return nil, invalid(c.GetName(), a.Name,
				"Addon %s has no version compatible with Kubernetes version %s.", a.Name, k8s)
		}
		return v, nil
	}
	v, ok := a.Version(version)
	if !ok {
		return nil, invalid(c.GetName(), a.Name, "Addon version %s specified is not supported for addon %s.", version, a.Name)
	}
	if v.Retired && version != current {
		return nil, invalid(c.GetName(), a.Name, "Addon version %s of %s is retired; choose another version.", version, a.Name)
	}
	if !v.Compatible(k8s) {
		return nil, invalid(c.GetName(), a.Name,
			"Addon version %s of %s is not compatible with Kubernetes version %s.", version, a.Name, k8s)
	}
	return v, nil
}

// parseConfiguration validates configurationValues against v's schema.
func parseConfiguration(c *storagev1.ClusterRecord, v *catalog.Version, raw string) error {
	if _, err := v.ParseConfiguration(raw); err != nil {
		return invalid(c.GetName(), v.Addon.Name,
			"ConfigurationValue provided in request is not supported: %v", err).WithCause(err)
	}
	return nil
}

// validateRoleARN checks that arn is an IAM role of the caller's account,
// the check iam:PassRole makes first. (Whether the role exists is the IAM
// store's business, which arrives with identity.)
func validateRoleARN(clusterName, addonName, member, arn, account string) error {
	if len(arn) > 2048 {
		return invalid(clusterName, addonName, "%s is longer than 2048 characters.", member)
	}
	m := roleARNPattern.FindStringSubmatch(arn)
	if m == nil {
		return invalid(clusterName, addonName, "%s %s is not a valid IAM role ARN.", member, arn)
	}
	if m[1] != account {
		return invalid(clusterName, addonName,
			"%s %s must be a role in the caller's account %s.", member, arn, account)
	}
	return nil
}

func validateResolveConflicts(clusterName, addonName, value string, create bool) error {
	switch value {
	case "", "OVERWRITE", "NONE":
		return nil
	case "PRESERVE":
		if !create {
			return nil
		}
		return invalid(clusterName, addonName, "ResolveConflicts PRESERVE is only supported for UpdateAddon.")
	}
	return invalid(clusterName, addonName,
		"resolveConflicts %q is not valid; use OVERWRITE, NONE or PRESERVE.", value)
}

// podIdentity validates requested pod identity associations against the
// version's service accounts and keeps the association id of a service
// account that had one (its association is updated in place when the role
// changes; package podidentity, Owner.Sync).
func podIdentity(c *storagev1.ClusterRecord, v *catalog.Version, account string,
	req []*eksv1.AddonPodIdentityAssociations, prior []*storagev1.PodIdentityAssociation,
	newID func() string,
) ([]*storagev1.PodIdentityAssociation, error) {
	known := make([]string, 0, len(v.PodIdentity))
	for _, p := range v.PodIdentity {
		known = append(known, p.ServiceAccount)
	}
	seen := map[string]bool{}
	out := make([]*storagev1.PodIdentityAssociation, 0, len(req))
	for _, a := range req {
		sa := a.GetServiceAccount()
		switch {
		case sa == "":
			return nil, invalid(c.GetName(), v.Addon.Name, "podIdentityAssociations: serviceAccount is required.")
		case !slices.Contains(known, sa):
			return nil, invalid(c.GetName(), v.Addon.Name,
				"podIdentityAssociations: service account %s is not used by addon %s version %s (it uses: %s).",
				sa, v.Addon.Name, v.Version, strings.Join(known, ", "))
		case seen[sa]:
			return nil, invalid(c.GetName(), v.Addon.Name,
				"podIdentityAssociations: service account %s is listed more than once.", sa)
		}
		seen[sa] = true
		if err := validateRoleARN(c.GetName(), v.Addon.Name, "podIdentityAssociations roleArn", a.GetRoleArn(), account); err != nil {
			return nil, err
		}
		id := ""
		for _, p := range prior {
			if p.GetServiceAccount() == sa {
				id = p.GetAssociationId()
			}
		}
		if id == "" {
			id = newID()
		}
		out = append(out, &storagev1.PodIdentityAssociation{ServiceAccount: sa, RoleArn: a.GetRoleArn(), AssociationId: id})
	}
	return out, nil
}

// podIdentityList reads UpdateAddon's podIdentityAssociations, a JSON list
// of {serviceAccount, roleArn} objects: nil when the member was absent, an
// empty (non-nil) slice when it was `[]`.
func podIdentityList(clusterName, addonName string, lv *structpb.ListValue) ([]*eksv1.AddonPodIdentityAssociations, error) {
	if lv == nil {
		return nil, nil
	}
	out := make([]*eksv1.AddonPodIdentityAssociations, 0, len(lv.GetValues()))
	for i, v := range lv.GetValues() {
		obj := v.GetStructValue()
		if obj == nil {
			return nil, invalid(clusterName, addonName,
				"podIdentityAssociations[%d] must be an object with serviceAccount and roleArn.", i)
		}
		a := &eksv1.AddonPodIdentityAssociations{}
		for k, f := range obj.GetFields() {
			sv, ok := f.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, invalid(clusterName, addonName, "podIdentityAssociations[%d].%s must be a string.", i, k)
			}
			switch k {
			case "serviceAccount":
				a.ServiceAccount = sv.StringValue
			case "roleArn":
				a.RoleArn = sv.StringValue
			default:
				return nil, invalid(clusterName, addonName, "podIdentityAssociations[%d] has unknown member %q.", i, k)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func validateNamespace(clusterName, addonName, ns string) error {
	if !namespacePattern.MatchString(ns) {
		return invalid(clusterName, addonName,
			"namespaceConfig namespace %q is not a valid Kubernetes namespace name.", ns)
	}
	return nil
}

func validateReference(ref string) error {
	if !referencePattern.MatchString(ref) {
		return errdefs.InvalidParameter("reference %q is not valid: 1-256 of A-Z a-z 0-9 . _ : / -, starting alphanumeric.", ref)
	}
	return nil
}

// versionIndex orders catalogue versions (newest first), for the
// no-downgrade rule.
func versionIndex(a *catalog.Addon, version string) int {
	return slices.IndexFunc(a.Versions, func(v *catalog.Version) bool { return v.Version == version })
}
