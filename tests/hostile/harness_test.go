package hostile

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
)

// env is the one server every case runs against and the resources the
// setup made on it, so requests aimed at existing resources (an ACTIVE
// cluster, its add-ons, access entry, pod identity association, update
// and insight) are exercised as well as absent ones.
type env struct {
	srv     *servertest.Server
	dev     servertest.Creds
	region  string
	account string
	// cluster is ACTIVE with two ACTIVE add-ons (coredns, kube-proxy), an
	// access entry for entryPrincipal besides the creator's, a pod
	// identity association (podID), a cluster update (updateID) and the
	// add-on compatibility insight (insightID). other is a second cluster
	// (CREATING) with an access entry besides its creator's.
	cluster, other string
	entryPrincipal string
	podID          string
	updateID       string
	insightID      string
	// Continuation tokens of real listings, each from its first page of
	// one item: ListClusters, ListAddons of cluster, ListAccessEntries of
	// cluster and of other.
	clustersToken, addonsToken, entriesToken, otherEntriesToken string
	// ARNs of the resources above.
	clusterARN, addonARN, entryARN, podARN string
	// issuer is cluster's OIDC issuer, hosted: saltbush holds its keys,
	// whose private half is issuerKey (podcreds_cases_test.go).
	issuer     string
	clusterUID string
	issuerKey  *ecdsa.PrivateKey
	// elsewhere is an OIDC provider made in the account for an issuer
	// saltbush does not host.
	elsewhere string
	// client sends the cases; it never follows a redirect, which is an
	// answer in itself.
	client *http.Client
	// snakeNames are the proto field names of the EKS contract that differ
	// from their JSON names (cluster_name, max_results): a message that
	// shows one is showing the implementation, not AWS's member name.
	snakeNames []string
}

