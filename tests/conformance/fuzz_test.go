package conformance

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/saltbush/saltbush/server/servertest"
)

// FuzzCreateClusterBody sends arbitrary bytes as a CreateCluster body. Every
// answer must be a success or an AWS-shaped client error: never a 5xx, never
// a body without a message. (`go test` runs the seeds; `go test -fuzz` explores.)
func FuzzCreateClusterBody(f *testing.F) {
	for _, seed := range []string{
		createBody,
		`{}`, `[]`, `null`, `{"name":"a"}`, `{"name":"a","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
		`{"name":"a","tags":{"aws:x":"y"},"roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{}}`,
		`{"name":"\u0000","roleArn":1}`, `{"logging":{"clusterLogging":[{"types":[null]}]}}`, "\xff\xfe", `{"name":"a"` + strings.Repeat(" ", 100),
	} {
		f.Add(seed)
	}
	srv := servertest.Start(f)
	f.Fuzz(func(t *testing.T, body string) {
		resp := srv.Do(t, "POST", "/clusters", []byte(body))
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, b)
		}
		if resp.StatusCode == 200 {
			return
		}
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil || e["message"] == nil || resp.Header.Get("X-Amzn-ErrorType") == "" {
			t.Fatalf("status %d for %q: not an AWS error: %s", resp.StatusCode, body, b)
		}
	})
}

// FuzzAccessEntryBodies sends arbitrary bytes as the body of the access-entry
// operations that take one (create, update, associate) to an API-mode
// cluster: every answer must be a success or an AWS-shaped client error.
func FuzzAccessEntryBodies(f *testing.F) {
	for _, seed := range []string{
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","kubernetesGroups":["a"],"username":"u:{{SessionName}}","type":"STANDARD"}`,
		`{"principalArn":"arn:aws:iam::000000000000:role/fuzz","type":"EC2_LINUX"}`,
		`{"kubernetesGroups":[]}`, `{"kubernetesGroups":[1,null,{}]}`, `{"username":"{{SessionName}}"}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy","accessScope":{"type":"namespace","namespaces":["dev*"]}}`,
		`{"policyArn":"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy","accessScope":{"type":"cluster","namespaces":["x"]}}`,
		`{}`, `[]`, `null`, "\xff\xfe", `{"tags":{"aws:x":"y"}}`, `{"clientRequestToken":"` + strings.Repeat("x", 65) + `"}`,
	} {
		f.Add(uint8(0), seed)
		f.Add(uint8(1), seed)
		f.Add(uint8(2), seed)
	}
	srv := servertest.Start(f)
	resp := srv.Do(f, "POST", "/clusters", []byte(`{"name":"fuzz","roleArn":"arn:aws:iam::000000000000:role/x","resourcesVpcConfig":{},"accessConfig":{"authenticationMode":"API"}}`))
	_ = resp.Body.Close()
	if _, err := srv.IAM().CreatePrincipal(f.Context(), "arn:aws:iam::000000000000:role/fuzz"); err != nil {
		f.Fatal(err)
	}
	entry := "/clusters/fuzz/access-entries/arn%3Aaws%3Aiam%3A%3A000000000000%3Arole%2Ffuzz"
	paths := []string{"/clusters/fuzz/access-entries", entry, entry + "/access-policies"}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		resp := srv.Do(t, "POST", paths[int(op)%len(paths)], []byte(body))
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, b)
		}
		if resp.StatusCode == 200 {
			return
		}
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil || e["message"] == nil || resp.Header.Get("X-Amzn-ErrorType") == "" {
			t.Fatalf("status %d for %q: not an AWS error: %s", resp.StatusCode, body, b)
		}
	})
}
