package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

const (
	// requestTimeout is each server's read and write timeout.
	requestTimeout = 30 * time.Second
	// probeTimeout bounds a health probe's round of the listeners.
	probeTimeout = 10 * time.Second
	// configTimeout bounds loading the SDK configuration.
	configTimeout = 30 * time.Second
	// rotationInterval is how often --rotate-credentials re-reads the
	// shared credentials file.
	rotationInterval = time.Minute
)

type serverOptions struct {
	port, probePort, metricsPort uint16
	metricsAddress               string
	bindHosts                    *stringArray
	clusterName                  string
	endpoint                     string
	region                       string
	maxRetention                 time.Duration
	maxCacheSize                 int
	maxServiceQPS                int
	rotateCredentials            bool
}

// serverFlags are the real agent's server flags, with its defaults.
func serverFlags(stderr io.Writer) (*serverOptions, *flag.FlagSet) {
	o := &serverOptions{port: 80, probePort: 2703, metricsPort: 2705,
		bindHosts: &stringArray{values: []string{agentIPv4, "[" + agentIPv6 + "]"}}}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.clusterName, "cluster-name", "", "Name of the EKS Cluster the agent will run on")
	fs.StringVar(&o.clusterName, "c", "", "shorthand for --cluster-name")
	fs.Var((*uint16Value)(&o.port), "port", "Listening port of the proxy server")
	fs.Var((*uint16Value)(&o.port), "p", "shorthand for --port")
	fs.Var((*uint16Value)(&o.probePort), "probe-port", "Health and readiness listening port")
	fs.StringVar(&o.metricsAddress, "metrics-address", "0.0.0.0", "Metrics listening address")
	fs.Var((*uint16Value)(&o.metricsPort), "metrics-port", "Metrics listening port")
	fs.DurationVar(&o.maxRetention, "max-credential-retention-before-renewal", 3*time.Hour,
		"Maximum amount of time that agent waits before renewing credentials. Set 0 to disable caching.")
	fs.IntVar(&o.maxCacheSize, "max-cache-size", 2000, "Maximum amount of unique credentials to cache. Set 0 to disable caching.")
	fs.IntVar(&o.maxServiceQPS, "max-service-qps", 3, "Maximum amount of queries per second to EKS Auth")
	fs.Var(o.bindHosts, "bind-hosts", "Hosts to bind server to")
	fs.Var(o.bindHosts, "b", "shorthand for --bind-hosts")
	fs.BoolVar(&o.rotateCredentials, "rotate-credentials", false, "Enable credentials rotation from shared credentials file")
	fs.StringVar(&o.endpoint, "endpoint", "", "Override for EKS auth endpoint")
	fs.StringVar(&o.region, "region", "", "The region of EKS Auth (the stand-in's own; default: the SDK's, from AWS_REGION)")
	return o, fs
}

// serve runs the credential listeners, the probe server and the metrics
// server until SIGTERM or SIGINT.
func serve(o *serverOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), configTimeout)
	cfg, err := config.LoadDefaultConfig(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("unable to initialize aws configuration: %w", err)
	}
	if o.region != "" {
		cfg.Region = o.region
	}
	creds := cfg.Credentials // the default chain, in an aws.CredentialsCache
	if o.rotateCredentials {
		logger.Info("Credentials rotation enabled. Creds will be fetched and rotated from shared credentials file")
		creds = aws.NewCredentialsCache(rotatingSharedCredentials{})
	}
	if creds == nil {
		return errors.New("no credential provider")
	}
	endpoint, err := resolveEndpoint(o.endpoint, cfg.Region, os.Getenv)
	if err != nil {
		return err
	}
	logger.Info("EKS Auth endpoint", "endpoint", endpoint, "region", cfg.Region, "cluster-name", o.clusterName)
	client, err := newEKSAuth(endpoint, cfg.Region, creds)
	if err != nil {
		return err
	}
	cache := newCredentialCache(func(ctx context.Context, token string) (Credentials, error) {
		start := time.Now()
		c, err := client.fetch(ctx, o.clusterName, token)
		if err == nil {
			logger.Info("Successfully fetched credentials from EKS Auth", "fetched_role_arn", c.RoleArn,
				"association-id", c.AssociationID, "expiration", c.Expiration, "request_time_ms", time.Since(start).Milliseconds())
		}
		return c, err
	}, o.maxRetention, o.maxCacheSize)

	m := &metrics{}
	handler := newCredentialHandler(cache, []string{agentIPv4, agentIPv6}, m)
	var (
		servers []*http.Server
		probed  []string // the credential listeners' addresses
	)
	for _, host := range o.bindHosts.values {
		addr := net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(int(o.port)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			// The real agent stops here. The stand-in goes on without
			// the IPv6 address when the node has none (initialize could
			// not add it: IPv6 is off in the node's namespace).
			if strings.Trim(host, "[]") == agentIPv6 && isAddrNotAvail(err) {
				logger.Warn("IPv6 address not on this node, not listening there", "bind-addr", addr, "error", err)
				continue
			}
			return fmt.Errorf("unable to start server: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/v1/credentials", handler)
		servers = append(servers, start(l, mux))
		probed = append(probed, addr)
		logger.Info("Starting server...", "bind-addr", addr)
	}
	probe := &probeHandler{addrs: probed}
	probeMux := http.NewServeMux()
	probeMux.Handle("/healthz", probe)
	probeMux.Handle("/readyz", probe)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.probePort))))
	if err != nil {
		return fmt.Errorf("unable to start server: %w", err)
	}
	servers = append(servers, start(l, probeMux))
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/healthz", probe)
	metricsMux.Handle("/readyz", probe)
	metricsMux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { writeMetrics(w, m, cache) })
	if l, err = net.Listen("tcp", net.JoinHostPort(o.metricsAddress, strconv.Itoa(int(o.metricsPort)))); err != nil {
		return fmt.Errorf("unable to start server: %w", err)
	}
	servers = append(servers, start(l, metricsMux))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	logger.Info("Shutting down server...")
	ctx, cancel = context.WithTimeout(context.Background(), requestTimeout+5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() { _ = s.Shutdown(ctx) })
	}
	wg.Wait()
	logger.Info("Server gracefully stopped")
	return nil
}

