package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/server/sts"
	"github.com/saltbush/saltbush/server/validation"
)

// The façade fuzz targets send arbitrary path labels, query strings and
// bodies, SigV4-signed as the development administrator, to a real
// saltbush (one per fuzz process) and check every answer (checkEKSAnswer):
// never a 5xx; a success is JSON; a failure is AWS's REST-JSON error, with
// an exception the operation's model lists (or one the façade sends for
// any operation: genericExceptions), the HTTP status that exception has,
// and a message without Go's or the gateway's internals; and a refused
// request wrote nothing to etcd. `go test` runs the seeds; `go test -fuzz`
// explores (make fuzz-short, make fuzz).

// genericExceptions are what the façade may answer any operation with,
// whatever its model lists: a body that is not JSON, a path no operation
// has, a body over the limit.
var genericExceptions = []string{"SerializationException", "UnknownOperationException", "RequestEntityTooLargeException"}

// goInternals are words of Go's, protojson's, grpc-gateway's and etcd's
// errors that must never reach a client (unless the request itself holds
// them: messages quote the values they refuse).
var goInternals = []string{
	"proto:", "protojson", "strconv", "(line ", "parsing field", "parsing list", "too many values for field",
	"type mismatch", "rpc error", "runtime error", "goroutine", "nil pointer", "invalid memory", "json: ",
	"unexpected eof", "etcd", "grpc", "unmarshal", ".go:", "syntax error", "saltbush.eks.v1", "context deadline",
}

// snakeCase finds proto field names (max_results) in a message: AWS names
// members in camelCase.
var snakeCase = regexp.MustCompile(`\b[a-z][a-z0-9]*_[a-z0-9_]+\b`)

// fuzzModel is the part of the EKS model the checks read: each operation's
// errors, from the validation table (generated from the model the
// conformance tests read, TestModelValidation checks the two agree).
type fuzzModel struct {
	errors map[string]map[string]bool
}

func (m *fuzzModel) load(t *testing.T) {
	if m.errors != nil {
		return
	}
	m.errors = map[string]map[string]bool{}
	for _, name := range validation.Operations() {
		set := map[string]bool{}
		errs, _ := validation.Errors(name)
		for _, e := range errs {
			set[e] = true
		}
		for _, e := range genericExceptions {
			set[e] = true
		}
		// The exception the operation answers validation errors with
		// (docs/contracts.md, "Input validation"): for an operation whose
		// model lists none, EKS's own InvalidParameterException.
		if e, ok := validation.Exception(name); ok {
			set[e] = true
		}
		m.errors[name] = set
	}
	if len(m.errors) == 0 {
		t.Fatal("the validation table has no operations")
	}
}

// allowed is the set of exceptions an answer to op may carry; "" is any
// operation's (the request may have been routed to another one).
func (m *fuzzModel) allowed(op string) map[string]bool {
	if op != "" {
		return m.errors[op]
	}
	all := map[string]bool{}
	for _, set := range m.errors {
		for e := range set {
			all[e] = true
		}
	}
	return all
}

// checkEKSAnswer checks one façade answer to a request for op (input is
// everything the request sent, to tell a quoted value from a leak). It
// reports whether the request succeeded.
func checkEKSAnswer(t *testing.T, m *fuzzModel, op, input string, resp *http.Response, body []byte) bool {
	t.Helper()
	what := fmt.Sprintf("%s %s: %d %s %s", op, input, resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), body)
	if resp.StatusCode >= 500 {
		t.Fatalf("a server error: %s", what)
	}
	if resp.StatusCode < 300 {
		if len(body) > 0 && !json.Valid(body) {
			t.Fatalf("a success whose body is not JSON: %s", what)
		}
		return true
	}
	exception := resp.Header.Get("X-Amzn-Errortype")
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || exception == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("not an AWS error: %s", what)
	}
	msg, ok := e["message"].(string)
	if !ok || msg == "" {
		t.Fatalf("an error without a message: %s", what)
	}
	// Every operation naming a cluster refuses a malformed name with
	// AWS's own InvalidParameterException and message, which not every
	// operation's model lists (server/cluster/validate.go).
	clusterName := exception == errdefs.InvalidParameterException && strings.Contains(msg, "at 'name' failed to satisfy constraint: "+
		"Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]* and be 1 to 100 characters long")
	if !m.allowed(op)[exception] && !clusterName {
		t.Fatalf("%s is not an exception the model lists for %s: %s", exception, op, what)
	}
	if want := errdefs.HTTPStatus(exception); want != http.StatusInternalServerError && want != resp.StatusCode {
		t.Fatalf("%s with status %d, not its %d: %s", exception, resp.StatusCode, want, what)
	}
	lowMsg, lowIn := strings.ToLower(msg), strings.ToLower(input)
	for _, internal := range goInternals {
		if strings.Contains(lowMsg, internal) && !strings.Contains(lowIn, internal) {
			t.Fatalf("the message shows %q: %s", internal, what)
		}
	}
	for _, w := range snakeCase.FindAllString(msg, -1) {
		if !strings.Contains(input, w) {
			t.Fatalf("the message names %q, a proto field: %s", w, what)
		}
	}
	return false
}

