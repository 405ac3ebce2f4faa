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