const (
	clusterRole = "arn:aws:iam::000000000000:role/eks-cluster"
	podRole     = "arn:aws:iam::000000000000:role/pods"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newEnv starts saltbush and makes the resources the cases aim at.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := servertest.Start(t)
	e := &env{
		srv: srv, dev: srv.Dev(t), region: srv.Config.Cluster.Region, account: srv.Config.DevAccount,
		cluster: "hostile-1", other: "hostile-2", entryPrincipal: "arn:aws:iam::000000000000:role/dev",
		issuer: "https://oidc.hostile.example/id/HOSTILE1", elsewhere: "https://elsewhere.hostile.example/id/ELSEWHERE",
		client: &http.Client{
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	ctx := ctxT(t)
	client := srv.EKS(t)
	for _, name := range []string{e.cluster, e.other} {
		if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name: aws.String(name), Version: aws.String("1.35"), RoleArn: aws.String(clusterRole),
			ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
			AccessConfig:       &ekstypes.CreateAccessConfigRequest{AuthenticationMode: ekstypes.AuthenticationModeApiAndConfigMap},
		}); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
	}
	conn := srv.GRPC(t)
	ref := &controlv1.ClusterRef{AccountId: e.account, Name: e.cluster}
	if _, err := controlv1.NewClusterControlServiceClient(conn).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE, Endpoint: clustertest.Endpoint,
		PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t), OidcIssuer: e.issuer,
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	control := controlv1.NewAddonControlServiceClient(conn)
	for _, name := range []string{"coredns", "kube-proxy"} {
		out, err := client.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(name)})
		if err != nil {
			t.Fatalf("CreateAddon %s: %v", name, err)
		}
		if name == "coredns" {
			e.addonARN = aws.ToString(out.Addon.AddonArn)
		}
		// READY makes it ACTIVE, so no deadline rewrites it during the run.
		info, err := control.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: ref, AddonName: name})
		if err != nil {
			t.Fatalf("GetAddon %s: %v", name, err)
		}
		a := info.GetAddon()
		e.clusterUID = a.GetClusterUid()
		if _, err := control.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{
			ClusterUid: a.GetClusterUid(), AddonName: name, AddonUid: a.GetUid(), Generation: a.GetGeneration(),
			Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "i-0123456789abcdef0",
		}); err != nil {
			t.Fatalf("ApplyAddonReport %s READY: %v", name, err)
		}
	}
	// An access entry's principal must exist in the key store.
	if _, err := srv.IAM().CreatePrincipal(ctx, e.entryPrincipal); err != nil {
		t.Fatalf("create principal %s: %v", e.entryPrincipal, err)
	}
	for _, name := range []string{e.cluster, e.other} {
		out, err := client.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(name), PrincipalArn: aws.String(e.entryPrincipal)})
		if err != nil {
			t.Fatalf("CreateAccessEntry %s: %v", name, err)
		}
		if name == e.cluster {
			e.entryARN = aws.ToString(out.AccessEntry.AccessEntryArn)
		}
	}
	if _, err := client.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
		ClusterName: aws.String(e.cluster), PrincipalArn: aws.String(e.entryPrincipal),
		PolicyArn:   aws.String("arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"),
		AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeNamespace, Namespaces: []string{"dev"}},
	}); err != nil {
		t.Fatalf("AssociateAccessPolicy: %v", err)
	}
	pod, err := client.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("app"), RoleArn: aws.String(podRole),
	})
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	e.podID, e.podARN = aws.ToString(pod.Association.AssociationId), aws.ToString(pod.Association.AssociationArn)
	upd, err := client.UpdateClusterConfig(ctx, &eks.UpdateClusterConfigInput{Name: aws.String(e.cluster),
		Logging: &ekstypes.Logging{ClusterLogging: []ekstypes.LogSetup{{Types: []ekstypes.LogType{ekstypes.LogTypeApi}, Enabled: aws.Bool(true)}}}})
	if err != nil {
		t.Fatalf("UpdateClusterConfig: %v", err)
	}
	e.updateID = aws.ToString(upd.Update.Id)
	ins, err := client.ListInsights(ctx, &eks.ListInsightsInput{ClusterName: aws.String(e.cluster)})
	if err != nil {
		t.Fatalf("ListInsights: %v", err)
	}
	if len(ins.Insights) == 0 {
		t.Fatal("ListInsights: no insight")
	}
	e.insightID = aws.ToString(ins.Insights[0].Id)
	desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(e.cluster)})
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	e.clusterARN = aws.ToString(desc.Cluster.Arn)
	e.hostIssuer(t)

	one := aws.Int32(1)
	lc, err := client.ListClusters(ctx, &eks.ListClustersInput{MaxResults: one})
	if err != nil {
		t.Fatalf("ListClusters: %v", err)
	}
	la, err := client.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(e.cluster), MaxResults: one})
	if err != nil {
		t.Fatalf("ListAddons: %v", err)
	}
	le, err := client.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(e.cluster), MaxResults: one})
	if err != nil {
		t.Fatalf("ListAccessEntries %s: %v", e.cluster, err)
	}
	lo, err := client.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(e.other), MaxResults: one})
	if err != nil {
		t.Fatalf("ListAccessEntries %s: %v", e.other, err)
	}
	e.clustersToken, e.addonsToken = aws.ToString(lc.NextToken), aws.ToString(la.NextToken)
	e.entriesToken, e.otherEntriesToken = aws.ToString(le.NextToken), aws.ToString(lo.NextToken)
	for name, tok := range map[string]string{"ListClusters": e.clustersToken, "ListAddons": e.addonsToken,
		"ListAccessEntries": e.entriesToken, "ListAccessEntries of the other cluster": e.otherEntriesToken} {
		if tok == "" {
			t.Fatalf("%s with maxResults 1 returned no nextToken", name)
		}
	}
	e.snakeNames = snakeFieldNames()
	return e
}

