package conformance

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/saltbush/saltbush/server/servertest"
)

// rawCall sends one HTTP request, SigV4-signed as the development
// administrator, and returns status, headers and the body parsed as JSON.
func rawCall(t *testing.T, srv *servertest.Server, method, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	srv.Sign(t, req, []byte(body), srv.Dev(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var parsed map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &parsed); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode, resp.Header, parsed
}

// golden compares got with testdata/name as parsed JSON (protojson output is
// deliberately unstable byte-wise, so bytes are never compared).
func golden(t *testing.T, name string, got map[string]any) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(got); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s: %v (run with UPDATE_GOLDEN=1 to create it)", path, err)
	}
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("golden %s: %v", path, err)
	}
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("%s: wire body differs from golden\n got: %s\nwant: %s", name, gb, b)
	}
}

// normalizeCluster replaces the members that differ on every run with
// markers, after checking their type.
func normalizeCluster(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	c, ok := body["cluster"].(map[string]any)
	if !ok {
		t.Fatalf("no cluster object in %v", body)
	}
	if _, ok := c["createdAt"].(float64); !ok {
		t.Errorf("createdAt = %#v, want a JSON number (epoch seconds)", c["createdAt"])
	}
	c["createdAt"] = "<epoch-seconds>"
	// id is an Outposts cluster's; eksctl would sign tokens with it.
	if id, ok := c["id"]; ok {
		t.Errorf("id = %#v, want no id (AWS sends it only for local clusters on Outposts)", id)
	}
	return body
}

const createBody = `{
  "name": "wire-1",
  "version": "1.34",
  "roleArn": "arn:aws:iam::000000000000:role/eks-cluster",
  "resourcesVpcConfig": {"subnetIds": ["subnet-a", "subnet-b"], "securityGroupIds": ["sg-1"], "endpointPublicAccess": false, "endpointPrivateAccess": true},
  "kubernetesNetworkConfig": {"serviceIpv4Cidr": "10.96.0.0/12"},
  "clientRequestToken": "wire-token-1",
  "tags": {"env": "test"},
  "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": false},
  "upgradePolicy": {"supportType": "STANDARD"},
  "computeConfig": {"enabled": true, "nodePools": ["general-purpose"], "nodeRoleArn": "arn:aws:iam::000000000000:role/eks-node"},
  "storageConfig": {"blockStorage": {"enabled": true}},
  "remoteNetworkConfig": {"remoteNodeNetworks": [{"cidrs": ["10.200.0.0/16"]}], "remotePodNetworks": [{"cidrs": ["10.201.0.0/16"]}]},
  "controlPlaneScalingConfig": {"tier": "standard"}
}`

func TestClusterWireBodies(t *testing.T) {
	srv := servertest.Start(t)

	// AWS sends an empty list as [], not as an absent member.
	status, _, body := rawCall(t, srv, "GET", srv.URL+"/clusters", "")
	if status != http.StatusOK || !reflect.DeepEqual(body, map[string]any{"clusters": []any{}}) {
		t.Errorf("ListClusters with no clusters: %d %v, want {\"clusters\": []}", status, body)
	}

	status, hdr, body := rawCall(t, srv, "POST", srv.URL+"/clusters", createBody)
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("CreateCluster: %d %s %v", status, hdr.Get("Content-Type"), body)
	}
	golden(t, "create_cluster.json", normalizeCluster(t, body))

	status, _, body = rawCall(t, srv, "GET", srv.URL+"/clusters/wire-1", "")
	if status != http.StatusOK {
		t.Fatalf("DescribeCluster: %d %v", status, body)
	}
	golden(t, "describe_cluster.json", normalizeCluster(t, body))

	status, _, body = rawCall(t, srv, "GET", srv.URL+"/clusters?maxResults=10", "")
	if status != http.StatusOK {
		t.Fatalf("ListClusters: %d %v", status, body)
	}
	golden(t, "list_clusters.json", body)

	status, _, body = rawCall(t, srv, "DELETE", srv.URL+"/clusters/wire-1", "")
	if status != http.StatusOK {
		t.Fatalf("DeleteCluster: %d %v", status, body)
	}
	golden(t, "delete_cluster.json", normalizeCluster(t, body))
}

