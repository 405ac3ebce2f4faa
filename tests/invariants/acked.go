package invariants

import (
	"slices"
	"sort"
	"sync"
)

// Kind is the kind of an acknowledged write.
type Kind string

// The kinds of acknowledged writes Check verifies.
const (
	// KindCluster: CreateCluster answered; the cluster's record exists.
	KindCluster Kind = "cluster"
	// KindAddon: CreateAddon answered with the add-on's uid (its ARN's
	// last segment); that incarnation exists.
	KindAddon Kind = "addon"
	// KindAccessEntry: CreateAccessEntry answered with the entry's uid
	// (its ARN's last segment); that entry exists.
	KindAccessEntry Kind = "access-entry"
	// KindPolicyAssociation: AssociateAccessPolicy answered; the
	// principal's entry on the cluster holds the policy.
	KindPolicyAssociation Kind = "policy-association"
	// KindPodIdentityAssociation: CreatePodIdentityAssociation answered
	// with the association's id; it exists on the cluster.
	KindPodIdentityAssociation Kind = "pod-identity-association"
	// KindAddonUpdate: UpdateAddon answered with an update id; the update
	// record exists while its add-on incarnation does.
	KindAddonUpdate Kind = "addon-update"
	// KindClusterUpdate: UpdateClusterConfig or UpdateClusterVersion
	// answered with an update id; the cluster's update record exists.
	KindClusterUpdate Kind = "cluster-update"
	// KindTag: TagResource answered; the resource's record has the tag
	// with that value.
	KindTag Kind = "tag"
)

// Write is one write the server acknowledged, as a workload records it.
// Make one with the constructors (ClusterCreated, AddonCreated, …): they
// fill the scopes a deletion forgets it by.
type Write struct {
	Kind Kind
	// Account and Cluster name the cluster (every kind).
	Account, Cluster string
	// Name is the add-on's name (KindAddon, KindAddonUpdate) or the
	// principal ARN (KindAccessEntry, KindPolicyAssociation).
	Name string
	// ID is the add-on's or entry's uid, the association's id or the
	// update's id.
	ID string
	// Policy is the access policy ARN (KindPolicyAssociation).
	Policy string
	// ARN, Key and Value are the tagged resource and the tag (KindTag).
	ARN, Key, Value string

	scopes []string
}

// identity is what a later acknowledgement of the same thing replaces: a
// tag's new value replaces its old one, a recreated cluster its earlier
// incarnation.
func (w Write) identity() string {
	switch w.Kind {
	case KindCluster:
		return "cluster " + w.Account + "/" + w.Cluster
	case KindPolicyAssociation:
		return "policy " + w.Account + "/" + w.Cluster + " " + w.Name + " " + w.Policy
	case KindTag:
		return "tag " + w.ARN + " " + w.Key
	default:
		return string(w.Kind) + " " + w.Account + "/" + w.Cluster + " " + w.ID
	}
}

// String names the write for a violation.
func (w Write) String() string {
	switch w.Kind {
	case KindCluster:
		return "cluster " + w.Cluster + " (account " + w.Account + ")"
	case KindAddon:
		return "add-on " + w.Name + " " + w.ID + " of cluster " + w.Cluster
	case KindAccessEntry:
		return "access entry " + w.ID + " of " + w.Name + " on cluster " + w.Cluster
	case KindPolicyAssociation:
		return "policy " + w.Policy + " of " + w.Name + " on cluster " + w.Cluster
	case KindPodIdentityAssociation:
		return "pod identity association " + w.ID + " of cluster " + w.Cluster
	case KindAddonUpdate:
		return "update " + w.ID + " of add-on " + w.Name + " of cluster " + w.Cluster
	case KindClusterUpdate:
		return "update " + w.ID + " of cluster " + w.Cluster
	case KindTag:
		return "tag " + w.Key + "=" + w.Value + " on " + w.ARN
	}
	return string(w.Kind) + " " + w.ID
}

// Scopes: what a request for a deletion makes the workload forget. A
// cluster's scope covers everything under it; an add-on's its updates and
// tags; an entry's its policies and tags.

// ClusterScope is everything under one cluster name (DeleteCluster).
func ClusterScope(account, cluster string) string { return "cluster " + account + "/" + cluster }

// AddonScope is one add-on name of a cluster, its updates and tags
// (DeleteAddon, and a REMOVED report, which erases a deleted add-on).
func AddonScope(account, cluster, addon string) string {
	return "addon " + account + "/" + cluster + " " + addon
}

// AccessEntryScope is one principal's entry on a cluster, its policies and
// tags (DeleteAccessEntry).
func AccessEntryScope(account, cluster, principal string) string {
	return "access-entry " + account + "/" + cluster + " " + principal
}

// PolicyScope is one policy of a principal's entry
// (DisassociateAccessPolicy).
func PolicyScope(account, cluster, principal, policy string) string {
	return "policy " + account + "/" + cluster + " " + principal + " " + policy
}

// PodIdentityScope is one association and its tags
// (DeletePodIdentityAssociation).
func PodIdentityScope(account, cluster, id string) string {
	return "pod-identity " + account + "/" + cluster + " " + id
}

// TagScope is one tag key of a resource (UntagResource, and a TagResource
// that replaces the value).
func TagScope(arn, key string) string { return "tag " + arn + " " + key }

