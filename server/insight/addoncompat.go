package insight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
)

// addonCompatibilityName is the name of both add-on compatibility checks:
// AWS's.
const addonCompatibilityName = "Amazon EKS add-on version compatibility"

// The upgrade check, in AWS's words where known: description and
// recommendation are worded like AWS's.
const (
	checkAddonCompatibility = "addon-version-compatibility"
	addonCompatibilityDesc  = "Checks the version of every installed Amazon EKS add-on to ensure it is compatible " +
		"with the next Kubernetes version. An add-on whose installed version is not compatible keeps running on the " +
		"upgraded cluster unmanaged by any compatible release; update it first."
	addonCompatibilityRecommendation = "Update each listed add-on (UpdateAddon) to a version compatible with the next " +
		"Kubernetes version before upgrading the cluster; DescribeAddonVersions with kubernetesVersion set to that " +
		"version lists them, defaultVersion marking the recommended one."
)

// compatCheck is one add-on version compatibility check: the insight it
// renders and the Kubernetes version it judges a cluster's add-ons
// against. Both checks (upgradeCheck here, rollbackCheck in
// rollbackcompat.go) share the verdicts and the rendering below.
type compatCheck struct {
	// check names the check in the insight's id (insightID).
	check, category, description, recommendation string
	// target is the version the cluster is judged against; false when
	// there is none, and then the cluster has no such insight.
	target func(ctx context.Context, c *storagev1.ClusterRecord) (string, bool, error)
}

// upgradeCheck is the UPGRADE_READINESS insight for the next minor version
// saltbush offers: a cluster on the newest version has none.
func (s *Service) upgradeCheck() compatCheck {
	return compatCheck{
		check: checkAddonCompatibility, category: CategoryUpgradeReadiness,
		description: addonCompatibilityDesc, recommendation: addonCompatibilityRecommendation,
		target: func(_ context.Context, c *storagev1.ClusterRecord) (string, bool, error) {
			next, ok := s.versions.NextOffered(c.GetKubernetesVersion())
			return next, ok, nil
		},
	}
}

// addonVerdict is the check's finding for one add-on.
type addonVerdict struct {
	rec        *storagev1.AddonRecord
	compatible bool
	// versions compatible with the target Kubernetes version, newest first.
	versions []string
}

// compatibility renders check for the cluster and its add-ons, or nil when
// the cluster's version has no target for it: ERROR when an installed
// add-on (one not being deleted) has a version that is not compatible with
// the target, naming each with the versions that are, PASSING otherwise.
//
// Insights are computed, not stored, so lastTransitionTime is the latest
// change of what the check reads (the cluster record and its add-ons): the
// status can only have changed then. lastRefreshTime is the call's time.
func (s *Service) compatibility(ctx context.Context, c *storagev1.ClusterRecord, addons []*storagev1.AddonRecord, check compatCheck, now time.Time) (*eksv1.Insight, error) {
	target, ok, err := check.target(ctx, c)
	if err != nil || !ok {
		return nil, err
	}
	verdicts, err := s.verdicts(ctx, c, addons, target)
	if err != nil {
		return nil, err
	}
	return render(c, check, target, verdicts, now, lastChange(c, addons)), nil
}

// lastChange is the latest modification of the cluster record or any of
// its add-ons, deleting ones included.
func lastChange(c *storagev1.ClusterRecord, addons []*storagev1.AddonRecord) time.Time {
	t := c.GetModifiedAt().AsTime()
	for _, a := range addons {
		if m := a.GetModifiedAt().AsTime(); m.After(t) {
			t = m
		}
	}
	return t
}

