package gateway

import (
	"reflect"
	"testing"
)

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
			if got := parseMessage(tc.op, tc.member, tc.detail); got != tc.want {
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
