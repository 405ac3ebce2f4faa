package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/saltbush/saltbush/profiling"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/iam"
)

func newServeCommand() *cobra.Command {
	cfg := server.DefaultConfig()
	var logLevel, profilingAddr string
	var logJSON bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run saltbush (embedded etcd in ./data unless --etcd-endpoints is given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			// The master key may come from the environment, never from a
			// flag (flags show up in process listings).
			if v, ok := os.LookupEnv("SALTBUSH_MASTER_KEY"); ok && cfg.MasterKeyFile == "" {
				key, err := iam.ParseMasterKey(strings.TrimSpace(v))
				if err != nil {
					return fmt.Errorf("SALTBUSH_MASTER_KEY: %w", err)
				}
				cfg.MasterKey = key
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			opts := &slog.HandlerOptions{Level: level}
			if logJSON {
				cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, opts))
			} else {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, opts))
			}
			// One --region and one --idempotency-ttl for every service.
			cfg.Addon.Region = cfg.Cluster.Region
			cfg.Addon.IdempotencyTTL = cfg.Cluster.IdempotencyTTL
			cfg.Banner = os.Stderr
			// As etcd's --enable-pprof and kube-apiserver's --profiling.
			if profilingAddr != "" {
				if err := profiling.Serve(cmd.Context(), profilingAddr); err != nil {
					return fmt.Errorf("--profiling-addr: %w", err)
				}
			}
			srv, err := server.New(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return srv.Serve(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "EKS REST-JSON façade listen address")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "data directory of the embedded etcd")
	// Hidden: for benchmarks and tests that run serve as a child process
	// (tests/bench/process_test.go), as servertest runs it in-process. A
	// crash can lose or corrupt acknowledged writes, so never for real data.
	f.BoolVar(&cfg.EtcdUnsafeNoFsync, "etcd-unsafe-no-fsync", false, "tests and benchmarks only: the embedded etcd skips fsync (a crash can lose or corrupt acknowledged writes)")
	_ = f.MarkHidden("etcd-unsafe-no-fsync")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", nil, "external etcd endpoints (no embedded etcd when set)")
	f.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "root of saltbush's etcd keyspace")
	f.StringVar(&cfg.EtcdCAFile, "etcd-cacert", "", "CA bundle that signed the external etcd's server certificate")
	f.StringVar(&cfg.EtcdCertFile, "etcd-cert", "", "client certificate presented to the external etcd")
	f.StringVar(&cfg.EtcdKeyFile, "etcd-key", "", "key of --etcd-cert")
	f.StringVar(&cfg.EtcdUsername, "etcd-username", "", "user for an external etcd with auth enabled")
	f.StringVar(&cfg.EtcdPassword, "etcd-password", "", "password of --etcd-username (prefer SALTBUSH_ETCD_PASSWORD)")
	f.StringVar(&cfg.DevAccount, "dev-account", cfg.DevAccount, "12-digit development account the first start on an empty store creates (with an administrator access key)")
	f.StringVar(&cfg.MasterKeyFile, "master-key-file", "", "file holding the base64 32-byte key that seals secrets (default: DATA_DIR/master.key, generated; required with --etcd-endpoints unless SALTBUSH_MASTER_KEY is set)")
	f.Float64Var(&cfg.ThrottleRate, "throttle-rate", cfg.ThrottleRate, "requests per second each account may make (0 disables throttling)")
	f.IntVar(&cfg.ThrottleBurst, "throttle-burst", cfg.ThrottleBurst, "burst each account may make above --throttle-rate")
	f.StringVar(&cfg.AuditLog, "audit-log", "", "file that receives audit records as JSON lines (default: the log)")
	f.StringSliceVar(&cfg.GRPCServerNames, "grpc-server-names", nil, "extra DNS names or IPs in the gRPC port's certificate")
	f.StringSliceVar(&cfg.STSHosts, "sts-host", nil, "extra STS host names accepted in get-token bearer tokens (besides AWS's sts.{region}.amazonaws.com)")
	f.DurationVar(&cfg.CertTTL, "cert-ttl", cfg.CertTTL, "default validity of issued client certificates")
	f.StringVar(&cfg.Cluster.Region, "region", cfg.Cluster.Region, "region named in ARNs")
	f.StringSliceVar(&cfg.Cluster.KubernetesVersions, "kubernetes-versions", cfg.Cluster.KubernetesVersions, "Kubernetes minors clusters may run")
	f.StringVar(&cfg.Cluster.DefaultKubernetesVersion, "default-kubernetes-version", cfg.Cluster.DefaultKubernetesVersion, "Kubernetes minor used when CreateCluster names none")
	f.DurationVar(&cfg.Cluster.IdempotencyTTL, "idempotency-ttl", cfg.Cluster.IdempotencyTTL, "how long a clientRequestToken is remembered")
	f.DurationVar(&cfg.Addon.CreateTimeout, "addon-create-timeout", cfg.Addon.CreateTimeout, "how long an add-on may stay CREATING before it is CREATE_FAILED (ClusterUnreachable)")
	f.DurationVar(&cfg.Addon.UpdateTimeout, "addon-update-timeout", cfg.Addon.UpdateTimeout, "how long an add-on may stay UPDATING before it is UPDATE_FAILED (ClusterUnreachable)")
	f.DurationVar(&cfg.Addon.DeleteTimeout, "addon-delete-timeout", cfg.Addon.DeleteTimeout, "how long an add-on may stay DELETING before it is DELETE_FAILED (ClusterUnreachable)")
	f.DurationVar(&cfg.Addon.SweepInterval, "addon-sweep-interval", cfg.Addon.SweepInterval, "how often the elected replica looks for passed add-on deadlines")
	f.DurationVar(&cfg.Delivery.SessionTTL, "delivery-session-ttl", cfg.Delivery.SessionTTL, "etcd lease of a guest agent's session: a successor executor may be assigned this long after the old one's last keepalive")
	f.DurationVar(&cfg.Delivery.HeartbeatInterval, "delivery-heartbeat-interval", cfg.Delivery.HeartbeatInterval, "how often each side of an agent stream sends a heartbeat when idle")
	f.DurationVar(&cfg.Delivery.FenceAfter, "delivery-fence-after", cfg.Delivery.FenceAfter, "how long an agent applies without hearing from saltbush before it stops (sent to agents)")
	f.DurationVar(&cfg.Delivery.SafetyMargin, "delivery-safety-margin", cfg.Delivery.SafetyMargin, "fence-after plus this margin plus the heartbeat interval must be below the session TTL")
	f.StringVar(&cfg.ReplicaName, "replica-name", "", "this replica's name in elections (default host/pid)")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest accepted request body")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long graceful shutdown waits for in-flight requests")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&logJSON, "log-json", false, "log JSON lines instead of text")
	f.StringVar(&profilingAddr, "profiling-addr", "", "serve Go's runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off when empty (they take no credentials: bind loopback)")
	return cmd
}
