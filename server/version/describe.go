package version

import (
	"context"
	"slices"
	"time"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/paging"
)

// clusterTypeEKS is the one cluster type saltbush has.
const clusterTypeEKS = "eks"

const describeScope = "DescribeClusterVersions"

// Describe returns one page of the versions saltbush offers, newest first,
// as DescribeClusterVersions filters them: clusterType (only "eks" has
// versions), clusterVersions, defaultOnly, versionStatus (or its
// deprecated spelling, status). Unsupported versions are listed only with
// includeAll or when a status filter asks for them.
func (s *Service) Describe(ctx context.Context, req *eksv1.DescribeClusterVersionsRequest) ([]*eksv1.ClusterVersionInformation, string, error) {
	if _, err := identity.AccountCaller(ctx); err != nil {
		return nil, "", err
	}
	limit, err := paging.Limit(req.MaxResults)
	if err != nil {
		return nil, "", err
	}
	after := ""
	if req.GetNextToken() != "" {
		if after, err = s.store.OpenPageToken(req.GetNextToken(), describeScope); err != nil {
			return nil, "", paging.InvalidToken(err)
		}
	}
	now := s.cfg.Now()
	out := []*eksv1.ClusterVersionInformation{}
	for i := len(Calendar) - 1; i >= 0; i-- {
		r := Calendar[i]
		if !s.Offered(r.Minor) || (after != "" && compareMinor(r.Minor, after) >= 0) {
			continue
		}
		info := s.information(r, now)
		if !selected(req, info) {
			continue
		}
		if len(out) == limit {
			return out, s.store.SealPageToken(describeScope, out[len(out)-1].GetClusterVersion()), nil
		}
		out = append(out, info)
	}
	return out, "", nil
}

// information renders a calendar row at now.
func (s *Service) information(r Release, now time.Time) *eksv1.ClusterVersionInformation {
	st := r.VersionStatus(now)
	return &eksv1.ClusterVersionInformation{
		ClusterVersion:           r.Minor,
		ClusterType:              clusterTypeEKS,
		DefaultPlatformVersion:   r.PlatformVersion,
		DefaultVersion:           ptr(r.Minor == s.cfg.Default),
		ReleaseDate:              epoch(r.Released),
		EndOfStandardSupportDate: epoch(r.EndOfStandardSupport),
		EndOfExtendedSupportDate: epoch(r.EndOfExtendedSupport),
		Status:                   legacyStatus[st],
		VersionStatus:            st,
		KubernetesPatchVersion:   r.Patch,
	}
}

// selected applies the request's filters to one version.
func selected(req *eksv1.DescribeClusterVersionsRequest, info *eksv1.ClusterVersionInformation) bool {
	if t := req.GetClusterType(); t != "" && t != info.GetClusterType() {
		return false
	}
	if vs := req.GetClusterVersions(); len(vs) > 0 && !slices.Contains(vs, info.GetClusterVersion()) {
		return false
	}
	if req.GetDefaultOnly() && !info.GetDefaultVersion() {
		return false
	}
	if st := req.GetVersionStatus(); st != "" && st != info.GetVersionStatus() {
		return false
	}
	if st := req.GetStatus(); st != "" && st != info.GetStatus() {
		return false
	}
	askedUnsupported := req.GetVersionStatus() == StatusUnsupported || req.GetStatus() == legacyStatus[StatusUnsupported]
	if info.GetVersionStatus() == StatusUnsupported && !req.GetIncludeAll() && !askedUnsupported {
		return false
	}
	return true
}

func ptr[T any](v T) *T { return &v }
