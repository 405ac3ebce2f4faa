package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func TestContainerAnswer(t *testing.T) {
	tests := []struct {
		name  string
		creds Credentials
		want  string
	}{
		{"whole seconds", Credentials{AccessKeyID: "ASIA1", SecretAccessKey: "s", SessionToken: "t", AccountID: "111122223333",
			Expiration: time.Date(2023, 12, 12, 12, 50, 44, 0, time.UTC)},
			`{"AccessKeyId":"ASIA1","SecretAccessKey":"s","Token":"t","AccountId":"111122223333","Expiration":"2023-12-12T12:50:44Z"}`},
		{"fractions and another zone", Credentials{AccessKeyID: "ASIA2", SecretAccessKey: "s", SessionToken: "t", AccountID: "000000000000",
			Expiration: time.Date(2026, 1, 2, 13, 4, 5, 250e6, time.FixedZone("x", 3600))},
			`{"AccessKeyId":"ASIA2","SecretAccessKey":"s","Token":"t","AccountId":"000000000000","Expiration":"2026-01-02T12:04:05.25Z"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(containerAnswer(tc.creds))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
			// The SDKs read Expiration as an RFC 3339 time.
			var back struct{ Expiration time.Time }
			if err := json.Unmarshal(b, &back); err != nil || !back.Expiration.Equal(tc.creds.Expiration) {
				t.Fatalf("Expiration reads back as %v, %v", back.Expiration, err)
			}
		})
	}
}

func TestValidateHost(t *testing.T) {
	allowed := []string{agentIPv4, agentIPv6}
	tests := []struct {
		host string
		ok   bool
	}{
		{"169.254.170.23", true},
		{"169.254.170.23:80", true},
		{"[fd00:ec2::23]:80", true},
		{"[fd00:ec2::23]", true},
		{"127.0.0.1", false},
		{"localhost:80", false},
		{"169.254.170.2", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run("host "+tc.host, func(t *testing.T) {
			if err := validateHost(tc.host, allowed); (err == nil) != tc.ok {
				t.Fatalf("validateHost = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func jwt(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc([]byte(claims)) + ".c2lnbmF0dXJl"
}

func TestValidateToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name    string
		token   string
		wantErr string
	}{
		{"valid", jwt(`{"aud":["pods.eks.amazonaws.com"],"exp":1800000600,"iat":1799999000,"nbf":1799999000,"sub":"system:serviceaccount:a:b"}`), ""},
		{"no exp or nbf", jwt(`{"sub":"x"}`), ""},
		{"empty", "", "Service account token cannot be empty"},
		{"two segments", "a.b", "cannot be parsed"},
		{"header not JSON", "bm90IGpzb24." + strings.SplitN(jwt(`{}`), ".", 2)[1], "cannot be parsed"},
		{"claims not base64", strings.Split(jwt(`{}`), ".")[0] + ".***.c2ln", "cannot be parsed"},
		{"expired", jwt(`{"exp":1800000000}`), "token is expired"},
		{"not valid yet", jwt(`{"exp":1800000600,"nbf":1800000060}`), "token is not valid yet"},
		{"exp not a number", jwt(`{"exp":"soon"}`), "cannot be parsed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateToken(tc.token, now)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			body, status := errorAnswer(err)
			if status != 400 || !strings.Contains(body, tc.wantErr) {
				t.Fatalf("answer %d %q, want 400 containing %q", status, body, tc.wantErr)
			}
		})
	}
}

// TestParseFlags runs the command lines the real add-on's manifests give
// the agent, and the additional arguments operators pass.
func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(*serverOptions) bool
		wantErr string
	}{
		{"the add-on's", []string{"--port", "80", "--cluster-name", "prod", "--probe-port", "2703"}, func(o *serverOptions) bool {
			return o.port == 80 && o.clusterName == "prod" && o.probePort == 2703 && o.metricsPort == 2705 &&
				o.maxRetention == 3*time.Hour && o.maxCacheSize == 2000 && o.bindHosts.String() == "[169.254.170.23,[fd00:ec2::23]]"
		}, ""},
		{"the chart's with verbosity", []string{"--port", "80", "--cluster-name", "c", "--probe-port", "2703", "--metrics-port", "2705", "-v", "trace"},
			func(o *serverOptions) bool { return o.metricsPort == 2705 }, ""},
		{"short and = forms", []string{"-p=8080", "-c", "dev", "--endpoint=https://e.example"}, func(o *serverOptions) bool {
			return o.port == 8080 && o.clusterName == "dev" && o.endpoint == "https://e.example"
		}, ""},
		{"bind hosts replace the default", []string{"-c", "x", "-b", "169.254.170.23", "--bind-hosts", "127.0.0.1"}, func(o *serverOptions) bool {
			return o.bindHosts.String() == "[169.254.170.23,127.0.0.1]"
		}, ""},
		{"a boolean given a value as the next argument", []string{"-c", "x", "--rotate-credentials", "true", "--max-cache-size", "10"},
			func(o *serverOptions) bool { return o.rotateCredentials && o.maxCacheSize == 10 }, ""},
		{"caching off", []string{"-c", "x", "--max-credential-retention-before-renewal", "0s"},
			func(o *serverOptions) bool { return o.maxRetention == 0 }, ""},
		{"unknown flag", []string{"-c", "x", "--no-such-flag", "1"}, nil, "unknown flag: --no-such-flag"},
		{"missing value", []string{"-c"}, nil, "flag needs an argument"},
		{"port out of range", []string{"-p", "70000"}, nil, "invalid argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, fs := serverFlags(io.Discard)
			v := "info"
			addVerbosity(fs, &v)
			_, err := parseFlags(fs, tc.args, false)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(o) {
				t.Fatalf("options %+v", *o)
			}
		})
	}
}

func TestRun_CommandLines(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"no command", nil, 1, "usage"},
		{"unknown command", []string{"serve"}, 1, `unknown command "serve"`},
		{"server without a cluster name", []string{"server", "--port", "80"}, 1, `required flag(s) "cluster-name" not set`},
		{"global verbosity before the command", []string{"-v", "trace", "version"}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := run(tc.args, &stderr); got != tc.want || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Fatalf("run = %d, stderr %q; want %d with %q", got, stderr.String(), tc.want, tc.wantErr)
			}
		})
	}
}

func TestGoRunner(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    int
		wantOut string
	}{
		{"runs the command", []string{"/bin/sh", "-c", "echo out; echo err >&2"}, 0, "out\nerr\n"},
		{"stderr kept apart", []string{"--redirect-stderr=false", "/bin/sh", "-c", "echo out; echo err >&2"}, 0, "out\n"},
		{"a failing command", []string{"/bin/sh", "-c", "exit 3"}, 1, ""},
		{"nothing to run", nil, 1, ""},
		{"not a program", []string{"/no/such/program"}, 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := goRunner(tc.args, &out, &errOut); got != tc.want || out.String() != tc.wantOut {
				t.Fatalf("goRunner = %d, stdout %q; want %d, %q (stderr %s)", got, out.String(), tc.want, tc.wantOut, errOut.String())
			}
		})
	}
}
