package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// identityRun wraps one IdentityControlService call as a command.
func identityRun(af *adminFlags, call func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		conn, err := af.dial()
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
		defer cancel()
		resp, err := call(ctx, controlv1.NewIdentityControlServiceClient(conn), args)
		if err != nil {
			return err
		}
		return af.print(cmd, resp)
	}
}

// readDocument reads a policy document from a file, or stdin for "-".
func readDocument(path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path) //nolint:gosec // G304: the file the operator names on the command line
	}
	if err != nil {
		return "", fmt.Errorf("policy document: %w", err)
	}
	return string(b), nil
}

// newAdminAccountCommand manages accounts, their principals, policies and
// access keys: the identities the façade's SigV4 callers sign as.
func newAdminAccountCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "account", Short: "Accounts, IAM users and roles, policies and access keys"})
	cmd.AddCommand(&cobra.Command{
		Use: "create ACCOUNT_ID [NAME]", Short: "Record a 12-digit account", Args: cobra.RangeArgs(1, 2),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			req := &controlv1.CreateAccountRequest{AccountId: args[0]}
			if len(args) > 1 {
				req.Name = args[1]
			}
			return c.CreateAccount(ctx, req)
		}),
	}, &cobra.Command{
		Use: "create-principal ARN", Short: "Record an IAM user or role (arn:aws:iam::ACCOUNT:user/NAME or role/NAME)", Args: cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.CreatePrincipal(ctx, &controlv1.CreatePrincipalRequest{Arn: args[0]})
		}),
	}, &cobra.Command{
		Use: "put-policy ACCOUNT_ID NAME FILE|-", Short: "Create or replace an IAM-style policy document of an account", Args: cobra.ExactArgs(3),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			doc, err := readDocument(args[2])
			if err != nil {
				return nil, err
			}
			return c.PutPolicy(ctx, &controlv1.PutPolicyRequest{AccountId: args[0], Name: args[1], Document: doc})
		}),
	}, &cobra.Command{
		Use: "attach-policy PRINCIPAL_ARN NAME", Short: "Attach an account's policy to one of its principals", Args: cobra.ExactArgs(2),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.AttachPolicy(ctx, &controlv1.AttachPolicyRequest{PrincipalArn: args[0], PolicyName: args[1]})
		}),
	}, &cobra.Command{
		Use: "create-key PRINCIPAL_ARN", Short: "Make an access key (the secret is shown once)", Args: cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.CreateAccessKey(ctx, &controlv1.CreateAccessKeyRequest{PrincipalArn: args[0]})
		}),
	}, &cobra.Command{
		Use: "set-key-status ACCESS_KEY_ID Active|Inactive", Short: "Activate or deactivate an access key", Args: cobra.ExactArgs(2),
		// The server checks the status (its message is AWS's); the shell
		// offers the two it takes.
		ValidArgsFunction: completeArg(1, "Active", "Inactive"),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.UpdateAccessKey(ctx, &controlv1.UpdateAccessKeyRequest{AccessKeyId: args[0], Status: args[1]})
		}),
	}, newAdminRoleCommand(af))
	return cmd
}

