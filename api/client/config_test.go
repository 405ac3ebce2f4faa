package client

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

func TestConfigValidate(t *testing.T) {
	dir := filepath.Join("etc", "saltbush")
	ok := func(c Config) Config {
		if c.Endpoints == nil {
			c.Endpoints = []string{"127.0.0.1:9090"}
		}
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		want    files
		wantErr string
	}{
		{
			name: "cert dir and name",
			cfg:  ok(Config{CertDir: dir, CertName: "provisioner"}),
			want: files{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "provisioner.crt"), key: filepath.Join(dir, "provisioner.key")},
		},
		{
			name: "explicit files only",
			cfg:  ok(Config{CAFile: "/a/ca.pem", CertFile: "/a/me.pem", KeyFile: "/a/me-key.pem"}),
			want: files{ca: "/a/ca.pem", cert: "/a/me.pem", key: "/a/me-key.pem"},
		},
		{
			name: "an explicit CA file beats the cert dir's",
			cfg:  ok(Config{CertDir: dir, CertName: "svc", CAFile: "/rotated/ca.crt"}),
			want: files{ca: "/rotated/ca.crt", cert: filepath.Join(dir, "svc.crt"), key: filepath.Join(dir, "svc.key")},
		},
		{
			name: "cert dir for the CA, explicit certificate and key",
			cfg:  ok(Config{CertDir: dir, CertFile: "/a/me.pem", KeyFile: "/a/me-key.pem"}),
			want: files{ca: filepath.Join(dir, "ca.crt"), cert: "/a/me.pem", key: "/a/me-key.pem"},
		},
		{
			name: "several endpoints, host names and IPv6",
			cfg:  Config{Endpoints: []string{"saltbush-0.internal:9090", "[::1]:9090", "10.0.0.2:9090"}, CertDir: dir, CertName: "svc"},
			want: files{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "svc.crt"), key: filepath.Join(dir, "svc.key")},
		},
		{
			name: "account and timeout",
			cfg:  ok(Config{CertDir: dir, CertName: "svc", Account: "000000000000", CallTimeout: time.Minute}),
			want: files{ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "svc.crt"), key: filepath.Join(dir, "svc.key")},
		},
		{name: "no endpoints", cfg: Config{CertDir: dir, CertName: "svc"}, wantErr: "no endpoints"},
		{name: "endpoint without a port", cfg: Config{Endpoints: []string{"127.0.0.1"}, CertDir: dir, CertName: "svc"}, wantErr: `endpoint "127.0.0.1" is not host:port`},
		{name: "endpoint is a URL", cfg: Config{Endpoints: []string{"https://saltbush:9090"}, CertDir: dir, CertName: "svc"}, wantErr: `endpoint "https://saltbush:9090" is not host:port`},
		{name: "endpoint without a host", cfg: Config{Endpoints: []string{":9090"}, CertDir: dir, CertName: "svc"}, wantErr: `endpoint ":9090" has no host`},
		{name: "port out of range", cfg: Config{Endpoints: []string{"h:70000"}, CertDir: dir, CertName: "svc"}, wantErr: `port "70000" is not 1-65535`},
		{name: "port by name", cfg: Config{Endpoints: []string{"h:grpc"}, CertDir: dir, CertName: "svc"}, wantErr: `port "grpc" is not 1-65535`},
		{name: "endpoint twice", cfg: Config{Endpoints: []string{"h:1", "g:1", "h:1"}, CertDir: dir, CertName: "svc"}, wantErr: `endpoint "h:1" is listed twice`},
		{name: "no CA", cfg: ok(Config{CertFile: "/a/me.pem", KeyFile: "/a/me-key.pem"}), wantErr: "no CA bundle"},
		{name: "cert dir without a name", cfg: ok(Config{CertDir: dir}), wantErr: "no client certificate"},
		{name: "certificate without its key", cfg: ok(Config{CAFile: "/a/ca.pem", CertFile: "/a/me.pem"}), wantErr: "no client certificate"},
		{name: "name with a directory", cfg: ok(Config{CertDir: dir, CertName: "../admin"}), wantErr: `CertName "../admin" must be a file name`},
		{name: "name is a parent directory", cfg: ok(Config{CertDir: dir, CertName: ".."}), wantErr: `CertName ".." must be a file name`},
		{name: "short account", cfg: ok(Config{CertDir: dir, CertName: "svc", Account: "12345"}), wantErr: `Account "12345" must be 12 digits`},
		{name: "account with a letter", cfg: ok(Config{CertDir: dir, CertName: "svc", Account: "00000000000a"}), wantErr: "must be 12 digits"},
		{name: "negative timeout", cfg: ok(Config{CertDir: dir, CertName: "svc", CallTimeout: -time.Second}), wantErr: "CallTimeout -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("validate() = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("validate() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestConfigCallTimeout(t *testing.T) {
	tests := []struct {
		name string
		set  time.Duration
		want time.Duration
	}{
		{name: "unset is the default", set: 0, want: DefaultCallTimeout},
		{name: "set is kept", set: 3 * time.Second, want: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Config{CallTimeout: tt.set}).callTimeout(); got != tt.want {
				t.Errorf("callTimeout() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestNewRefuses: New reports what it cannot read or use, naming the file,
// and connects nowhere.
func TestNewRefuses(t *testing.T) {
	p := newTestPKI(t)
	dir := p.clientDir(t, "svc")
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		cfg     Config
		wantErr string
	}{
		{name: "missing certificate", ctx: t.Context(), cfg: Config{Endpoints: []string{"127.0.0.1:1"}, CertDir: dir, CertName: "other"},
			wantErr: filepath.Join(dir, "other.crt")},
		{name: "CA file without a certificate", ctx: t.Context(), cfg: Config{Endpoints: []string{"127.0.0.1:1"}, CertDir: dir, CertName: "svc", CAFile: notPEM},
			wantErr: notPEM + " holds no PEM certificate"},
		{name: "key of another certificate", ctx: t.Context(), cfg: Config{Endpoints: []string{"127.0.0.1:1"}, CertDir: dir, CertName: "svc",
			KeyFile: filepath.Join(p.clientDir(t, "other"), "other.key")}, wantErr: "private key does not match public key"},
		{name: "context done", ctx: done, cfg: Config{Endpoints: []string{"127.0.0.1:1"}, CertDir: dir, CertName: "svc"}, wantErr: "context canceled"},
		{name: "invalid configuration", ctx: t.Context(), cfg: Config{CertDir: dir, CertName: "svc"}, wantErr: "no endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.ctx, tt.cfg)
			if err == nil {
				_ = c.Close()
				t.Fatalf("New succeeded, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestRetryableMethods: the retry policy covers exactly the methods whose
// proto declares them free of side effects or idempotent.
func TestRetryableMethods(t *testing.T) {
	names, err := retryableMethods(services())
	if err != nil {
		t.Fatal(err)
	}
	has := func(sd *grpc.ServiceDesc, method string) bool {
		return slices.Contains(names, methodName{Service: sd.ServiceName, Method: method})
	}
	tests := []struct {
		name   string
		sd     *grpc.ServiceDesc
		method string
		want   bool
	}{
		{name: "GetCluster has no side effects", sd: &controlv1.ClusterControlService_ServiceDesc, method: "GetCluster", want: true},
		{name: "AddMember is idempotent", sd: &controlv1.ClusterControlService_ServiceDesc, method: "AddMember", want: true},
		{name: "EnsureAddon is idempotent", sd: &controlv1.AddonControlService_ServiceDesc, method: "EnsureAddon", want: true},
		{name: "DescribeCluster has no side effects", sd: &eksv1.ClusterService_ServiceDesc, method: "DescribeCluster", want: true},
		{name: "DescribeAddon has no side effects", sd: &eksv1.AddonService_ServiceDesc, method: "DescribeAddon", want: true},
		{name: "SetStatus is not declared idempotent", sd: &controlv1.ClusterControlService_ServiceDesc, method: "SetStatus", want: false},
		{name: "ApplyAddonReport is not declared idempotent", sd: &controlv1.AddonControlService_ServiceDesc, method: "ApplyAddonReport", want: false},
		{name: "CreateAccessKey makes a new key each time", sd: &controlv1.IdentityControlService_ServiceDesc, method: "CreateAccessKey", want: false},
		{name: "CreateCluster is not declared idempotent", sd: &eksv1.ClusterService_ServiceDesc, method: "CreateCluster", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := has(tt.sd, tt.method); got != tt.want {
				t.Errorf("%s/%s retried = %v, want %v", tt.sd.ServiceName, tt.method, got, tt.want)
			}
		})
	}
	if _, err := buildServiceConfig(services()); err != nil {
		t.Fatal(err)
	}
}
