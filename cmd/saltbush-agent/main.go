// Command saltbush-agent is the guest agent of a saltbush cluster's
// control-plane VM: `saltbush-agent run` holds the delivery stream and,
// as the cluster's executor, applies its add-ons, and serves the
// apiserver's authentication and authorization webhooks;
// `saltbush-agent webhook-config` writes the webhooks' kubeconfig files
// before the apiserver starts; `saltbush-agent status` shows what a
// running agent is doing. See images/README.md for how a VM
// image runs it and docs/delivery-protocol.md for the protocol.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/saltbush/saltbush/guest/agent"
	"github.com/saltbush/saltbush/guest/config"
	"github.com/saltbush/saltbush/guest/webhook"
	"github.com/saltbush/saltbush/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "saltbush-agent",
		Short:         "saltbush guest agent: delivers a cluster's add-ons, fenced",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newWebhookConfigCommand(), newStatusCommand(), &cobra.Command{
		Use: "version", Short: "Print the agent's release: module version, commit, contract baseline", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), release.Current())
			return err
		},
	})
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "saltbush-agent:", err)
		os.Exit(1)
	}
}

func newRunCommand() *cobra.Command {
	cfg := config.Default()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent (flags, SALTBUSH_AGENT_* variables, or the --config YAML file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.Resolve(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return run(cmd.Context(), cfg)
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}

// newWebhookConfigCommand writes the webhooks' certificates and kubeconfig
// files and exits: K3s runs it before its apiserver starts (the apiserver
// reads the files once, at its start), and `run` then serves with the same
// material.
func newWebhookConfigCommand() *cobra.Command {
	cfg := config.Default()
	cmd := &cobra.Command{
		Use:   "webhook-config",
		Short: "Write the apiserver's webhook kubeconfig files and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.Resolve(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			if cfg.WebhookAddr == "" {
				return fmt.Errorf("webhook-addr is empty: the webhooks are off")
			}
			authn, authz, _, err := writeWebhookConfig(cfg)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s\n", authn, authz)
			return err
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}

// writeWebhookConfig ensures the webhooks' TLS material and writes the two
// kubeconfig files.
func writeWebhookConfig(cfg config.Config) (authn, authz string, p *webhook.PKI, err error) {
	host, _, err := net.SplitHostPort(cfg.WebhookAddr)
	if err != nil {
		return "", "", nil, fmt.Errorf("webhook-addr %q: %w", cfg.WebhookAddr, err)
	}
	dir := cfg.WebhookDirectory()
	p, _, err = webhook.EnsurePKI(dir, host, time.Now())
	if err != nil {
		return "", "", nil, err
	}
	authn, authz, err = p.WriteKubeconfigs(dir, cfg.WebhookAddr)
	return authn, authz, p, err
}

func run(ctx context.Context, cfg config.Config) error {
	log := newLogger(cfg)
	rel := release.Current()
	a, err := agent.New(cfg, log, rel)
	if err != nil {
		return err
	}
	if cfg.WebhookAddr != "" {
		authn, authz, p, err := writeWebhookConfig(cfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.WebhookAddr)
		if err != nil {
			return fmt.Errorf("webhook address: %w", err)
		}
		log.Info("authentication and authorization webhooks", "addr", ln.Addr().String(),
			"authentication_kubeconfig", authn, "authorization_kubeconfig", authz)
		go func() {
			if err := a.ServeWebhooks(ctx, ln, p); err != nil {
				log.Error("webhook server", "err", err)
			}
		}()
	}
	if cfg.PodIdentityWebhookAddr != "" {
		ln, err := net.Listen("tcp", cfg.PodIdentityWebhookAddr)
		if err != nil {
			return fmt.Errorf("pod identity webhook address: %w", err)
		}
		log.Info("pod identity webhook", "addr", ln.Addr().String(), "endpoint", cfg.PodCredentialsEndpoint)
		go func() {
			if err := a.ServePodWebhook(ctx, ln); err != nil {
				log.Error("pod identity webhook server", "err", err)
			}
		}()
	}
	if cfg.StatusAddr != "" {
		ln, err := net.Listen("tcp", cfg.StatusAddr)
		if err != nil {
			return fmt.Errorf("status address: %w", err)
		}
		log.Info("status and metrics", "addr", ln.Addr().String())
		go func() {
			if err := a.ServeStatus(ctx, ln); err != nil {
				log.Error("status server", "err", err)
			}
		}()
	}
	log.Info("saltbush-agent starting", "version", rel.Version, "commit", rel.ShortCommit(), "contract_baseline", rel.ContractBaseline, "cluster", cfg.ClusterName, "cluster_uid", cfg.ClusterUID,
		"instance", cfg.InstanceID, "endpoints", cfg.Endpoints)
	return a.Run(ctx)
}

func newLogger(cfg config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func newStatusCommand() *cobra.Command {
	addr := config.Default().StatusAddr
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running agent's role, epoch, grant and add-ons",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("is the agent running? %w", err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status: %s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
			if asJSON {
				_, err = cmd.OutOrStdout().Write(body)
				return err
			}
			var st agent.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	cmd.Flags().StringVar(&addr, "status-addr", addr, "the agent's status address")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// printStatus writes st for a person; the only error is w's.
func printStatus(w io.Writer, st agent.Status) error {
	var head, rows bytes.Buffer
	fmt.Fprintf(&head, "cluster:   %s (%s)\ninstance:  %s  agent %s (commit %s, contract baseline %d)\n",
		st.ClusterName, st.ClusterUID, st.InstanceID, st.Version, orNone(st.Commit), st.ContractBaseline)
	conn := "disconnected"
	if st.Connected {
		conn = "connected to " + st.Endpoint
	}
	fmt.Fprintf(&head, "stream:    %s\n", conn)
	grant := "no grant (writes nothing)"
	if st.Writable {
		grant = "may write for " + st.GrantLeft + " unless saltbush is heard again"
	}
	fmt.Fprintf(&head, "role:      %s at epoch %d (executor %s); %s\n", st.Role, st.Epoch, orNone(st.Executor), grant)
	fmt.Fprintf(&head, "desired:   version %d digest %s\n", st.DesiredVersion, orNone(st.DesiredDigest))
	if p := st.PodIdentity; p != nil {
		fmt.Fprintf(&head, "pod identity: %d associations, %d recorded on their service accounts", p.Associations, p.Recorded)
		if len(p.Pending) > 0 {
			fmt.Fprintf(&head, ", %d waiting for theirs (%s)", len(p.Pending), strings.Join(p.Pending, ", "))
		}
		head.WriteString("\n")
		for _, i := range p.Issues {
			fmt.Fprintf(&head, "  %s: %s\n", i.Code, i.Message)
		}
	}
	head.WriteString("\n")
	fmt.Fprintln(&rows, "ADDON\tVERSION\tGENERATION\tPHASE\tISSUES")
	for _, a := range st.Addons {
		phase := orNone(a.Phase)
		if a.Deleting {
			phase += " (deleting)"
		}
		var issues []string
		for _, i := range a.Issues {
			issues = append(issues, i.Code+": "+i.Message)
		}
		fmt.Fprintf(&rows, "%s\t%s\t%d\t%s\t%s\n", a.Name, a.Version, a.Generation, phase, strings.Join(issues, "; "))
	}
	if _, err := w.Write(head.Bytes()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if _, err := tw.Write(rows.Bytes()); err != nil {
		return err
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
