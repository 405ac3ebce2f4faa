package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key layout (docs/architecture.md, "Store"), relative to the root prefix. Children of a
// cluster live under its uid, never its name, so a cluster recreated with the
// same name starts empty, and purging a cluster is one DeleteRange.

// ClustersPrefix is the prefix of an account's cluster records.
func ClustersPrefix(account string) string { return "accounts/" + account + "/clusters/" }

// ClusterKey is where a cluster record lives.
func ClusterKey(account, name string) string { return ClustersPrefix(account) + name }

// ClusterChildrenPrefix is the prefix of everything owned by one cluster
// incarnation (add-ons, updates, access entries, executor, sessions, the
// latest insights refresh).
func ClusterChildrenPrefix(uid string) string { return "clusters/" + uid + "/" }

// IdempotencyKey is where the outcome of a request with a client token is
// remembered. The token is hashed: it is caller-chosen and unbounded.
func IdempotencyKey(account, operation, token string) string {
	sum := sha256.Sum256([]byte(token))
	return "idempotency/" + account + "/" + operation + "/" + hex.EncodeToString(sum[:])
}

// AddonsPrefix is the prefix of a cluster incarnation's add-on records.
func AddonsPrefix(clusterUID string) string { return ClusterChildrenPrefix(clusterUID) + "addons/" }

// AddonKey is where an add-on record lives.
func AddonKey(clusterUID, name string) string { return AddonsPrefix(clusterUID) + name }

// AddonUpdatesPrefix is the prefix of one add-on's update records. Updates
// are grouped by add-on because AWS scopes ListUpdates by addonName, so a
// listing is one prefix scan, and removing an add-on drops its history in one
// DeleteRange.
func AddonUpdatesPrefix(clusterUID, addon string) string {
	return ClusterChildrenPrefix(clusterUID) + "updates/addons/" + addon + "/"
}

// AddonUpdateKey is where one add-on update record lives.
func AddonUpdateKey(clusterUID, addon, updateID string) string {
	return AddonUpdatesPrefix(clusterUID, addon) + updateID
}

// ClusterUpdatesPrefix is the prefix of a cluster incarnation's own update
// records (UpdateClusterConfig), beside its add-ons' (updates/addons/): a
// ListUpdates without addonName is one prefix scan.
func ClusterUpdatesPrefix(clusterUID string) string {
	return ClusterChildrenPrefix(clusterUID) + "updates/cluster/"
}

// ClusterUpdateKey is where one cluster update record lives.
func ClusterUpdateKey(clusterUID, updateID string) string {
	return ClusterUpdatesPrefix(clusterUID) + updateID
}

// AccessEntriesPrefix is the prefix of a cluster incarnation's access
// entries.
func AccessEntriesPrefix(clusterUID string) string {
	return ClusterChildrenPrefix(clusterUID) + "access/"
}

// AccessEntryKey is where the access entry of a principal lives. principal
// is the canonical principal ARN (see package access); it is hashed because
// ARNs hold "/" and are up to 2048 characters.
func AccessEntryKey(clusterUID, principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return AccessEntriesPrefix(clusterUID) + hex.EncodeToString(sum[:])
}

// PodIdentityAssociationsPrefix is the prefix of a cluster incarnation's
// pod identity association records (key order is association id order).
func PodIdentityAssociationsPrefix(clusterUID string) string {
	return ClusterChildrenPrefix(clusterUID) + "podidentity/associations/"
}

// PodIdentityAssociationKey is where one pod identity association lives.
func PodIdentityAssociationKey(clusterUID, associationID string) string {
	return PodIdentityAssociationsPrefix(clusterUID) + associationID
}

// PodIdentityServiceAccountsPrefix is the prefix of a cluster incarnation's
// pod identity exclusivity keys.
func PodIdentityServiceAccountsPrefix(clusterUID string) string {
	return ClusterChildrenPrefix(clusterUID) + "podidentity/serviceaccounts/"
}

// PodIdentityServiceAccountKey is the exclusivity key of one (namespace,
// service account): it names the one association that holds the pair.
// Both are Kubernetes names, which hold no "/".
func PodIdentityServiceAccountKey(clusterUID, namespace, serviceAccount string) string {
	return PodIdentityServiceAccountsPrefix(clusterUID) + namespace + "/" + serviceAccount
}

// InsightsRefreshKey is where a cluster incarnation's latest insights
// refresh lives (StartInsightsRefresh replaces it; server/insight).
func InsightsRefreshKey(clusterUID string) string {
	return ClusterChildrenPrefix(clusterUID) + "insights/refresh"
}

// PublishedAddonsPrefix holds the add-on versions operators published:
// catalog/addons/{addon-name}/{version}.
const PublishedAddonsPrefix = "catalog/addons/"

// PublishedAddonPrefix holds one add-on's published versions.
func PublishedAddonPrefix(addon string) string { return PublishedAddonsPrefix + addon + "/" }

// PublishedAddonVersionKey is one published add-on version.
func PublishedAddonVersionKey(addon, version string) string {
	return PublishedAddonPrefix(addon) + version
}

// ExecutorKey is where a cluster incarnation's delivery executor
// {instance, epoch} lives.
func ExecutorKey(clusterUID string) string { return ClusterChildrenPrefix(clusterUID) + "executor" }

// SessionsPrefix is the prefix of a cluster incarnation's live agent
// sessions.
func SessionsPrefix(clusterUID string) string { return ClusterChildrenPrefix(clusterUID) + "sessions/" }

// SessionKey is where one agent's session lives (attached to a lease).
func SessionKey(clusterUID, instance string) string { return SessionsPrefix(clusterUID) + instance }

// AddonDeadlinesPrefix is the prefix of the add-on deadline index.
const AddonDeadlinesPrefix = "addon-deadlines/"

// AddonDeadlineKey is the deadline index entry of one add-on generation. The
// zero-padded nanoseconds make key order deadline order, so the due entries
// are a prefix of the listing.
func AddonDeadlineKey(deadline time.Time, clusterUID, addon string) string {
	return fmt.Sprintf("%s%020d/%s/%s", AddonDeadlinesPrefix, deadline.UnixNano(), clusterUID, addon)
}

// UpdateDeadlinesPrefix is the prefix of the cluster-update deadline
// index: a VersionRollback's rollbackConfig.timeoutMinutes.
const UpdateDeadlinesPrefix = "update-deadlines/"

// UpdateDeadlineKey is the deadline index entry of one cluster update,
// encoded as AddonDeadlineKey is (AddonDeadlineOf reads both).
func UpdateDeadlineKey(deadline time.Time, clusterUID, updateID string) string {
	return fmt.Sprintf("%s%020d/%s/%s", UpdateDeadlinesPrefix, deadline.UnixNano(), clusterUID, updateID)
}

// AddonDeadlineOf returns the deadline an AddonDeadlineKey or an
// UpdateDeadlineKey (relative to its prefix) encodes.
func AddonDeadlineOf(name string) (time.Time, error) {
	ts, _, _ := strings.Cut(name, "/")
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("deadline key %q: %w", name, ErrCorrupt)
	}
	return time.Unix(0, n), nil
}
