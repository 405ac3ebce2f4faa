// Package config is the guest agent's configuration. It comes from four
// places, each overriding the one before: defaults, a YAML file whose keys
// are the flag names (as K3s's own config.yaml is written), environment
// variables SALTBUSH_AGENT_<FLAG> (dashes become underscores), and flags.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// EnvPrefix starts every environment variable the agent reads.
const EnvPrefix = "SALTBUSH_AGENT_"

// DefaultConfigFile is where the VM image's provisioning writes the agent's
// configuration (images/README.md).
const DefaultConfigFile = "/etc/saltbush/agent.yaml"

// Config is everything the agent is told.
type Config struct {
	// ConfigFile is the YAML file read (flag "config"); a missing default
	// file is no error, a missing named one is.
	ConfigFile string

	// AccountID, ClusterName and ClusterUID name the cluster incarnation
	// the agent serves; the uid must be the one its certificate names.
	AccountID   string
	ClusterName string
	ClusterUID  string
	// InstanceID is this control-plane VM's member id.
	InstanceID string

	// Endpoints are saltbush replicas' gRPC addresses (host:port). The
	// agent holds one stream at a time and moves to the next endpoint when
	// it breaks.
	Endpoints []string
	// CertFile, KeyFile and CAFile are the agent's mTLS identity and the
	// CA bundle it trusts saltbush with; all three are re-read when they
	// change, so a rotation needs no restart.
	CertFile, KeyFile, CAFile string

	// Kubeconfig is how the agent reaches its cluster's apiserver.
	Kubeconfig string
	// StateDir holds what the agent remembers across restarts.
	StateDir string
	// WebhookAddr is where the authentication and authorization webhooks
	// for the local apiserver are served (loopback; "" turns them off).
	WebhookAddr string
	// WebhookDir holds the webhooks' TLS material and the two kubeconfig
	// files the apiserver reads ("" is StateDir/webhook).
	WebhookDir string
	// ReviewCacheTTL is how long an authenticated token or an allowed
	// request is answered from the agent's memory; ReviewNegativeCacheTTL
	// the same for a refused token or "no opinion". They bound how long a
	// revoked access lasts (docs/agent.md, "Cluster access").
	ReviewCacheTTL, ReviewNegativeCacheTTL time.Duration
	// ReviewTimeout bounds one webhook review, asking saltbush included.
	ReviewTimeout time.Duration
	// StatusAddr serves /metrics and /status on loopback.
	StatusAddr string
	// PodIdentityWebhookAddr is where the pod identity webhook (package
	// podwebhook) is served for the local apiserver: loopback, the same
	// port on every server VM of a cluster ("" turns it off).
	PodIdentityWebhookAddr string
	// PodCredentialsEndpoint is saltbush's façade as the cluster's pods
	// reach it (https://…): the webhook points mutated pods' STS, EKS and
	// EKS Auth endpoints at it. "" leaves the SDKs' defaults.
	PodCredentialsEndpoint string
	// Region is the cluster's region, set as AWS_REGION in mutated pods.
	Region string

	// DriftInterval is how often the executor re-applies every add-on,
	// besides re-applying when an applied object changes.
	DriftInterval time.Duration
	// KeysInterval is how often the executor reads the apiserver's
	// service-account issuer and keys again, so that a rotated key reaches
	// saltbush within it (docs/agent.md, "Service-account keys").
	KeysInterval time.Duration
	// ReadyTimeout bounds how long a new generation may take to become
	// ready before it is reported FAILED.
	ReadyTimeout time.Duration
	// FailureGrace is how long a workload of a new generation may show a
	// failing pod (image pull or crash-loop back-off) before the
	// generation is reported FAILED.
	FailureGrace time.Duration
	// BackoffInitial and BackoffMax bound the jittered exponential backoff
	// between connection attempts.
	BackoffInitial, BackoffMax time.Duration

	LogLevel string
	LogJSON  bool
}

// WebhookDirectory is WebhookDir, or its default under StateDir.
func (c Config) WebhookDirectory() string {
	if c.WebhookDir != "" {
		return c.WebhookDir
	}
	return filepath.Join(c.StateDir, "webhook")
}

