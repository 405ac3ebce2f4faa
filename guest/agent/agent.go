// Package agent is the guest agent: it holds the cluster member's delivery
// stream (package hostlink), and while the host names it the executor it
// applies the desired add-ons to the cluster (package apply), watches
// their health (package health) and reports what really happened; as a
// standby it keeps the desired set and writes nothing. Every write holds
// the grant (package grant), so a fenced agent cannot write.
//
// Goroutines and what they own:
//   - the link's receiver and sender (package hostlink) own the stream; the
//     receiver updates the grant synchronously (a Fence cancels writes at
//     once) and passes host messages to run;
//   - run owns everything else: the desired set, each add-on's state
//     (fields of addonState), the reports, the persistent state. Applying
//     happens in run, between messages; informer callbacks only mark
//     add-ons dirty and wake it.
package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/config"
	"github.com/saltbush/saltbush/guest/credentials"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/health"
	"github.com/saltbush/saltbush/guest/hostlink"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/guest/kube"
	"github.com/saltbush/saltbush/guest/podidentity"
	"github.com/saltbush/saltbush/guest/podwebhook"
	"github.com/saltbush/saltbush/guest/state"
	"github.com/saltbush/saltbush/guest/webhook"
	"github.com/saltbush/saltbush/release"
)

// Agent is one running guest agent.
type Agent struct {
	cfg     config.Config
	log     *slog.Logger
	release release.Identity
	bootID  string

	grant   *grant.Grant
	link    *hostlink.Link
	kube    *kube.Clients
	applier *apply.Applier
	health  *health.Watcher
	// pods records the pod identity associations on their service
	// accounts; saWatch follows those service accounts.
	pods    *podidentity.Reconciler
	saWatch *podidentity.Watcher
	metrics *metrics
	// webhooks answer the apiserver's reviews, with the aws-auth
	// ConfigMap awsAuth keeps.
	webhooks *webhook.Server
	awsAuth  *webhook.AwsAuth
	// podWebhook gives pods their AWS credentials (nil when off);
	// podWebhookURL is where the apiserver reaches it, set once it
	// listens (ServePodWebhook).
	podWebhook    *podwebhook.Server
	podWebhookURL atomic.Pointer[string]

	// events carries host messages and stream changes to run.
	events chan event
	// kick wakes run when informers marked add-ons dirty.
	kick    chan struct{}
	dirtyMu sync.Mutex
	dirty   map[string]health.Change
	// podDirty: a service account an association names changed.
	podDirty atomic.Bool

	// status is run's latest snapshot, for the status API.
	status atomic.Pointer[Status]
	// held is the desired set held (version and digest), which the link's
	// goroutine reads for a new stream's Hello.
	held atomic.Pointer[deliveryv1.DesiredSet]

	// Owned by run.
	st         *state.State
	addons     map[string]*addonState
	streamUp   bool
	pendingAck *deliveryv1.DesiredSet
	healthDue  bool
	pod        podIdentityState
	keys       keysState
	// webhookDue: the executor applies the pod identity webhook's
	// configuration (once per epoch, and on the drift tick); retryAt paces
	// a failure.
	webhookDue     bool
	webhookRetryAt time.Time
}

// podIdentityState is run's view of the desired set's pod identity
// associations.
type podIdentityState struct {
	// needApply: a reconciliation is due; retryAt and retries pace
	// transient failures.
	needApply bool
	retryAt   time.Time
	retries   int
	// refused: the last reconciliation had a verdict, the cluster refused
	// some records (the set counts as applied; they are tried again).
	refused bool
	// The last reconciliation's outcome.
	last podidentity.Outcome
}

// addonState is run's view of one add-on of the desired set.
type addonState struct {
	desired *deliveryv1.DesiredAddon
	// digest identifies what is applied: manifest, mode, deletion.
	digest string
	// objects are the generation's objects (from its manifest).
	objects []inventory.Ref
	// record is the inventory as last read or written (nil: not yet).
	record *inventory.Record
	// generations are the workloads' generations after this agent's last
	// apply (health judges no older cached view of them).
	generations map[string]int64

	// applied: applied at the current epoch (no apply due but drift).
	applied bool
	// needApply: an apply (or a deletion step) is due.
	needApply bool
	// retryAt and retries pace transient failures.
	retryAt time.Time
	retries int
	// appliedAt is when the generation was first applied by this agent
	// (the ready timeout counts from it); failingSince is when a definite
	// failure was first seen while the generation was not yet ready.
	appliedAt    time.Time
	failingSince time.Time
	// final: the generation's verdict is in (FAILED, or REMOVED): it is
	// not applied again until a new generation.
	final bool
	// applyIssues are why the last re-apply of a ready generation failed
	// (a conflict under NONE): health issues until an apply succeeds.
	applyIssues []*deliveryv1.Issue
	// podIdentityIssues are why the add-on's pod identity associations
	// could not be recorded on their service accounts.
	podIdentityIssues []*deliveryv1.Issue

	// report is the latest observation; sent says it went out on the
	// current stream.
	report *deliveryv1.Report
	sent   bool
}

