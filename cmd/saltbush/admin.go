package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/gen/saltbush/control/v1"
)

// adminFlags are shared by every admin command.
type adminFlags struct {
	addr    string
	account string
	timeout time.Duration
}

func newAdminCommand() *cobra.Command {
	af := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operate a running saltbush over its gRPC API",
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return bindEnv(cmd)
		},
	}
	cmd.PersistentFlags().StringVar(&af.addr, "grpc-addr", "127.0.0.1:9090", "saltbush gRPC address")
	cmd.PersistentFlags().StringVar(&af.account, "account", "000000000000", "account that owns the cluster")
	cmd.PersistentFlags().DurationVar(&af.timeout, "timeout", 10*time.Second, "request timeout")
	cmd.AddCommand(newAdminClusterCommand(af), newAdminAddonCommand(af))
	return cmd
}

func (af *adminFlags) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(af.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", af.addr, err)
	}
	return conn, nil
}

func printJSON(m proto.Message) error {
	// Zero values are printed too: an operator must see "accepted": false.
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(os.Stdout, string(b))
	return err
}

func newAdminClusterCommand(af *adminFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Cluster membership and lifecycle (the provisioner's API)"}
	var uid string
	cmd.PersistentFlags().StringVar(&uid, "uid", "", "act only on this incarnation of the cluster")

	run := func(call func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			ref := &controlv1.ClusterRef{AccountId: af.account, Name: args[0], Uid: uid}
			resp, err := call(ctx, controlv1.NewClusterControlServiceClient(conn), ref, args[1:])
			if err != nil {
				return err
			}
			return printJSON(resp)
		}
	}

	var endpoint, caFile, platformVersion string
	setStatus := &cobra.Command{
		Use: "set-status CLUSTER ACTIVE|FAILED [REASON]", Short: "Mark a cluster ACTIVE or FAILED", Args: cobra.RangeArgs(2, 3),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			st, ok := controlv1.ClusterStatus_value["CLUSTER_STATUS_"+strings.ToUpper(args[0])]
			if !ok {
				return nil, fmt.Errorf("unknown status %q", args[0])
			}
			req := &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus(st),
				Endpoint: endpoint, PlatformVersion: platformVersion}
			if len(args) > 1 {
				req.Reason = args[1]
			}
			if caFile != "" {
				pemBytes, err := os.ReadFile(caFile)
				if err != nil {
					return nil, err
				}
				req.CertificateAuthorityData = base64.StdEncoding.EncodeToString(pemBytes)
			}
			return c.SetStatus(ctx, req)
		}),
	}
	setStatus.Flags().StringVar(&endpoint, "endpoint", "", "https URL of the cluster's Kubernetes API (for ACTIVE)")
	setStatus.Flags().StringVar(&caFile, "ca-file", "", "PEM file of the cluster's CA (for ACTIVE)")
	setStatus.Flags().StringVar(&platformVersion, "platform-version", "", "platform version to report (for ACTIVE)")

	cmd.AddCommand(&cobra.Command{
		Use: "get CLUSTER", Short: "Show a cluster's uid, status and members", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, _ []string) (proto.Message, error) {
			return c.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
		}),
	}, &cobra.Command{
		Use: "add-member CLUSTER INSTANCE", Short: "Record a control-plane instance", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			return c.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: args[0]})
		}),
	}, &cobra.Command{
		Use: "remove-member CLUSTER INSTANCE", Short: "Forget a control-plane instance", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			return c.RemoveMember(ctx, &controlv1.RemoveMemberRequest{Cluster: ref, InstanceId: args[0]})
		}),
	}, setStatus, &cobra.Command{
		Use: "finalize-deletion CLUSTER", Short: "Purge a DELETING cluster once its VMs are gone", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, _ []string) (proto.Message, error) {
			return c.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: ref})
		}),
	})
	return cmd
}