// keyspaceMark is where the keyspace was before a request: its revision
// and how many keys it held (the add-on sweeper's election aside).
type keyspaceMark struct {
	rev, count int64
}

// keyspaceWatch tells what was written to saltbush's keyspace between a
// mark and now.
type keyspaceWatch struct {
	etcd   *clientv3.Client
	prefix string
}

func newKeyspaceWatch(tb testing.TB, srv *servertest.Server) keyspaceWatch {
	tb.Helper()
	return keyspaceWatch{etcd: srv.Etcd(tb), prefix: srv.Store(tb).Prefix()}
}

func (w keyspaceWatch) count(ctx context.Context) (rev, n int64, err error) {
	all, err := w.etcd.Get(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, err
	}
	elections, err := w.etcd.Get(ctx, w.prefix+"elections/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(all.Header.Revision))
	if err != nil {
		return 0, 0, err
	}
	return all.Header.Revision, all.Count - elections.Count, nil
}

func (w keyspaceWatch) mark(t *testing.T) keyspaceMark {
	t.Helper()
	rev, n, err := w.count(t.Context())
	if err != nil {
		t.Fatalf("read the keyspace: %v", err)
	}
	return keyspaceMark{rev: rev, count: n}
}

// unchanged fails t if anything was written or deleted since m.
func (w keyspaceWatch) unchanged(t *testing.T, m keyspaceMark, what string) {
	t.Helper()
	resp, err := w.etcd.Get(t.Context(), w.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinModRev(m.rev+1))
	if err != nil {
		t.Fatalf("read the keyspace: %v", err)
	}
	var written []string
	created := int64(0)
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), w.prefix)
		if strings.HasPrefix(k, "elections/") {
			continue
		}
		written = append(written, k)
		if kv.CreateRevision > m.rev {
			created++
		}
	}
	if len(written) > 0 {
		t.Fatalf("a refused request wrote %v: %s", written, what)
	}
	_, n, err := w.count(t.Context())
	if err != nil {
		t.Fatalf("read the keyspace: %v", err)
	}
	if n != m.count+created {
		t.Fatalf("a refused request deleted %d keys: %s", m.count+created-n, what)
	}
}

// facadeFuzz is one fuzz process's saltbush, the model and the keyspace.
type facadeFuzz struct {
	srv   *servertest.Server
	dev   servertest.Creds
	model *fuzzModel
	keys  keyspaceWatch
}

func newFacadeFuzz(f *testing.F) *facadeFuzz {
	srv := servertest.Start(f)
	return &facadeFuzz{srv: srv, dev: srv.Dev(f), model: &fuzzModel{}, keys: newKeyspaceWatch(f, srv)}
}

// noRedirects is an HTTP client that shows a redirect instead of following
// it: a redirect is an answer like any other, and no AWS API sends one.
var noRedirects = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// send sends a raw request signed as the development administrator for
// the signing name service gives the request; ok is false when target is
// not a URL an HTTP client can send.
func (z *facadeFuzz) send(t *testing.T, service func(*http.Request) string, method, target, contentType string, body []byte) (resp *http.Response, payload []byte, ok bool) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, z.srv.URL+target, rd)
	if err != nil {
		return nil, nil, false
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: z.dev.AccessKeyID, SecretAccessKey: z.dev.SecretAccessKey},
		req, hex.EncodeToString(sum[:]), service(req), z.srv.Config.Cluster.Region, time.Now()); err != nil {
		t.Fatalf("sign: %v", err)
	}
	resp, err = noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	payload, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, target, err)
	}
	return resp, payload, true
}

// eks sends one EKS request for op and checks the answer; a refused one
// must leave the keyspace as it was. It reports whether it succeeded.
func (z *facadeFuzz) eks(t *testing.T, op, method, target string, body []byte) bool {
	t.Helper()
	z.model.load(t)
	before := z.keys.mark(t)
	var ct string
	if body != nil {
		ct = "application/json"
	}
	resp, payload, ok := z.send(t, func(*http.Request) string { return "eks" }, method, target, ct, body)
	if !ok {
		return false
	}
	input := method + " " + target + " " + string(body)
	if u, err := url.PathUnescape(target); err == nil {
		input += " " + u
	}
	if u, err := url.QueryUnescape(target); err == nil {
		input += " " + u
	}
	if checkEKSAnswer(t, z.model, op, input, resp, payload) {
		return true
	}
	z.keys.unchanged(t, before, fmt.Sprintf("%s %s %q: %d %s", op, target, body, resp.StatusCode, payload))
	return false
}