// event is one thing run reacts to.
type event struct {
	msg    *deliveryv1.HostMessage
	opened bool
	closed error
}

// New builds an agent from its configuration: it loads the credentials and
// the state, and connects nothing yet.
func New(cfg config.Config, log *slog.Logger, rel release.Identity) (*Agent, error) {
	creds, err := credentials.New(credentials.Files{Cert: cfg.CertFile, Key: cfg.KeyFile, CA: cfg.CAFile}, log)
	if err != nil {
		return nil, err
	}
	st, err := state.Load(cfg.StateDir, cfg.ClusterUID, cfg.InstanceID)
	if err != nil {
		return nil, err
	}
	restCfg, err := kube.LoadConfig(cfg.Kubeconfig, "saltbush-agent/"+rel.Version)
	if err != nil {
		return nil, err
	}
	// client-go and controller-runtime log through klog and logr: into
	// the agent's log, like everything else.
	klog.SetSlogLogger(log)
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	g := grant.New()
	kc, err := kube.New(restCfg, g)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, log: log, release: rel, bootID: bootID(),
		grant: g, kube: kc,
		applier: apply.New(kc.Client, kc.Mapper, log),
		events:  make(chan event, 1024), kick: make(chan struct{}, 1), dirty: map[string]health.Change{},
		st: st, addons: map[string]*addonState{},
		metrics: newMetrics(),
	}
	a.link = hostlink.New(hostlink.Config{Endpoints: cfg.Endpoints, TLS: creds.TLSConfig(),
		BackoffInitial: cfg.BackoffInitial, BackoffMax: cfg.BackoffMax, Log: log})
	a.awsAuth = webhook.NewAwsAuth(kc.Kubernetes, log.With("component", "aws-auth"))
	if a.webhooks, err = webhook.New(webhook.Config{
		Cluster:          &deliveryv1.ClusterName{AccountId: cfg.AccountID, Name: cfg.ClusterName},
		Host:             reviewHost{link: a.link},
		AwsAuth:          a.awsAuth.Get,
		CacheTTL:         cfg.ReviewCacheTTL,
		NegativeCacheTTL: cfg.ReviewNegativeCacheTTL,
		Timeout:          cfg.ReviewTimeout,
		Log:              log.With("component", "webhook"),
		Registerer:       a.metrics.reg,
	}); err != nil {
		return nil, err
	}
	if cfg.PodIdentityWebhookAddr != "" {
		a.podWebhook = podwebhook.New(kc.Kubernetes, podwebhook.Config{
			Region: cfg.Region, Endpoint: cfg.PodCredentialsEndpoint, Log: log.With("component", "pod-identity-webhook"),
		})
	}
	a.health = health.New(kc.Dynamic, kc.Kubernetes, kc.Mapper, apply.AddonLabel, a.markDirty, log)
	a.pods = &podidentity.Reconciler{Client: kc.Client, Log: log}
	a.saWatch = podidentity.NewWatcher(kc.Kubernetes, a.markPodIdentityDirty)
	if st.Desired != nil {
		a.held.Store(&deliveryv1.DesiredSet{Version: st.Desired.GetVersion(), Digest: st.Desired.GetDigest()})
		a.adopt(st.Desired)
	}
	a.publish()
	return a, nil
}

// Run runs the agent until ctx ends. The stop is logged when ctx ends and
// again when it is over, so that the journal tells a stop that was asked
// for (and by what: saltbush-agent's context ends with the signal as its
// cause) from a crash, and a slow stop from a quick one.
func (a *Agent) Run(ctx context.Context) error {
	// AfterFunc logs at the moment ctx ends, even while run is in the
	// middle of an apply.
	stopping := make(chan time.Time, 1)
	stopLog := context.AfterFunc(ctx, func() { stopping <- a.logStopping(context.Cause(ctx)) })
	linkDone := make(chan error, 1)
	go func() { linkDone <- a.link.Run(ctx, &linkHandler{a: a, ctx: ctx}) }()
	err := a.run(ctx)
	<-linkDone //nolint:errcheck // Link.Run returns only ctx's error, once ctx ends
	a.saWatch.Stop()
	a.health.Stop()
	if stopLog() {
		return err // ctx did not end: nobody asked for a stop
	}
	a.logStopped(<-stopping)
	return err
}

