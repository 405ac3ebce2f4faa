package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/tlsclient"
)

// adminFlags are shared by every admin command.
type adminFlags struct {
	addr    string
	account string
	timeout time.Duration
	// tlsDir holds ca.crt, admin.crt and admin.key (saltbush serve writes
	// them to DATA_DIR/pki); cacert, cert and key override single files.
	tlsDir, cacert, cert, key, serverName string
	// output is -o: table, json, yaml, or "" to choose by the terminal
	// (outputFormat).
	output string
}

func newAdminCommand() *cobra.Command {
	af := &adminFlags{}
	cmd := group(&cobra.Command{
		Use:   "admin",
		Short: "Operate a running saltbush over its gRPC API",
		Long: "Operate a running saltbush over its gRPC API. Answers are printed as a table on a terminal and as " +
			"JSON otherwise; -o table|json|yaml chooses. A server error is one line naming the AWS exception " +
			"(docs/operators.md, \"The admin CLI\").",
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if af.output != "" && !slices.Contains(outputForms(), af.output) {
				return fmt.Errorf("--output %q: want one of %s", af.output, strings.Join(outputForms(), ", "))
			}
			argsChecked(cmd)
			return nil
		},
	})
	cmd.PersistentFlags().StringVarP(&af.output, "output", "o", "", "output form: table, json or yaml (default: table on a terminal, json otherwise)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputForms(), cobra.ShellCompDirectiveNoFileComp))
	cmd.PersistentFlags().StringVar(&af.addr, "grpc-addr", "127.0.0.1:9090", "saltbush gRPC address")
	cmd.PersistentFlags().StringVar(&af.account, "account", "000000000000", "account that owns the cluster")
	cmd.PersistentFlags().DurationVar(&af.timeout, "timeout", 10*time.Second, "request timeout")
	cmd.PersistentFlags().StringVar(&af.tlsDir, "tls-dir", "./data/pki", "directory with ca.crt, admin.crt and admin.key (written by saltbush serve)")
	cmd.PersistentFlags().StringVar(&af.cacert, "cacert", "", "CA bundle of the gRPC port (default TLS_DIR/ca.crt)")
	cmd.PersistentFlags().StringVar(&af.cert, "cert", "", "client certificate (default TLS_DIR/admin.crt)")
	cmd.PersistentFlags().StringVar(&af.key, "key", "", "client key (default TLS_DIR/admin.key)")
	cmd.PersistentFlags().StringVar(&af.serverName, "server-name", "", "name to verify the server certificate against (default: the host of --grpc-addr)")
	cmd.AddCommand(newAdminClusterCommand(af), newAdminAddonCommand(af),
		newAdminAccountCommand(af), newAdminServiceCommand(af), newAdminCertCommand(af), newAdminDeliveryCommand(af),
		newAdminEtcdCommand(af))
	return cmd
}

// argIn checks that positional argument i, when given, is one of values
// (in any case), so that a value outside them is a usage error found
// before anything is dialled. name names the argument in the error.
func argIn(i int, name string, values ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if i >= len(args) {
			return nil
		}
		for _, v := range values {
			if strings.EqualFold(args[i], v) {
				return nil
			}
		}
		return fmt.Errorf("%s %q: want one of %s", name, args[i], strings.Join(values, ", "))
	}
}

