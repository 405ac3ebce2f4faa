// Package delivery is the host side of add-on delivery
// (docs/delivery-protocol.md): guest agents hold one mutually authenticated
// stream each (delivery.v1 DeliveryService/Connect); the host admits them
// against their certificate and the cluster's members, assigns one
// executor per cluster with an epoch (break before make, on etcd leases),
// pushes the cluster's desired add-ons on change from an etcd watch, and
// accepts reports only from the current executor at its epoch, in the
// transaction that applies them.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
)

// Config is delivery's timing, in one place: validated at start and sent
// to every agent in its Assignment, so both sides agree.
type Config struct {
	// SessionTTL is the etcd lease of an agent's session: a successor
	// executor may be assigned this long after the old one's last
	// keepalive.
	SessionTTL time.Duration
	// HeartbeatInterval is how often each side sends a Heartbeat when
	// idle.
	HeartbeatInterval time.Duration
	// FenceAfter is how long an agent applies without hearing from the
	// host before it stops.
	FenceAfter time.Duration
	// SafetyMargin separates the agent's stop from the session's expiry.
	SafetyMargin time.Duration
	// HelloTimeout bounds the wait for a stream's first message.
	HelloTimeout time.Duration
	// Replica names this saltbush in session records.
	Replica string
}

// DefaultConfig returns the timing `saltbush serve` starts with.
func DefaultConfig() Config {
	return Config{
		SessionTTL:        15 * time.Second,
		HeartbeatInterval: 2 * time.Second,
		FenceAfter:        8 * time.Second,
		SafetyMargin:      3 * time.Second,
		HelloTimeout:      10 * time.Second,
	}
}

// Validate checks the timing: the old executor must have stopped (after
// FenceAfter, plus a margin for clock rates and scheduling) before its
// session can expire and a successor be assigned.
func (c Config) Validate() error {
	switch {
	case c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0:
		return fmt.Errorf("delivery: session TTL %s must be whole seconds, at least 1s (an etcd lease)", c.SessionTTL)
	case c.HeartbeatInterval <= 0 || c.FenceAfter <= 0 || c.SafetyMargin <= 0 || c.HelloTimeout <= 0:
		return errors.New("delivery: heartbeat interval, fence-after, safety margin and hello timeout must be positive")
	case c.FenceAfter+c.SafetyMargin+c.HeartbeatInterval >= c.SessionTTL:
		// The session is renewed every heartbeat interval, and a stream
		// speaks to its agent only while the last renewal leaves at least
		// fence-after + margin: so the renewal period comes out of the TTL.
		return fmt.Errorf("delivery: fence-after %s + safety margin %s + heartbeat interval %s must be below the session TTL %s",
			c.FenceAfter, c.SafetyMargin, c.HeartbeatInterval, c.SessionTTL)
	case 2*c.HeartbeatInterval > c.FenceAfter:
		return fmt.Errorf("delivery: heartbeat interval %s must be at most half of fence-after %s, or one lost heartbeat fences the executor", c.HeartbeatInterval, c.FenceAfter)
	}
	return nil
}

// freshWindow is how old the last renewal of a session's lease may be for
// the session to be fresh: what of the TTL is left after the agent's
// fence-after and the margin. Validate keeps it above the heartbeat
// interval, so a renewal may take longer than one interval.
func (c Config) freshWindow() time.Duration {
	return c.SessionTTL - c.FenceAfter - c.SafetyMargin
}

func (c Config) timing() *deliveryv1.Timing {
	return &deliveryv1.Timing{
		SessionTtl:        durationpb.New(c.SessionTTL),
		HeartbeatInterval: durationpb.New(c.HeartbeatInterval),
		FenceAfter:        durationpb.New(c.FenceAfter),
		SafetyMargin:      durationpb.New(c.SafetyMargin),
	}
}