// logStopping says that the agent stops, why, and what it held then; it
// returns when the stop began.
func (a *Agent) logStopping(cause error) time.Time {
	began := time.Now()
	g := a.grant.Snapshot()
	a.log.Info("saltbush-agent stopping: closing the delivery stream, ending the grant",
		"reason", cause, "cluster", a.cfg.ClusterName, "cluster_uid", a.cfg.ClusterUID, "instance", a.cfg.InstanceID,
		"role", g.Role, "epoch", g.Epoch, "may_write", g.Writable)
	return began
}

// logStopped says that the stop that began at began is over. The link has
// closed its stream by now, which ended the grant and cancelled every write
// holding it; the drain checks that none is still running. One that is would
// outlive the grant, which the fencing exists to prevent: a warning.
func (a *Agent) logStopped(began time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drained := a.grant.Drain(ctx) == nil
	level := slog.LevelInfo
	if !drained {
		level = slog.LevelWarn
	}
	a.log.Log(context.Background(), level, "saltbush-agent stopped", "took", time.Since(began).Round(time.Millisecond),
		"grant_released", !a.grant.Snapshot().Writable, "writes_drained", drained)
}

// run is the agent's loop; see the package comment for what it owns.
func (a *Agent) run(ctx context.Context) error {
	drift := time.NewTicker(a.cfg.DriftInterval)
	defer drift.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		a.step(ctx)
		a.publish()
		wake.Reset(a.nextWake())
		select {
		case <-ctx.Done():
			return nil
		case ev := <-a.events:
			a.handle(ctx, ev)
			// Take every event already queued before working again: a
			// burst (a new stream's Assignment and DesiredSet) is one pass.
			for more := true; more; {
				select {
				case ev := <-a.events:
					a.handle(ctx, ev)
				default:
					more = false
				}
			}
		case <-a.kick:
			a.takeDirty()
		case <-drift.C:
			for _, as := range a.addons {
				if !as.final && !as.desired.GetDeleting() {
					as.needApply = true
				}
			}
			a.pod.needApply = true
			a.webhookDue = true
		case <-wake.C:
			a.healthDue = true
		}
	}
}

// handle reacts to one event.
func (a *Agent) handle(ctx context.Context, ev event) {
	switch {
	case ev.opened:
		a.streamUp = true
		a.metrics.connects.Inc()
		for _, as := range a.addons {
			as.sent = false // level triggered: re-sent on every stream
		}
		a.keys.sent = false
		return
	case ev.closed != nil:
		a.streamUp = false
		a.pendingAck = nil // an Ack names this stream's nonce; the next stream resends
		return
	}
	switch m := ev.msg.GetMessage().(type) {
	case *deliveryv1.HostMessage_Assignment:
		a.assigned(m.Assignment)
	case *deliveryv1.HostMessage_DesiredSet:
		a.received(ctx, m.DesiredSet)
	case *deliveryv1.HostMessage_Fence:
		a.fenced(ctx, m.Fence)
	case *deliveryv1.HostMessage_ReportResult:
		a.answered(m.ReportResult)
	case *deliveryv1.HostMessage_ServiceAccountKeysResult:
		a.keysAnswered(m.ServiceAccountKeysResult)
	}
}

// assigned: the grant already follows the Assignment (the link handler
// applied it); run decides what the new role means for each add-on.
func (a *Agent) assigned(as *deliveryv1.Assignment) {
	a.log.Info("assignment", "role", as.GetRole(), "epoch", as.GetEpoch(), "executor", as.GetExecutorInstanceId())
	if as.GetRole() != deliveryv1.Role_ROLE_EXECUTOR && a.pendingAck != nil {
		// A standby acknowledges what it holds.
		a.ack(context.Background(), a.pendingAck)
		a.pendingAck = nil
	}
	a.metrics.epoch.Set(float64(as.GetEpoch()))
	for name, s := range a.addons {
		s.sent = false
		if as.GetRole() != deliveryv1.Role_ROLE_EXECUTOR {
			continue
		}
		// What this agent applied at this very epoch (it restarted, or the
		// stream moved) need not be applied again; after any other epoch
		// another executor may have acted, so everything is applied anew.
		prev, ok := a.st.Addons[name]
		s.applied = ok && prev.Epoch == as.GetEpoch() && prev.UID == s.desired.GetUid() &&
			prev.Generation == s.desired.GetGeneration() && prev.Digest == s.digest
		s.needApply = !s.applied || s.desired.GetDeleting()
		s.final = s.applied && prev.Removed
		s.retryAt, s.retries = time.Time{}, 0
	}
	if as.GetRole() == deliveryv1.Role_ROLE_EXECUTOR {
		// Another executor may have acted: look at every service account.
		a.pod = podIdentityState{needApply: true}
		a.webhookDue, a.webhookRetryAt = true, time.Time{}
	}
	// Keys are fenced by epoch: a new one sends them again.
	a.keys.sent, a.keys.retryAt = false, time.Time{}
	a.healthDue = true
}

