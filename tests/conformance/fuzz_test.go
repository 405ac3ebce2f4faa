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
		defer resp.Body.Close()
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
