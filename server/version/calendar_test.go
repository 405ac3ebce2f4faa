package version

import (
	"slices"
	"testing"
	"time"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

func TestVersionStatus(t *testing.T) {
	r := Release{Minor: "1.40", EndOfStandardSupport: day("2030-01-01"), EndOfExtendedSupport: day("2031-01-01")}
	tests := []struct {
		name string
		now  time.Time
		want string
	}{
		{"before the end of standard support", day("2029-12-31"), StatusStandard},
		{"at the end of standard support", day("2030-01-01"), StatusExtended},
		{"during extended support", day("2030-06-01"), StatusExtended},
		{"at the end of extended support", day("2031-01-01"), StatusUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.VersionStatus(tt.now); got != tt.want {
				t.Fatalf("VersionStatus(%s) = %s, want %s", tt.now, got, tt.want)
			}
		})
	}
}

func TestCalendarIsOrdered(t *testing.T) {
	for i, r := range Calendar {
		if !r.Released.Before(r.EndOfStandardSupport) || !r.EndOfStandardSupport.Before(r.EndOfExtendedSupport) {
			t.Errorf("%s: dates out of order", r.Minor)
		}
		if i > 0 {
			if next, _ := NextMinor(Calendar[i-1].Minor); next != r.Minor {
				t.Errorf("row %d is %s, want %s after %s", i, r.Minor, next, Calendar[i-1].Minor)
			}
		}
	}
}

func TestNextMinor(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"1.35", "1.36", true},
		{"1.9", "1.10", true},
		{"1", "", false},
		{"1.x", "", false},
		{"1.035", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got, ok := NextMinor(tt.in); got != tt.want || ok != tt.ok {
				t.Fatalf("NextMinor(%q) = %q, %t; want %q, %t", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestUnsupportedListedOnRequest: once a version's extended support has
// ended it is listed only with includeAll or a status filter asking for
// it (the clock is the service's, so no test depends on today's date).
func TestUnsupportedListedOnRequest(t *testing.T) {
	s := &Service{cfg: Config{Versions: []string{"1.32", "1.33"}, Default: "1.33",
		Now: func() time.Time { return day("2027-05-01") }}}
	now := s.cfg.Now()
	list := func(req *eksv1.DescribeClusterVersionsRequest) []string {
		var out []string
		for _, minor := range []string{"1.33", "1.32"} {
			r, _ := release(minor)
			if info := s.information(r, now); selected(req, info) {
				out = append(out, minor+" "+info.GetVersionStatus())
			}
		}
		return out
	}
	yes := true
	tests := []struct {
		name string
		req  *eksv1.DescribeClusterVersionsRequest
		want []string
	}{
		{"default", &eksv1.DescribeClusterVersionsRequest{}, []string{"1.33 EXTENDED_SUPPORT"}},
		{"includeAll", &eksv1.DescribeClusterVersionsRequest{IncludeAll: &yes},
			[]string{"1.33 EXTENDED_SUPPORT", "1.32 UNSUPPORTED"}},
		{"versionStatus UNSUPPORTED", &eksv1.DescribeClusterVersionsRequest{VersionStatus: StatusUnsupported},
			[]string{"1.32 UNSUPPORTED"}},
		{"status unsupported", &eksv1.DescribeClusterVersionsRequest{Status: "unsupported"}, []string{"1.32 UNSUPPORTED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := list(tt.req); !slices.Equal(got, tt.want) {
				t.Fatalf("listed %v, want %v", got, tt.want)
			}
		})
	}
}