// received takes a desired set: a set older than the one held is refused
// (a lagging replica must not roll the cluster back); a standby
// acknowledges at once, the executor once it has applied the set.
func (a *Agent) received(ctx context.Context, set *deliveryv1.DesiredSet) {
	if cur := a.st.Desired; cur != nil && set.GetVersion() < cur.GetVersion() {
		a.log.Warn("refused a desired set older than the one held", "version", set.GetVersion(), "held", cur.GetVersion())
		a.link.Send(ctx, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Nack{Nack: &deliveryv1.Nack{
			Version: set.GetVersion(), Nonce: set.GetNonce(),
			Error: fmt.Sprintf("desired set version %d is older than version %d, which this agent holds", set.GetVersion(), cur.GetVersion()),
		}}})
		return
	}
	a.st.Desired = set
	a.held.Store(&deliveryv1.DesiredSet{Version: set.GetVersion(), Digest: set.GetDigest()})
	a.adopt(set)
	a.save()
	a.metrics.desiredVersion.Set(float64(set.GetVersion()))
	if a.grant.Snapshot().Role == deliveryv1.Role_ROLE_EXECUTOR {
		a.pendingAck = set
		return
	}
	a.ack(ctx, set)
}

// adopt makes the add-on states follow set: an add-on whose content
// changed gets a fresh state (and an apply); one that left the set is
// forgotten (its removal was accepted).
func (a *Agent) adopt(set *deliveryv1.DesiredSet) {
	next := make(map[string]*addonState, len(set.GetAddons()))
	for _, d := range set.GetAddons() {
		digest := contentDigest(d)
		if s, ok := a.addons[d.GetName()]; ok && s.digest == digest && s.desired.GetUid() == d.GetUid() &&
			s.desired.GetGeneration() == d.GetGeneration() {
			s.desired = d
			next[d.GetName()] = s
			continue
		}
		s := &addonState{desired: d, digest: digest, needApply: true}
		if !d.GetDeleting() {
			if objs, err := apply.Objects(d.GetName(), d.GetManifest()); err == nil {
				for _, o := range objs {
					s.objects = append(s.objects, inventory.RefOf(o))
				}
			}
		}
		next[d.GetName()] = s
	}
	for name := range a.st.Addons {
		if _, ok := next[name]; !ok {
			delete(a.st.Addons, name)
		}
	}
	a.addons = next
	// The associations are reconciled with every set (an unchanged one
	// reads the service accounts and writes nothing).
	a.pod.needApply, a.pod.retryAt, a.pod.retries = true, time.Time{}, 0
	if a.podWebhook != nil {
		a.podWebhook.SetAssociations(set.GetPodIdentityAssociations())
	}
	a.healthDue = true
}

// contentDigest identifies what applying d means.
func contentDigest(d *deliveryv1.DesiredAddon) string {
	c := proto.Clone(d).(*deliveryv1.DesiredAddon)
	c.Generation = 0 // the generation is compared on its own
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fenced: the grant already ended (the link handler applied the Fence, so
// every write was cancelled at once); once no write is in flight the
// agent says so.
func (a *Agent) fenced(ctx context.Context, f *deliveryv1.Fence) {
	a.metrics.fences.Inc()
	st := a.grant.Snapshot()
	if f.GetEpoch() < st.Epoch {
		return // an older epoch's fence; this agent's grant is newer
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.grant.Drain(dctx); err != nil {
		a.log.Error("writes still in flight after a fence", "epoch", f.GetEpoch(), "err", err)
		return // no FenceAck: the host waits for the session to run out
	}
	a.log.Info("fenced; writing stopped", "epoch", f.GetEpoch(), "reason", f.GetReason())
	a.pendingAck = nil
	a.link.Send(ctx, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_FenceAck{FenceAck: &deliveryv1.FenceAck{Epoch: f.GetEpoch()}}})
}

// answered takes a ReportResult.
func (a *Agent) answered(r *deliveryv1.ReportResult) {
	a.metrics.reports.WithLabelValues(r.GetReason()).Inc()
	if r.GetAccepted() || r.GetReason() == "accepted" {
		return
	}
	s := a.addons[r.GetAddon()]
	switch r.GetReason() {
	case "unavailable":
		// saltbush could not judge it (etcd): say it again later.
		if s != nil && s.report.GetGeneration() == r.GetGeneration() {
			s.sent = false
			s.retryAt = time.Now().Add(time.Second)
		}
	default:
		a.log.Info("report not accepted", "addon", r.GetAddon(), "generation", r.GetGeneration(), "reason", r.GetReason())
	}
}

func (a *Agent) ack(ctx context.Context, set *deliveryv1.DesiredSet) {
	a.link.Send(ctx, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{
		Version: set.GetVersion(), Nonce: set.GetNonce()}}})
}