// snakeFieldNames lists the proto names of saltbush.eks.v1's fields whose
// JSON names differ.
func snakeFieldNames() []string {
	seen := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		var walk func(protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := 0; i < ms.Len(); i++ {
				md := ms.Get(i)
				for j := 0; j < md.Fields().Len(); j++ {
					f := md.Fields().Get(j)
					if string(f.Name()) != f.JSONName() {
						seen[string(f.Name())] = true
					}
				}
				walk(md.Messages())
			}
		}
		walk(fd.Messages())
		return true
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// snapshot is the etcd keyspace under the server's prefix: every key with
// its value, revisions, version and lease, and etcd's revision.
type snapshot struct {
	keys map[string]string
	rev  int64
	// ownRevs are the revisions that wrote a key of the families that
	// change without any request (exempt).
	ownRevs map[int64]bool
}

// exempt reports the key families that change on their own, not by a
// request: the leader elections (elections/), whose campaign key a
// replica (this one) writes when it campaigns, at start and again after
// its session lease expired. Nothing else is exempt: audit records go to
// the log and throttling is counted in memory, neither in etcd.
func exempt(key string) bool { return strings.HasPrefix(key, "elections/") }

func (e *env) keyspace(t *testing.T) snapshot {
	t.Helper()
	prefix := e.srv.Store(t).Prefix()
	resp, err := e.srv.Etcd(t).Get(ctxT(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read keyspace: %v", err)
	}
	snap := snapshot{keys: make(map[string]string, len(resp.Kvs)), rev: resp.Header.Revision, ownRevs: map[int64]bool{}}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if exempt(k) {
			snap.ownRevs[kv.ModRevision] = true
			continue
		}
		snap.keys[k] = fmt.Sprintf("mod=%d create=%d version=%d lease=%d value=%x", kv.ModRevision, kv.CreateRevision, kv.Version, kv.Lease, kv.Value)
	}
	return snap
}

// sameKeyspace fails t unless after is before, key for key and byte for
// byte, and etcd's revision moved only for the exempt families: a write
// undone within the request (a put and its delete) still moves the
// revision.
func sameKeyspace(t *testing.T, before, after snapshot) {
	t.Helper()
	for k, v := range after.keys {
		if bv, ok := before.keys[k]; !ok {
			t.Errorf("the request wrote key %s", k)
		} else if bv != v {
			t.Errorf("the request rewrote key %s", k)
		}
	}
	for k := range before.keys {
		if _, ok := after.keys[k]; !ok {
			t.Errorf("the request deleted key %s", k)
		}
	}
	for r := before.rev + 1; r <= after.rev; r++ {
		if !after.ownRevs[r] {
			t.Errorf("etcd revision %d was written during the request (revision %d before, %d after)", r, before.rev, after.rev)
		}
	}
}

// signer signs a request as a caller for a signing name, region and time.
type signer struct {
	creds   servertest.Creds
	service string
	region  string
	at      time.Time
}

func (s signer) sign(t *testing.T, req *http.Request, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	at := s.at
	if at.IsZero() {
		at = time.Now()
	}
	err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: s.creds.AccessKeyID,
		SecretAccessKey: s.creds.SecretAccessKey, SessionToken: s.creds.SessionToken},
		req, hex.EncodeToString(sum[:]), s.service, s.region, at)
	if err != nil {
		t.Fatalf("sign request: %v", err)
	}
}

// noContentType sends a request body without a Content-Type header.
const noContentType = "-"

// hostileCase is one malformed or hostile request and the refusal it must
// get.
type hostileCase struct {
	name     string
	category string
	// op is the operation the request is aimed at (an EKS operation, or
	// sts:/iam: and the query-protocol action); "" for a request that
	// names none (an unknown path).
	op string

	method, path string
	body         string
	// bodyBytes, when set, is sent instead of body.
	bodyBytes []byte
	// contentType is the Content-Type sent with a body: application/json
	// when "", none when noContentType.
	contentType string
	// header is set before signing (so it is signed when it is one the
	// signer signs).
	header map[string]string
	// chunked sends the body without a Content-Length.
	chunked bool
	// sign overrides the signature: the development administrator with
	// signing name eks (or sts for a query request) when nil.
	sign func(e *env, t *testing.T, req *http.Request, body []byte)
	// tamper changes the request after it was signed.
	tamper func(req *http.Request)
	// query marks an STS or IAM query-protocol request (XML answers).
	query bool

	// status and exception are the answer: the HTTP status and the
	// exception (X-Amzn-ErrorType; the query protocol's Error Code).
	status    int
	exception string
	// redirect, when set, is the Location of a redirect answer (which
	// carries no exception).
	redirect string
	// plainHTTP marks an answer net/http's server gives itself, before any
	// handler runs: a status, no exception, no JSON.
	plainHTTP bool
	// member is the member the message must name (empty when no member is
	// at fault); message, when set, is a part of the message it must hold.
	member, message string
}

// answer is what a refusal carried.
type answer struct {
	status    int
	exception string
	message   string
}

