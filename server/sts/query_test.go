package sts

import (
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/saltbush/saltbush/errdefs"
)

func TestIsQueryRequest(t *testing.T) {
	tests := []struct {
		name, method, target, contentType string
		want                              bool
	}{
		{"form POST", http.MethodPost, "/", "application/x-www-form-urlencoded; charset=utf-8", true},
		{"GET with Action", http.MethodGet, "/?Action=GetCallerIdentity&Version=2011-06-15", "", true},
		{"POST with Action in the query", http.MethodPost, "/?Action=GetCallerIdentity", "", true},
		{"GET without Action", http.MethodGet, "/", "", false},
		{"JSON POST", http.MethodPost, "/", "application/json", false},
		{"EKS route", http.MethodPost, "/clusters", "application/x-www-form-urlencoded", false},
		{"EKS GET with an Action parameter", http.MethodGet, "/clusters?Action=x", "", false},
		{"DELETE", http.MethodDelete, "/?Action=AssumeRole", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, nil)
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			if got := IsQueryRequest(r); got != tc.want {
				t.Errorf("IsQueryRequest = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestErrorDocument: the query protocol's ErrorResponse, in the API's
// namespace, with the codes AWS sends for each kind of failure.
func TestErrorDocument(t *testing.T) {
	tests := []struct {
		name   string
		api    api
		err    error
		status int
		code   string
		typ    string
	}{
		{"unsigned", apiSTS, &errdefs.Error{Exception: errdefs.MissingAuthenticationTokenException, Message: "x"}, 403, "MissingAuthenticationToken", "Sender"},
		{"unknown key", apiSTS, &errdefs.Error{Exception: errdefs.UnrecognizedClientException, Message: "x"}, 403, "InvalidClientTokenId", "Sender"},
		{"bad signature", apiIAM, &errdefs.Error{Exception: errdefs.InvalidSignatureException, Message: "x"}, 403, "SignatureDoesNotMatch", "Sender"},
		{"expired session", apiSTS, &errdefs.Error{Exception: errdefs.ExpiredTokenException, Message: "x"}, 400, "ExpiredToken", "Sender"},
		{"denied", apiSTS, errdefs.AccessDenied("no"), 403, "AccessDenied", "Sender"},
		{"invalid STS input", apiSTS, errdefs.InvalidParameter("no"), 400, "ValidationError", "Sender"},
		{"invalid IAM input", apiIAM, errdefs.InvalidParameter("no"), 400, "InvalidInput", "Sender"},
		{"IAM not found", apiIAM, errdefs.NotFound("no"), 404, "NoSuchEntity", "Sender"},
		{"throttled", apiSTS, errdefs.Throttling("Rate exceeded"), 400, "Throttling", "Sender"},
		{"internal", apiSTS, errStr("etcd: boom"), 500, "InternalFailure", "Receiver"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, tc.api, "rid-1", toQueryError(tc.err, tc.api))
			if rec.Code != tc.status {
				t.Errorf("status = %d, want %d", rec.Code, tc.status)
			}
			var doc struct {
				XMLName xml.Name
				Error   struct{ Type, Code, Message string }
				ReqID   string `xml:"RequestId"`
			}
			if err := xml.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if doc.XMLName.Local != "ErrorResponse" || doc.XMLName.Space != tc.api.namespace {
				t.Errorf("root = %v, want ErrorResponse in %s", doc.XMLName, tc.api.namespace)
			}
			if doc.Error.Code != tc.code || doc.Error.Type != tc.typ || doc.ReqID != "rid-1" {
				t.Errorf("error = %+v request id %q, want %s %s rid-1", doc.Error, doc.ReqID, tc.typ, tc.code)
			}
			if strings.Contains(doc.Error.Message, "etcd") {
				t.Errorf("message %q leaks internals", doc.Error.Message)
			}
		})
	}
}

type errStr string

func (e errStr) Error() string { return string(e) }