func start(l net.Listener, h http.Handler) *http.Server {
	s := &http.Server{Handler: h, ReadTimeout: requestTimeout, WriteTimeout: requestTimeout}
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("Unable to start server", "error", err)
			os.Exit(1)
		}
	}()
	return s
}

func isAddrNotAvail(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL)
}

// probeHandler answers /healthz and /readyz as the real agent: 200 when
// every credential listener answers a request for "/" with 404 (it is
// up and serving), 408 when that takes longer than probeTimeout, 500
// otherwise.
type probeHandler struct {
	addrs  []string
	client http.Client
}

func (p *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	err := p.probe(ctx)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, context.DeadlineExceeded):
		w.WriteHeader(http.StatusRequestTimeout)
	default:
		logger.Error("InternalServerError: "+err.Error(), "error", err)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("Internal Server Error occurred"))
	}
}

func (p *probeHandler) probe(ctx context.Context) error {
	for _, addr := range p.addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr, nil)
		if err != nil {
			return err
		}
		resp, err := p.client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			return fmt.Errorf("unexpected status code recieved, expected %d, got %d", http.StatusNotFound, resp.StatusCode)
		}
	}
	return nil
}

// writeMetrics writes the counters in Prometheus' text format.
func writeMetrics(w http.ResponseWriter, m *metrics, c *credentialCache) {
	var b strings.Builder
	m.mu.Lock()
	codes := make([]int, 0, len(m.responses))
	for code := range m.responses {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	b.WriteString("# HELP pod_identity_http_response Pod Identity http response code\n")
	b.WriteString("# TYPE pod_identity_http_response counter\n")
	for _, code := range codes {
		fmt.Fprintf(&b, "pod_identity_http_response{code=%q} %d\n", strconv.Itoa(code), m.responses[code])
	}
	m.mu.Unlock()
	s, size := c.snapshot()
	b.WriteString("# HELP pod_identity_cache_state The state of credential in cache\n")
	b.WriteString("# TYPE pod_identity_cache_state counter\n")
	for _, st := range []struct {
		name string
		n    uint64
	}{{"hit", s.Hits}, {"miss", s.Misses}, {"renewal", s.Renewals}, {"kept_after_error", s.KeptAfterError}, {"evicted", s.Evictions}} {
		fmt.Fprintf(&b, "pod_identity_cache_state{state=%q} %d\n", st.name, st.n)
	}
	b.WriteString("# HELP pod_identity_cache_size Credentials held in the cache\n")
	b.WriteString("# TYPE pod_identity_cache_size gauge\n")
	fmt.Fprintf(&b, "pod_identity_cache_size %d\n", size)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = io.WriteString(w, b.String())
}

// rotatingSharedCredentials reads the default profile of the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, else the SDK's default)
// and has the credentials expire after rotationInterval, so that the
// cache reads the file again: --rotate-credentials.
type rotatingSharedCredentials struct{}

func (rotatingSharedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	files := config.DefaultSharedCredentialsFiles
	if f, ok := os.LookupEnv("AWS_SHARED_CREDENTIALS_FILE"); ok {
		files = []string{f}
	}
	sc, err := config.LoadSharedConfigProfile(ctx, config.DefaultSharedConfigProfile, func(o *config.LoadSharedConfigOptions) {
		o.ConfigFiles = []string{}
		o.CredentialsFiles = files
	})
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("loading shared credentials: %w", err)
	}
	c := sc.Credentials
	c.Source = fmt.Sprintf("RotatingSharedCredentialsProvider: %s", files)
	c.CanExpire, c.Expires = true, time.Now().Add(rotationInterval)
	return c, nil
}

// uint16Value is a flag.Value for a port.
type uint16Value uint16

func (v *uint16Value) String() string { return strconv.Itoa(int(*v)) }
func (v *uint16Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return err
	}
	*v = uint16Value(n)
	return nil
}

// stringArray is a repeatable string flag whose first use replaces the
// default, as the real agent's --bind-hosts.
type stringArray struct {
	values []string
	set    bool
}

func (a *stringArray) String() string {
	if a == nil {
		return ""
	}
	return "[" + strings.Join(a.values, ",") + "]"
}

func (a *stringArray) Set(s string) error {
	if !a.set {
		a.values, a.set = nil, true
	}
	a.values = append(a.values, s)
	return nil
}