func (e *env) send(t *testing.T, c hostileCase) answer {
	t.Helper()
	body := []byte(c.body)
	if c.bodyBytes != nil {
		body = c.bodyBytes
	}
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(c.method, e.srv.URL+c.path, rd)
	if err != nil {
		t.Fatalf("build request: %v", err)
	}
	if len(body) > 0 {
		switch c.contentType {
		case "":
			req.Header.Set("Content-Type", "application/json")
		case noContentType:
		default:
			req.Header.Set("Content-Type", c.contentType)
		}
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.chunked {
		req.ContentLength = -1
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = nil
	}
	switch {
	case c.sign != nil:
		c.sign(e, t, req, body)
	case c.query:
		signer{creds: e.dev, service: "sts", region: e.region}.sign(t, req, body)
	default:
		e.srv.Sign(t, req, body, e.dev)
	}
	if c.tamper != nil {
		c.tamper(req)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	a := answer{status: resp.StatusCode}
	if c.plainHTTP {
		a.exception = resp.Header.Get("X-Amzn-Errortype")
		return a
	}
	if c.redirect != "" {
		if loc := resp.Header.Get("Location"); loc != c.redirect {
			t.Errorf("Location %q, want %q", loc, c.redirect)
		}
		a.exception = resp.Header.Get("X-Amzn-Errortype")
		return a
	}
	if c.query {
		var doc struct {
			Error struct {
				Type, Code, Message string
			}
			RequestID string `xml:"RequestId"`
		}
		if err := xml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("answer %d %q is not a query-protocol ErrorResponse: %v", resp.StatusCode, raw, err)
		}
		if want := map[bool]string{true: "Receiver", false: "Sender"}[resp.StatusCode >= 500]; doc.Error.Type != want {
			t.Errorf("Error Type %q, want %q", doc.Error.Type, want)
		}
		if doc.RequestID == "" || doc.RequestID != resp.Header.Get("X-Amzn-Requestid") {
			t.Errorf("RequestId %q, header %q", doc.RequestID, resp.Header.Get("X-Amzn-Requestid"))
		}
		a.exception, a.message = doc.Error.Code, doc.Error.Message
		return a
	}
	a.exception = resp.Header.Get("X-Amzn-Errortype")
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json (answer %q)", ct, raw)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("answer %d %q is not a JSON object: %v", resp.StatusCode, raw, err)
	}
	if typ, ok := doc["__type"]; ok && typ != a.exception {
		t.Errorf("__type %v differs from X-Amzn-ErrorType %q", typ, a.exception)
	}
	if _, ok := doc["code"]; ok {
		t.Errorf("the answer carries a numeric code member: %q", raw)
	}
	msg, ok := doc["message"].(string)
	if !ok {
		t.Errorf("the answer has no message: %q", raw)
	}
	a.message = msg
	if resp.Header.Get("X-Amzn-Requestid") == "" {
		t.Errorf("no X-Amzn-RequestId")
	}
	return a
}

// internals are words no AWS message holds: Go's and protojson's errors,
// grpc-gateway's, the implementation's packages and types.
func internals() []string {
	return []string{
		"proto:", "protojson", "proto.", "json:", "cannot unmarshal", "invalid character", "unexpected EOF",
		"exceeded max depth", "syntax error", "strconv", "rpc error", "grpc", "gRPC", "runtime error", "panic",
		"goroutine", "nil pointer", "saltbush.eks", "saltbush.storage", "saltbush.control", "github.com/", "eksv1", "storagev1", "controlv1", ".go:", "type mismatch",
		"parsing field", "parsing list", "(line ", "errdefs", "store:", "etcd", "context deadline", "context canceled",
		"struct {", "struct{", "map[", "interface {}", "[]string", "http: ", "net/http", "*errors", "Unmarshal",
		"unknown value for enum", "google.", "protobuf",
	}
}

// awsMessage fails t unless msg reads as AWS's: present, UTF-8, naming
// member when one is at fault, and free of the implementation's words.
func (e *env) awsMessage(t *testing.T, msg, member string) {
	t.Helper()
	if strings.TrimSpace(msg) == "" {
		t.Errorf("empty message")
		return
	}
	if !utf8.ValidString(msg) {
		t.Errorf("message %q is not UTF-8", msg)
	}
	for _, w := range internals() {
		if strings.Contains(msg, w) {
			t.Errorf("message %q shows %q", msg, w)
		}
	}
	for _, w := range e.snakeNames {
		if strings.Contains(msg, w) {
			t.Errorf("message %q shows the proto field name %q", msg, w)
		}
	}
	if member != "" && !strings.Contains(msg, member) {
		t.Errorf("message %q does not name the member %q", msg, member)
	}
}

// escape is url.PathEscape, which leaves ':' alone; the SDKs escape it in
// ARN labels, and so do these requests.
func escape(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ":", "%3A")
}
