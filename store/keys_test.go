package store_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/store"
)

func TestAddonDeadlineKeysSortByDeadline(t *testing.T) {
	base := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	deadlines := []time.Time{base.Add(time.Hour), base, base.Add(time.Nanosecond), base.Add(-time.Hour), base.Add(100 * 365 * 24 * time.Hour)}
	var keys []string
	for i, d := range deadlines {
		keys = append(keys, store.AddonDeadlineKey(d, "uid", string(rune('a'+i))))
	}
	sort.Strings(keys)
	var prev time.Time
	for i, k := range keys {
		got, err := store.AddonDeadlineOf(strings.TrimPrefix(k, store.AddonDeadlinesPrefix))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && got.Before(prev) {
			t.Fatalf("key order is not deadline order: %v", keys)
		}
		prev = got
	}
	if _, err := store.AddonDeadlineOf("not-a-time/uid/x"); err == nil {
		t.Fatal("a malformed deadline key was accepted")
	}
}

func TestClusterUpdatesAreApartFromAddonUpdates(t *testing.T) {
	cluster := store.ClusterUpdatesPrefix("uid")
	for _, addon := range []string{"cluster", "coredns", "c"} {
		a := store.AddonUpdatesPrefix("uid", addon)
		if strings.HasPrefix(a, cluster) || strings.HasPrefix(cluster, a) {
			t.Errorf("cluster updates %q and add-on %q updates %q overlap", cluster, addon, a)
		}
	}
	if k := store.ClusterUpdateKey("uid", "id"); !strings.HasPrefix(k, store.ClusterChildrenPrefix("uid")) || k != cluster+"id" {
		t.Errorf("ClusterUpdateKey = %q, want %q under the cluster's children", k, cluster+"id")
	}
}

// TestInsightsRefreshKeyIsTheClusters: the refresh lives under the cluster
// incarnation (so purging the cluster removes it) and under no other
// family's prefix.
func TestInsightsRefreshKeyIsTheClusters(t *testing.T) {
	k := store.InsightsRefreshKey("uid")
	if !strings.HasPrefix(k, store.ClusterChildrenPrefix("uid")) || strings.HasPrefix(k, store.ClusterChildrenPrefix("uid-2")) {
		t.Fatalf("InsightsRefreshKey = %q, want it under cluster uid's children alone", k)
	}
	others := []struct{ name, prefix string }{
		{"add-ons", store.AddonsPrefix("uid")},
		{"cluster updates", store.ClusterUpdatesPrefix("uid")},
		{"access entries", store.AccessEntriesPrefix("uid")},
		{"pod identity associations", store.PodIdentityAssociationsPrefix("uid")},
		{"sessions", store.SessionsPrefix("uid")},
		{"executor", store.ExecutorKey("uid")},
	}
	for _, o := range others {
		t.Run(o.name, func(t *testing.T) {
			if strings.HasPrefix(k, o.prefix) || strings.HasPrefix(o.prefix, k) {
				t.Errorf("InsightsRefreshKey %q overlaps %s %q", k, o.name, o.prefix)
			}
		})
	}
}
