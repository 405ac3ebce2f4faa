// Package clusterscope is the one way a cluster-scoped resource (add-ons,
// access entries, pod identity associations, update records, version
// upgrades) reaches its cluster: read the caller's cluster record at a
// named consistency, check that the cluster accepts the operation, and
// guard the resource's transaction with the cluster record's mod revision,
// so nothing is written to a cluster that turned DELETING or FAILED, or was
// deleted and recreated under the same name, after it was read.
//
// Every resource record lives under its cluster's incarnation uid
// (clusters/{uid}/...), and the cluster's purge removes them in one
// transaction: the guard is what makes "the cluster I read" and "the
// cluster I wrote under" the same incarnation. The package also holds the
// skeleton of an exclusive, idempotent create (Create), which every
// cluster-scoped resource follows.
package clusterscope

import (
	"context"
	"errors"
	"fmt"
	"strings"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/store"
)

// Reader reads cluster records (the cluster service). Each returns the
// record and its mod revision; the record may be shared with other readers
// and must not be changed.
type Reader interface {
	// Get reads linearizably.
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// Read reads from the replica's read view, which holds every write
	// this replica made.
	Read(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// GetSerializable reads without a round of consensus: it may be stale.
	GetSerializable(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
}

// Consistency is how fresh a read of the cluster record must be.
type Consistency int

const (
	// FromView reads the replica's read view: what answers a caller's read
	// (Describe, List). It holds every write this replica made, so a
	// caller reads its own writes through one replica.
	FromView Consistency = iota + 1
	// Serializable reads without a round of consensus and may be stale.
	// It is for what is confirmed afterwards: a write guarded by the
	// returned revision (a stale read fails the guard and the retry reads
	// Linearizable), or a read whose miss or refusal is re-read
	// Linearizable before it is answered, so a cluster created or changed
	// a moment ago on another replica is seen.
	Serializable
	// Linearizable reads through a round of consensus: the newest record.
	Linearizable
)

func (c Consistency) String() string {
	switch c {
	case FromView:
		return "FromView"
	case Serializable:
		return "Serializable"
	case Linearizable:
		return "Linearizable"
	}
	return fmt.Sprintf("Consistency(%d)", int(c))
}

// Scope is one read of a cluster: the record a resource operation works
// in, and the revision its writes are guarded on.
type Scope struct {
	// Cluster is the record read; shared, so never changed.
	Cluster *storagev1.ClusterRecord
	// Rev is the cluster record's mod revision when it was read.
	Rev int64
	// Consistency is how the record was read. A miss of a resource in a
	// scope read Serializable may be a stale uid: a caller confirms it
	// with a Linearizable read (or store.ErrConflict, inside Write).
	Consistency Consistency
	// key is the cluster record's store key, which Guard compares.
	key string
}

// Name is the cluster's name.
func (sc Scope) Name() string { return sc.Cluster.GetName() }

// UID is the cluster incarnation's uid, under which its resources live.
func (sc Scope) UID() string { return sc.Cluster.GetUid() }

// Guard adds to txn the compare that the cluster record is still the one
// read: the transaction commits only if the cluster has not changed (its
// status, or its incarnation) since. A failed guard is store.ErrConflict,
// which Write retries on a fresh read.
func (sc Scope) Guard(txn *store.Txn) *store.Txn {
	return txn.RequireModRevision(sc.key, sc.Rev)
}

// Config is what differs between the resources of a cluster.
type Config struct {
	// Resources names the resources in a refusal: "Cluster c is in
	// DELETING state; its <Resources> cannot be changed."
	Resources string
	// Check, when set, refuses a cluster whose resources of this kind
	// cannot be used at all, for reads and writes alike (access entries
	// need an authentication mode that includes them). It returns an API
	// error.
	Check func(c *storagev1.ClusterRecord) error
}

// Scopes opens the scope of clusters for one kind of resource. It is safe
// for concurrent use.
type Scopes struct {
	clusters Reader
	cfg      Config
}

// New returns the scopes of the clusters read through clusters.
func New(clusters Reader, cfg Config) *Scopes {
	return &Scopes{clusters: clusters, cfg: cfg}
}

// Ref is the caller's cluster called name: the account is the verified
// caller's, never one the request names.
func Ref(ctx context.Context, name string) (identity.Caller, *controlv1.ClusterRef, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return identity.Caller{}, nil, err
	}
	return who, &controlv1.ClusterRef{AccountId: who.AccountID, Name: name}, nil
}

// Read opens the scope of ref for reading, at consistency c: the cluster
// must exist and pass the resource's Check.
func (s *Scopes) Read(ctx context.Context, ref *controlv1.ClusterRef, c Consistency) (Scope, error) {
	return s.open(ctx, ref, c, false)
}

// Writable opens the scope of ref for a write, at consistency c: besides
// Read's checks, the cluster must not be DELETING (its resources are going
// with it) or FAILED (it never becomes usable).
func (s *Scopes) Writable(ctx context.Context, ref *controlv1.ClusterRef, c Consistency) (Scope, error) {
	return s.open(ctx, ref, c, true)
}

// Write runs attempt with a writable scope of ref until it stops losing
// races (store.RetryOnConflict): attempt guards its transaction with the
// scope (Scope.Guard), and a lost race on the cluster or on the resource's
// own records (store.ErrConflict) runs it again on a fresh read. The first
// read is Serializable, later ones Linearizable: a stale first read costs
// one failed guard, and most writes pay no round of consensus for it.
func (s *Scopes) Write(ctx context.Context, ref *controlv1.ClusterRef, attempt func(sc Scope) error) error {
	return store.RetryOnConflict(ctx, func(first bool) error {
		c := Linearizable
		if first {
			c = Serializable
		}
		sc, err := s.Writable(ctx, ref, c)
		if err != nil {
			return err
		}
		return attempt(sc)
	})
}

func (s *Scopes) open(ctx context.Context, ref *controlv1.ClusterRef, c Consistency, write bool) (Scope, error) {
	sc, err := s.read(ctx, ref, c)
	if err == nil {
		err = s.accepts(sc.Cluster, write)
	}
	if c == Serializable && err != nil {
		// What a stale read refused, or missed, may be there now: only a
		// linearizable read says no.
		return s.open(ctx, ref, Linearizable, write)
	}
	if err != nil {
		return Scope{}, err
	}
	return sc, nil
}

func (s *Scopes) read(ctx context.Context, ref *controlv1.ClusterRef, c Consistency) (Scope, error) {
	read := s.clusters.Get
	switch c {
	case FromView:
		read = s.clusters.Read
	case Serializable:
		read = s.clusters.GetSerializable
	case Linearizable:
	default:
		return Scope{}, fmt.Errorf("read cluster %q: unknown consistency %v", ref.GetName(), c)
	}
	rec, rev, err := read(ctx, ref)
	if err != nil {
		return Scope{}, err
	}
	return Scope{Cluster: rec, Rev: rev, Consistency: c, key: store.ClusterKey(ref.GetAccountId(), ref.GetName())}, nil
}

func (s *Scopes) accepts(c *storagev1.ClusterRecord, write bool) error {
	if s.cfg.Check != nil {
		if err := s.cfg.Check(c); err != nil {
			return err
		}
	}
	if !write {
		return nil
	}
	switch st := c.GetStatus(); st {
	case storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, storagev1.ClusterStatus_CLUSTER_STATUS_FAILED:
		return errdefs.InvalidRequest("Cluster %s is in %s state; its %s cannot be changed.",
			c.GetName(), statusName(st), s.cfg.Resources).WithField("clusterName", c.GetName())
	}
	return nil
}

// statusName is a cluster status as AWS names it: ACTIVE, DELETING.
func statusName(st storagev1.ClusterStatus) string {
	return strings.TrimPrefix(st.String(), "CLUSTER_STATUS_")
}

// Creation is one exclusive, idempotent create of a cluster-scoped record:
// what Create needs of the resource.
type Creation struct {
	// Build validates the request against the scope's cluster and returns
	// the transaction that creates the record (Txn.Create, so a name
	// already taken fails with store.ErrExists), with the request's token
	// remembered in it (idempotency.Token.Remember). Create adds the
	// cluster guard.
	Build func(ctx context.Context, sc Scope) (*store.Txn, error)
	// Replay answers a request whose clientRequestToken was used before
	// (idempotency.Replay): found when the earlier request's record was
	// read, false when the token is unknown or absent.
	Replay func(ctx context.Context, sc Scope) (found bool, err error)
	// Exists says what store.ErrExists meant when Replay found nothing: a
	// ResourceInUseException for the name taken, or store.ErrConflict to
	// read again when what existed was a key the resource holds besides
	// its record (a service account's association taken in between).
	Exists func(ctx context.Context, sc Scope, err error) error
}

// Create runs one create under Write: build the records, guard them with
// the cluster's revision, commit. A retry of a create that happened (the
// same clientRequestToken) is answered with its record: when the commit
// finds the token taken, and also when the retry no longer validates (a
// request that succeeded once must not fail on its retry because, say, a
// version it named was retired since).
func (s *Scopes) Create(ctx context.Context, st *store.Store, ref *controlv1.ClusterRef, c Creation) error {
	return s.Write(ctx, ref, func(sc Scope) error {
		txn, err := c.Build(ctx, sc)
		if err != nil {
			if found, rerr := c.Replay(ctx, sc); found || rerr != nil {
				return rerr
			}
			return err
		}
		_, err = st.Commit(ctx, sc.Guard(txn))
		if !errors.Is(err, store.ErrExists) {
			return err
		}
		if found, rerr := c.Replay(ctx, sc); found || rerr != nil {
			return rerr
		}
		return c.Exists(ctx, sc, err)
	})
}
