package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// newAdminCompleteUpdateCommand is `saltbush admin cluster complete-update`:
// the provisioner's report of how a cluster update it carried out (an
// UpdateClusterVersion) ended (docs/operations.md, "Kubernetes versions and
// upgrades"). uid is the cluster command's --uid.
func newAdminCompleteUpdateCommand(af *adminFlags, uid *string) *cobra.Command {
	var platformVersion string
	var errs []string
	cmd := &cobra.Command{
		Use:   "complete-update CLUSTER UPDATE_ID Successful|Failed|Cancelled",
		Short: "Report how a cluster update (a Kubernetes version upgrade or rollback) ended",
		Long: "Ends an InProgress cluster update: Successful moves the cluster to the update's Kubernetes version, " +
			"Failed keeps it, Cancelled (a rollback whose cancellation CancelUpdate asked for) keeps it and cancels " +
			"the update; either way the cluster is ACTIVE again.",
		Args:              cobra.MatchAll(cobra.ExactArgs(3), argIn(2, "outcome", updateOutcomes()...)),
		ValidArgsFunction: completeArg(2, updateOutcomes()...),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &controlv1.CompleteUpdateRequest{
				Cluster:         &controlv1.ClusterRef{AccountId: af.account, Name: args[0], Uid: *uid},
				UpdateId:        args[1],
				PlatformVersion: platformVersion,
			}
			switch strings.ToLower(args[2]) {
			case "successful":
				req.Outcome = controlv1.UpdateOutcome_UPDATE_OUTCOME_SUCCESSFUL
			case "failed":
				req.Outcome = controlv1.UpdateOutcome_UPDATE_OUTCOME_FAILED
			case "cancelled":
				req.Outcome = controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED
			default:
				return fmt.Errorf("outcome %q: want Successful, Failed or Cancelled", args[2])
			}
			for _, e := range errs {
				parts := strings.SplitN(e, ":", 3)
				if len(parts) < 2 {
					return fmt.Errorf("--error %q: want CODE:MESSAGE[:RESOURCE,...]", e)
				}
				d := &controlv1.UpdateErrorDetail{ErrorCode: parts[0], ErrorMessage: parts[1]}
				if len(parts) == 3 && parts[2] != "" {
					d.ResourceIds = strings.Split(parts[2], ",")
				}
				req.Errors = append(req.Errors, d)
			}
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			resp, err := controlv1.NewClusterUpdateControlServiceClient(conn).CompleteUpdate(ctx, req)
			if err != nil {
				return err
			}
			return af.print(cmd, resp)
		},
	}
	cmd.Flags().StringVar(&platformVersion, "platform-version", "", "platform version after a successful update (eks.N; default the update's)")
	cmd.Flags().StringArrayVar(&errs, "error", nil, "why it failed, CODE:MESSAGE[:RESOURCE,...] with an AWS ErrorCode (repeatable; Failed only)")
	return cmd
}

// updateOutcomes are complete-update's outcomes, spelled as AWS spells an
// update's status (DescribeUpdate).
func updateOutcomes() []string { return []string{"Successful", "Failed", "Cancelled"} }