// FuzzCreateClusterBody sends arbitrary bytes as a CreateCluster body.
func FuzzCreateClusterBody(f *testing.F) {
	for _, seed := range []string{
		createBody,
		`{}`, `[]`, `null`, `{"name":"a"}`, `{"name":"a","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
		`{"name":"a","tags":{"aws:x":"y"},"roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
		`{"name":"\u0000","roleArn":1}`, `{"logging":{"clusterLogging":[{"types":[null]}]}}`, "\xff\xfe", `{"name":"a"` + strings.Repeat(" ", 100),
		`{"name":"b","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"version":"1.0"}`,
		`{"name":"c","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"kubernetesNetworkConfig":{"serviceIpv4Cidr":"10.0.0.0/33"}}`,
		`{"name":"d","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"accessConfig":{"authenticationMode":"X"}}`,
		`{"name":"e","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"clientRequestToken":""}`,
		`{"name":"f","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"upgradePolicy":{"supportType":"NONE"}}`,
		`{"name":1e400}`, `{"name":"g","name":"h"}`, `{"name":"a","tags":{"k":1}}`,
	} {
		f.Add(seed)
	}
	z := newFacadeFuzz(f)
	f.Fuzz(func(t *testing.T, body string) {
		z.eks(t, "CreateCluster", http.MethodPost, "/clusters", []byte(body))
	})
}

// FuzzAccessEntryBodies sends arbitrary bytes as the body of the
// access-entry operations that take one (create, update, associate) to an
// API-mode cluster.
func FuzzAccessEntryBodies(f *testing.F) {
	for _, seed := range []string{
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","kubernetesGroups":["a"],"username":"u:{{SessionName}}","type":"STANDARD"}`,
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","type":"EC2_LINUX"}`,
		`{"kubernetesGroups":[]}`, `{"kubernetesGroups":[1,null,{}]}`, `{"username":"{{SessionName}}"}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy","accessScope":{"type":"namespace","namespaces":["dev*"]}}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy","accessScope":{"type":"cluster","namespaces":["x"]}}`,
		`{}`, `[]`, `null`, "\xff\xfe", `{"tags":{"aws:x":"y"}}`, `{"clientRequestToken":"` + strings.Repeat("x", 65) + `"}`,
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","kubernetesGroups":["system:masters"]}`,
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","username":"system:admin"}`,
		`{"principalArn":"arn:aws:iam::111111111111:role/elsewhere"}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/Nope","accessScope":{"type":"cluster"}}`,
	} {
		f.Add(uint8(0), seed)
		f.Add(uint8(1), seed)
		f.Add(uint8(2), seed)
	}
	z := newFacadeFuzz(f)
	ctx := f.Context()
	if _, err := z.srv.EKS(f).CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("fuzz"), RoleArn: aws.String(roleARN),
		ResourcesVpcConfig: &types.VpcConfigRequest{}, AccessConfig: &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi}}); err != nil {
		f.Fatalf("CreateCluster: %v", err)
	}
	if _, err := z.srv.IAM().CreatePrincipal(ctx, "arn:aws:iam::000000000000:role/fuzz"); err != nil {
		f.Fatal(err)
	}
	entry := "/clusters/fuzz/access-entries/" + url.PathEscape("arn:aws:iam::000000000000:role/fuzz")
	ops := []struct{ name, path string }{
		{"CreateAccessEntry", "/clusters/fuzz/access-entries"},
		{"UpdateAccessEntry", entry},
		{"AssociateAccessPolicy", entry + "/access-policies"},
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		o := ops[int(op)%len(ops)]
		z.eks(t, o.name, http.MethodPost, o.path, []byte(body))
	})
}

// facadeOp is one EKS operation the façade serves, as its HTTP rule says.
type facadeOp struct {
	name, method, path string
	in                 protoreflect.MessageDescriptor
}

// facadeOps are every EKS operation with an HTTP rule, by name.
func facadeOps(tb testing.TB) []facadeOp {
	tb.Helper()
	var ops []facadeOp
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if !ok || rule == nil {
					continue
				}
				op := facadeOp{name: string(md.Name()), in: md.Input()}
				switch {
				case rule.GetGet() != "":
					op.method, op.path = http.MethodGet, rule.GetGet()
				case rule.GetPost() != "":
					op.method, op.path = http.MethodPost, rule.GetPost()
				case rule.GetPut() != "":
					op.method, op.path = http.MethodPut, rule.GetPut()
				case rule.GetDelete() != "":
					op.method, op.path = http.MethodDelete, rule.GetDelete()
				case rule.GetPatch() != "":
					op.method, op.path = http.MethodPatch, rule.GetPatch()
				}
				ops = append(ops, op)
			}
		}
		return true
	})
	sort.Slice(ops, func(i, j int) bool { return ops[i].name < ops[j].name })
	if len(ops) == 0 {
		tb.Fatal("no saltbush.eks.v1 method with an HTTP rule is registered")
	}
	return ops
}