// newAdminRoleCommand manages how a role is assumed: who may assume it (its
// trust policy: sts:AssumeRole, sts:AssumeRoleWithWebIdentity, EKS Pod
// Identity), how long its sessions last, and revoking the sessions issued
// so far.
func newAdminRoleCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "role", Short: "A role's trust policy, maximum session duration and sessions"})
	var trustFile string
	var maxSession time.Duration
	update := &cobra.Command{
		Use:   "update ROLE_ARN [--trust-policy FILE|-] [--max-session-duration 1h..12h]",
		Short: "Set who may assume the role (its trust policy) and how long its sessions may last",
		Args:  cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			req := &controlv1.UpdateRoleRequest{RoleArn: args[0]}
			if trustFile != "" {
				doc, err := readDocument(trustFile)
				if err != nil {
					return nil, err
				}
				req.TrustPolicy = &doc
			}
			if maxSession != 0 {
				if maxSession < 0 || maxSession > 24*time.Hour {
					return nil, fmt.Errorf("--max-session-duration %v: a role's sessions last 1h to 12h", maxSession)
				}
				secs := int32(maxSession / time.Second) //nolint:gosec // G115: at most a day, checked above
				req.MaxSessionDurationSeconds = &secs
			}
			if req.TrustPolicy == nil && req.MaxSessionDurationSeconds == nil {
				return nil, fmt.Errorf("nothing to change: give --trust-policy, --max-session-duration or both")
			}
			return c.UpdateRole(ctx, req)
		}),
	}
	update.Flags().StringVar(&trustFile, "trust-policy", "", "the trust policy document (JSON), a file or - for stdin")
	update.Flags().DurationVar(&maxSession, "max-session-duration", 0, "the longest session AssumeRole issues (1h to 12h)")
	cmd.AddCommand(update, &cobra.Command{
		Use: "get ROLE_ARN", Short: "Show a role's trust policy, maximum session duration and last revocation", Args: cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.GetRole(ctx, &controlv1.GetRoleRequest{RoleArn: args[0]})
		}),
	}, &cobra.Command{
		Use:   "revoke-sessions ROLE_ARN",
		Short: "Refuse every session of the role issued until now (new sessions still work)",
		Args:  cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			return c.RevokeRoleSessions(ctx, &controlv1.RevokeRoleSessionsRequest{RoleArn: args[0]})
		}),
	})
	return cmd
}

// newAdminServiceCommand manages what service identities may do.
func newAdminServiceCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "service", Short: "Service identities (spiffe://saltbush/service/NAME) and their policies"})
	cmd.AddCommand(&cobra.Command{
		Use:   "put-policy NAME FILE|-",
		Short: "Set a service's policy (saltbush:ActForAccount on arn:aws:iam::ACCOUNT:root delegates an account; saltbush:METHOD allows a control RPC)",
		Args:  cobra.ExactArgs(2),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			doc, err := readDocument(args[1])
			if err != nil {
				return nil, err
			}
			return c.PutServicePolicy(ctx, &controlv1.PutServicePolicyRequest{Service: args[0], Document: doc})
		}),
	})
	return cmd
}