// completeArg completes positional argument i with values, and nothing
// else: the other arguments name clusters, add-ons and ARNs, never files.
// (cobra's ValidArgs completes only the first argument; the fixed values
// of these commands come later.)
func completeArg(i int, values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == i {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

func (af *adminFlags) dial() (*grpc.ClientConn, error) {
	pick := func(v, name string) string {
		if v != "" {
			return v
		}
		return filepath.Join(af.tlsDir, name)
	}
	serverName := af.serverName
	if serverName == "" {
		host, _, err := net.SplitHostPort(af.addr)
		if err != nil {
			return nil, fmt.Errorf("--grpc-addr %q: %w", af.addr, err)
		}
		serverName = host
	}
	tlsCfg, err := tlsclient.Load(pick(af.cacert, "ca.crt"), pick(af.cert, "admin.crt"), pick(af.key, "admin.key"), serverName)
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}
	// The EKS services need the account the admin acts for; the server
	// honours it only because the admin service's policy delegates every
	// account to it.
	conn, err := grpc.NewClient(af.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithUnaryInterceptor(server.ActForAccount(af.account)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", af.addr, err)
	}
	return conn, nil
}

func newAdminClusterCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "cluster", Short: "Cluster membership and lifecycle (the provisioner's API)"})
	var uid string
	cmd.PersistentFlags().StringVar(&uid, "uid", "", "act only on this incarnation of the cluster")

	run := func(call func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			ref := &controlv1.ClusterRef{AccountId: af.account, Name: args[0], Uid: uid}
			resp, err := call(ctx, controlv1.NewClusterControlServiceClient(conn), ref, args[1:])
			if err != nil {
				return err
			}
			return af.print(cmd, resp)
		}
	}

	var endpoint, caFile, platformVersion, oidcIssuer, vpcID, clusterSG string
	var subnetIDs, securityGroupIDs, healthIssues []string
	var clearHealthIssues bool
	setStatus := &cobra.Command{
		Use: "set-status CLUSTER ACTIVE|FAILED [REASON]", Short: "Mark a cluster ACTIVE or FAILED",
		Args:              cobra.MatchAll(cobra.RangeArgs(2, 3), argIn(1, "status", "ACTIVE", "FAILED")),
		ValidArgsFunction: completeArg(1, "ACTIVE", "FAILED"),
		RunE: run(func(ctx context.Context, c controlv1.ClusterControlServiceClient, ref *controlv1.ClusterRef, args []string) (proto.Message, error) {
			st, ok := controlv1.ClusterStatus_value["CLUSTER_STATUS_"+strings.ToUpper(args[0])]
			if !ok {
				return nil, fmt.Errorf("unknown status %q", args[0])
			}
			req := &controlv1.SetStatusRequest{Cluster: ref, Status: controlv1.ClusterStatus(st),
				Endpoint: endpoint, PlatformVersion: platformVersion, OidcIssuer: oidcIssuer,
				VpcId: vpcID, ClusterSecurityGroupId: clusterSG, SubnetIds: subnetIDs, SecurityGroupIds: securityGroupIDs,
				ClearHealthIssues: clearHealthIssues}
			for _, hi := range healthIssues {
				code, msg, ok := strings.Cut(hi, ":")
				if !ok {
					return nil, fmt.Errorf("--health-issue %q: want CODE:MESSAGE", hi)
				}
				req.HealthIssues = append(req.HealthIssues, &controlv1.ClusterIssue{Code: code, Message: msg})
			}
			if len(args) > 1 {
				req.Reason = args[1]
			}
			if caFile != "" {
				pemBytes, err := os.ReadFile(caFile) //nolint:gosec // G304: the CA file the operator names on the command line
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
	setStatus.Flags().StringVar(&oidcIssuer, "oidc-issuer", "", "https URL of the cluster's service-account token issuer")
	setStatus.Flags().StringVar(&vpcID, "vpc-id", "", "the control plane's VPC (vpc-…)")
	setStatus.Flags().StringVar(&clusterSG, "cluster-security-group-id", "", "the cluster security group (sg-…)")
	setStatus.Flags().StringSliceVar(&subnetIDs, "subnet-ids", nil, "the control plane's subnets (subnet-…), replacing the recorded ones")
	setStatus.Flags().StringSliceVar(&securityGroupIDs, "security-group-ids", nil, "the control plane's security groups (sg-…), replacing the recorded ones")
	setStatus.Flags().StringArrayVar(&healthIssues, "health-issue", nil, "a health issue CODE:MESSAGE (repeatable; replaces the recorded issues)")
	setStatus.Flags().BoolVar(&clearHealthIssues, "clear-health-issues", false, "record no health issues")

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
	}, newAdminCompleteUpdateCommand(af, &uid))
	return cmd
}
