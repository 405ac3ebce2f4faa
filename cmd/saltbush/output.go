package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// The output forms of `saltbush admin -o` (docs/operators.md, "The admin
// CLI").
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputForms are -o's values, for its check and its completion.
func outputForms() []string { return []string{formatTable, formatJSON, formatYAML} }

// outputFormat is the form to print in on w: -o when given; otherwise a
// table for a person at a terminal and JSON for a pipe, a file or a test's
// buffer, so a script never parses a table by accident.
func (af *adminFlags) outputFormat(w io.Writer) string {
	if af.output != "" {
		return af.output
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) { //nolint:gosec // G115: a file descriptor fits an int
		return formatTable
	}
	return formatJSON
}

// print writes a response to the command's standard output in the form -o
// chooses. Every admin command that answers with a response ends with it:
// `return af.print(cmd, resp)`.
func (af *adminFlags) print(cmd *cobra.Command, m proto.Message) error {
	w := cmd.OutOrStdout()
	if format := af.outputFormat(w); format != formatTable {
		return writeDoc(w, format, messageDoc(m.ProtoReflect()))
	}
	return writeTables(w, messageTables(m))
}

// printDoc is print for what is not a response (the files `cert issue`
// wrote, a snapshot's status): doc for JSON and YAML, tables for a table.
func (af *adminFlags) printDoc(cmd *cobra.Command, doc map[string]any, tables []table) error {
	w := cmd.OutOrStdout()
	if format := af.outputFormat(w); format != formatTable {
		return writeDoc(w, format, doc)
	}
	return writeTables(w, tables)
}

// renderer makes the table form of one kind of response.
type renderer func(proto.Message) []table

// messageTables is m's table form: its renderer's, or the generic record
// of its fields for a kind without one.
func messageTables(m proto.Message) []table {
	if r, ok := tableRenderers()[m.ProtoReflect().Descriptor().FullName()]; ok {
		return r(m)
	}
	return genericTables(m.ProtoReflect())
}

// nameOf is the full name of message type M, the key of its renderer.
func nameOf[M proto.Message]() protoreflect.FullName {
	var m M
	return m.ProtoReflect().Descriptor().FullName()
}

// typed adapts a renderer of one message type to the map's signature. The
// map's key is made from the same type (nameOf), so an entry cannot pair a
// renderer with the wrong message.
func typed[M proto.Message](f func(M) []table) renderer {
	return func(m proto.Message) []table { return f(m.(M)) }
}