// verdicts judges every installed add-on, those being deleted left out,
// against the target Kubernetes version, with the catalogue as the
// cluster's account sees it.
func (s *Service) verdicts(ctx context.Context, c *storagev1.ClusterRecord, addons []*storagev1.AddonRecord, target string) ([]addonVerdict, error) {
	var out []addonVerdict
	for _, a := range addons {
		if a.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_DELETING {
			continue
		}
		entry, ok, err := s.catalog.Lookup(ctx, c.GetAccountId(), a.GetName())
		if err != nil {
			return nil, err
		}
		if !ok {
			entry = nil
		}
		out = append(out, verdict(entry, a, target))
	}
	return out, nil
}

// verdict judges one add-on against the target Kubernetes version; entry
// is its catalogue entry, nil when the catalogue has none.
func verdict(entry *catalog.Addon, a *storagev1.AddonRecord, target string) addonVerdict {
	v := addonVerdict{rec: a, versions: []string{}}
	if entry == nil {
		return v
	}
	if cur, ok := entry.Version(a.GetSpec().GetVersion()); ok && cur.Compatible(target) {
		v.compatible = true
	}
	for _, ver := range entry.Versions {
		if !ver.Retired && ver.Compatible(target) {
			v.versions = append(v.versions, ver.Version)
		}
	}
	return v
}

// incompatible names each add-on the verdicts find not compatible, as
// "name (version)", in the verdicts' order; empty when there is none.
func incompatible(verdicts []addonVerdict) []string {
	out := []string{}
	for _, v := range verdicts {
		if !v.compatible {
			out = append(out, fmt.Sprintf("%s (%s)", v.rec.GetName(), v.rec.GetSpec().GetVersion()))
		}
	}
	return out
}

// render builds check's insight about the target version from the
// verdicts.
func render(c *storagev1.ClusterRecord, check compatCheck, target string, verdicts []addonVerdict, now, transition time.Time) *eksv1.Insight {
	in := &eksv1.Insight{
		Id:                 insightID(c.GetUid(), check.check),
		Name:               addonCompatibilityName,
		Category:           check.category,
		KubernetesVersion:  target,
		LastRefreshTime:    epoch(now),
		LastTransitionTime: epoch(transition),
		Description:        check.description,
		Recommendation:     check.recommendation,
		AdditionalInfo:     map[string]string{},
		Resources:          []*eksv1.InsightResourceDetail{},
		CategorySpecificSummary: &eksv1.InsightCategorySpecificSummary{
			DeprecationDetails:        []*eksv1.DeprecationDetail{},
			AddonCompatibilityDetails: []*eksv1.AddonCompatibilityDetail{},
		},
	}
	for _, v := range verdicts {
		st := &eksv1.InsightStatus{Status: StatusPassing,
			Reason: fmt.Sprintf("Add-on %s version %s is compatible with Kubernetes version %s.", v.rec.GetName(), v.rec.GetSpec().GetVersion(), target)}
		if !v.compatible {
			st = &eksv1.InsightStatus{Status: StatusError,
				Reason: fmt.Sprintf("Add-on %s version %s is not compatible with Kubernetes version %s; compatible versions: %s.",
					v.rec.GetName(), v.rec.GetSpec().GetVersion(), target, orNone(v.versions))}
			in.CategorySpecificSummary.AddonCompatibilityDetails = append(in.CategorySpecificSummary.AddonCompatibilityDetails,
				&eksv1.AddonCompatibilityDetail{Name: v.rec.GetName(), CompatibleVersions: v.versions})
		}
		in.Resources = append(in.Resources, &eksv1.InsightResourceDetail{InsightStatus: st, Arn: v.rec.GetArn()})
	}
	if bad := incompatible(verdicts); len(bad) > 0 {
		in.InsightStatus = &eksv1.InsightStatus{Status: StatusError,
			Reason: fmt.Sprintf("%d add-on(s) not compatible with Kubernetes version %s: %s.",
				len(bad), target, strings.Join(bad, ", "))}
	} else {
		in.InsightStatus = &eksv1.InsightStatus{Status: StatusPassing,
			Reason: fmt.Sprintf("Every installed add-on is compatible with Kubernetes version %s.", target)}
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