// newAdminCertCommand issues and revokes gRPC client certificates and
// rotates the CA.
func newAdminCertCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "cert", Short: "Certificates of the gRPC port: issue, revoke, rotate the CA"})
	var service, agent, outDir string
	var ttl time.Duration
	issue := &cobra.Command{
		Use:   "issue (--service NAME | --agent CLUSTER_UID/INSTANCE) --out-dir DIR",
		Short: "Make a key here, have saltbush's CA sign it, write NAME.key, NAME.crt and ca.crt",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (service == "") == (agent == "") {
				return fmt.Errorf("exactly one of --service and --agent is required")
			}
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return err
			}
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
			if err != nil {
				return err
			}
			req := &controlv1.IssueCertificateRequest{
				CsrPem:     string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
				TtlSeconds: int64(ttl / time.Second),
			}
			name := service
			if service != "" {
				req.Subject = &controlv1.IssueCertificateRequest_Service{Service: service}
			} else {
				uid, instance, ok := strings.Cut(agent, "/")
				if !ok {
					return fmt.Errorf("--agent is CLUSTER_UID/INSTANCE")
				}
				req.Subject = &controlv1.IssueCertificateRequest_Agent{Agent: &controlv1.AgentSubject{ClusterUid: uid, Instance: instance}}
				name = "agent-" + instance
			}
			conn, err := af.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
			defer cancel()
			resp, err := controlv1.NewIdentityControlServiceClient(conn).IssueCertificate(ctx, req)
			if err != nil {
				return err
			}
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(outDir, 0o700); err != nil {
				return err
			}
			out := issuedCertificate{
				Serial:               resp.GetSerial(),
				SpiffeID:             resp.GetSpiffeId(),
				NotAfterEpochSeconds: resp.GetNotAfterEpochSeconds(),
				KeyFile:              filepath.Join(outDir, name+".key"),
				CertificateFile:      filepath.Join(outDir, name+".crt"),
				CABundleFile:         filepath.Join(outDir, "ca.crt"),
			}
			files := map[string][]byte{
				out.KeyFile:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
				out.CertificateFile: []byte(resp.GetCertificatePem()),
				out.CABundleFile:    []byte(resp.GetCaBundlePem()),
			}
			for f, b := range files {
				if err := os.WriteFile(f, b, 0o600); err != nil {
					return err
				}
			}
			return af.printDoc(cmd, out.doc(), out.tables())
		},
	}
	issue.Flags().StringVar(&service, "service", "", "service name")
	issue.Flags().StringVar(&agent, "agent", "", "agent as CLUSTER_UID/INSTANCE")
	issue.Flags().StringVar(&outDir, "out-dir", ".", "where to write the key, certificate and CA bundle")
	issue.Flags().DurationVar(&ttl, "ttl", 0, "validity (the server's default when 0)")

	cmd.AddCommand(issue, &cobra.Command{
		Use: "revoke SERIAL [REASON]", Short: "Refuse a certificate from now on (new connections and every call on existing ones)", Args: cobra.RangeArgs(1, 2),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			req := &controlv1.RevokeCertificateRequest{Serial: args[0]}
			if len(args) > 1 {
				req.Reason = args[1]
			}
			return c.RevokeCertificate(ctx, req)
		}),
	}, &cobra.Command{
		Use:   "rotate-ca",
		Short: "Make a new CA the issuer (the old stays trusted until remove-ca); writes the new bundle to --cacert",
		Args:  cobra.NoArgs,
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, _ []string) (proto.Message, error) {
			resp, err := c.RotateCertificateAuthority(ctx, &controlv1.RotateCertificateAuthorityRequest{})
			if err != nil {
				return nil, err
			}
			// The server now presents a certificate of the new CA: this
			// CLI's next call must trust it.
			return resp, af.saveBundle(resp.GetCaBundlePem())
		}),
	}, &cobra.Command{
		Use: "remove-ca SERIAL", Short: "Stop trusting a CA that no longer issues; writes the new bundle to --cacert", Args: cobra.ExactArgs(1),
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, args []string) (proto.Message, error) {
			resp, err := c.RemoveCertificateAuthority(ctx, &controlv1.RemoveCertificateAuthorityRequest{Serial: args[0]})
			if err != nil {
				return nil, err
			}
			return resp, af.saveBundle(resp.GetCaBundlePem())
		}),
	}, &cobra.Command{
		Use: "ca-bundle", Short: "Print the trusted CA bundle", Args: cobra.NoArgs,
		RunE: identityRun(af, func(ctx context.Context, c controlv1.IdentityControlServiceClient, _ []string) (proto.Message, error) {
			return c.GetCertificateAuthorityBundle(ctx, &controlv1.GetCertificateAuthorityBundleRequest{})
		}),
	})
	return cmd
}

// issuedCertificate is what `cert issue` prints. The PEM goes to the files
// and only their paths are printed: the key must not reach a terminal or a
// log, and the certificate and CA bundle are read from the files by whoever
// uses them. (Printing the RPC answer with its PEM fields blanked showed
// "caBundlePem": "" beside a CA file that was not empty.)
type issuedCertificate struct {
	Serial, SpiffeID                       string
	NotAfterEpochSeconds                   int64
	KeyFile, CertificateFile, CABundleFile string
}

// doc is the JSON and YAML form, named as a response's fields would be.
func (c issuedCertificate) doc() map[string]any {
	return map[string]any{
		"serial": c.Serial, "spiffeId": c.SpiffeID, "notAfterEpochSeconds": c.NotAfterEpochSeconds,
		"keyFile": c.KeyFile, "certificateFile": c.CertificateFile, "caBundleFile": c.CABundleFile,
	}
}

// tables is the table form.
func (c issuedCertificate) tables() []table {
	return []table{record("",
		field{"Serial", c.Serial},
		field{"SPIFFE ID", c.SpiffeID},
		field{"Not after", epochCell(c.NotAfterEpochSeconds)},
		field{"Key file", c.KeyFile},
		field{"Certificate file", c.CertificateFile},
		field{"CA bundle file", c.CABundleFile},
	)}
}

// saveBundle replaces the CA bundle this CLI trusts.
func (af *adminFlags) saveBundle(bundle string) error {
	path := af.cacert
	if path == "" {
		path = filepath.Join(af.tlsDir, "ca.crt")
	}
	if err := os.WriteFile(path, []byte(bundle), 0o644); err != nil { //nolint:gosec // G306: a CA bundle is public; clients of any user read it
		return fmt.Errorf("save the CA bundle to %s: %w", path, err)
	}
	return nil
}
