package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// newAdminAddonCommand is the internal add-on API by hand: what a guest
// agent reports and what a node-group controller ensures. Until the
// delivery path lands it is how an operator (or the README's quickstart)
// settles an add-on.
func newAdminAddonCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "addon", Short: "Add-on internals: get, report (as the guest agent), ensure, release"})

	run := func(call func(ctx context.Context, c controlv1.AddonControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			ref := &controlv1.ClusterRef{AccountId: af.account, Name: args[0]}
			resp, err := call(ctx, controlv1.NewAddonControlServiceClient(conn), ref, args[1:])
			if err != nil {
				return err
			}
			if err := af.print(cmd, resp); err != nil {
				return err
			}
			// A report the server refused (stale generation, ...) is a
			// failure of the command, not a quiet success.
			if r, ok := resp.(*controlv1.ApplyAddonReportResponse); ok && !r.GetAccepted() {
				return fmt.Errorf("report not accepted: %s", r.GetReason())
			}
			return nil
		}
	}

	cmd.AddCommand(&cobra.Command{
		Use:   "get CLUSTER ADDON",
		Short: "Show an add-on's incarnation, generation, status and observed state",
		Args:  cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c controlv1.AddonControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			return c.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: ref, AddonName: args[0]})
		}),
	})

	var generation int64
	var issueCode, issueMessage string
	phases := addonPhases()
	report := &cobra.Command{
		Use:               "report CLUSTER ADDON " + strings.Join(phases, "|"),
		Short:             "Apply a guest report for the add-on's current generation (or --generation)",
		Args:              cobra.MatchAll(cobra.ExactArgs(3), argIn(2, "phase", phases...)),
		ValidArgsFunction: completeArg(2, phases...),
		RunE: run(func(ctx context.Context, c controlv1.AddonControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			phase, ok := controlv1.AddonPhase_value["ADDON_PHASE_"+strings.ToUpper(args[1])]
			if !ok || phase == 0 {
				return nil, fmt.Errorf("phase %q: want one of %s", args[1], strings.Join(phases, ", "))
			}
			got, err := c.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: ref, AddonName: args[0]})
			if err != nil {
				return nil, err
			}
			a := got.GetAddon()
			gen := generation
			if gen == 0 {
				gen = a.GetGeneration()
			}
			req := &controlv1.ApplyAddonReportRequest{
				ClusterUid: a.GetClusterUid(), AddonName: a.GetName(), AddonUid: a.GetUid(),
				Generation: gen, Phase: controlv1.AddonPhase(phase), InstanceId: "admin",
			}
			switch {
			case issueCode != "":
				req.Issues = []*controlv1.AddonIssue{{Code: issueCode, Message: issueMessage}}
			case issueMessage != "":
				return nil, fmt.Errorf("--issue-message needs --issue-code")
			}
			return c.ApplyAddonReport(ctx, req)
		}),
	}
	report.Flags().Int64Var(&generation, "generation", 0, "generation reported (default: the current one)")
	report.Flags().StringVar(&issueCode, "issue-code", "", "health issue code to report (e.g. InsufficientNumberOfReplicas)")
	report.Flags().StringVar(&issueMessage, "issue-message", "", "health issue message")
	cmd.AddCommand(report)

	var version, config string
	ensure := &cobra.Command{
		Use:   "ensure CLUSTER ADDON REFERENCE",
		Short: "Hold an add-on by reference (created if absent, re-driven if CREATE_FAILED or DELETE_FAILED)",
		Args:  cobra.ExactArgs(3),
		RunE: run(func(ctx context.Context, c controlv1.AddonControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			return c.EnsureAddon(ctx, &controlv1.EnsureAddonRequest{
				Cluster: ref, AddonName: args[0], Reference: args[1], AddonVersion: version, ConfigurationValues: config,
			})
		}),
	}
	ensure.Flags().StringVar(&version, "addon-version", "", "version (default: the catalogue default for the cluster)")
	ensure.Flags().StringVar(&config, "configuration-values", "", "configuration values (JSON or YAML)")
	cmd.AddCommand(ensure)

	cmd.AddCommand(&cobra.Command{
		Use:   "release CLUSTER ADDON REFERENCE",
		Short: "Drop a reference; the last one deletes an add-on created for references",
		Args:  cobra.ExactArgs(3),
		RunE: run(func(ctx context.Context, c controlv1.AddonControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			return c.ReleaseAddon(ctx, &controlv1.ReleaseAddonRequest{Cluster: ref, AddonName: args[0], Reference: args[1]})
		}),
	})
	cmd.AddCommand(newAdminPublishCommands(af)...)
	return cmd
}

// addonPhases are the phases a report may name: AddonPhase's values but
// UNSPECIFIED, as the output prints them (APPLIED, READY, ...), read from
// the enum so that a new phase is offered without a change here.
func addonPhases() []string {
	values := controlv1.AddonPhase(0).Descriptor().Values()
	var phases []string
	for i := range values.Len() {
		if v := values.Get(i); v.Number() != 0 {
			phases = append(phases, enumValueName(v))
		}
	}
	return phases
}
