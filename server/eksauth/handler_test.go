package eksauth

import (
	"strings"
	"testing"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/gateway"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name, body, exception, says, token string
	}{
		{"a token", `{"token":"a.b.c"}`, "", "", "a.b.c"},
		{"an empty body", ``, "", "", ""},
		{"not JSON", `token=a.b.c`, gateway.SerializationException, "not valid JSON", ""},
		{"trailing data", `{"token":"a.b.c"} {}`, gateway.SerializationException, "not valid JSON", ""},
		{"not an object", `["a.b.c"]`, gateway.SerializationException, "not a JSON object", ""},
		{"an unknown member", `{"token":"a.b.c","role":"x"}`, errdefs.InvalidParameterException, `unknown member "role"`, ""},
		{"a mistyped token", `{"token":1}`, errdefs.InvalidParameterException, "member token must be a string", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := decodeRequest([]byte(tc.body))
			if tc.exception == "" {
				if err != nil || (req.Token != nil) != (tc.token != "") || (req.Token != nil && *req.Token != tc.token) {
					t.Fatalf("decodeRequest: %+v, %v", req, err)
				}
				return
			}
			e := errdefs.Classify(err)
			if e == nil || e.Exception != tc.exception || !strings.Contains(e.Message, tc.says) || strings.Contains(e.Message, "json:") {
				t.Fatalf("decodeRequest: %v, want %s saying %q", err, tc.exception, tc.says)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name, cluster, token, exception string
	}{
		{"valid", "prod-1", "a.b.c", ""},
		{"an empty cluster name", "", "a.b.c", errdefs.InvalidParameterException},
		{"a cluster name of 101 characters", strings.Repeat("c", 101), "a.b.c", errdefs.InvalidParameterException},
		{"a cluster name starting with a dash", "-prod", "a.b.c", errdefs.InvalidParameterException},
		{"no token", "prod", "", errdefs.InvalidParameterException},
		{"a token that is not a JWT", "prod", "a.b", InvalidTokenException},
		{"a token too long", "prod", strings.Repeat("a", 20001) + ".b.c", InvalidTokenException},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.cluster, tc.token)
			if got := errdefs.Classify(err); (tc.exception == "") != (err == nil) || (err != nil && got.Exception != tc.exception) {
				t.Fatalf("Validate: %v, want %q", err, tc.exception)
			}
			if err != nil && strings.Contains(err.Error(), tc.token) && tc.token != "" {
				t.Fatalf("the message echoes the token: %v", err)
			}
		})
	}
}