// markDirty is the informers' callback: it must not block.
func (a *Agent) markDirty(addon string, c health.Change) {
	a.dirtyMu.Lock()
	if prev, ok := a.dirty[addon]; !ok || c > prev {
		a.dirty[addon] = c
	}
	a.dirtyMu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// markPodIdentityDirty is the service account watch's callback: it must not
// block.
func (a *Agent) markPodIdentityDirty() {
	a.podDirty.Store(true)
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// takeDirty moves informer changes into the add-on states: an object that
// changed or went is re-applied (drift, or a deletion's progress); any
// change makes health due.
func (a *Agent) takeDirty() {
	a.dirtyMu.Lock()
	dirty := a.dirty
	a.dirty = map[string]health.Change{}
	a.dirtyMu.Unlock()
	a.healthDue = true
	if a.podDirty.Swap(false) {
		a.pod.needApply, a.pod.retryAt = true, time.Time{}
	}
	for name, c := range dirty {
		s := a.addons[name]
		if s == nil || c == health.Status {
			continue
		}
		if s.desired.GetDeleting() || !s.final {
			s.needApply = true
		}
		if s.desired.GetDeleting() {
			s.retryAt = time.Time{} // a deletion moved: look now, not at the recheck
		}
	}
}

// save writes the persistent state; a failure is logged (the next save
// tries again), never fatal: the cluster is the truth, the file a cache.
func (a *Agent) save() {
	if err := state.Save(a.cfg.StateDir, a.st); err != nil {
		a.log.Error("save state", "err", err)
	}
}

// hello is the Hello of a new stream: it resumes from the set held.
func (a *Agent) hello() *deliveryv1.Hello {
	h := &deliveryv1.Hello{
		Cluster:    &deliveryv1.ClusterName{AccountId: a.cfg.AccountID, Name: a.cfg.ClusterName},
		InstanceId: a.cfg.InstanceID, BootId: a.bootID,
		AgentVersion: a.release.Version, AgentCommit: a.release.Commit, AgentContractBaseline: a.release.ContractBaseline,
	}
	if d := a.held.Load(); d != nil {
		h.DesiredVersion, h.DesiredDigest = d.GetVersion(), d.GetDigest()
	}
	return h
}

// healthRetry is how soon an evaluation asked for again runs, when no
// watch event comes first.
const healthRetry = time.Second

// nextWake is when run must look again without an event: a retry, a
// failure grace or a ready timeout coming due.
func (a *Agent) nextWake() time.Duration {
	next := time.Hour
	if a.healthDue {
		next = healthRetry // an evaluation was asked for again
	}
	now := time.Now()
	due := func(t time.Time) {
		if !t.IsZero() {
			next = min(next, max(t.Sub(now), 10*time.Millisecond))
		}
	}
	for _, s := range a.addons {
		switch {
		case s.needApply:
			due(s.retryAt)
		case s.final:
		case !s.failingSince.IsZero():
			due(s.failingSince.Add(a.cfg.FailureGrace))
		case !s.appliedAt.IsZero() && !s.readySeen():
			due(s.appliedAt.Add(a.cfg.ReadyTimeout))
		}
		if !s.sent && s.report != nil {
			due(s.retryAt)
		}
	}
	if a.pod.needApply {
		due(a.pod.retryAt)
	}
	due(a.keysWake())
	if a.webhookDue {
		due(a.webhookRetryAt)
	}
	return next
}

func (s *addonState) readySeen() bool {
	return s.record != nil && s.record.ReadyGeneration == s.desired.GetGeneration()
}

// sortedNames are the add-ons in a stable order.
func (a *Agent) sortedNames() []string {
	names := make([]string, 0, len(a.addons))
	for n := range a.addons {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// bootID names this boot of the VM (Linux's boot id), so the host tells a
// rebooted agent from a reconnecting one; a random id where there is none.
func bootID() string {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		return strings.TrimSpace(string(b))
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