// Clusters reads cluster records.
type Clusters interface {
	Get(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
	// Read is Get from the replica's read view: the record may be shared
	// with other readers, and must not be changed.
	Read(ctx context.Context, ref *controlv1.ClusterRef) (*storagev1.ClusterRecord, int64, error)
}

// Service is delivery's host side. It is safe for concurrent use.
type Service struct {
	store    *store.Store
	client   *clientv3.Client
	clusters Clusters
	addons   *addon.Service
	catalog  catalog.Source
	cfg      Config
	log      *slog.Logger

	rejected    *prometheus.CounterVec
	streams     prometheus.Gauge
	assignments prometheus.Counter
	// Per cluster with streams on this replica (labels go with the watch).
	epochs   *prometheus.GaugeVec
	sessions *prometheus.GaugeVec
	desired  *prometheus.GaugeVec
	// lastReport, appliedVersion and inSync: the latest accepted report,
	// and what the executor (with its stream here) has applied.
	lastReport, appliedVersion, inSync *prometheus.GaugeVec

	// clock measures freshness and deadlines on the monotonic clock.
	clock monoClock
	// closing closes when the replica shuts down (Shutdown): every
	// stream ends, and none is admitted any more. nil (a Service made
	// without NewService) never closes.
	closing     chan struct{}
	closingOnce sync.Once
	// renewer keeps the sessions of this replica's streams alive.
	renewer *renewer

	mu sync.Mutex
	// watches holds one watch per cluster incarnation with streams on
	// this replica, shared by them.
	watches map[string]*clusterWatch
	// live is the open stream of each "{cluster uid}/{instance}" here.
	live map[string]*agentStream
	// executorGauges is the stream whose figures the executor metrics of
	// a cluster show.
	executorGauges map[string]*agentStream
}

// NewService returns delivery's host side; its metrics are registered on
// reg.
func NewService(st *store.Store, clusters Clusters, addons *addon.Service, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clock := newMonoClock()
	s := &Service{
		store: st, client: st.Client(), clusters: clusters, addons: addons, catalog: addons.Catalog(), cfg: cfg, log: log,
		watches: map[string]*clusterWatch{}, live: map[string]*agentStream{}, executorGauges: map[string]*agentStream{},
		clock: clock, closing: make(chan struct{}), renewer: newRenewer(st.Client(), clock, cfg, log),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_delivery_reports_rejected_total",
			Help: "Agent reports that changed nothing, by reason (not_executor, stale_epoch, stale_generation, stale_incarnation, unknown_addon, invalid).",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "saltbush_delivery_streams",
			Help: "Agent streams admitted and open on this replica.",
		}),
		assignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "saltbush_delivery_assignments_total",
			Help: "Executor assignments (epoch increments) this replica committed.",
		}),
		epochs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_executor_epoch",
			Help: "Executor epoch of each cluster with agent streams on this replica (0: none assigned).",
		}, []string{"cluster_uid"}),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_sessions",
			Help: "Live agent sessions (connected members, on any replica) of each cluster with agent streams on this replica.",
		}, []string{"cluster_uid"}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_desired_version",
			Help: "Version (etcd revision) of the desired set of each cluster with agent streams on this replica; compare with the versions agents applied (saltbush admin delivery status).",
		}, []string{"cluster_uid"}),
		lastReport: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_last_report_timestamp_seconds",
			Help: "When the latest accepted report of any add-on of each cluster with agent streams on this replica was made (unix seconds).",
		}, []string{"cluster_uid"}),
		appliedVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_executor_applied_version",
			Help: "Version of the desired set the executor acknowledged, for each cluster whose executor's stream is on this replica.",
		}, []string{"cluster_uid"}),
		inSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_delivery_executor_in_sync",
			Help: "1 when the executor (its stream on this replica) has acknowledged the cluster's current desired add-ons (same content digest), else 0.",
		}, []string{"cluster_uid"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.rejected, s.streams, s.assignments, s.epochs, s.sessions, s.desired, s.lastReport, s.appliedVersion, s.inSync} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("delivery metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Shutdown ends every agent stream of this replica at once, with a Fence
// and Unavailable (endShuttingDown), and refuses new streams with
// Unavailable before their session is written, so that the agents move to
// another replica now: their streams would otherwise hold the replica's
// graceful stop for its whole timeout. A stream's session is retired as
// at any end; the agent's next stream takes it over wherever it connects,
// at the same epoch (docs/delivery-protocol.md, rule 17). It returns at
// once; the streams end on their own goroutines. Later calls do nothing.
func (s *Service) Shutdown() {
	s.closingOnce.Do(func() { close(s.closing) })
}

// shuttingDown reports whether Shutdown was called.
func (s *Service) shuttingDown() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}