// Default is the configuration before any file, variable or flag.
func Default() Config {
	return Config{
		ConfigFile:  DefaultConfigFile,
		CertFile:    "/etc/saltbush/pki/agent.crt",
		KeyFile:     "/etc/saltbush/pki/agent.key",
		CAFile:      "/etc/saltbush/pki/ca.crt",
		Kubeconfig:  "/etc/rancher/k3s/k3s.yaml",
		StateDir:    "/var/lib/saltbush-agent",
		WebhookAddr: "127.0.0.1:9444",
		// With the apiserver's own 5 s authorization cache (images/k3s),
		// a disassociated policy stops working within about 10 s.
		ReviewCacheTTL: 5 * time.Second,
		// A user refused an instant before their access entry was made
		// waits at most this long (plus the apiserver's 2 s).
		ReviewNegativeCacheTTL: 2 * time.Second,
		ReviewTimeout:          5 * time.Second,
		StatusAddr:             "127.0.0.1:9445",
		PodIdentityWebhookAddr: "127.0.0.1:9446",
		DriftInterval:          10 * time.Minute,
		KeysInterval:           time.Minute,
		ReadyTimeout:           10 * time.Minute,
		FailureGrace:           2 * time.Minute,
		BackoffInitial:         500 * time.Millisecond,
		BackoffMax:             30 * time.Second,
		LogLevel:               "info",
	}
}

// AddFlags binds c's fields to fs, with c's values as defaults.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "YAML file whose keys are these flags' names")
	fs.StringVar(&c.AccountID, "account-id", c.AccountID, "AWS account id of the cluster")
	fs.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "EKS name of the cluster")
	fs.StringVar(&c.ClusterUID, "cluster-uid", c.ClusterUID, "cluster incarnation uid (the one the agent certificate names)")
	fs.StringVar(&c.InstanceID, "instance-id", c.InstanceID, "this control-plane member's instance id")
	fs.StringSliceVar(&c.Endpoints, "endpoint", c.Endpoints, "saltbush gRPC endpoint host:port (repeat for each replica)")
	fs.StringVar(&c.CertFile, "cert", c.CertFile, "agent certificate (PEM)")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "agent private key (PEM)")
	fs.StringVar(&c.CAFile, "ca", c.CAFile, "CA bundle saltbush's certificate is verified against (PEM)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig of the cluster's apiserver")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory for the agent's persistent state")
	fs.StringVar(&c.WebhookAddr, "webhook-addr", c.WebhookAddr, "loopback address of the apiserver's authentication and authorization webhooks (\"\" turns them off)")
	fs.StringVar(&c.PodIdentityWebhookAddr, "pod-identity-webhook-addr", c.PodIdentityWebhookAddr, "loopback address of the pod identity webhook, the same port on every server of the cluster (\"\" turns it off)")
	fs.StringVar(&c.PodCredentialsEndpoint, "pod-credentials-endpoint", c.PodCredentialsEndpoint, "saltbush's façade URL as pods reach it: their STS, EKS and EKS Auth endpoint (\"\" leaves the SDKs' defaults)")
	fs.StringVar(&c.Region, "region", c.Region, "the cluster's region, AWS_REGION of pods given credentials")
	fs.StringVar(&c.WebhookDir, "webhook-dir", c.WebhookDir, "directory of the webhooks' certificates and kubeconfig files (default <state-dir>/webhook)")
	fs.DurationVar(&c.ReviewCacheTTL, "review-cache-ttl", c.ReviewCacheTTL, "how long an authenticated token or allowed request is cached (0 disables)")
	fs.DurationVar(&c.ReviewNegativeCacheTTL, "review-negative-cache-ttl", c.ReviewNegativeCacheTTL, "how long a refused token or \"no opinion\" is cached (0 disables)")
	fs.DurationVar(&c.ReviewTimeout, "review-timeout", c.ReviewTimeout, "deadline of one webhook review, asking saltbush included")
	fs.StringVar(&c.StatusAddr, "status-addr", c.StatusAddr, "loopback address serving /metrics and /status")
	fs.DurationVar(&c.DriftInterval, "drift-interval", c.DriftInterval, "how often every add-on is re-applied to undo drift")
	fs.DurationVar(&c.KeysInterval, "service-account-keys-interval", c.KeysInterval, "how often the apiserver's service-account issuer and keys are read again for saltbush")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", c.ReadyTimeout, "how long a new generation may take to become ready before it fails")
	fs.DurationVar(&c.FailureGrace, "failure-grace", c.FailureGrace, "how long a new generation's pods may be in back-off before it fails")
	fs.DurationVar(&c.BackoffInitial, "backoff-initial", c.BackoffInitial, "first delay between connection attempts")
	fs.DurationVar(&c.BackoffMax, "backoff-max", c.BackoffMax, "largest delay between connection attempts")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.BoolVar(&c.LogJSON, "log-json", c.LogJSON, "log JSON lines instead of text")
}