// facadeFixture is a cluster with one of everything the façade's paths
// name, so that fuzzed requests reach the services, not only their
// not-found answers.
type facadeFixture struct {
	// labels are each path label's value (by proto field name).
	labels map[string]string
}

const (
	fuzzPrincipal = "arn:aws:iam::000000000000:role/fuzz"
	fuzzTrust     = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:root"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`
)

// newFacadeFixture makes cluster name (ACTIVE, access entries on, deletion
// protection on) with the add-on coredns, an access entry with a policy, a
// pod identity association and an update.
func newFacadeFixture(tb testing.TB, srv *servertest.Server, name string) *facadeFixture {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := srv.EKS(tb)
	in := createInput(name)
	in.AccessConfig = &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApiAndConfigMap}
	if _, err := c.CreateCluster(ctx, in); err != nil {
		tb.Fatalf("CreateCluster %s: %v", name, err)
	}
	cc := controlv1.NewClusterControlServiceClient(srv.GRPC(tb))
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(tb),
	}); err != nil {
		tb.Fatalf("SetStatus ACTIVE: %v", err)
	}
	if ok, err := srv.IAM().PrincipalExists(ctx, fuzzPrincipal); err != nil {
		tb.Fatal(err)
	} else if !ok {
		if _, err := srv.IAM().CreatePrincipal(ctx, fuzzPrincipal); err != nil {
			tb.Fatal(err)
		}
		trust := fuzzTrust
		if _, err := srv.IAM().UpdateRole(ctx, fuzzPrincipal, iam.RoleUpdate{TrustPolicy: &trust}); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := c.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(name), AddonName: aws.String("coredns")}); err != nil {
		tb.Fatalf("CreateAddon: %v", err)
	}
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(fuzzPrincipal)}); err != nil {
		tb.Fatalf("CreateAccessEntry: %v", err)
	}
	if _, err := c.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(name), PrincipalArn: aws.String(fuzzPrincipal),
		PolicyArn: aws.String(viewPolicy), AccessScope: &types.AccessScope{Type: types.AccessScopeTypeCluster}}); err != nil {
		tb.Fatalf("AssociateAccessPolicy: %v", err)
	}
	pia, err := c.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(name),
		Namespace: aws.String("default"), ServiceAccount: aws.String("fuzz"), RoleArn: aws.String(fuzzPrincipal)})
	if err != nil {
		tb.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	up, err := c.UpdateClusterConfig(ctx, &eks.UpdateClusterConfigInput{Name: aws.String(name), DeletionProtection: aws.Bool(true)})
	if err != nil {
		tb.Fatalf("UpdateClusterConfig: %v", err)
	}
	dc, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
	if err != nil {
		tb.Fatalf("DescribeCluster: %v", err)
	}
	insight := "00000000-0000-0000-0000-000000000000"
	if li, err := c.ListInsights(ctx, &eks.ListInsightsInput{ClusterName: aws.String(name)}); err == nil && len(li.Insights) > 0 {
		insight = aws.ToString(li.Insights[0].Id)
	}
	return &facadeFixture{labels: map[string]string{
		"name": name, "cluster_name": name, "addon_name": "coredns", "principal_arn": fuzzPrincipal, "policy_arn": viewPolicy,
		"association_id": aws.ToString(pia.Association.AssociationId), "update_id": aws.ToString(up.Update.Id), "id": insight,
		"resource_arn": aws.ToString(dc.Cluster.Arn),
	}}
}

// active reports whether the fixture's cluster is still ACTIVE (a fuzzed
// request may have deleted or upgraded it).
func (fx *facadeFixture) active(t *testing.T, srv *servertest.Server) bool {
	t.Helper()
	dc, err := srv.EKS(t).DescribeCluster(t.Context(), &eks.DescribeClusterInput{Name: aws.String(fx.labels["name"])})
	return err == nil && dc.Cluster.Status == types.ClusterStatusActive
}

