package conformance

import (
	"net/http"
	"reflect"
	"regexp"
	"testing"
)

// TestPodIdentityAssociationWireBodies checks the JSON on the wire, which
// the SDK's parser would smooth over: the members AWS always sends
// (`"tags": {}`, `"disableSessionTags": false`, `"associations": []`),
// epoch-second timestamps, absent optional members, and AWS's error
// bodies.
func TestPodIdentityAssociationWireBodies(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	base := h.srv.URL + "/clusters/" + h.cluster + "/pod-identity-associations"

	status, _, body := rawCall(t, h.srv, "GET", base, "")
	if status != http.StatusOK || !reflect.DeepEqual(body, map[string]any{"associations": []any{}}) {
		t.Errorf("List with none: %d %v, want {\"associations\": []}", status, body)
	}

	status, _, body = rawCall(t, h.srv, "POST", base,
		`{"namespace": "apps", "serviceAccount": "web", "roleArn": "arn:aws:iam::000000000000:role/pods"}`)
	if status != http.StatusOK {
		t.Fatalf("Create: %d %v", status, body)
	}
	a, _ := body["association"].(map[string]any)
	id, _ := a["associationId"].(string)
	if !regexp.MustCompile(`^a-[a-z0-9]{17}$`).MatchString(id) {
		t.Fatalf("associationId %q", id)
	}
	for _, ts := range []string{"createdAt", "modifiedAt"} {
		if _, ok := a[ts].(float64); !ok {
			t.Errorf("%s = %#v, want epoch seconds", ts, a[ts])
		}
	}
	want := map[string]any{
		"clusterName": h.cluster, "namespace": "apps", "serviceAccount": "web",
		"roleArn":        "arn:aws:iam::000000000000:role/pods",
		"associationArn": "arn:aws:eks:us-east-1:000000000000:podidentityassociation/" + h.cluster + "/" + id,
		"associationId":  id, "tags": map[string]any{}, "disableSessionTags": false,
		"createdAt": a["createdAt"], "modifiedAt": a["modifiedAt"],
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("created association on the wire\n%v\nwant\n%v", a, want)
	}

	status, _, body = rawCall(t, h.srv, "GET", base+"/"+id, "")
	if got, _ := body["association"].(map[string]any); status != http.StatusOK || !reflect.DeepEqual(got, want) {
		t.Errorf("Describe: %d %v", status, body)
	}
	status, _, body = rawCall(t, h.srv, "GET", base+"?namespace=apps&serviceAccount=web&maxResults=5", "")
	list, _ := body["associations"].([]any)
	if status != http.StatusOK || len(list) != 1 || !reflect.DeepEqual(list[0], map[string]any{
		"clusterName": h.cluster, "namespace": "apps", "serviceAccount": "web",
		"associationArn": want["associationArn"], "associationId": id,
	}) {
		t.Errorf("List filtered: %d %v", status, body)
	}

	errs := []struct {
		name, method, url, body string
		status                  int
		exception               string
	}{
		{"unknown body member", "POST", base, `{"namespace": "apps", "serviceAccount": "x", "roleArn": "arn:aws:iam::000000000000:role/pods", "bogus": 1}`,
			http.StatusBadRequest, ""},
		{"held service account", "POST", base, `{"namespace": "apps", "serviceAccount": "web", "roleArn": "arn:aws:iam::000000000000:role/pods"}`,
			http.StatusConflict, "ResourceInUseException"},
		{"unknown id", "GET", base + "/a-00000000000000000", "", http.StatusNotFound, "ResourceNotFoundException"},
		{"short id", "DELETE", base + "/a-1", "", http.StatusBadRequest, "InvalidParameterException"},
		{"unknown cluster", "GET", h.srv.URL + "/clusters/nope/pod-identity-associations", "", http.StatusNotFound, "ResourceNotFoundException"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := rawCall(t, h.srv, tc.method, tc.url, tc.body)
			if status != tc.status || (tc.exception != "" && hdr.Get("X-Amzn-Errortype") != tc.exception) {
				t.Errorf("%d %s %v, want %d %s", status, hdr.Get("X-Amzn-Errortype"), body, tc.status, tc.exception)
			}
			if msg, _ := body["message"].(string); msg == "" {
				t.Errorf("error body %v has no message", body)
			}
			if _, ok := body["code"]; ok {
				t.Errorf("error body %v has a numeric code member", body)
			}
		})
	}

	status, _, body = rawCall(t, h.srv, "DELETE", base+"/"+id, "")
	if got, _ := body["association"].(map[string]any); status != http.StatusOK || got["associationId"] != id {
		t.Errorf("Delete: %d %v", status, body)
	}
}