// tableRenderers maps each response kind to its table form. A response
// without an entry prints the generic record of its fields; a new command
// gets a table of its own by adding an entry here.
func tableRenderers() map[protoreflect.FullName]renderer {
	return map[protoreflect.FullName]renderer{
		// cluster
		nameOf[*controlv1.GetClusterResponse](): typed(func(r *controlv1.GetClusterResponse) []table {
			return clusterTables(r.GetCluster())
		}),
		nameOf[*controlv1.AddMemberResponse](): typed(func(r *controlv1.AddMemberResponse) []table {
			return clusterTables(r.GetCluster())
		}),
		nameOf[*controlv1.RemoveMemberResponse](): typed(func(r *controlv1.RemoveMemberResponse) []table {
			return clusterTables(r.GetCluster())
		}),
		nameOf[*controlv1.SetStatusResponse](): typed(func(r *controlv1.SetStatusResponse) []table {
			return clusterTables(r.GetCluster())
		}),
		nameOf[*controlv1.FinalizeDeletionResponse](): typed(func(r *controlv1.FinalizeDeletionResponse) []table {
			return []table{record("", field{"Deleted keys", strconv.FormatInt(r.GetDeletedKeys(), 10)})}
		}),
		nameOf[*controlv1.CompleteUpdateResponse](): typed(func(r *controlv1.CompleteUpdateResponse) []table {
			return append([]table{record("",
				field{"Update status", r.GetUpdateStatus()},
				field{"Kubernetes version", r.GetKubernetesVersion()},
			)}, clusterTables(r.GetCluster())...)
		}),

		// addon
		nameOf[*controlv1.GetAddonResponse](): typed(func(r *controlv1.GetAddonResponse) []table {
			return addonTables(r.GetAddon())
		}),
		nameOf[*controlv1.ApplyAddonReportResponse](): typed(func(r *controlv1.ApplyAddonReportResponse) []table {
			return append([]table{record("",
				field{"Report accepted", yesNo(r.GetAccepted())},
				field{"Reason", r.GetReason()},
			)}, addonTables(r.GetAddon())...)
		}),
		nameOf[*controlv1.EnsureAddonResponse](): typed(func(r *controlv1.EnsureAddonResponse) []table {
			return append([]table{record("", field{"Created", yesNo(r.GetCreated())})}, addonTables(r.GetAddon())...)
		}),
		nameOf[*controlv1.ReleaseAddonResponse](): typed(func(r *controlv1.ReleaseAddonResponse) []table {
			return append([]table{record("", field{"Deleting", yesNo(r.GetDeleting())})}, addonTables(r.GetAddon())...)
		}),

		// addon publish, retire, unretire, list-published (admin_catalog.go)
		nameOf[*controlv1.ListPublishedAddonVersionsResponse](): typed(publishedTables),

		// delivery
		nameOf[*controlv1.GetDeliveryStatusResponse](): typed(deliveryTables),
		nameOf[*controlv1.DrainExecutorResponse](): typed(func(r *controlv1.DrainExecutorResponse) []table {
			return []table{executorRecord(r.GetExecutor())}
		}),

		// account
		nameOf[*controlv1.CreateAccountResponse](): typed(func(r *controlv1.CreateAccountResponse) []table {
			return []table{record("", field{"Account ID", r.GetAccountId()}, field{"Name", r.GetName()})}
		}),
		nameOf[*controlv1.CreatePrincipalResponse](): typed(func(r *controlv1.CreatePrincipalResponse) []table {
			return []table{record("", field{"ARN", r.GetArn()})}
		}),
		nameOf[*controlv1.CreateAccessKeyResponse](): typed(func(r *controlv1.CreateAccessKeyResponse) []table {
			return []table{record("",
				field{"Access key ID", r.GetAccessKeyId()},
				field{"Secret access key", r.GetSecretAccessKey()},
				field{"Account ID", r.GetAccountId()},
				field{"Principal ARN", r.GetPrincipalArn()},
			), {empty: "The secret access key is shown this once: keep it now."}}
		}),
		nameOf[*controlv1.UpdateRoleResponse](): typed(func(r *controlv1.UpdateRoleResponse) []table {
			return []table{record("",
				field{"Role ARN", r.GetRoleArn()},
				field{"Max session duration", durationCell(time.Duration(r.GetMaxSessionDurationSeconds()) * time.Second)},
				field{"Trust policy", policyCell(r.GetTrustPolicy())},
			)}
		}),
		nameOf[*controlv1.GetRoleResponse](): typed(func(r *controlv1.GetRoleResponse) []table {
			return []table{record("",
				field{"Role ARN", r.GetRoleArn()},
				field{"Max session duration", durationCell(time.Duration(r.GetMaxSessionDurationSeconds()) * time.Second)},
				field{"Sessions revoked before", epochCell(r.GetSessionsRevokedBeforeEpochSeconds())},
				field{"Trust policy", policyCell(r.GetTrustPolicy())},
			)}
		}),
		nameOf[*controlv1.RevokeRoleSessionsResponse](): typed(func(r *controlv1.RevokeRoleSessionsResponse) []table {
			return []table{record("", field{"Sessions revoked before", epochCell(r.GetSessionsRevokedBeforeEpochSeconds())})}
		}),

		// cert
		nameOf[*controlv1.IssueCertificateResponse](): typed(func(r *controlv1.IssueCertificateResponse) []table {
			return []table{record("",
				field{"Serial", r.GetSerial()},
				field{"SPIFFE ID", r.GetSpiffeId()},
				field{"Not after", epochCell(r.GetNotAfterEpochSeconds())},
			)}
		}),
		nameOf[*controlv1.RotateCertificateAuthorityResponse](): typed(func(r *controlv1.RotateCertificateAuthorityResponse) []table {
			return []table{
				record("", field{"Issuing serial", r.GetIssuingSerial()}),
				bundleTable(r.GetCaBundlePem(), r.GetIssuingSerial()),
			}
		}),
		nameOf[*controlv1.RemoveCertificateAuthorityResponse](): typed(func(r *controlv1.RemoveCertificateAuthorityResponse) []table {
			return []table{bundleTable(r.GetCaBundlePem(), "")}
		}),
		nameOf[*controlv1.GetCertificateAuthorityBundleResponse](): typed(func(r *controlv1.GetCertificateAuthorityBundleResponse) []table {
			return []table{
				record("", field{"Issuing serial", r.GetIssuingSerial()}),
				bundleTable(r.GetCaBundlePem(), r.GetIssuingSerial()),
			}
		}),
	}
}

