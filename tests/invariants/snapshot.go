package invariants

import (
	"strconv"
	"strings"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// Snapshot is what one Check saw of the records that must only move
// forward, and of every incarnation seen before (present or gone), so the
// next Check of the same keyspace can tell a step back or a resurrection.
// Pass it to the next Check with Previous. Not safe for concurrent use.
type Snapshot struct {
	revision  int64
	addons    map[string]addonMark    // by add-on uid
	clusters  map[string]clusterMark  // by cluster uid
	executors map[string]executorMark // by cluster uid
	updates   map[string]updateMark   // by cluster uid/update id
	entries   map[string]mark         // by entry uid
	assocs    map[string]mark         // by cluster uid/association id
}

// Revision is the etcd revision the snapshot was read at.
func (s *Snapshot) Revision() int64 { return s.revision }

type mark struct {
	key     string
	present bool
}

type addonMark struct {
	mark
	generation, observed int64
}

type clusterMark struct {
	mark
	deleting bool
	version  string
}

type executorMark struct {
	mark
	epoch    int64
	instance string
}

type updateMark struct {
	mark
	status     storagev1.UpdateStatus
	generation int64
}

// minor is the minor number of a Kubernetes version "1.N" (-1 when it is
// not one).
func minor(v string) int {
	_, m, ok := strings.Cut(v, ".")
	n, err := strconv.Atoi(m)
	if !ok || err != nil {
		return -1
	}
	return n
}

// snapshot records what this check saw and compares it with prev.
func (c *checker) snapshot(prev *Snapshot) *Snapshot {
	s := &Snapshot{
		revision: c.revision,
		addons:   map[string]addonMark{}, clusters: map[string]clusterMark{}, executors: map[string]executorMark{},
		updates: map[string]updateMark{}, entries: map[string]mark{}, assocs: map[string]mark{},
	}
	decoded(c, famCluster, func(it *item, r *storagev1.ClusterRecord) {
		s.clusters[r.GetUid()] = clusterMark{mark: mark{it.key, true},
			deleting: r.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, version: r.GetKubernetesVersion()}
	})
	decoded(c, famAddon, func(it *item, r *storagev1.AddonRecord) {
		s.addons[r.GetUid()] = addonMark{mark: mark{it.key, true}, generation: r.GetGeneration(), observed: r.GetObserved().GetGeneration()}
	})
	decoded(c, famExecutor, func(it *item, r *storagev1.ExecutorRecord) {
		s.executors[it.caps["uid"]] = executorMark{mark: mark{it.key, true}, epoch: r.GetEpoch(), instance: r.GetInstanceId()}
	})
	for _, fam := range []string{famAddonUpdate, famClusterUpdate} {
		decoded(c, fam, func(it *item, r *storagev1.UpdateRecord) {
			s.updates[it.caps["uid"]+"/"+it.caps["id"]] = updateMark{mark: mark{it.key, true}, status: r.GetStatus(), generation: r.GetGeneration()}
		})
	}
	decoded(c, famAccessEntry, func(it *item, r *storagev1.AccessEntryRecord) {
		s.entries[r.GetUid()] = mark{it.key, true}
	})
	decoded(c, famPodIdentity, func(it *item, r *storagev1.PodIdentityAssociationRecord) {
		s.assocs[it.caps["uid"]+"/"+it.caps["id"]] = mark{it.key, true}
	})
	if prev == nil {
		return s
	}
	if c.revision < prev.revision {
		c.violate(InvMonotonic, "", "the keyspace is at revision %d, behind the previous check's %d: acknowledged history was lost",
			c.revision, prev.revision)
	}
	carry(c, prev.clusters, s.clusters, "cluster", func(key string, was, now clusterMark) {
		switch {
		case was.deleting && !now.deleting:
			c.violate(InvMonotonic, key, "the cluster incarnation was DELETING and is not any more")
		case minor(now.version) < minor(was.version):
			c.violate(InvMonotonic, key, "Kubernetes version went back from %s to %s", was.version, now.version)
		}
	})
	carry(c, prev.addons, s.addons, "add-on", func(key string, was, now addonMark) {
		switch {
		case now.generation < was.generation:
			c.violate(InvMonotonic, key, "generation went back from %d to %d", was.generation, now.generation)
		case now.observed < was.observed:
			c.violate(InvMonotonic, key, "observed generation went back from %d to %d", was.observed, now.observed)
		}
	})
	carry(c, prev.executors, s.executors, "executor", func(key string, was, now executorMark) {
		switch {
		case now.epoch < was.epoch:
			c.violate(InvExecutor, key, "epoch went back from %d (%s) to %d (%s)", was.epoch, was.instance, now.epoch, now.instance)
		case now.epoch == was.epoch && now.instance != was.instance && now.instance != "":
			// One epoch, one executor: at the same epoch the record may
			// only be vacated (the cluster fenced), never handed on.
			c.violate(InvExecutor, key, "epoch %d named %q and now names %s", was.epoch, was.instance, now.instance)
		}
	})
	carry(c, prev.updates, s.updates, "update", func(key string, was, now updateMark) {
		switch {
		case was.status != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS && now.status != was.status:
			c.violate(InvMonotonic, key, "update ended %s and is now %s", was.status, now.status)
		case now.generation != was.generation:
			c.violate(InvMonotonic, key, "update of generation %d is now of generation %d", was.generation, now.generation)
		}
	})
	carry(c, prev.entries, s.entries, "access entry", nil)
	carry(c, prev.assocs, s.assocs, "pod identity association", nil)
	return s
}

// marked is a snapshot record: whether it was present, and itself
// marked gone.
type marked[M any] interface {
	get() mark
	absent() M
}

func (m mark) get() mark    { return m }
func (m mark) absent() mark { m.present = false; return m }
func (m addonMark) absent() addonMark {
	m.present = false
	return m
}
func (m clusterMark) absent() clusterMark {
	m.present = false
	return m
}
func (m executorMark) absent() executorMark {
	m.present = false
	return m
}
func (m updateMark) absent() updateMark {
	m.present = false
	return m
}

// carry compares every record prev and now both hold (same), reports an
// incarnation gone in prev that is present again, and keeps in now, as
// gone, what prev held and now does not.
func carry[M marked[M]](c *checker, prev, now map[string]M, what string, same func(key string, was, now M)) {
	for id, was := range prev {
		cur, ok := now[id]
		switch {
		case ok && !was.get().present:
			c.violate(InvMonotonic, cur.get().key, "%s %s was gone and is back", what, id)
		case ok && same != nil:
			same(cur.get().key, was, cur)
		case !ok:
			now[id] = was.absent()
		}
	}
}
