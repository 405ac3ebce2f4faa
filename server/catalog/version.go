package catalog

import (
	"cmp"
	"strconv"
	"strings"
)

// CompareVersions orders two add-on versions that match addonVersionRE:
// major, minor, patch, then eksbuild number (absent counts as 0). Strings are
// compared numerically because "v1.10.0" is newer than "v1.9.0".
func CompareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	for i := range pa {
		if c := cmp.Compare(pa[i], pb[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(a, b)
}

func versionParts(v string) [4]int {
	var out [4]int
	m := addonVersionRE.FindStringSubmatch(v)
	if m == nil {
		return out
	}
	for i := range out {
		out[i], _ = strconv.Atoi(m[i+1]) // "" (no eksbuild) → 0
	}
	return out
}

// compareKubernetesVersions orders "1.9" before "1.33".
func compareKubernetesVersions(a, b string) int {
	amaj, amin, _ := strings.Cut(a, ".")
	bmaj, bmin, _ := strings.Cut(b, ".")
	x, _ := strconv.Atoi(amaj)
	y, _ := strconv.Atoi(bmaj)
	if c := cmp.Compare(x, y); c != 0 {
		return c
	}
	x, _ = strconv.Atoi(amin)
	y, _ = strconv.Atoi(bmin)
	if c := cmp.Compare(x, y); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}
