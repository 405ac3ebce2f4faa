package agent

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// metrics are the agent's Prometheus metrics, on their own registry.
type metrics struct {
	reg            *prometheus.Registry
	connected      prometheus.Gauge
	connects       prometheus.Counter
	executor       prometheus.Gauge
	epoch          prometheus.Gauge
	grantLeft      prometheus.Gauge
	desiredVersion prometheus.Gauge
	applies        *prometheus.CounterVec
	written        prometheus.Counter
	reports        *prometheus.CounterVec
	fences         prometheus.Counter
	addons         *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saltbush_agent_connected",
			Help: "1 while a delivery stream to saltbush is open."}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{Name: "saltbush_agent_stream_connects_total",
			Help: "Delivery streams opened."}),
		executor: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saltbush_agent_executor",
			Help: "1 while this agent holds a fresh executor grant (it may write to the cluster)."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saltbush_agent_epoch",
			Help: "The cluster's executor epoch in the last assignment."}),
		grantLeft: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saltbush_agent_grant_seconds_left",
			Help: "How long the executor grant lasts if saltbush is not heard again (0 without one)."}),
		desiredVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saltbush_agent_desired_version",
			Help: "Version of the desired set held."}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saltbush_agent_applies_total",
			Help: "Add-on applies by result: applied, failed (a verdict), transient (retried), fenced (stopped)."}, []string{"result"}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "saltbush_agent_objects_written_total",
			Help: "Objects created, changed or deleted in the cluster."}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saltbush_agent_report_results_total",
			Help: "Answers to reports, by saltbush's reason (accepted, stale_generation, stale_epoch, ...)."}, []string{"reason"}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{Name: "saltbush_agent_fences_total",
			Help: "Fences received."}),
		addons: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "saltbush_agent_addon_generation",
			Help: "Per add-on, the generation of the latest report, labelled with its phase."}, []string{"addon", "phase"}),
	}
	m.reg.MustRegister(m.connected, m.connects, m.executor, m.epoch, m.grantLeft, m.desiredVersion, m.applies,
		m.written, m.reports, m.fences, m.addons,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Status is what `saltbush-agent status` shows.
type Status struct {
	ClusterName string `json:"clusterName"`
	ClusterUID  string `json:"clusterUid"`
	InstanceID  string `json:"instanceId"`
	Version     string `json:"agentVersion"`
	// Commit (12 hex digits, "+dirty" for a modified tree) and
	// ContractBaseline complete the agent's release identity.
	Commit           string `json:"agentCommit,omitempty"`
	ContractBaseline uint32 `json:"contractBaseline"`
	Connected        bool   `json:"connected"`
	Endpoint         string `json:"endpoint,omitempty"`
	Role             string `json:"role"`
	Epoch            int64  `json:"epoch"`
	Executor         string `json:"executorInstance,omitempty"`
	// Writable and GrantLeft are the grant now (filled when served).
	Writable       bool          `json:"writable"`
	GrantLeft      string        `json:"grantLeft,omitempty"`
	DesiredVersion int64         `json:"desiredVersion"`
	DesiredDigest  string        `json:"desiredDigest,omitempty"`
	Addons         []AddonStatus `json:"addons"`
	// PodIdentity is the desired set's pod identity associations, as
	// the executor last recorded them (absent when there are none).
	PodIdentity *PodIdentityStatus `json:"podIdentity,omitempty"`
	At          time.Time          `json:"at"`
}

// PodIdentityStatus is the pod identity associations in Status.
type PodIdentityStatus struct {
	Associations int `json:"associations"`
	// Recorded counts the service accounts that carry their association;
	// Pending names those that do not exist (yet).
	Recorded int      `json:"recorded"`
	Pending  []string `json:"pending,omitempty"`
	// Issues are what the cluster refused.
	Issues []IssueStatus `json:"issues,omitempty"`
}

// AddonStatus is one add-on in Status.
type AddonStatus struct {
	Name       string        `json:"name"`
	Generation int64         `json:"generation"`
	Version    string        `json:"version,omitempty"`
	Deleting   bool          `json:"deleting,omitempty"`
	Phase      string        `json:"phase,omitempty"`
	Applied    bool          `json:"applied"`
	Issues     []IssueStatus `json:"issues,omitempty"`
}

// IssueStatus is one issue of a report.
type IssueStatus struct {
	Code        string   `json:"code"`
	Message     string   `json:"message"`
	ResourceIDs []string `json:"resourceIds,omitempty"`
}

// publish makes run's view the one the status API serves, and sets the
// metrics that follow it.
func (a *Agent) publish() {
	st := &Status{ClusterName: a.cfg.ClusterName, ClusterUID: a.cfg.ClusterUID, InstanceID: a.cfg.InstanceID,
		Version: a.release.Version, Commit: a.release.ShortCommit(), ContractBaseline: a.release.ContractBaseline,
		Connected: a.streamUp, Endpoint: a.link.Endpoint(), At: time.Now()}
	if d := a.st.Desired; d != nil {
		st.DesiredVersion, st.DesiredDigest = d.GetVersion(), d.GetDigest()
	}
	a.metrics.addons.Reset()
	for _, name := range a.sortedNames() {
		s := a.addons[name]
		as := AddonStatus{Name: name, Generation: s.desired.GetGeneration(), Version: s.desired.GetVersion(),
			Deleting: s.desired.GetDeleting(), Applied: s.applied}
		if r := s.report; r != nil && r.GetGeneration() == s.desired.GetGeneration() {
			as.Phase = phaseName(r.GetPhase())
			for _, i := range r.GetIssues() {
				as.Issues = append(as.Issues, IssueStatus{Code: i.GetCode(), Message: i.GetMessage(), ResourceIDs: i.GetResourceIds()})
			}
			a.metrics.addons.WithLabelValues(name, as.Phase).Set(float64(r.GetGeneration()))
		}
		st.Addons = append(st.Addons, as)
	}
	if n := len(a.st.Desired.GetPodIdentityAssociations()); n > 0 || a.pod.last.Changed > 0 {
		ps := &PodIdentityStatus{Associations: n, Recorded: a.pod.last.Recorded}
		for _, k := range a.pod.last.Pending {
			ps.Pending = append(ps.Pending, k.String())
		}
		for _, owner := range slices.Sorted(maps.Keys(a.pod.last.Issues)) {
			for _, i := range a.pod.last.Issues[owner] {
				ps.Issues = append(ps.Issues, IssueStatus{Code: i.GetCode(), Message: i.GetMessage(), ResourceIDs: i.GetResourceIds()})
			}
		}
		st.PodIdentity = ps
	}
	if a.streamUp {
		a.metrics.connected.Set(1)
	}
	a.status.Store(st)
}

func phaseName(p deliveryv1.Phase) string {
	switch p {
	case deliveryv1.Phase_PHASE_APPLIED:
		return "APPLIED"
	case deliveryv1.Phase_PHASE_READY:
		return "READY"
	case deliveryv1.Phase_PHASE_FAILED:
		return "FAILED"
	case deliveryv1.Phase_PHASE_REMOVED:
		return "REMOVED"
	}
	return ""
}

func roleName(r deliveryv1.Role) string {
	switch r {
	case deliveryv1.Role_ROLE_EXECUTOR:
		return "EXECUTOR"
	case deliveryv1.Role_ROLE_STANDBY:
		return "STANDBY"
	}
	return "NONE"
}

// Snapshot is the agent's status now.
func (a *Agent) Snapshot() Status {
	st := *a.status.Load()
	// The stream, like the grant, is read now: run publishes the rest
	// after its next pass, and a role without its stream would mislead.
	st.Endpoint = a.link.Endpoint()
	st.Connected = st.Endpoint != ""
	g := a.grant.Snapshot()
	st.Role, st.Epoch, st.Executor, st.Writable = roleName(g.Role), g.Epoch, g.ExecutorInstance, g.Writable
	if g.Writable {
		st.GrantLeft = g.Left.Round(time.Millisecond).String()
	}
	return st
}

// observeGrant sets the grant's metrics (scraped: read at scrape time).
func (a *Agent) observeGrant() {
	g := a.grant.Snapshot()
	if g.Writable {
		a.metrics.executor.Set(1)
		a.metrics.grantLeft.Set(g.Left.Seconds())
	} else {
		a.metrics.executor.Set(0)
		a.metrics.grantLeft.Set(0)
	}
}

// ServeStatus serves /status (JSON), /metrics and /healthz on ln until ctx
// ends.
func (a *Agent) ServeStatus(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Snapshot())
	})
	metricsHandler := promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		a.observeGrant()
		metricsHandler.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// Profiles, on loopback like the rest (what an idle agent holds).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
