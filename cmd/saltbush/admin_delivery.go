package main

import (
	"context"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// newAdminDeliveryCommand shows and steers a cluster's add-on delivery
// (docs/delivery-protocol.md).
func newAdminDeliveryCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "delivery", Short: "Add-on delivery: status, drain-executor"})
	run := func(call func(ctx context.Context, c controlv1.DeliveryControlServiceClient, ref *controlv1.ClusterRef) (proto.Message, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			resp, err := call(ctx, controlv1.NewDeliveryControlServiceClient(conn), &controlv1.ClusterRef{AccountId: af.account, Name: args[0]})
			if err != nil {
				return err
			}
			return af.print(cmd, resp)
		}
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show the executor and epoch, the connected agents and what they applied, and each add-on's desired against reported generation",
		Args:  cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c controlv1.DeliveryControlServiceClient, ref *controlv1.ClusterRef) (proto.Message, error) {
			return c.GetDeliveryStatus(ctx, &controlv1.GetDeliveryStatusRequest{Cluster: ref})
		}),
	}, &cobra.Command{
		Use:   "drain-executor CLUSTER",
		Short: "Fence the executor; a successor is assigned once it acknowledges (or its session expires)",
		Args:  cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c controlv1.DeliveryControlServiceClient, ref *controlv1.ClusterRef) (proto.Message, error) {
			return c.DrainExecutor(ctx, &controlv1.DrainExecutorRequest{Cluster: ref})
		}),
	})
	return cmd
}
