package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
)

// Sentinel errors. Every error etcd returns, and every missing, existing or
// conflicting key, is mapped to one of them here. (Errors in the caller's
// input, such as an unencodable record or a page size out of range, are
// returned as they are.)
//
// Each sentinel but ErrCorrupt also matches its errdefs.Kind under errors.Is,
// so errdefs.Classify maps store errors without importing the store.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound error = &sentinel{"not found", errdefs.KindNotFound}
	// ErrExists: an exclusive create found the key already there.
	ErrExists error = &sentinel{"already exists", errdefs.KindExists}
	// ErrConflict: a compare in the transaction failed (the record changed,
	// or a guard such as a fencing compare no longer holds).
	ErrConflict error = &sentinel{"conflict", errdefs.KindConflict}
	// ErrUnavailable: etcd could not be reached or has no leader.
	ErrUnavailable error = &sentinel{"store unavailable", errdefs.KindUnavailable}
	// ErrInvalidToken: a continuation token was tampered with, expired or
	// belongs to another listing.
	ErrInvalidToken error = &sentinel{"invalid continuation token", errdefs.KindInvalidToken}
	// ErrCorrupt: a stored value does not decode as the expected record.
	ErrCorrupt = errors.New("corrupt record")
)

// sentinel is a store error that classifies itself: it is its own
// identity under errors.Is, and also matches kind.
type sentinel struct {
	msg  string
	kind errdefs.Kind
}

func (e *sentinel) Error() string { return e.msg }

// Is reports whether target is e's errdefs.Kind.
func (e *sentinel) Is(target error) bool {
	k, ok := target.(errdefs.Kind)
	return ok && k == e.kind
}

// DefaultPrefix is the root of saltbush's keyspace.
const DefaultPrefix = "/saltbush/"

// metaKey holds StoreMeta, shared by every replica.
const metaKey = "meta/store"

// Options configure a Store.
type Options struct {
	// Prefix is prepended to every key; DefaultPrefix when empty.
	Prefix string
	// RequestTimeout bounds each etcd request whose context has no earlier
	// deadline; 5s when zero.
	RequestTimeout time.Duration
	// MaxUpdateAttempts bounds GuaranteedUpdate's CAS retries; when zero
	// they are bounded only by the request's deadline (or
	// ContentionTimeout).
	MaxUpdateAttempts int
	// ContentionTimeout bounds how long GuaranteedUpdate keeps retrying
	// lost races when the request's context has no deadline;
	// DefaultContentionTimeout when zero. Each etcd request within it is
	// still bounded by RequestTimeout.
	ContentionTimeout time.Duration
	// LeaseReuseWindow is how long one lease is shared by CreateWithTTL keys
	// of the same TTL; one minute when zero, a lease per transaction when
	// negative.
	LeaseReuseWindow time.Duration
}

// Store is saltbush's view of etcd. It is safe for concurrent use.
type Store struct {
	client      *clientv3.Client
	prefix      string
	timeout     time.Duration
	contention  time.Duration
	maxAttempts int
	tokens      *tokenSigner
	leases      *leasePool
	// view, when attached (NewView), answers Read, ReadList and
	// GetSerializable.
	view atomic.Pointer[View]
	// seen is the highest revision etcd answered any request of this
	// store at: a read from the view waits until the view has it.
	seen atomic.Int64
	// down, while set, refuses requests (SetUnavailable).
	down atomic.Pointer[unavailable]
}

