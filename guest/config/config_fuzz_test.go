package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// FuzzConfigFile reads arbitrary bytes as the agent's configuration file
// (and one more setting from the environment). Resolving and validating
// never panic, and a file that resolves is a fixed point: writing every
// resolved setting back as a file (the flag names as keys, as
// images/agent.yaml.example is written) and resolving that gives the same
// configuration (when the settings are text a YAML file can hold), and
// so does giving the settings as environment variables (when a list's
// items hold no comma).
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		sampleFile,
		"account-id: \"111122223333\"\ncluster-name: demo\ncluster-uid: uid-1\ninstance-id: i-1\nendpoint: [\"127.0.0.1:9090\"]\n",
		"account-id: 111122223333\nlog-json: yes\nreview-cache-ttl: 0\nbackoff-max: 1h\n",
		"endpoint: a:1\n", "endpoint: []\n", "endpoint: [[a]]\n", "endpoint: {a: 1}\n", "endpoint: [\"a,b:1\", \" c:2 \"]\n",
		"instance-id: [a, b]\n", "drift-interval: soon\n", "drift-interval: 1e400\n", "failure-grace: -1s\n",
		"cluster-name: ~\n", "cluster-uid: 1e5\n", "account-id: 000000000000\n", "webhook-addr: \"\"\n",
		"config: /etc/other.yaml\n", "clustr-name: x\n", "log-level: [debug]\n", "log-json: maybe\n",
		"- a\n- b\n", "a\n", "{", "\t", "", "---\n---\n", "&a [*a]\n", "? [a]\n: b\n", "account-id: !!binary aGVsbG8=\n",
		"cluster-name: demo\ncluster-name: other\n",
	} {
		f.Add(seed, "SALTBUSH_AGENT_INSTANCE_ID", "i-env")
	}
	f.Add("endpoint: a:1\n", "SALTBUSH_AGENT_ENDPOINT", "x:1, ,y:2")
	f.Add("", "SALTBUSH_AGENT_CONFIG", "/nonexistent/agent.yaml")
	f.Add("", "SALTBUSH_AGENT_LOG_JSON", "maybe")
	// One directory per fuzz process (its inputs run one at a time), so an
	// input costs two file writes, not a directory made and removed.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file, envKey, envValue string) {
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{envKey: envValue}
		c, fs, err := resolveFuzz(t, path, env)
		if err != nil {
			return
		}
		_ = c.Validate() // a verdict, whatever the settings

		// The resolved settings written back as a file.
		settings := map[string]any{}
		envs := map[string]string{}
		commas, text := false, true
		fs.VisitAll(func(fl *pflag.Flag) {
			if fl.Name == "config" {
				return
			}
			if sv, ok := fl.Value.(pflag.SliceValue); ok {
				items := sv.GetSlice()
				settings[fl.Name] = items
				for _, it := range items {
					commas = commas || strings.Contains(it, ",") || strings.TrimSpace(it) != it || it == ""
					text = text && utf8.ValidString(it)
				}
				envs[envName(fl.Name)] = strings.Join(items, ",")
				return
			}
			settings[fl.Name] = fl.Value.String()
			envs[envName(fl.Name)] = fl.Value.String()
			text = text && utf8.ValidString(fl.Value.String())
		})
		c = comparable(c)
		// A YAML file is UTF-8 text without control characters; a variable
		// need not be.
		if b, err := yaml.Marshal(settings); text && err == nil {
			again := filepath.Join(dir, "again.yaml")
			if err := os.WriteFile(again, b, 0o600); err != nil {
				t.Fatal(err)
			}
			c2, _, err := resolveFuzz(t, again, nil)
			if err != nil {
				t.Fatalf("the resolved settings, written as a file, do not resolve: %v\n%s", err, b)
			}
			if c2 = comparable(c2); !reflect.DeepEqual(c, c2) {
				t.Fatalf("the resolved settings, written as a file, resolve to another configuration:\n%+v\n%+v\n%s", c, c2, b)
			}
		}
		if commas {
			return // a list item the comma-separated variable cannot carry
		}
		c3, _, err := resolveDefault(t, envs)
		if err != nil {
			t.Fatalf("the resolved settings, as environment variables, do not resolve: %v\n%v", err, envs)
		}
		if c3 = comparable(c3); !reflect.DeepEqual(c, c3) {
			t.Fatalf("the resolved settings, as environment variables, resolve to another configuration:\n%+v\n%+v", c, c3)
		}
	})
}

// comparable is c without what the round trips do not carry: the file's
// name, and an empty list's being nil or not.
func comparable(c Config) Config {
	c.ConfigFile = ""
	if len(c.Endpoints) == 0 {
		c.Endpoints = nil
	}
	return c
}

// resolveFuzz resolves the flag set of a configuration named --config path
// with env as the environment.
func resolveFuzz(t *testing.T, path string, env map[string]string) (Config, *pflag.FlagSet, error) {
	t.Helper()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c := Default()
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatalf("parse: %v", err)
	}
	err := Resolve(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return c, fs, err
}

// resolveDefault resolves with env only: the default file, made absent.
func resolveDefault(t *testing.T, env map[string]string) (Config, *pflag.FlagSet, error) {
	t.Helper()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c := Default()
	c.ConfigFile = filepath.Join(os.TempDir(), "saltbush-agent-fuzz-absent", "agent.yaml")
	c.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatalf("parse: %v", err)
	}
	err := Resolve(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return c, fs, err
}