// Resolve fills every flag of fs not given on the command line from the
// environment (lookup, normally os.LookupEnv) or else from the YAML file
// the "config" flag names. fs must be parsed and bound by AddFlags.
func Resolve(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	// The file's name itself may come from the environment.
	if f := fs.Lookup("config"); f != nil && !f.Changed {
		if v, ok := lookup(envName("config")); ok {
			if err := fs.Set("config", v); err != nil {
				return fmt.Errorf("%s: %w", envName("config"), err)
			}
		}
	}
	file, err := readFile(fs)
	if err != nil {
		return err
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" {
			return
		}
		if v, ok := lookup(envName(f.Name)); ok {
			if err := setFlag(f, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := setFromYAML(f, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: key %q: %w", fs.Lookup("config").Value, f.Name, err))
			}
		}
	})
	for key := range file {
		if fs.Lookup(key) == nil || key == "config" {
			errs = append(errs, fmt.Errorf("%s: unknown key %q", fs.Lookup("config").Value, key))
		}
	}
	return errors.Join(errs...)
}

func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// readFile parses the config file; a default file that does not exist is
// an empty one.
func readFile(fs *pflag.FlagSet) (map[string]any, error) {
	f := fs.Lookup("config")
	if f == nil || f.Value.String() == "" {
		return nil, nil
	}
	path := f.Value.String()
	b, err := os.ReadFile(path) //nolint:gosec // G304: the --config file the operator names
	if errors.Is(err, os.ErrNotExist) && !f.Changed && path == f.DefValue {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return m, nil
}

// setFlag sets a flag from a string; a list flag's string is
// comma-separated and replaces the default.
func setFlag(f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var items []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		return sv.Replace(items)
	}
	return f.Value.Set(v)
}

// setFromYAML sets a flag from a decoded YAML value: a scalar, or a list
// for a list flag.
func setFromYAML(f *pflag.Flag, v any) error {
	if list, ok := v.([]any); ok {
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return errors.New("is not a list setting")
		}
		items := make([]string, 0, len(list))
		for _, e := range list {
			s, err := scalar(e)
			if err != nil {
				return err
			}
			items = append(items, s)
		}
		return sv.Replace(items)
	}
	s, err := scalar(v)
	if err != nil {
		return err
	}
	return setFlag(f, s)
}

func scalar(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case bool:
		return strconv.FormatBool(t), nil
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("%T is not a scalar", v)
}

var (
	accountRE = regexp.MustCompile(`^[0-9]{12}$`)
	// nameRE is EKS's cluster-name pattern.
	nameRE = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$`)
)

// Validate reports every missing or malformed setting at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !accountRE.MatchString(c.AccountID) {
		bad("account-id %q must be 12 digits", c.AccountID)
	}
	if !nameRE.MatchString(c.ClusterName) {
		bad("cluster-name %q is not an EKS cluster name", c.ClusterName)
	}
	if c.ClusterUID == "" {
		bad("cluster-uid is required")
	}
	if c.InstanceID == "" {
		bad("instance-id is required")
	}
	if len(c.Endpoints) == 0 {
		bad("at least one endpoint is required")
	}
	for _, e := range c.Endpoints {
		if _, port, err := net.SplitHostPort(e); err != nil || port == "" {
			bad("endpoint %q is not host:port", e)
		}
	}
	for name, v := range map[string]string{"cert": c.CertFile, "key": c.KeyFile, "ca": c.CAFile, "kubeconfig": c.Kubeconfig, "state-dir": c.StateDir} {
		if v == "" {
			bad("%s is required", name)
		}
	}
	for name, addr := range map[string]string{"webhook-addr": c.WebhookAddr, "status-addr": c.StatusAddr, "pod-identity-webhook-addr": c.PodIdentityWebhookAddr} {
		if addr == "" {
			continue // off
		}
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			bad("%s %q must be a loopback host:port", name, addr)
		}
	}
	for name, d := range map[string]time.Duration{"drift-interval": c.DriftInterval, "service-account-keys-interval": c.KeysInterval, "ready-timeout": c.ReadyTimeout,
		"backoff-initial": c.BackoffInitial, "backoff-max": c.BackoffMax, "review-timeout": c.ReviewTimeout} {
		if d <= 0 {
			bad("%s must be positive", name)
		}
	}
	if c.FailureGrace < 0 {
		bad("failure-grace must not be negative")
	}
	if c.ReviewCacheTTL < 0 || c.ReviewNegativeCacheTTL < 0 {
		bad("review-cache-ttl and review-negative-cache-ttl must not be negative")
	}
	if e := c.PodCredentialsEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("pod-credentials-endpoint %q is not an http(s) URL", e)
		}
	}
	if c.BackoffMax < c.BackoffInitial {
		bad("backoff-max must not be below backoff-initial")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		bad("log-level %q is not debug, info, warn or error", c.LogLevel)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