// uriEscape percent-encodes the bytes of s that a request target cannot
// hold raw, keeping those keep allows (and '%', so that malformed escapes
// reach the server).
func uriEscape(s, keep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-._~%", c) >= 0,
			strings.IndexByte(keep, c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// pathLabel matches a label of an HTTP rule's path template.
var pathLabel = regexp.MustCompile(`\{([a-z_]+)\}`)

// fuzzBodies are request bodies for particular operations: valid ones
// (so that fuzzing starts from requests the services take) and ones each
// breaking one rule of the operation's.
var fuzzBodies = map[string][]string{
	"CreateAddon": {`{"addonName":"kube-proxy"}`, `{"addonName":"coredns","resolveConflicts":"OVERWRITE"}`,
		`{"addonName":"kube-proxy","configurationValues":"{\"a\":1}"}`, `{"addonName":"vpc-cni","addonVersion":"v0"}`,
		`{"addonName":"vpc-cni","podIdentityAssociations":[{"serviceAccount":"aws-node","roleArn":"` + fuzzPrincipal + `"}]}`,
		`{"addonName":"vpc-cni","serviceAccountRoleArn":"","tags":{}}`},
	"UpdateAddon": {`{"resolveConflicts":"PRESERVE"}`, `{"addonVersion":"v0","serviceAccountRoleArn":""}`, `{"configurationValues":"x: ["}`,
		`{"podIdentityAssociations":[]}`},
	"CreateAccessEntry": {`{"principalArn":"arn:aws:iam::000000000000:user/saltbush-dev","kubernetesGroups":["a"],"username":"u:{{SessionName}}"}`,
		`{"principalArn":"` + fuzzPrincipal + `"}`, `{"principalArn":"arn:aws:iam::000000000000:role/x","type":"EC2_LINUX","kubernetesGroups":["a"]}`,
		`{"principalArn":"arn:aws:iam::111111111111:role/elsewhere"}`},
	"UpdateAccessEntry": {`{"kubernetesGroups":["system:masters"]}`, `{"username":"{{SessionName}}"}`, `{"kubernetesGroups":[]}`},
	"AssociateAccessPolicy": {`{"policyArn":"` + viewPolicy + `","accessScope":{"type":"namespace","namespaces":["dev*"]}}`,
		`{"policyArn":"` + viewPolicy + `","accessScope":{"type":"cluster","namespaces":["x"]}}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/Nope","accessScope":{"type":"cluster"}}`},
	"CreatePodIdentityAssociation": {`{"namespace":"default","serviceAccount":"x","roleArn":"` + fuzzPrincipal + `"}`,
		`{"namespace":"default","serviceAccount":"fuzz","roleArn":"` + fuzzPrincipal + `"}`,
		`{"namespace":"default","serviceAccount":"y","roleArn":"` + fuzzPrincipal + `","targetRoleArn":"arn:aws:iam::111111111111:role/t","disableSessionTags":true}`},
	"UpdatePodIdentityAssociation": {`{"roleArn":"` + fuzzPrincipal + `"}`, `{"targetRoleArn":"","disableSessionTags":true}`},
	"UpdateClusterConfig": {`{"logging":{"clusterLogging":[{"types":["api"],"enabled":true}]}}`, `{"deletionProtection":false}`,
		`{"accessConfig":{"authenticationMode":"API"}}`, `{"upgradePolicy":{"supportType":"EXTENDED"}}`,
		`{"resourcesVpcConfig":{"endpointPublicAccess":false}}`, `{"logging":{},"deletionProtection":true}`},
	"UpdateClusterVersion": {`{"version":"1.36"}`, `{"version":"1.0"}`, `{"version":"1.35","force":true}`},
	"TagResource":          {`{"tags":{"k":"v"}}`, `{"tags":{"aws:k":"v"}}`, `{"tags":{"":""}}`},
	"StartInsightsRefresh": {`{}`},
	"CreateCluster":        {createBody, `{"name":"fuzz-0","roleArn":"` + roleARN + `","resourcesVpcConfig":{}}`},
}

// wrongValue is a JSON value of another type than field's.
func wrongValue(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsList():
		return `{}`
	case fd.IsMap(), fd.Message() != nil:
		return `[]`
	case fd.Kind() == protoreflect.StringKind, fd.Kind() == protoreflect.EnumKind:
		return `5`
	}
	return `"x"`
}

// queryValues are values of a query parameter for field that its type
// does not take, or that the model's constraints refuse, or a second one.
func queryValues(fd protoreflect.FieldDescriptor) []string {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return []string{"abc", "99999999999", "-1", "0", "1", "1&" + fd.JSONName() + "=2"}
	case protoreflect.BoolKind:
		return []string{"maybe", "true", "1"}
	}
	return []string{"", strings.Repeat("A", 300), "%zz", "a&" + fd.JSONName() + "=b"}
}

