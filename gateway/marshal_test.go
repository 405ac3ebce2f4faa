package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

func TestAWSJSONTopLevelLists(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	tests := []struct {
		name string
		msg  any
		want map[string]any
	}{
		{"empty list response", &eksv1.ListClustersResponse{}, map[string]any{"clusters": []any{}}},
		{"list with a token", &eksv1.ListClustersResponse{NextToken: "t"}, map[string]any{"clusters": []any{}, "nextToken": "t"}},
		{"full list", &eksv1.ListClustersResponse{Clusters: []string{"a"}}, map[string]any{"clusters": []any{"a"}}},
		{"nested lists stay absent", &eksv1.DescribeClusterResponse{Cluster: &eksv1.Cluster{Name: "a"}},
			map[string]any{"cluster": map[string]any{"name": "a"}}},
		{"no lists at all", &eksv1.DescribeClusterResponse{}, map[string]any{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := m.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("invalid JSON %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Marshal = %s, want %v", b, tc.want)
			}
		})
	}
}

func TestAWSJSONAlwaysPresentMembers(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	tests := []struct {
		name string
		msg  any
		want map[string]any
	}{
		{"add-on without tags or issues", &eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{AddonName: "coredns"}},
			map[string]any{"addon": map[string]any{"addonName": "coredns", "tags": map[string]any{}, "health": map[string]any{"issues": []any{}}}}},
		{"add-on with an issue keeps it", &eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{
			AddonName: "a\"b}", Tags: map[string]string{"k": "v,}"},
			Health: &eksv1.AddonHealth{Issues: []*eksv1.AddonIssue{{Code: "InternalFailure", Message: "x]"}}},
		}}, map[string]any{"addon": map[string]any{"addonName": "a\"b}", "tags": map[string]any{"k": "v,}"},
			"health": map[string]any{"issues": []any{map[string]any{"code": "InternalFailure", "message": "x]"}}}}}},
		{"update lists", &eksv1.UpdateAddonResponse{Update: &eksv1.Update{Id: "u"}},
			map[string]any{"update": map[string]any{"id": "u", "params": []any{}, "errors": []any{}}}},
		{"untagged resource", &eksv1.ListTagsForResourceResponse{}, map[string]any{"tags": map[string]any{}}},
		{"unmarked nested members stay absent", &eksv1.DescribeAddonVersionsResponse{Addons: []*eksv1.AddonInfo{{AddonName: "x"}}},
			map[string]any{"addons": []any{map[string]any{"addonName": "x"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := m.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("invalid JSON %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Marshal = %s, want %v", b, tc.want)
			}
		})
	}
}

func TestObjectMembersScansAwkwardJSON(t *testing.T) {
	b := []byte(` { "a" : "x\"}" , "b":[1,{"c":"]"}], "d" :{"e":{}} ,"f":-1.5e3,"g":null} `)
	spans, err := legacyObjectMembers(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": `"x\"}"`, "b": `[1,{"c":"]"}]`, "d": `{"e":{}}`, "f": `-1.5e3`, "g": `null`}
	for name, v := range want {
		sp, ok := spans[name]
		if !ok || string(b[sp[0]:sp[1]]) != v {
			t.Errorf("member %s = %q, want %q", name, b[sp[0]:sp[1]], v)
		}
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":"x`, `{"a":1 "b":2}`} {
		if _, err := legacyObjectMembers([]byte(bad)); err == nil {
			t.Errorf("objectMembers(%q) accepted malformed JSON", bad)
		}
	}
}

func TestAWSJSONRefusesPathMembersInTheBody(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	tests := []struct {
		name    string
		body    string
		into    proto.Message
		wantErr bool
	}{
		{"body members only", `{"addonName":"coredns"}`, &eksv1.CreateAddonRequest{}, false},
		{"cluster name in a CreateAddon body", `{"addonName":"coredns","clusterName":"other"}`, &eksv1.CreateAddonRequest{}, true},
		{"add-on name in an UpdateAddon body", `{"addonName":"other"}`, &eksv1.UpdateAddonRequest{}, true},
		{"ARN in a TagResource body", `{"resourceArn":"arn:aws:eks:us-east-1:000000000000:cluster/x","tags":{"a":"b"}}`, &eksv1.TagResourceRequest{}, true},
		{"empty path member is no member", `{"clusterName":""}`, &eksv1.CreateAddonRequest{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := m.NewDecoder(strings.NewReader(tc.body)).Decode(tc.into)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Decode(%s) = %v, want error %v", tc.body, err, tc.wantErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "proto:") {
				t.Errorf("error %q is not worded as a body decode error", err)
			}
		})
	}
}

// TestDecoderOneValue: the body is one JSON value; anything after it but
// whitespace is a syntax error (which the error handler answers with
// SerializationException), never silently dropped.
func TestDecoderOneValue(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	tests := []struct {
		name, body string
		// syntax is true when the body must be refused as not JSON.
		syntax bool
	}{
		{name: "one object", body: `{"addonName": "a"}`},
		{name: "whitespace after it", body: "{\"addonName\": \"a\"}\n\t "},
		{name: "garbage after it", body: `{"addonName": "a"} garbage`, syntax: true},
		{name: "a second object", body: `{"addonName": "a"} {"addonName": "b"}`, syntax: true},
		{name: "a closing brace too many", body: `{"addonName": "a"}}`, syntax: true},
		{name: "truncated", body: `{"addonName": `, syntax: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req eksv1.CreateAddonRequest
			err := m.NewDecoder(strings.NewReader(tc.body)).Decode(&req)
			switch {
			case tc.syntax && (err == nil || !isSyntaxError(err.Error())):
				t.Errorf("Decode(%q) = %v, want a syntax error", tc.body, err)
			case !tc.syntax && err != nil:
				t.Errorf("Decode(%q) = %v", tc.body, err)
			case !tc.syntax && req.GetAddonName() != "a":
				t.Errorf("Decode(%q) addonName %q, want a", tc.body, req.GetAddonName())
			}
		})
	}
}