// clusterTables shows a cluster as the provisioner's API holds it, its
// health issues as a list.
func clusterTables(c *controlv1.ClusterInfo) []table {
	issues := table{title: "Health issues:", header: []string{"CODE", "MESSAGE", "RESOURCES"}}
	for _, hi := range c.GetHealthIssues() {
		issues.rows = append(issues.rows, []string{hi.GetCode(), hi.GetMessage(), joined(hi.GetResourceIds())})
	}
	return []table{record("",
		field{"Name", c.GetName()},
		field{"Account ID", c.GetAccountId()},
		field{"UID", c.GetUid()},
		field{"ARN", c.GetArn()},
		field{"Status", enumCell(c.GetStatus())},
		field{"Status reason", c.GetStatusReason()},
		field{"Kubernetes version", c.GetKubernetesVersion()},
		field{"Platform version", c.GetPlatformVersion()},
		field{"Endpoint", c.GetEndpoint()},
		field{"Certificate authority", yesNo(c.GetHasCertificateAuthority())},
		field{"OIDC issuer", c.GetOidcIssuer()},
		field{"VPC ID", c.GetVpcId()},
		field{"Cluster security group", c.GetClusterSecurityGroupId()},
		field{"Members", joined(c.GetMembers())},
	), issues}
}

// addonTables shows an add-on's incarnation, its desired generation and
// what was last reported of it.
func addonTables(a *controlv1.AddonInfo) []table {
	return []table{record("",
		field{"Add-on", a.GetName()},
		field{"Cluster UID", a.GetClusterUid()},
		field{"UID", a.GetUid()},
		field{"Version", a.GetVersion()},
		field{"Status", a.GetStatus()},
		field{"Generation", strconv.FormatInt(a.GetGeneration(), 10)},
		field{"Observed generation", generationCell(a.GetObservedGeneration())},
		field{"Observed phase", enumCell(a.GetObservedPhase())},
		field{"References", joined(a.GetReferences())},
		field{"Deleting", yesNo(a.GetDeleting())},
		field{"Preserve", yesNo(a.GetPreserve())},
		field{"Update ID", a.GetUpdateId()},
	)}
}

// deliveryTables is `delivery status` as a summary: the executor and its
// grant, the desired set, then one row per agent session (whether it has
// the desired set) and one per add-on (desired against reported).
func deliveryTables(r *controlv1.GetDeliveryStatusResponse) []table {
	e := r.GetExecutor()
	summary := executorRecord(e)
	summary.rows = append([][]string{{"Cluster UID:", r.GetClusterUid()}}, summary.rows...)
	summary.rows = append(summary.rows,
		[]string{"Desired version:", strconv.FormatInt(r.GetDesiredVersion(), 10)},
		[]string{"Desired digest:", shortDigest(r.GetDesiredDigest())},
	)

	sessions := table{
		title:  "Agent sessions:",
		header: []string{"INSTANCE", "ROLE", "REPLICA", "AGENT VERSION", "COMMIT", "BASELINE", "CONNECTED", "ACKED VERSION", "ACKED DIGEST", "ACKED AT", "HAS DESIRED"},
		empty:  "No agent sessions.",
	}
	for _, s := range r.GetSessions() {
		role := "standby"
		if e.GetInstanceId() != "" && s.GetInstanceId() == e.GetInstanceId() {
			role = "executor"
		}
		sessions.rows = append(sessions.rows, []string{
			s.GetInstanceId(), role, s.GetReplica(), s.GetAgentVersion(), shortCommit(s.GetAgentCommit()),
			baselineCell(s.GetAgentContractBaseline()), timeCell(s.GetConnectedAt()),
			generationCell(s.GetAckedVersion()), shortDigest(s.GetAckedDigest()), timeCell(s.GetAckedAt()),
			yesNo(s.GetAckedDigest() != "" && s.GetAckedDigest() == r.GetDesiredDigest()),
		})
	}

	addons := table{
		title:  "Add-ons:",
		header: []string{"ADD-ON", "GENERATION", "REPORTED GENERATION", "PHASE", "REPORTED BY", "EPOCH", "LAST REPORT"},
		empty:  "No add-ons.",
	}
	for _, a := range r.GetAddons() {
		addons.rows = append(addons.rows, []string{
			a.GetName(), strconv.FormatInt(a.GetGeneration(), 10), generationCell(a.GetObservedGeneration()),
			a.GetObservedPhase(), a.GetReportedBy(), generationCell(a.GetReportedEpoch()), timeCell(a.GetLastReportAt()),
		})
	}
	return []table{summary, sessions, addons}
}

