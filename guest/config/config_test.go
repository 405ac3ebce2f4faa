package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

const sampleFile = `
account-id: "111122223333"
cluster-name: demo
cluster-uid: uid-1
instance-id: i-file
endpoint:
  - saltbush-a:9090
  - saltbush-b:9090
drift-interval: 5m
log-json: true
`

func load(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c := Default()
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	err := Resolve(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return c, err
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte(sampleFile), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{
			name: "file over defaults",
			args: []string{"--config", file},
			check: func(t *testing.T, c Config) {
				if c.InstanceID != "i-file" || c.DriftInterval != 5*time.Minute || !c.LogJSON {
					t.Errorf("got instance %q drift %v json %v", c.InstanceID, c.DriftInterval, c.LogJSON)
				}
				if !slices.Equal(c.Endpoints, []string{"saltbush-a:9090", "saltbush-b:9090"}) {
					t.Errorf("endpoints %v", c.Endpoints)
				}
				if c.Kubeconfig != Default().Kubeconfig {
					t.Errorf("kubeconfig %q, want the default", c.Kubeconfig)
				}
			},
		},
		{
			name: "environment over file",
			args: []string{"--config", file},
			env:  map[string]string{"SALTBUSH_AGENT_INSTANCE_ID": "i-env", "SALTBUSH_AGENT_ENDPOINT": "x:1, y:2"},
			check: func(t *testing.T, c Config) {
				if c.InstanceID != "i-env" || !slices.Equal(c.Endpoints, []string{"x:1", "y:2"}) {
					t.Errorf("got instance %q endpoints %v", c.InstanceID, c.Endpoints)
				}
			},
		},
		{
			name: "flags over environment",
			args: []string{"--config", file, "--instance-id", "i-flag", "--endpoint", "z:3"},
			env:  map[string]string{"SALTBUSH_AGENT_INSTANCE_ID": "i-env"},
			check: func(t *testing.T, c Config) {
				if c.InstanceID != "i-flag" || !slices.Equal(c.Endpoints, []string{"z:3"}) {
					t.Errorf("got instance %q endpoints %v", c.InstanceID, c.Endpoints)
				}
			},
		},
		{
			name: "config file named by the environment",
			env:  map[string]string{"SALTBUSH_AGENT_CONFIG": file},
			check: func(t *testing.T, c Config) {
				if c.ClusterName != "demo" {
					t.Errorf("cluster name %q", c.ClusterName)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "unknown key", args: []string{"--config", write("typo.yaml", "clustr-name: x\n")}, want: `unknown key "clustr-name"`},
		{name: "named file missing", args: []string{"--config", filepath.Join(dir, "none.yaml")}, want: "no such file"},
		{name: "list for a scalar", args: []string{"--config", write("list.yaml", "instance-id: [a, b]\n")}, want: "not a list setting"},
		{name: "bad duration", args: []string{"--config", write("dur.yaml", "drift-interval: soon\n")}, want: "drift-interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestMissingDefaultFileIsEmpty(t *testing.T) {
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c := Default()
	c.ConfigFile = filepath.Join(t.TempDir(), "absent.yaml")
	c.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(fs, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatalf("a missing default file must read as empty: %v", err)
	}
}

func TestValidate(t *testing.T) {
	good := Default()
	good.AccountID, good.ClusterName, good.ClusterUID, good.InstanceID = "111122223333", "demo", "uid", "i-1"
	good.Endpoints = []string{"127.0.0.1:9090"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"short account", func(c *Config) { c.AccountID = "123" }, "account-id"},
		{"bad cluster name", func(c *Config) { c.ClusterName = "-x" }, "cluster-name"},
		{"no uid", func(c *Config) { c.ClusterUID = "" }, "cluster-uid"},
		{"no instance", func(c *Config) { c.InstanceID = "" }, "instance-id"},
		{"no endpoint", func(c *Config) { c.Endpoints = nil }, "endpoint"},
		{"endpoint without port", func(c *Config) { c.Endpoints = []string{"saltbush"} }, "not host:port"},
		{"status on a public address", func(c *Config) { c.StatusAddr = "0.0.0.0:9445" }, "status-addr"},
		{"zero drift interval", func(c *Config) { c.DriftInterval = 0 }, "drift-interval"},
		{"backoff inverted", func(c *Config) { c.BackoffMax = time.Millisecond }, "backoff-max"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, "log-level"},
		{"webhooks on a public address", func(c *Config) { c.WebhookAddr = "10.0.0.1:9444" }, "webhook-addr"},
		{"negative review cache", func(c *Config) { c.ReviewCacheTTL = -time.Second }, "review-cache-ttl"},
		{"zero review timeout", func(c *Config) { c.ReviewTimeout = 0 }, "review-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}
