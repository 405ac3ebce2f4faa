package gateway

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// testModel is the part of AWS's EKS model these tests word messages
// with, as server/validation's table has it (its TestModelForTheFacade
// checks the same answers against the table).
type testModel struct{}

var testMembers = map[string][2]string{
	"CreateCluster resourcesVpcConfig": {"resourcesVpcConfig", "a structure"},
	"UpdateAddon configurationValues":  {"configurationValues", "a string"},
	"ListInsights maxResults":          {"maxResults", "an integer"},
}

func (testModel) Exception(string) (string, bool) { return "", false }

func (testModel) Member(op string, path []any) (string, string, bool) {
	m, ok := testMembers[op+" "+fmt.Sprint(path...)]
	return m[0], m[1], ok
}

func (testModel) MemberConstraint(op, name string) (minV, maxV *int64, ok bool) {
	if (op == "ListAddons" || op == "ListInsights") && name == "maxResults" {
		one, hundred := int64(1), int64(100)
		return &one, &hundred, true
	}
	return nil, nil, false
}

// Render writes values as AWS's messages do: lists as [a, b], objects as
// {k=v, …} with sorted keys.
func (m testModel) Render(value any) string {
	switch x := value.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, it := range x {
			parts[i] = m.Render(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + m.Render(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case json.Number:
		return x.String()
	}
	return fmt.Sprint(value)
}

func TestPathAt(t *testing.T) {
	tests := []struct {
		name string
		body string
		// at is the text whose first byte is the offset asked about.
		at   string
		want []any
	}{
		{name: "top-level member", body: `{"tags": 5}`, at: `5`, want: []any{"tags"}},
		{name: "after another member", body: `{"addonName": "a", "tags": [1]}`, at: `[1]`, want: []any{"tags"}},
		{name: "member of a list element", body: `{"p": [{"s": "a"}, {"s": "b", "r": 5}]}`, at: `5`, want: []any{"p", 1, "r"}},
		{name: "nested structure", body: "{\n \"a\": {\"b\": {\"c\": true}}}", at: `true`, want: []any{"a", "b", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			off := len(tc.body) - len(tc.at) - len(trailing(tc.body, tc.at))
			got, ok := pathAt([]byte(tc.body), off)
			if !ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pathAt = %v %v, want %v", got, ok, tc.want)
			}
		})
	}
}

// trailing is what follows the last occurrence of at in body.
func trailing(body, at string) string {
	for i := len(body) - len(at); i >= 0; i-- {
		if body[i:i+len(at)] == at {
			return body[i+len(at):]
		}
	}
	return ""
}

func TestParseMessage(t *testing.T) {
	tests := []struct {
		name, op, member, detail, want string
	}{
		{
			name: "not an integer", op: "ListAddons", member: "maxResults", detail: `strconv.ParseInt: parsing "abc": invalid syntax`,
			want: "1 validation error detected: Value 'abc' at 'maxResults' failed to satisfy constraint: Member must be an integer",
		},
		{
			name: "beyond 32 bits, above", op: "ListAddons", member: "maxResults", detail: `strconv.ParseInt: parsing "9999999999": value out of range`,
			want: "1 validation error detected: Value '9999999999' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100",
		},
		{
			name: "beyond 32 bits, below", op: "ListAddons", member: "maxResults", detail: `strconv.ParseInt: parsing "-9999999999": value out of range`,
			want: "1 validation error detected: Value '-9999999999' at 'maxResults' failed to satisfy constraint: Member must have value greater than or equal to 1",
		},
		{
			name: "not a boolean", op: "DeleteAddon", member: "preserve", detail: `strconv.ParseBool: parsing "maybe": invalid syntax`,
			want: "1 validation error detected: Value 'maybe' at 'preserve' failed to satisfy constraint: Member must be a boolean (true or false)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseMessage(testModel{}, tc.op, tc.member, tc.detail); got != tc.want {
				t.Errorf("parseMessage\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestJSONName(t *testing.T) {
	for field, want := range map[string]string{"max_results": "maxResults", "name": "name", "service_account_role_arn": "serviceAccountRoleArn"} {
		if got := jsonName(field); got != want {
			t.Errorf("jsonName(%q) = %q, want %q", field, got, want)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		name, op, body, msg, want string
	}{
		{
			name: "a list where a structure belongs", op: "CreateCluster", body: `{"resourcesVpcConfig": ["a", 1]}`,
			msg:  `proto: syntax error (line 1:24): unexpected token [`,
			want: "1 validation error detected: Value '[a, 1]' at 'resourcesVpcConfig' failed to satisfy constraint: Member must be a structure",
		},
		{
			name: "an object where a string belongs", op: "UpdateAddon", body: `{"configurationValues": {"b": 2, "a": 1}}`,
			msg:  `proto: syntax error (line 1:25): unexpected token {`,
			want: "1 validation error detected: Value '{a=1, b=2}' at 'configurationValues' failed to satisfy constraint: Member must be a string",
		},
		{
			name: "a body integer beyond 32 bits", op: "ListInsights", body: `{"maxResults": 9223372036854775808}`,
			msg:  `proto: (line 1:16): invalid value for int32 field maxResults: 9223372036854775808`,
			want: "1 validation error detected: Value '9223372036854775808' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100",
		},
		{
			name: "a negative body integer beyond 32 bits", op: "ListInsights", body: `{"maxResults": -9223372036854775809}`,
			msg:  `proto: (line 1:16): invalid value for int32 field maxResults: -9223372036854775809`,
			want: "1 validation error detected: Value '-9223372036854775809' at 'maxResults' failed to satisfy constraint: Member must have value greater than or equal to 1",
		},
		{
			name: "a body fraction", op: "ListInsights", body: `{"maxResults": 1.5}`,
			msg:  `proto: (line 1:16): invalid value for int32 field maxResults: 1.5`,
			want: "1 validation error detected: Value '1.5' at 'maxResults' failed to satisfy constraint: Member must be an integer",
		},
		{
			name: "a duplicate member", op: "CreateAddon", body: `{"addonName": "a", "addonName": "b"}`,
			msg:  "proto:\u00a0(line 1:20): duplicate field \"addonName\"",
			want: `Could not parse the request body: duplicate field "addonName"`,
		},
		{
			name: "a protojson syntax error keeps its detail only", op: "CreateCluster", body: `{"name": "x"}`,
			msg:  "proto: syntax error (line 1:10): something else",
			want: `Could not parse the request body: something else`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeMessage(testModel{}, tc.op, []byte(tc.body), tc.msg); got != tc.want {
				t.Errorf("decodeMessage\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestIsEncodingError(t *testing.T) {
	for msg, want := range map[string]bool{
		"proto: syntax error (line 1:10): invalid UTF-8 in string": true,
		"proto: (line 1:2): unknown field \"x\"":                   false,
		"invalid UTF-8 somewhere":                                  false,
	} {
		if got := isEncodingError(msg); got != want {
			t.Errorf("isEncodingError(%q) = %v, want %v", msg, got, want)
		}
	}
}