// New returns a Store on client. It loads the shared store metadata, creating
// it (exclusively, so concurrent replicas agree) when this is a new keyspace.
func New(ctx context.Context, client *clientv3.Client, opts Options) (*Store, error) {
	s := &Store{
		client:      client,
		prefix:      opts.Prefix,
		timeout:     opts.RequestTimeout,
		contention:  opts.ContentionTimeout,
		maxAttempts: opts.MaxUpdateAttempts,
		leases:      newLeasePool(client, opts.LeaseReuseWindow),
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if !strings.HasSuffix(s.prefix, "/") {
		s.prefix += "/"
	}
	if s.timeout <= 0 {
		s.timeout = 5 * time.Second
	}
	if s.contention <= 0 {
		s.contention = DefaultContentionTimeout
	}
	if s.maxAttempts < 0 {
		s.maxAttempts = 0
	}
	meta, err := s.loadMeta(ctx)
	if err != nil {
		return nil, err
	}
	s.tokens = &tokenSigner{key: meta.GetTokenSigningKey()}
	return s, nil
}

func (s *Store) loadMeta(ctx context.Context) (*storagev1.StoreMeta, error) {
	meta := &storagev1.StoreMeta{}
	if _, err := s.Get(ctx, metaKey, meta); err == nil {
		return meta, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("load store metadata: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate token signing key: %w", err)
	}
	meta = &storagev1.StoreMeta{TokenSigningKey: key, CreatedAt: timestamppb.Now()}
	if _, err := s.Create(ctx, metaKey, meta); err != nil && !errors.Is(err, ErrExists) {
		return nil, fmt.Errorf("create store metadata: %w", err)
	}
	// Another replica may have won the create: read back whatever is there.
	meta = &storagev1.StoreMeta{}
	if _, err := s.Get(ctx, metaKey, meta); err != nil {
		return nil, fmt.Errorf("load store metadata: %w", err)
	}
	return meta, nil
}

// Client returns the underlying etcd client, for packages that use etcd's
// concurrency primitives (elections, leases) under the same prefix.
func (s *Store) Client() *clientv3.Client { return s.client }

// Key returns the absolute etcd key for a relative key.
func (s *Store) Key(rel string) string { return s.prefix + rel }

// Prefix returns the root prefix.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) rel(abs []byte) string { return strings.TrimPrefix(string(abs), s.prefix) }

// withTimeout applies the default request timeout unless ctx ends sooner.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Ping checks that etcd answers a linearizable read, for readiness probes.
// It asks for a member with a leader: a member without one answers "no
// leader" at once rather than holding the read until the deadline (during
// an election, or for good when the quorum is lost). It reaches etcd even
// while the store refuses requests (SetUnavailable).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.withTimeout(clientv3.WithRequireLeader(ctx))
	defer cancel()
	resp, err := s.client.Get(ctx, s.Key(metaKey), clientv3.WithCountOnly())
	if err != nil {
		return mapErr(err, metaKey)
	}
	s.observe(resp.Header.Revision)
	return nil
}

// Get decodes the record at key into into and returns its mod revision.
// The read is linearizable.
func (s *Store) Get(ctx context.Context, key string, into proto.Message) (int64, error) {
	return s.get(ctx, key, into)
}

// GetSerializable is a read that may lag behind the latest write: from the
// read view when it holds the key (see Read), otherwise from the etcd member
// the client talks to, without a round of consensus. Use it only where the
// result is confirmed, e.g. a read whose mod revision a later transaction
// compares (a stale read then fails the compare and is retried with Get),
// or a miss that is re-read with Get.
func (s *Store) GetSerializable(ctx context.Context, key string, into proto.Message) (int64, error) {
	if vs := s.viewFor(ctx, key); vs != nil {
		return vs.get(key, into)
	}
	return s.get(ctx, key, into, clientv3.WithSerializable())
}

func (s *Store) get(ctx context.Context, key string, into proto.Message, opts ...clientv3.OpOption) (int64, error) {
	if err := s.refuse(key); err != nil {
		return 0, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, s.Key(key), opts...)
	if err != nil {
		return 0, mapErr(err, key)
	}
	s.observe(resp.Header.Revision)
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err := Decode(resp.Kvs[0].Value, into); err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return resp.Kvs[0].ModRevision, nil
}

// Create stores rec at key only if key does not exist (CreateRevision == 0).
// It returns the revision of the write, or ErrExists.
func (s *Store) Create(ctx context.Context, key string, rec proto.Message) (int64, error) {
	res, err := s.Commit(ctx, NewTxn().Create(key, rec))
	return res.Revision, err
}

// Encode is the record codec: deterministic binary protobuf, so equal
// records encode to equal bytes (and a no-op update can be detected).
func Encode(rec proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", rec.ProtoReflect().Descriptor().FullName(), err)
	}
	return b, nil
}

// Decode decodes a stored value into rec, replacing its contents.
func Decode(b []byte, rec proto.Message) error {
	if err := proto.Unmarshal(b, rec); err != nil {
		return fmt.Errorf("decode %s: %w: %v", rec.ProtoReflect().Descriptor().FullName(), ErrCorrupt, err)
	}
	return nil
}

// mapErr maps an etcd client error to a store sentinel.
func mapErr(err error, key string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", key, ErrUnavailable, err)
	}
	// etcd's own errors are formatted, never wrapped: callers see only the
	// store's sentinels (a gRPC status in the chain would otherwise be taken
	// for an answer to the caller).
	switch {
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		errors.Is(err, rpctypes.ErrLeaderChanged), errors.Is(err, rpctypes.ErrNotCapable),
		errors.Is(err, rpctypes.ErrStopped):
		return fmt.Errorf("%s: %w: %v", key, ErrUnavailable, err)
	case errors.Is(err, rpctypes.ErrNoSpace):
		// The NOSPACE alarm: etcd refuses every write until an operator
		// compacts, defragments and disarms it (docs/operations.md). Reads
		// still work; a write is unavailable, not a bug of the request.
		// The outcome is unknown, not "not written": the write that crosses
		// the quota is applied and still answered NOSPACE, so callers
		// retry with their clientRequestToken.
		return fmt.Errorf("%s: %w: etcd space quota exhausted (NOSPACE alarm): %v", key, ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
			return fmt.Errorf("%s: %w: %v", key, ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%s: etcd: %v", key, err)
}