// ClusterCreated is an answered CreateCluster.
func ClusterCreated(account, cluster string) Write {
	return Write{Kind: KindCluster, Account: account, Cluster: cluster,
		scopes: []string{ClusterScope(account, cluster)}}
}

// AddonCreated is an answered CreateAddon; uid is its ARN's last segment.
func AddonCreated(account, cluster, addon, uid string) Write {
	return Write{Kind: KindAddon, Account: account, Cluster: cluster, Name: addon, ID: uid,
		scopes: []string{ClusterScope(account, cluster), AddonScope(account, cluster, addon)}}
}

// AccessEntryCreated is an answered CreateAccessEntry; uid is its ARN's
// last segment.
func AccessEntryCreated(account, cluster, principal, uid string) Write {
	return Write{Kind: KindAccessEntry, Account: account, Cluster: cluster, Name: principal, ID: uid,
		scopes: []string{ClusterScope(account, cluster), AccessEntryScope(account, cluster, principal)}}
}

// PolicyAssociated is an answered AssociateAccessPolicy.
func PolicyAssociated(account, cluster, principal, policy string) Write {
	return Write{Kind: KindPolicyAssociation, Account: account, Cluster: cluster, Name: principal, Policy: policy,
		scopes: []string{ClusterScope(account, cluster), AccessEntryScope(account, cluster, principal),
			PolicyScope(account, cluster, principal, policy)}}
}

// PodIdentityAssociationCreated is an answered
// CreatePodIdentityAssociation.
func PodIdentityAssociationCreated(account, cluster, id string) Write {
	return Write{Kind: KindPodIdentityAssociation, Account: account, Cluster: cluster, ID: id,
		scopes: []string{ClusterScope(account, cluster), PodIdentityScope(account, cluster, id)}}
}

// AddonUpdated is an answered UpdateAddon and the update it returned.
func AddonUpdated(account, cluster, addon, updateID string) Write {
	return Write{Kind: KindAddonUpdate, Account: account, Cluster: cluster, Name: addon, ID: updateID,
		scopes: []string{ClusterScope(account, cluster), AddonScope(account, cluster, addon)}}
}

// ClusterUpdated is an answered UpdateClusterConfig or
// UpdateClusterVersion and the update it returned.
func ClusterUpdated(account, cluster, updateID string) Write {
	return Write{Kind: KindClusterUpdate, Account: account, Cluster: cluster, ID: updateID,
		scopes: []string{ClusterScope(account, cluster)}}
}

// Tagged is an answered TagResource of one tag on of, the acknowledged
// write that made the resource arn names: the tag goes with it.
func Tagged(of Write, arn, key, value string) Write {
	return Write{Kind: KindTag, Account: of.Account, Cluster: of.Cluster, ARN: arn, Key: key, Value: value,
		scopes: append(append([]string(nil), of.scopes...), TagScope(arn, key))}
}

// Acked is the set of acknowledged writes a workload keeps for Check. Safe
// for concurrent use.
//
// A workload calls Begin before it sends a request and Add with that token
// when the server answers. Before it asks for a deletion it calls Forget
// with the deletion's scope, and the function Forget returns once the
// deletion request has returned, whatever its outcome (or the server died
// under it). A deletion is not a point in time: from Forget to its return
// the server may apply it before or after any other request. So Add drops
// a write in a scope whose deletion was pending at any time since the
// write's Begin: that write may have been applied first and deleted after,
// and its absence proves nothing. What Forget removes was asked to go;
// everything else in the set must be in the keyspace.
//
// Only deletions that are done when their request returns fit this:
// add-on deletion ends later, with a REMOVED report, so a write that may
// still be accepted while an add-on is DELETING (its tags) must not be
// recorded.
type Acked struct {
	mu     sync.Mutex
	seq    uint64
	writes map[string]Write
	// Per scope: deletions pending now, and when the last one returned.
	pending map[string]int
	ended   map[string]uint64
}

// Token is where in the sequence of deletions a request began.
type Token struct{ seq uint64 }

// NewAcked returns an empty set.
func NewAcked() *Acked {
	return &Acked{writes: map[string]Write{}, pending: map[string]int{}, ended: map[string]uint64{}}
}

// Begin returns the token of a request about to be sent.
func (a *Acked) Begin() Token {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Token{seq: a.seq}
}

// Add records w, acknowledged for the request that began at t. It reports
// whether w was recorded (false: a deletion in its scope was pending at
// some time since t).
func (a *Acked) Add(t Token, w Write) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range w.scopes {
		if a.pending[s] > 0 || a.ended[s] > t.seq {
			return false
		}
	}
	a.writes[w.identity()] = w
	return true
}

// Forget drops every write in scope: call it before sending the request
// that deletes what scope names, and call the function it returns once
// that request has returned.
func (a *Acked) Forget(scope string) (done func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	a.pending[scope]++
	for id, w := range a.writes {
		if slices.Contains(w.scopes, scope) {
			delete(a.writes, id)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.seq++
			a.pending[scope]--
			a.ended[scope] = a.seq
		})
	}
}

// Writes returns the recorded writes, in a stable order.
func (a *Acked) Writes() []Write {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Write, 0, len(a.writes))
	ids := make([]string, 0, len(a.writes))
	for id := range a.writes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		out = append(out, a.writes[id])
	}
	return out
}

// Len is the number of recorded writes.
func (a *Acked) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.writes)
}
