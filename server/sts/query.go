package sts

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/saltbush/saltbush/errdefs"
)

// The two query-protocol APIs this endpoint answers, by their Version
// parameter, signing name and XML namespace (botocore's models
// sts/2011-06-15 and iam/2010-05-08).
type api struct {
	name      string // signing name in the credential scope
	version   string
	namespace string
}

var (
	apiSTS = api{name: "sts", version: "2011-06-15", namespace: "https://sts.amazonaws.com/doc/2011-06-15/"}
	apiIAM = api{name: "iam", version: "2010-05-08", namespace: "https://iam.amazonaws.com/doc/2010-05-08/"}
)

// IsQueryRequest reports whether r is shaped as an AWS query-protocol call
// (STS, IAM) rather than an EKS REST call: the path is "/" and it is a POST
// with a form body, or a GET with an Action parameter. No EKS route is
// "/", so the two never overlap.
func IsQueryRequest(r *http.Request) bool {
	if r.URL.Path != "/" {
		return false
	}
	switch r.Method {
	case http.MethodPost:
		ct := strings.ToLower(strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]))
		return ct == "application/x-www-form-urlencoded" || r.URL.Query().Has("Action")
	case http.MethodGet:
		return r.URL.Query().Has("Action")
	}
	return false
}

// queryError is an error of the query protocol: a code from the model, the
// sender or receiver fault type and the HTTP status.
type queryError struct {
	status  int
	code    string
	message string
}

func (e *queryError) Error() string { return e.code + ": " + e.message }

func senderError(status int, code, format string, args ...any) *queryError {
	return &queryError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// toQueryError converts an error of the façade's authentication or of
// saltbush's services (errdefs) into the query protocol's codes, once.
func toQueryError(err error, a api) *queryError {
	if qe, ok := err.(*queryError); ok {
		return qe
	}
	e := errdefs.Classify(err)
	switch e.Exception {
	case errdefs.MissingAuthenticationTokenException:
		return senderError(http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
	case errdefs.UnrecognizedClientException:
		return senderError(http.StatusForbidden, "InvalidClientTokenId", "%s", e.Message)
	case errdefs.InvalidSignatureException:
		return senderError(http.StatusForbidden, "SignatureDoesNotMatch", "%s", e.Message)
	case errdefs.ExpiredTokenException:
		// AWS's STS and IAM send the code ExpiredToken (the SDKs
		// refresh credentials on it).
		return senderError(http.StatusBadRequest, "ExpiredToken", "%s", e.Message)
	case errdefs.AccessDeniedException:
		return senderError(http.StatusForbidden, "AccessDenied", "%s", e.Message)
	case errdefs.ThrottlingException:
		return senderError(http.StatusBadRequest, "Throttling", "%s", e.Message)
	case errdefs.InvalidParameterException, errdefs.ClientException, errdefs.BadRequestException, errdefs.InvalidRequestException:
		if a == apiIAM {
			return senderError(http.StatusBadRequest, "InvalidInput", "%s", e.Message)
		}
		return senderError(http.StatusBadRequest, "ValidationError", "%s", e.Message)
	case errdefs.ResourceNotFoundException, errdefs.NotFoundException:
		if a == apiIAM {
			return senderError(http.StatusNotFound, "NoSuchEntity", "%s", e.Message)
		}
		return senderError(http.StatusBadRequest, "ValidationError", "%s", e.Message)
	case errdefs.ServiceUnavailableException:
		return &queryError{status: http.StatusServiceUnavailable, code: "ServiceUnavailable", message: e.Message}
	case "RequestEntityTooLargeException":
		return senderError(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "%s", e.Message)
	}
	if a == apiIAM {
		return &queryError{status: http.StatusInternalServerError, code: "ServiceFailure", message: "An internal error occurred."}
	}
	return &queryError{status: http.StatusInternalServerError, code: "InternalFailure", message: "An internal error occurred."}
}

// errorBody is the query protocol's error document.
type errorBody struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Error     errorXML `xml:"Error"`
	RequestID string   `xml:"RequestId"`
}

type errorXML struct {
	Type    string `xml:"Type"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// writeError writes an ErrorResponse document.
func writeError(w http.ResponseWriter, a api, rid string, e *queryError) {
	typ := "Sender"
	if e.status >= 500 {
		typ = "Receiver"
	}
	writeXML(w, e.status, errorBody{Xmlns: a.namespace, Error: errorXML{Type: typ, Code: e.code, Message: e.message}, RequestID: rid})
}

// metadata is every response's ResponseMetadata.
type metadata struct {
	RequestID string `xml:"RequestId"`
}

func writeXML(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	b.WriteString(xml.Header[:len(xml.Header)-1])
	_ = xml.NewEncoder(&b).Encode(v) // the documents are fixed structs of strings
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// params are the request's query-protocol parameters.
type params url.Values

func (p params) get(name string) (string, bool) {
	vs, ok := p[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// has reports whether any parameter of a structure or list named name was
// sent (Name, Name.member.1, Name.member.1.Key, ...).
func (p params) has(name string) bool {
	for k := range p {
		if k == name || strings.HasPrefix(k, name+".") {
			return true
		}
	}
	return false
}
