package addon

import (
	"context"
	"slices"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/paging"
)

// DescribeVersions pages through the catalogue. Hidden add-ons are listed
// only when addonName names them (they are creatable by name, like AWS's
// unlisted add-ons). With kubernetesVersion only compatible versions are
// listed, each with that Kubernetes version's compatibility only.
func (s *Service) DescribeVersions(ctx context.Context, req *eksv1.DescribeAddonVersionsRequest) ([]*eksv1.AddonInfo, string, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(req.MaxResults)
	if err != nil {
		return nil, "", err
	}
	scope := "DescribeAddonVersions"
	after := ""
	if req.GetNextToken() != "" {
		if after, err = s.store.OpenPageToken(req.GetNextToken(), scope); err != nil {
			return nil, "", paging.InvalidToken(err)
		}
	}
	out := []*eksv1.AddonInfo{}
	addons, err := s.catalog.List(ctx, who.AccountID)
	if err != nil {
		return nil, "", err
	}
	for _, a := range addons {
		if a.Name <= after || !matches(a, req) {
			continue
		}
		info := addonInfo(a, req.GetKubernetesVersion())
		if info == nil {
			continue
		}
		if len(out) == limit {
			return out, s.store.SealPageToken(scope, out[len(out)-1].GetAddonName()), nil
		}
		out = append(out, info)
	}
	return out, "", nil
}

func matches(a *catalog.Addon, req *eksv1.DescribeAddonVersionsRequest) bool {
	if req.GetAddonName() != "" && a.Name != req.GetAddonName() {
		return false
	}
	if a.Hidden && req.GetAddonName() == "" {
		return false
	}
	in := func(filter []string, v string) bool { return len(filter) == 0 || slices.Contains(filter, v) }
	return in(req.GetTypes(), a.Type) && in(req.GetPublishers(), a.Publisher) && in(req.GetOwners(), a.Owner)
}

// addonInfo renders a catalogue add-on; nil when no version is compatible
// with kubernetesVersion.
func addonInfo(a *catalog.Addon, kubernetesVersion string) *eksv1.AddonInfo {
	info := &eksv1.AddonInfo{
		AddonName: a.Name, Type: a.Type, Publisher: a.Publisher, Owner: a.Owner,
		DefaultNamespace: a.DefaultNamespace, MarketplaceInformation: nil,
		AddonVersions: []*eksv1.AddonVersionInfo{},
	}
	for _, v := range a.Versions {
		if v.Retired || (kubernetesVersion != "" && !v.Compatible(kubernetesVersion)) {
			continue
		}
		vi := &eksv1.AddonVersionInfo{
			AddonVersion:           v.Version,
			Architecture:           v.Architectures,
			ComputeTypes:           v.ComputeTypes,
			RequiresConfiguration:  ptr(v.RequiresConfiguration),
			RequiresIamPermissions: ptr(v.RequiresIAMPermissions),
			Compatibilities:        []*eksv1.Compatibility{},
		}
		for _, c := range v.Compatibilities {
			if kubernetesVersion != "" && c.ClusterVersion != kubernetesVersion {
				continue
			}
			vi.Compatibilities = append(vi.Compatibilities, &eksv1.Compatibility{
				ClusterVersion: c.ClusterVersion, PlatformVersions: c.PlatformVersions, DefaultVersion: ptr(c.Default),
			})
		}
		info.AddonVersions = append(info.AddonVersions, vi)
	}
	if len(info.AddonVersions) == 0 {
		return nil
	}
	return info
}

func ptr[T any](v T) *T { return &v }

// DescribeConfiguration returns a version's configuration schema and pod
// identity configuration.
func (s *Service) DescribeConfiguration(ctx context.Context, addonName, version string) (*eksv1.DescribeAddonConfigurationResponse, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case addonName == "":
		return nil, errdefs.InvalidParameter("addonName is required.")
	case version == "":
		return nil, errdefs.InvalidParameter("addonVersion is required.").WithField("addonName", addonName)
	}
	a, ok, err := s.catalog.Lookup(ctx, who.AccountID, addonName)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errdefs.NotFound("Addon %s specified is not supported.", addonName).WithField("addonName", addonName)
	}
	v, ok := a.Version(version)
	if !ok {
		return nil, errdefs.NotFound("Addon version %s specified is not supported for addon %s.", version, addonName).
			WithField("addonName", addonName)
	}
	out := &eksv1.DescribeAddonConfigurationResponse{
		AddonName: a.Name, AddonVersion: v.Version, ConfigurationSchema: v.Schema,
		PodIdentityConfiguration: []*eksv1.AddonPodIdentityConfiguration{},
	}
	for _, p := range v.PodIdentity {
		out.PodIdentityConfiguration = append(out.PodIdentityConfiguration, &eksv1.AddonPodIdentityConfiguration{
			ServiceAccount: p.ServiceAccount, RecommendedManagedPolicies: p.RecommendedManagedPolicies,
		})
	}
	return out, nil
}
