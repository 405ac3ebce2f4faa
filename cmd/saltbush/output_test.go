package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

func TestScreamingSnake(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ClusterStatus", "CLUSTER_STATUS"},
		{"AddonPhase", "ADDON_PHASE"},
		{"HTTPRoute", "HTTP_ROUTE"},
		{"RouteHTTP", "ROUTE_HTTP"},
		{"Phase2Kind", "PHASE2_KIND"},
		{"Role", "ROLE"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			if got := screamingSnake(tt.in); got != tt.want {
				t.Errorf("screamingSnake(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestEnumValueName(t *testing.T) {
	for _, tt := range []struct {
		name string
		e    protoreflect.Enum
		want string
	}{
		{"cluster status", controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, "ACTIVE"},
		{"addon phase", controlv1.AddonPhase_ADDON_PHASE_REMOVED, "REMOVED"},
		{"update outcome", controlv1.UpdateOutcome_UPDATE_OUTCOME_CANCELLED, "CANCELLED"},
		{"unspecified", controlv1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED, "UNSPECIFIED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := tt.e.Descriptor().Values().ByNumber(tt.e.Number())
			if got := enumValueName(ev); got != tt.want {
				t.Errorf("enumValueName(%s) = %q, want %q", ev.Name(), got, tt.want)
			}
		})
	}
}

// TestWriteDoc: what -o json and -o yaml print of a response: numbers as
// numbers, enums by their AWS names, RFC 3339 times, an unset message or
// optional field left out (never null), an UNSPECIFIED enum left out,
// other zero scalars kept.
func TestWriteDoc(t *testing.T) {
	since := timestamppb.New(time.Date(2026, 12, 6, 17, 15, 32, 500_000_000, time.UTC))
	seconds := int32(3600)
	for _, tt := range []struct {
		name   string
		m      proto.Message
		format string
		want   string
	}{
		{"no executor", &controlv1.GetDeliveryStatusResponse{ClusterUid: "u", DesiredVersion: 11}, formatJSON, `{
  "addons": [],
  "clusterUid": "u",
  "desiredDigest": "",
  "desiredVersion": 11,
  "sessions": []
}
`},
		{"an executor", &controlv1.DrainExecutorResponse{Executor: &controlv1.DeliveryExecutor{InstanceId: "i-1", Epoch: 9007199254740993, Since: since, Draining: true}}, formatJSON, `{
  "executor": {
    "draining": true,
    "epoch": 9007199254740993,
    "instanceId": "i-1",
    "reason": "",
    "since": "2026-12-06T17:15:32.5Z"
  }
}
`},
		{"enums", &controlv1.AddonInfo{Name: "coredns", ObservedPhase: controlv1.AddonPhase_ADDON_PHASE_READY}, formatYAML, `clusterUid: ""
deleting: false
generation: 0
name: coredns
observedGeneration: 0
observedPhase: READY
preserve: false
references: []
status: ""
uid: ""
updateId: ""
version: ""
`},
		{"unspecified enum", &controlv1.SetStatusRequest{}, formatJSON, `{
  "certificateAuthorityData": "",
  "clearHealthIssues": false,
  "clusterSecurityGroupId": "",
  "endpoint": "",
  "healthIssues": [],
  "oidcIssuer": "",
  "platformVersion": "",
  "reason": "",
  "securityGroupIds": [],
  "subnetIds": [],
  "vpcId": ""
}
`},
		{"optional fields", &controlv1.UpdateRoleRequest{RoleArn: "r", MaxSessionDurationSeconds: &seconds}, formatYAML, `maxSessionDurationSeconds: 3600
roleArn: r
`},
		{"oneof", &controlv1.IssueCertificateRequest{Subject: &controlv1.IssueCertificateRequest_Agent{Agent: &controlv1.AgentSubject{ClusterUid: "u", Instance: "i"}}}, formatJSON, `{
  "agent": {
    "clusterUid": "u",
    "instance": "i"
  },
  "csrPem": "",
  "ttlSeconds": 0
}
`},
		{"a policy stays readable", &controlv1.GetRoleResponse{TrustPolicy: `{"a":"<&>"}`}, formatJSON, `{
  "maxSessionDurationSeconds": 0,
  "roleArn": "",
  "sessionsRevokedBeforeEpochSeconds": 0,
  "trustPolicy": "{\"a\":\"<&>\"}"
}
`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeDoc(&b, tt.format, messageDoc(tt.m.ProtoReflect())); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

// TestTableRenderers: every entry's key is a message this binary knows, and
// its renderer takes that message (typed would panic otherwise), even
// empty.
func TestTableRenderers(t *testing.T) {
	for name, r := range tableRenderers() {
		t.Run(string(name), func(t *testing.T) {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
			if err != nil {
				t.Fatalf("no message %s: %v", name, err)
			}
			var b bytes.Buffer
			if err := writeTables(&b, r(mt.New().Interface())); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTables: the table form of a response with a renderer and of ones
// without (the generic record of their fields, never a failure).
func TestTables(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 12, 6, 17, 15, 32, 0, time.UTC))
	for _, tt := range []struct {
		name string
		m    proto.Message
		want string
	}{
		{"a renderer", &controlv1.GetDeliveryStatusResponse{ClusterUid: "u", DesiredVersion: 11, DesiredDigest: "0123456789abcdef",
			Sessions: []*controlv1.AgentSession{{InstanceId: "i-1", AckedVersion: 11, AckedDigest: "0123456789abcdef", AckedAt: at}}}, `Cluster UID:      u
Executor:         -
Epoch:            -
Grant:            none (no executor assigned)
Executor since:   -
Executor reason:  -
Desired version:  11
Desired digest:   0123456789ab

Agent sessions:
INSTANCE  ROLE     REPLICA  AGENT VERSION  COMMIT  BASELINE  CONNECTED  ACKED VERSION  ACKED DIGEST  ACKED AT                 HAS DESIRED
i-1       standby  -        -              -       -         -          11             0123456789ab  2026-12-06 17:15:32 UTC  yes

Add-ons:
No add-ons.
`},
		{"no renderer", &controlv1.SetStatusRequest{
			Cluster: &controlv1.ClusterRef{Name: "demo"}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, SubnetIds: []string{"subnet-a", "subnet-b"},
			HealthIssues: []*controlv1.ClusterIssue{{Code: "C", Message: "two\nlines"}},
		}, `Cluster account id:          -
Cluster name:                demo
Cluster uid:                 -
Status:                      ACTIVE
Reason:                      -
Endpoint:                    -
Certificate authority data:  -
Platform version:            -
Oidc issuer:                 -
Vpc id:                      -
Cluster security group id:   -
Subnet ids:                  subnet-a, subnet-b
Security group ids:          -
Clear health issues:         false

Health issues:
CODE  MESSAGE    RESOURCE IDS
C     two lines  -
`},
		{"nothing to say", &controlv1.PutPolicyResponse{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeTables(&b, messageTables(tt.m)); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

// TestOutputFormat: -o wins; without it, output that is not a terminal
// (a pipe, a file, this buffer) is JSON.
func TestOutputFormat(t *testing.T) {
	for _, tt := range []struct{ flag, want string }{
		{"", formatJSON},
		{formatTable, formatTable},
		{formatYAML, formatYAML},
	} {
		t.Run("-o="+tt.flag, func(t *testing.T) {
			af := &adminFlags{output: tt.flag}
			cmd := &cobra.Command{}
			var b bytes.Buffer
			cmd.SetOut(&b)
			if got := af.outputFormat(cmd.OutOrStdout()); got != tt.want {
				t.Errorf("outputFormat = %q, want %q", got, tt.want)
			}
			if err := af.print(cmd, &controlv1.CreatePrincipalResponse{Arn: "arn:aws:iam::000000000000:user/a"}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "arn:aws:iam::000000000000:user/a") {
				t.Errorf("printed %q", b.String())
			}
		})
	}
}
