package hostile

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// queryOperations are the query-protocol operations on the façade's
// address (server/sts), and EKS Auth's one operation beside it
// (server/eksauth).
func queryOperations() []string {
	return []string{
		"sts:GetCallerIdentity", "sts:AssumeRole", "sts:AssumeRoleWithWebIdentity",
		"iam:ListOpenIDConnectProviders", "iam:GetOpenIDConnectProvider", "iam:ListOpenIDConnectProviderTags",
		"iam:CreateOpenIDConnectProvider", "iam:DeleteOpenIDConnectProvider", "iam:UpdateOpenIDConnectProviderThumbprint",
		"iam:AddClientIDToOpenIDConnectProvider", "iam:RemoveClientIDFromOpenIDConnectProvider",
		"iam:TagOpenIDConnectProvider", "iam:UntagOpenIDConnectProvider",
		"eks-auth:AssumeRoleForPodIdentity",
	}
}

// minCasesPerOperation is how many hostile requests each operation gets
// at least.
const minCasesPerOperation = 3

// TestHostileInputs sends every case to one server and checks the refusal
// and that nothing was written.
func TestHostileInputs(t *testing.T) {
	e := newEnv(t)
	cases := e.cases()

	names := map[string]bool{}
	byOp, byCategory := map[string]int{}, map[string]int{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases named %q", c.name)
		}
		names[c.name] = true
		if c.category == "" || c.status == 0 || (c.exception == "") == (c.redirect == "" && !c.plainHTTP) {
			t.Fatalf("case %q lacks a category, status or exception", c.name)
		}
		byOp[c.op]++
		byCategory[c.category]++
	}
	if len(cases) < 150 {
		t.Errorf("%d cases, want at least 150", len(cases))
	}
	for _, op := range append(servedOperations(t), queryOperations()...) {
		if byOp[op] < minCasesPerOperation {
			t.Errorf("operation %s has %d cases, want at least %d", op, byOp[op], minCasesPerOperation)
		}
	}
	t.Logf("%d cases; by category: %s; by operation: %s", len(cases), counts(byCategory), counts(byOp))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.keyspace(t)
			a := e.send(t, c)
			t.Logf("%s %s: %d %s %q", c.method, clipped(c.path), a.status, a.exception, a.message)
			if a.status != c.status || a.exception != c.exception {
				t.Errorf("%s %s: %d %s %q, want %d %s", c.method, clipped(c.path), a.status, a.exception, a.message, c.status, c.exception)
			}
			if c.redirect == "" && !c.plainHTTP {
				e.awsMessage(t, a.message, c.member)
			}
			if c.message != "" && !strings.Contains(a.message, c.message) {
				t.Errorf("message %q, want it to hold %q", a.message, c.message)
			}
			sameKeyspace(t, before, e.keyspace(t))
		})
	}
}

func clipped(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s %d", name, m[k])
	}
	return strings.Join(parts, ", ")
}

// servedOperations are the EKS operations the façade serves: every
// saltbush.eks.v1 method with an HTTP rule.
func servedOperations(t *testing.T) []string {
	t.Helper()
	var out []string
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			methods := fd.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				md := methods.Get(j)
				if rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule); ok && rule != nil {
					out = append(out, string(md.Name()))
				}
			}
		}
		return true
	})
	slices.Sort(out)
	if len(out) != 38 {
		t.Fatalf("the façade serves %d EKS operations, want 38: %v", len(out), out)
	}
	return out
}

// Status codes, short.
const (
	s400 = http.StatusBadRequest
	s403 = http.StatusForbidden
	s404 = http.StatusNotFound
	s405 = http.StatusMethodNotAllowed
	s413 = http.StatusRequestEntityTooLarge
)

// Exceptions, short.
const (
	ipe  = "InvalidParameterException"
	ire  = "InvalidRequestException"
	bre  = "BadRequestException"
	ce   = "ClientException"
	rnf  = "ResourceNotFoundException"
	nf   = "NotFoundException"
	ser  = "SerializationException"
	ade  = "AccessDeniedException"
	ise  = "InvalidSignatureException"
	uce  = "UnrecognizedClientException"
	mat  = "MissingAuthenticationTokenException"
	uoe  = "UnknownOperationException"
	tle  = "RequestEntityTooLargeException"
	notJ = "The request body is not valid JSON."
)
