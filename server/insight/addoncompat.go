package insight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// The add-on version compatibility check, in AWS's words where known: the
// name is AWS's; description and recommendation are worded like AWS's.
const (
	checkAddonCompatibility = "addon-version-compatibility"
	addonCompatibilityName  = "Amazon EKS add-on version compatibility"
	addonCompatibilityDesc  = "Checks the version of every installed Amazon EKS add-on to ensure it is compatible " +
		"with the next Kubernetes version. An add-on whose installed version is not compatible keeps running on the " +
		"upgraded cluster unmanaged by any compatible release; update it first."
	addonCompatibilityRecommendation = "Update each listed add-on (UpdateAddon) to a version compatible with the next " +
		"Kubernetes version before upgrading the cluster; DescribeAddonVersions with kubernetesVersion set to that " +
		"version lists them, defaultVersion marking the recommended one."
)

// addonVerdict is the check's finding for one add-on.
type addonVerdict struct {
	rec        *storagev1.AddonRecord
	compatible bool
	// versions compatible with the next Kubernetes version, newest first.
	versions []string
}

// addonCompatibility is the UPGRADE_READINESS insight for the next minor
// version the cluster can be upgraded to: ERROR when an installed add-on
// (one not being deleted) has a version that is not compatible with it,
// naming each with the versions that are, PASSING otherwise. A cluster on
// the newest version saltbush offers has no next version and no insight.
//
// Insights are computed, not stored, so lastTransitionTime is the latest
// change of what the check reads (the cluster record and its add-ons): the
// status can only have changed then. lastRefreshTime is the call's time.
func (s *Service) addonCompatibility(ctx context.Context, c *storagev1.ClusterRecord) (*eksv1.Insight, error) {
	next, ok := s.versions.NextOffered(c.GetKubernetesVersion())
	if !ok {
		return nil, nil
	}
	addons, err := s.addons(ctx, c)
	if err != nil {
		return nil, err
	}
	transition := c.GetModifiedAt().AsTime()
	var verdicts []addonVerdict
	for _, a := range addons {
		if t := a.GetModifiedAt().AsTime(); t.After(transition) {
			transition = t
		}
		if a.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_DELETING {
			continue
		}
		verdicts = append(verdicts, s.verdict(a, next))
	}
	return render(c, next, verdicts, s.now(), transition), nil
}

// verdict judges one add-on against the next Kubernetes version.
func (s *Service) verdict(a *storagev1.AddonRecord, next string) addonVerdict {
	v := addonVerdict{rec: a, versions: []string{}}
	entry, ok := s.catalog.Addon(a.GetName())
	if !ok {
		return v
	}
	if cur, ok := entry.Version(a.GetSpec().GetVersion()); ok && cur.Compatible(next) {
		v.compatible = true
	}
	for _, ver := range entry.Versions {
		if ver.Compatible(next) {
			v.versions = append(v.versions, ver.Version)
		}
	}
	return v
}

// render builds the insight from the verdicts.
func render(c *storagev1.ClusterRecord, next string, verdicts []addonVerdict, now, transition time.Time) *eksv1.Insight {
	in := &eksv1.Insight{
		Id:                 insightID(c.GetUid(), checkAddonCompatibility),
		Name:               addonCompatibilityName,
		Category:           CategoryUpgradeReadiness,
		KubernetesVersion:  next,
		LastRefreshTime:    epoch(now),
		LastTransitionTime: epoch(transition),
		Description:        addonCompatibilityDesc,
		Recommendation:     addonCompatibilityRecommendation,
		AdditionalInfo:     map[string]string{},
		Resources:          []*eksv1.InsightResourceDetail{},
		CategorySpecificSummary: &eksv1.InsightCategorySpecificSummary{
			DeprecationDetails:        []*eksv1.DeprecationDetail{},
			AddonCompatibilityDetails: []*eksv1.AddonCompatibilityDetail{},
		},
	}
	var incompatible []string
	for _, v := range verdicts {
		st := &eksv1.InsightStatus{Status: StatusPassing,
			Reason: fmt.Sprintf("Add-on %s version %s is compatible with Kubernetes version %s.", v.rec.GetName(), v.rec.GetSpec().GetVersion(), next)}
		if !v.compatible {
			st = &eksv1.InsightStatus{Status: StatusError,
				Reason: fmt.Sprintf("Add-on %s version %s is not compatible with Kubernetes version %s; compatible versions: %s.",
					v.rec.GetName(), v.rec.GetSpec().GetVersion(), next, orNone(v.versions))}
			incompatible = append(incompatible, fmt.Sprintf("%s (%s)", v.rec.GetName(), v.rec.GetSpec().GetVersion()))
			in.CategorySpecificSummary.AddonCompatibilityDetails = append(in.CategorySpecificSummary.AddonCompatibilityDetails,
				&eksv1.AddonCompatibilityDetail{Name: v.rec.GetName(), CompatibleVersions: v.versions})
		}
		in.Resources = append(in.Resources, &eksv1.InsightResourceDetail{InsightStatus: st, Arn: v.rec.GetArn()})
	}
	if len(incompatible) == 0 {
		in.InsightStatus = &eksv1.InsightStatus{Status: StatusPassing,
			Reason: fmt.Sprintf("Every installed add-on is compatible with Kubernetes version %s.", next)}
	} else {
		in.InsightStatus = &eksv1.InsightStatus{Status: StatusError,
			Reason: fmt.Sprintf("%d add-on(s) not compatible with Kubernetes version %s: %s.",
				len(incompatible), next, strings.Join(incompatible, ", "))}
	}
	return in
}

func orNone(vs []string) string {
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// addons reads every add-on record of the cluster, by name.
func (s *Service) addons(ctx context.Context, c *storagev1.ClusterRecord) ([]*storagev1.AddonRecord, error) {
	var out []*storagev1.AddonRecord
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{
			Prefix: store.AddonsPrefix(c.GetUid()), Scope: "insight-addons/" + c.GetUid(), Token: token,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster %q insights: list its add-ons: %w", c.GetName(), err)
		}
		for _, kv := range page.Items {
			a := &storagev1.AddonRecord{}
			if err := store.Decode(kv.Value, a); err != nil {
				return nil, fmt.Errorf("cluster %q insights: add-on %s: %w", c.GetName(), kv.Name, err)
			}
			out = append(out, a)
		}
		if page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	slices.SortFunc(out, func(a, b *storagev1.AddonRecord) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}