// FuzzFacadeOperations sends every operation the façade serves, chosen by
// sel, with fuzzed path labels (labels holds them one per line; a missing
// or empty one is the fixture's, so the request reaches the service),
// query string and body. The top bit of sel puts the labels into the path
// raw (only what cannot be in a request target escaped, so '/', '%' and
// '.' segments reach the router) instead of escaped as the SDKs escape
// them. The seeds break, per operation, each query parameter's type and
// each body member's.
func FuzzFacadeOperations(f *testing.F) {
	z := newFacadeFuzz(f)
	ops := facadeOps(f)
	fx := newFacadeFixture(f, z.srv, "fuzz-0")
	for i, op := range ops {
		sel := uint8(i)
		f.Add(sel, "", "", []byte(nil))
		f.Add(sel|0x80, "a/b", "", []byte(nil))
		inPath := map[string]bool{}
		for _, m := range pathLabel.FindAllStringSubmatch(op.path, -1) {
			inPath[m[1]] = true
		}
		var fields []protoreflect.FieldDescriptor
		for j := range op.in.Fields().Len() {
			if fd := op.in.Fields().Get(j); !inPath[string(fd.Name())] {
				fields = append(fields, fd)
			}
		}
		switch op.method {
		case http.MethodGet, http.MethodDelete:
			// Each query parameter once, with one of its type's bad values.
			for j, fd := range fields {
				if fd.Message() != nil && !fd.IsList() {
					continue
				}
				vs := queryValues(fd)
				f.Add(sel, "", fd.JSONName()+"="+vs[j%len(vs)], []byte(nil))
			}
		default:
			// The first, middle and last body member of a wrong type.
			for _, j := range slices.Compact([]int{0, len(fields) / 2, len(fields) - 1}) {
				if j >= 0 && j < len(fields) {
					fd := fields[j]
					f.Add(sel, "", "", []byte(`{"`+fd.JSONName()+`":`+wrongValue(fd)+`}`))
				}
			}
			f.Add(sel, "", "", []byte(`[]`))
			f.Add(sel, "", "", []byte("\xff"))
		}
		for _, b := range fuzzBodies[op.name] {
			f.Add(sel, "", "", []byte(b))
		}
	}
	// Path labels the services must refuse or not find, each on a few of
	// the operations that take labels.
	var labelled []uint8
	for i, op := range ops {
		if sel := uint8(i); strings.Contains(op.path, "{") {
			labelled = append(labelled, sel)
		}
	}
	for k, labels := range []string{"nope", "fuzz-0\nnope", "fuzz-0\nkube-proxy", "-", strings.Repeat("a", 101),
		"fuzz-0\narn:aws:iam::000000000000:user/x", "fuzz-0\n" + fuzzPrincipal + "\narn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy",
		"arn:aws:eks:us-east-1:000000000000:cluster/nope", "arn:aws:eks:us-east-1:111111111111:cluster/fuzz-0", "a-00000000000000000",
		"..", "%zz", "%2F", "\x00", "\xff"} {
		for n := 0; n < 3; n++ {
			f.Add(labelled[(k*3+n*7)%len(labelled)], labels, "", []byte(nil))
		}
	}
	generation := 0
	f.Fuzz(func(t *testing.T, sel uint8, labels, query string, body []byte) {
		op := ops[int(sel&0x7f)%len(ops)]
		raw := sel&0x80 != 0
		given := strings.Split(labels, "\n")
		i := 0
		rerouted := false
		target := pathLabel.ReplaceAllStringFunc(op.path, func(m string) string {
			v := fx.labels[m[1:len(m)-1]]
			if i < len(given) && given[i] != "" {
				v = given[i]
			}
			i++
			if raw {
				if strings.Contains(v, "/") || v == "." || v == ".." {
					rerouted = true // the request may reach another operation
				}
				return uriEscape(v, "!$&'()*+,;=:@/")
			}
			return url.PathEscape(v)
		})
		if query != "" {
			target += "?" + uriEscape(query, "!$&'()*+,;=:@/?")
		}
		if len(body) == 0 {
			body = nil
		}
		name := op.name
		if rerouted {
			name = ""
		}
		ok := z.eks(t, name, op.method, target, body)
		if ok && op.method != http.MethodGet && !fx.active(t, z.srv) {
			// The fixture cluster was deleted or is being upgraded: a new
			// one, so later inputs still reach everything.
			generation++
			fx = newFacadeFixture(t, z.srv, fmt.Sprintf("fuzz-%d", generation))
		}
	})
}

// The query-protocol APIs' (STS, IAM) codes an answer may carry: those
// their models list for the operations served, and those the query
// protocol has for any request (a missing or unknown action, a malformed
// form, a denial, a validation error).
var queryCodes = []string{
	"ValidationError", "InvalidAction", "MissingAction", "MalformedQueryString", "AccessDenied", "InvalidInput",
	"NoSuchEntity", "PackedPolicyTooLarge", "MalformedPolicyDocument", "RegionDisabledException", "ExpiredToken",
	"RequestEntityTooLarge",
	// STS's AssumeRoleWithWebIdentity.
	"InvalidIdentityToken", "ExpiredTokenException", "IDPCommunicationError",
	// IAM's OIDC provider writes.
	"EntityAlreadyExists", "LimitExceeded", "ConcurrentModification",
}

// fuzzProvider is an OIDC provider FuzzQueryProtocol makes in the account,
// for an issuer saltbush does not host.
const fuzzProvider = "https://oidc.fuzz.example/id/FUZZ"

// unverifiedToken is a JWT of issuer iss with a signature nobody made: its
// issuer is read before any key is looked for.
func unverifiedToken(iss, aud string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256","kid":"k1","typ":"JWT"}`)) + "." +
		enc([]byte(`{"iss":"`+iss+`","sub":"system:serviceaccount:default:fuzz","aud":["`+aud+`"],"exp":4102444800}`)) + "." + enc([]byte("sig"))
}