// executorRecord shows the cluster's executor and the state of its grant
// to write (docs/delivery-protocol.md): held, or draining (fenced, its
// successor waits for the fence's acknowledgement or its session's end),
// or none.
func executorRecord(e *controlv1.DeliveryExecutor) table {
	grant, epoch := "none (no executor assigned)", noValue
	if e != nil {
		epoch = strconv.FormatInt(e.GetEpoch(), 10)
		switch {
		case e.GetInstanceId() == "":
		case e.GetDraining():
			grant = "draining (fenced; a successor follows its acknowledgement or its session's end)"
		default:
			grant = "held"
		}
	}
	return record("",
		field{"Executor", e.GetInstanceId()},
		field{"Epoch", epoch},
		field{"Grant", grant},
		field{"Executor since", timeCell(e.GetSince())},
		field{"Executor reason", e.GetReason()},
	)
}

// bundleTable lists the CA certificates of a PEM bundle; issuing (a
// serial, or "" when the response does not say) marks the one that signs
// new certificates.
func bundleTable(bundle, issuing string) table {
	t := table{
		title:  "CA certificates:",
		header: []string{"SERIAL", "SUBJECT", "NOT BEFORE", "NOT AFTER"},
		empty:  "No CA certificates.",
	}
	if issuing != "" {
		t.header = append(t.header, "ISSUING")
	}
	rest := []byte(bundle)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		row := []string{noValue, "unreadable certificate: " + fmt.Sprint(err), noValue, noValue}
		serial := noValue
		if err == nil {
			serial = c.SerialNumber.Text(16)
			row = []string{serial, c.Subject.String(), c.NotBefore.UTC().Format(tableTime), c.NotAfter.UTC().Format(tableTime)}
		}
		if issuing != "" {
			row = append(row, yesNo(serial == issuing))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// generationCell shows a generation, epoch or version; 0 (none yet) is
// noValue.
func generationCell(n int64) string {
	if n == 0 {
		return noValue
	}
	return strconv.FormatInt(n, 10)
}

// shortDigest is a content digest's first 12 hex digits, as docker shows
// an image ID: enough to compare two, short enough for a column. JSON and
// YAML carry the whole digest.
func shortDigest(d string) string {
	const short = 12
	if len(d) > short {
		return d[:short]
	}
	return d
}

// durationCell shows a duration without its zero tails: 3h, 1h30m.
func durationCell(d time.Duration) string {
	if d == 0 {
		return noValue
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// policyCell shows a policy document on one line (compacted when it is
// JSON).
func policyCell(doc string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(doc)) == nil {
		return b.String()
	}
	return doc
}

// shortCommit is a commit's first 12 hex digits, "-" when unknown.
func shortCommit(c string) string {
	if c == "" {
		return "-"
	}
	return c[:min(len(c), 12)]
}

// baselineCell is a contract baseline, "-" for an agent that does not
// send one (older than the field).
func baselineCell(n uint32) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(n), 10)
}
