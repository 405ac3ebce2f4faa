// Command podidentityagent is the test node's stand-in for the EKS Pod
// Identity Agent, whose image cannot be built here. It is what the
// catalogue's eks-pod-identity-agent add-on
// (catalog/addons/eks-pod-identity-agent) runs on the real test node
// (tests/nodetest), under the image reference the catalogue renders
// (tests/nodetest/credentials.go), and takes the real agent's command lines:
//
//	/go-runner /eks-pod-identity-agent initialize                (the init container)
//	/go-runner /eks-pod-identity-agent server --port 80 --cluster-name NAME --probe-port 2703
//
// with the real agent's flags (--endpoint, --bind-hosts/-b,
// --max-credential-retention-before-renewal, --max-cache-size,
// --max-service-qps, --metrics-address, --metrics-port,
// --rotate-credentials, -v/--verbosity), so that a manifest written for the
// real agent runs it unchanged. Invoked as go-runner (the image links
// /go-runner to it) it is that program: it runs the command line that
// follows, forwarding signals and exit status, with go-runner's flags
// (--log-file, --also-stdout, --redirect-stderr, ...).
//
// initialize puts 169.254.170.23/32 (and, when the kernel allows it,
// fd00:ec2::23/128) on a link of the host network namespace with a route
// in the main table, as the real agent does: on a dummy link
// pod-id-link0, or on lo where the kernel has no dummy links (a network
// namespace of the test machine may not). server listens there on --port
// and answers GET /v1/credentials: the Authorization header is the pod's
// service account token, exchanged for the pod's credentials with EKS
// Auth's AssumeRoleForPodIdentity (SigV4, signing name eks-auth, with the
// agent's own credentials from the SDK's default chain), cached per token
// (cache.go), answered as the SDKs' container credential providers read
// it. Failures are answered as the real agent answers them (handler.go).
// The probe port (127.0.0.1) serves /healthz and /readyz, which ask every
// credential listener; the metrics port serves /metrics besides.
//
// The EKS Auth endpoint is --endpoint, else AWS_ENDPOINT_URL_EKS_AUTH,
// else AWS_ENDPOINT_URL, else the region's default; the region is
// AWS_REGION (or the SDK's other sources), or --region, which the real
// agent does not have.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// logger writes JSON lines to stderr, as the real agent's logrus does.
var logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: &logLevel}))

var logLevel slog.LevelVar

func main() {
	if filepath.Base(os.Args[0]) == "go-runner" {
		os.Exit(goRunner(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is the agent's command line: an optional -v/--verbosity, then
// initialize, server or version with its flags.
func run(args []string, stderr io.Writer) int {
	verbosity := "info"
	global := flag.NewFlagSet("eks-pod-identity-agent", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.StringVar(&verbosity, "verbosity", verbosity, "Logging verbosity can be one of: panic, error, info, trace")
	global.StringVar(&verbosity, "v", verbosity, "shorthand for --verbosity")
	rest, err := parseFlags(global, args, true)
	if err != nil || len(rest) == 0 {
		_, _ = fmt.Fprintln(stderr, "usage: eks-pod-identity-agent [-v LEVEL] initialize | server --cluster-name NAME [flags] | version")
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "Error:", err)
		}
		return 1
	}
	cmd, cmdArgs := rest[0], rest[1:]
	switch cmd {
	case "initialize":
		fs := flag.NewFlagSet("initialize", flag.ContinueOnError)
		fs.SetOutput(stderr)
		addVerbosity(fs, &verbosity)
		if _, err := parseFlags(fs, cmdArgs, false); err != nil {
			_, _ = fmt.Fprintln(stderr, "Error:", err)
			return 1
		}
		setVerbosity(verbosity)
		if err := initialize(); err != nil {
			logger.Error("Unable to initialize agent", "error", err)
			return 1
		}
		return 0
	case "server":
		opts, fs := serverFlags(stderr)
		addVerbosity(fs, &verbosity)
		if _, err := parseFlags(fs, cmdArgs, false); err != nil {
			_, _ = fmt.Fprintln(stderr, "Error:", err)
			return 1
		}
		if opts.clusterName == "" {
			_, _ = fmt.Fprintln(stderr, `Error: required flag(s) "cluster-name" not set`)
			return 1
		}
		setVerbosity(verbosity)
		if err := serve(opts); err != nil {
			logger.Error("server failed", "error", err)
			return 1
		}
		return 0
	case "version":
		fmt.Println(agentVersion)
		return 0
	default:
		_, _ = fmt.Fprintf(stderr, "Error: unknown command %q for \"eks-pod-identity-agent\"\n", cmd)
		return 1
	}
}

// agentVersion is the stand-in's version string.
const agentVersion = "saltbush-stand-in"

func addVerbosity(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "verbosity", *v, "Logging verbosity can be one of: panic, error, info, trace")
	fs.StringVar(v, "v", *v, "shorthand for --verbosity")
}

// setVerbosity maps logrus's levels onto slog's.
func setVerbosity(v string) {
	switch strings.ToLower(v) {
	case "panic", "fatal", "error":
		logLevel.Set(slog.LevelError)
	case "warn", "warning":
		logLevel.Set(slog.LevelWarn)
	case "debug":
		logLevel.Set(slog.LevelDebug)
	case "trace":
		logLevel.Set(slog.LevelDebug - 4)
	default:
		logLevel.Set(slog.LevelInfo)
	}
	logger.Info("Setting logging verbosity level to: " + v)
}

// parseFlags parses args as the real agent's command-line library does:
// flags and other arguments may be mixed (the others are returned, and
// ignored by the commands, as there), "-x", "--x", "-x=v" and "--x=v" are
// the same, a non-boolean flag takes the next argument as its value, and
// an unknown flag is an error. With stopAtArg, parsing stops at the first
// argument that is not a flag (the command name).
func parseFlags(fs *flag.FlagSet, args []string, stopAtArg bool) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			if stopAtArg {
				return append(rest, args[i:]...), nil
			}
			rest = append(rest, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		f := fs.Lookup(name)
		if f == nil {
			return nil, fmt.Errorf("unknown flag: %s", a)
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag needs an argument: %s", a)
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("invalid argument %q for %q flag: %v", value, a, err)
		}
	}
	return rest, nil
}