func TestWireErrors(t *testing.T) {
	srv := servertest.Start(t)
	if status, _, body := rawCall(t, srv, "POST", srv.URL+"/clusters", createBody); status != http.StatusOK {
		t.Fatalf("CreateCluster: %d %v", status, body)
	}

	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantType   string
		wantBody   map[string]any // exact, when set
	}{
		{
			name: "unknown cluster", method: "GET", path: "/clusters/nope",
			wantStatus: 404, wantType: "ResourceNotFoundException",
			wantBody: map[string]any{"message": "No cluster found for name: nope.", "clusterName": "nope"},
		},
		{
			name: "duplicate", method: "POST", path: "/clusters",
			body:       `{"name":"wire-1","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
			wantStatus: 409, wantType: "ResourceInUseException",
			wantBody: map[string]any{"message": "Cluster already exists with name: wire-1", "clusterName": "wire-1"},
		},
		{
			name: "unknown body member", method: "POST", path: "/clusters",
			body:       `{"name":"u1","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"bogus":true}`,
			wantStatus: 400, wantType: "InvalidParameterException",
			wantBody: map[string]any{"message": `Could not parse the request body: unknown field "bogus"`},
		},
		{
			name: "unknown nested member", method: "POST", path: "/clusters",
			body:       `{"name":"u2","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{"subnets":["a"]}}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			// What AWS's services answer a body that is not JSON, modelled or
			// not (docs/contracts.md, "Input validation").
			name: "body is not JSON", method: "POST", path: "/clusters", body: `{"name":`,
			wantStatus: 400, wantType: "SerializationException",
		},
		{
			name: "wrong member type", method: "POST", path: "/clusters",
			body:       `{"name":42,"roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "missing roleArn", method: "POST", path: "/clusters",
			body:       `{"name":"u3","resourcesVpcConfig":{}}`,
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "percent-encoded slash stays in the label", method: "GET", path: "/clusters/a%2Fb",
			wantStatus: 400, wantType: "ClientException", // DescribeCluster's model lists no InvalidParameterException
		},
		{
			name: "unknown path", method: "GET", path: "/no-such-thing",
			wantStatus: 404, wantType: "UnknownOperationException",
		},
		{
			name: "wrong method", method: "PUT", path: "/clusters",
			wantStatus: 405, wantType: "UnknownOperationException",
		},
		{
			name: "maxResults not a number", method: "GET", path: "/clusters?maxResults=lots",
			wantStatus: 400, wantType: "InvalidParameterException",
		},
		{
			name: "body too large", method: "POST", path: "/clusters",
			body:       `{"name":"big","tags":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`,
			wantStatus: 413, wantType: "RequestEntityTooLargeException",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := rawCall(t, srv, tc.method, srv.URL+tc.path, tc.body)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %v)", status, tc.wantStatus, body)
			}
			if got := hdr.Get("X-Amzn-ErrorType"); got != tc.wantType {
				t.Errorf("X-Amzn-ErrorType = %q, want %q", got, tc.wantType)
			}
			if hdr.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", hdr.Get("Content-Type"))
			}
			if hdr.Get("X-Amzn-RequestId") == "" {
				t.Error("no X-Amzn-RequestId")
			}
			if msg, _ := body["message"].(string); msg == "" {
				t.Errorf("body %v has no message", body)
			}
			if _, ok := body["code"]; ok {
				t.Errorf("body %v has a code member (breaks the Go SDK)", body)
			}
			if tc.wantBody != nil && !reflect.DeepEqual(body, tc.wantBody) {
				t.Errorf("body = %v, want %v", body, tc.wantBody)
			}
		})
	}

	// A chunked body (no Content-Length) over the limit is refused the same way.
	t.Run("chunked body too large", func(t *testing.T) {
		body := `{"name":"big","tags":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`
		req, err := http.NewRequest("POST", srv.URL+"/clusters", io.NopCloser(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // unknown: sent chunked
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Amzn-ErrorType") != "RequestEntityTooLargeException" {
			t.Errorf("chunked oversize body: %d %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"))
		}
	})

	// Only wire-1 exists: no failed request wrote anything.
	_, _, body := rawCall(t, srv, "GET", srv.URL+"/clusters", "")
	if !reflect.DeepEqual(body, map[string]any{"clusters": []any{"wire-1"}}) {
		t.Errorf("clusters after failed requests = %v", body)
	}
}

func TestPercentEncodedPathLabels(t *testing.T) {
	srv := servertest.Start(t)
	if status, _, body := rawCall(t, srv, "POST", srv.URL+"/clusters",
		`{"name":"my-cluster_1","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`); status != 200 {
		t.Fatalf("CreateCluster: %d %v", status, body)
	}
	// Every escaped form of the same name reaches the same cluster.
	for _, path := range []string{"/clusters/my-cluster_1", "/clusters/my%2Dcluster%5F1", "/clusters/%6Dy-cluster_1"} {
		status, _, body := rawCall(t, srv, "GET", srv.URL+path, "")
		if status != 200 {
			t.Errorf("GET %s: %d %v", path, status, body)
			continue
		}
		if name := body["cluster"].(map[string]any)["name"]; name != "my-cluster_1" {
			t.Errorf("GET %s: name = %v", path, name)
		}
	}
}

func TestOperationalEndpoints(t *testing.T) {
	srv := servertest.Start(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s = %d", path, resp.StatusCode)
		}
	}
	// A request, then its metric.
	rawCall(t, srv, "GET", srv.URL+"/clusters/nope", "")
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Contains(b, []byte(`saltbush_http_requests_total{code="404",method="GET"}`)) {
		t.Errorf("/metrics lacks the façade request counter:\n%s", b)
	}
	resp, err = http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	_ = resp.Body.Close()
	if paths, _ := doc["paths"].(map[string]any); paths["/clusters/{name}"] == nil {
		t.Errorf("openapi.json has no /clusters/{name} path")
	}
}