// queryAPI is the signing name of a query-protocol request, read from its
// parameters as the endpoint reads them (server/sts, requestParams): iam
// for IAM's Version, else sts.
func queryAPI(rawQuery string, body []byte, method string) string {
	form, err := url.ParseQuery(rawQuery)
	if err != nil {
		form = url.Values{}
	}
	if method == http.MethodPost {
		if b, err := url.ParseQuery(string(body)); err == nil {
			for k, vs := range form {
				if _, dup := b[k]; !dup {
					b[k] = vs
				}
			}
			form = b
		}
	}
	if form.Get("Version") == "2010-05-08" {
		return "iam"
	}
	return "sts"
}

// FuzzQueryProtocol sends arbitrary query-protocol requests (STS, IAM) to
// the façade's "/": a form body and query string, POSTed as a form or as
// a GET (bit 0 of sel), signed for the API its Version names as a client
// signs it or, with bit 1, for the other one (which only a signature error
// may answer). Every answer must be
// a success in the action's XML or an ErrorResponse with a code the query
// protocol has, a Sender fault with a 4xx, without internals; a refused
// one (AssumeRole's above all) writes nothing.
func FuzzQueryProtocol(f *testing.F) {
	z := newFacadeFuzz(f)
	_ = newFacadeFixture(f, z.srv, "fuzz-0") // the role
	if _, err := z.srv.IAM().CreateOIDCProvider(f.Context(), &storagev1.OpenIDConnectProviderRecord{Url: fuzzProvider,
		AccountId: z.srv.Config.DevAccount, ClientIds: []string{"sts.amazonaws.com"}}); err != nil {
		f.Fatalf("CreateOIDCProvider: %v", err)
	}
	providerARN := url.QueryEscape("arn:aws:iam::" + z.srv.Config.DevAccount + ":oidc-provider/" + strings.TrimPrefix(fuzzProvider, "https://"))
	webIdentity := "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=w1"
	oidcCall := func(action, rest string) string {
		return "Action=" + action + "&Version=2010-05-08&OpenIDConnectProviderArn=" + providerARN + rest
	}
	for _, s := range []struct{ query, body string }{
		{"", "Action=GetCallerIdentity&Version=2011-06-15"},
		{"Action=GetCallerIdentity&Version=2011-06-15", ""},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=s1"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=s2&DurationSeconds=899"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=s3&Tags.member.1.Key=a&Tags.member.1.Value=b&Tags.member.2.Key=A&Tags.member.2.Value=c"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=s4&Policy=%7B%7D"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + url.QueryEscape(fuzzPrincipal) + "&RoleSessionName=s5&SourceIdentity=x&ExternalId=y"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=arn:aws:iam::000000000000:role/nope&RoleSessionName=s6"},
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=short&RoleSessionName=a%20b&DurationSeconds=x"},
		{"", "Action=AssumeRole&Version=2011-06-15&Tags.member.1.Value=x"},
		{"", "Action=ListOpenIDConnectProviders&Version=2010-05-08"},
		{"", "Action=GetOpenIDConnectProvider&Version=2010-05-08&OpenIDConnectProviderArn=arn:aws:iam::000000000000:oidc-provider/x"},
		{"", "Action=GetOpenIDConnectProvider&Version=2010-05-08"},
		// AssumeRoleWithWebIdentity is answered unsigned: a token of an
		// issuer saltbush does not host, of no provider, for another
		// audience, no JWT at all; members the model refuses.
		{"", webIdentity + "&WebIdentityToken=" + unverifiedToken(fuzzProvider, "sts.amazonaws.com")},
		{"", webIdentity + "&WebIdentityToken=" + unverifiedToken("https://nowhere.fuzz.example", "sts.amazonaws.com")},
		{"", webIdentity + "&WebIdentityToken=" + unverifiedToken(fuzzProvider, "pods.eks.amazonaws.com")},
		{"", webIdentity + "&WebIdentityToken=not-a-jwt&DurationSeconds=899"},
		{"", webIdentity + "&WebIdentityToken=a.b.c&ProviderId=www.amazon.com&Policy=%7B%7D"},
		{"", "Action=AssumeRoleWithWebIdentity&Version=2011-06-15"},
		// IAM's OIDC provider writes, on the provider made above.
		{"", "Action=CreateOpenIDConnectProvider&Version=2010-05-08&Url=" + url.QueryEscape(fuzzProvider) + "&ClientIDList.member.1=a"},
		{"", "Action=CreateOpenIDConnectProvider&Version=2010-05-08&Url=https%3A%2F%2Foidc.fuzz.example%3A443%2Fid%2FNEW&ThumbprintList.member.1=" +
			strings.Repeat("a", 40) + "&Tags.member.1.Key=k&Tags.member.1.Value=v"},
		{"", "Action=CreateOpenIDConnectProvider&Version=2010-05-08&Url=http%3A%2F%2Fplain.fuzz.example&ThumbprintList.member.1=" + strings.Repeat("z", 40)},
		{"", oidcCall("UpdateOpenIDConnectProviderThumbprint", "&ThumbprintList.member.1="+strings.Repeat("b", 40))},
		{"", oidcCall("UpdateOpenIDConnectProviderThumbprint", "&ThumbprintList.member.1=short")},
		{"", oidcCall("AddClientIDToOpenIDConnectProvider", "&ClientID=fuzz")},
		{"", oidcCall("RemoveClientIDFromOpenIDConnectProvider", "&ClientID=fuzz")},
		{"", oidcCall("TagOpenIDConnectProvider", "&Tags.member.1.Key=Team&Tags.member.1.Value=a&Tags.member.2.Key=team&Tags.member.2.Value=b")},
		{"", oidcCall("UntagOpenIDConnectProvider", "&TagKeys.member.1=team")},
		{"", oidcCall("ListOpenIDConnectProviderTags", "&MaxItems=1&Marker=1")},
		{"", oidcCall("DeleteOpenIDConnectProvider", "")},
		{"", "Action=DeleteOpenIDConnectProvider&Version=2010-05-08&OpenIDConnectProviderArn=arn:aws:iam::000000000000:role/fuzz"},
		{"", "Action=Nope&Version=2011-06-15"},
		{"", "Version=2011-06-15"},
		{"", "Action=GetCallerIdentity&Version=2011-06-15&Action=AssumeRole"},
		{"", "Action=GetCallerIdentity;Version=2011-06-15"},
		{"", "Action=%zz"},
		{"Action=AssumeRole", "Version=2011-06-15&RoleArn=x"},
	} {
		for sel := range uint8(4) {
			f.Add(sel, s.query, s.body)
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, query, body string) {
		z.model.load(t)
		method, ct := http.MethodPost, "application/x-www-form-urlencoded"
		var payload []byte
		if sel&1 != 0 {
			method, ct = http.MethodGet, ""
			if body != "" {
				query = strings.TrimPrefix(query+"&"+body, "&")
			}
		} else {
			payload = []byte(body)
		}
		target := "/"
		if query != "" {
			target += "?" + uriEscape(query, "!$&'()*+,;=:@/?")
		}
		wrongName := sel&2 != 0
		service := func(r *http.Request) string {
			name := "eks"
			if sts.IsQueryRequest(r) {
				name = queryAPI(r.URL.RawQuery, payload, method)
			}
			if wrongName {
				name = map[string]string{"sts": "iam", "iam": "sts", "eks": "sts"}[name]
			}
			return name
		}
		before := z.keys.mark(t)
		resp, answer, ok := z.send(t, service, method, target, ct, payload)
		if !ok {
			return
		}
		what := fmt.Sprintf("%s %s %q (wrong signing name %v): %d %s", method, target, body, wrongName, resp.StatusCode, answer)
		if resp.StatusCode >= 500 {
			t.Fatalf("a server error: %s", what)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			// Not a query-protocol request (a GET without Action): the
			// EKS router's answer.
			if !wrongName || resp.Header.Get("X-Amzn-Errortype") != errdefs.InvalidSignatureException {
				checkEKSAnswer(t, z.model, "", what, resp, answer)
			}
			z.keys.unchanged(t, before, what)
			return
		}
		var doc struct {
			XMLName xml.Name
			Error   struct{ Type, Code, Message string }
		}
		if err := xml.Unmarshal(answer, &doc); err != nil || resp.Header.Get("Content-Type") != "text/xml" {
			t.Fatalf("not an XML answer: %s", what)
		}
		if resp.StatusCode < 300 {
			if !strings.HasSuffix(doc.XMLName.Local, "Response") || doc.XMLName.Local == "ErrorResponse" {
				t.Fatalf("a success that is no action's response: %s", what)
			}
			return
		}
		if doc.XMLName.Local != "ErrorResponse" || doc.Error.Type != "Sender" || doc.Error.Message == "" {
			t.Fatalf("not a query-protocol error: %s", what)
		}
		if !slices.Contains(queryCodes, doc.Error.Code) && (!wrongName || doc.Error.Code != "SignatureDoesNotMatch") {
			t.Fatalf("code %s is not one the query protocol answers here: %s", doc.Error.Code, what)
		}
		input := strings.ToLower(query + " " + body)
		if u, err := url.QueryUnescape(query + "&" + body); err == nil {
			input += " " + strings.ToLower(u)
		}
		for _, internal := range goInternals {
			if strings.Contains(strings.ToLower(doc.Error.Message), internal) && !strings.Contains(input, internal) {
				t.Fatalf("the message shows %q: %s", internal, what)
			}
		}
		z.keys.unchanged(t, before, what)
	})
}
