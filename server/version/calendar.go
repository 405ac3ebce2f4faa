package version

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Release is one Kubernetes minor version on saltbush's support calendar.
type Release struct {
	// Minor is the version as clusters name it: "1.36".
	Minor string
	// Patch is the patch release clusters of this minor run: "1.36.2".
	Patch string
	// PlatformVersion is the platform version a cluster of this minor gets
	// by default ("eks.1").
	PlatformVersion string
	// Released, EndOfStandardSupport and EndOfExtendedSupport are the
	// calendar's dates (UTC midnight).
	Released, EndOfStandardSupport, EndOfExtendedSupport time.Time
}

// The support statuses, in DescribeClusterVersions' two spellings.
const (
	StatusStandard    = "STANDARD_SUPPORT"
	StatusExtended    = "EXTENDED_SUPPORT"
	StatusUnsupported = "UNSUPPORTED"
)

// legacyStatus is the deprecated `status` spelling of a versionStatus.
var legacyStatus = map[string]string{
	StatusStandard:    "standard-support",
	StatusExtended:    "extended-support",
	StatusUnsupported: "unsupported",
}

// VersionStatus is the release's support status at now: standard support
// from its release until its end of standard support, then extended
// support until its end, then unsupported.
func (r Release) VersionStatus(now time.Time) string {
	switch {
	case now.Before(r.EndOfStandardSupport):
		return StatusStandard
	case now.Before(r.EndOfExtendedSupport):
		return StatusExtended
	}
	return StatusUnsupported
}

func day(s string) time.Time {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(fmt.Sprintf("calendar date %q: %v", s, err))
	}
	return t
}

// Calendar is saltbush's Kubernetes support calendar, oldest first: the
// one table DescribeClusterVersions answers from, and what UpdateClusterVersion
// and the upgrade insights take the next minor version from. Standard
// support lasts about 14 months from a release, extended support 12 more,
// as in EKS's calendar. A version saltbush offers
// (cluster.Config.KubernetesVersions) must have a row here
// (Config.Validate); a row saltbush does not offer is never listed.
// docs/operations.md, "Kubernetes versions and upgrades", documents it.
var Calendar = []Release{
	{Minor: "1.32", Patch: "1.32.9", PlatformVersion: "eks.1",
		Released: day("2025-01-23"), EndOfStandardSupport: day("2026-03-23"), EndOfExtendedSupport: day("2027-03-23")},
	{Minor: "1.33", Patch: "1.33.5", PlatformVersion: "eks.1",
		Released: day("2025-05-29"), EndOfStandardSupport: day("2026-07-29"), EndOfExtendedSupport: day("2027-07-29")},
	{Minor: "1.34", Patch: "1.34.2", PlatformVersion: "eks.1",
		Released: day("2025-10-02"), EndOfStandardSupport: day("2026-12-02"), EndOfExtendedSupport: day("2027-12-02")},
	{Minor: "1.35", Patch: "1.35.1", PlatformVersion: "eks.1",
		Released: day("2026-01-27"), EndOfStandardSupport: day("2027-03-27"), EndOfExtendedSupport: day("2028-03-27")},
	{Minor: "1.36", Patch: "1.36.0", PlatformVersion: "eks.1",
		Released: day("2026-05-28"), EndOfStandardSupport: day("2027-07-28"), EndOfExtendedSupport: day("2028-07-28")},
	{Minor: "1.37", Patch: "1.37.0", PlatformVersion: "eks.1",
		Released: day("2026-09-30"), EndOfStandardSupport: day("2027-11-30"), EndOfExtendedSupport: day("2028-11-30")},
}

// parseMinor splits "1.36" into 1 and 36.
func parseMinor(v string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || major < 0 || minor < 0 || strconv.Itoa(major) != a || strconv.Itoa(minor) != b {
		return 0, 0, false
	}
	return major, minor, true
}

// NextMinor is the minor version after v ("1.36" after "1.35"); false
// when v is not a minor version.
func NextMinor(v string) (string, bool) {
	major, minor, ok := parseMinor(v)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d.%d", major, minor+1), true
}

// compareMinor orders two minor versions numerically ("1.9" before
// "1.10"); malformed ones sort first.
func compareMinor(a, b string) int {
	am, an, aok := parseMinor(a)
	bm, bn, bok := parseMinor(b)
	switch {
	case !aok || !bok:
		return strings.Compare(a, b)
	case am != bm:
		return am - bm
	}
	return an - bn
}

// epoch is t in the façade's timestamp form: epoch seconds with a
// millisecond fraction.
func epoch(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}
