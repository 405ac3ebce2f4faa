package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/errdefs"
)

// SerializationException is what AWS's services answer a request body that
// is not JSON at all. No EKS operation models it; it is what AWS sends
// (docs/contracts.md, "Input validation").
const SerializationException = "SerializationException"

// requestError is an error grpc-gateway raised before the service ran: a
// body it could not decode, a query parameter or path label it could not
// parse. It is rendered in AWS's words, with the exception the operation's
// model lists for validation errors; ok is false for any other error. body
// is the request's body.
func requestError(ctx context.Context, model Model, st *status.Status, body []byte) (e *errdefs.Error, httpStatus int, ok bool) {
	if st.Code() != codes.InvalidArgument || fromService(st) {
		return nil, 0, false
	}
	exception := errdefs.InvalidParameterException
	op := operationOf(ctx)
	if exc, found := model.Exception(op); found {
		exception = exc
	}
	msg := st.Message()
	switch {
	case isSyntaxError(msg) || isEncodingError(msg):
		return &errdefs.Error{Exception: SerializationException, Message: "The request body is not valid JSON."},
			http.StatusBadRequest, true
	case strings.HasPrefix(msg, "proto:") && !isObject(body):
		return &errdefs.Error{Exception: SerializationException, Message: "The request body is not a JSON object."},
			http.StatusBadRequest, true
	case strings.HasPrefix(msg, "proto:"):
		// A body protojson could not decode (an unknown or mistyped
		// member): say which member, without the decoder's internals.
		return &errdefs.Error{Exception: exception, Message: decodeMessage(model, op, body, msg)},
			http.StatusBadRequest, true
	}
	if m := queryParseError.FindStringSubmatch(msg); m != nil {
		return &errdefs.Error{Exception: exception, Message: parseMessage(model, op, jsonName(m[1]), m[2])}, http.StatusBadRequest, true
	}
	if m := tooManyValues.FindStringSubmatch(msg); m != nil {
		return &errdefs.Error{Exception: exception, Message: fmt.Sprintf(
			"1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must have one value",
			m[2], jsonName(m[1]))}, http.StatusBadRequest, true
	}
	if m := pathParseError.FindStringSubmatch(msg); m != nil {
		return &errdefs.Error{Exception: exception, Message: parseMessage(model, op, jsonName(m[1]), m[2])}, http.StatusBadRequest, true
	}
	return nil, 0, false
}

// bodyOf is the body of a request ServeHTTP read (nil for any other).
func bodyOf(r *http.Request) []byte {
	if b, ok := r.Body.(*requestBody); ok {
		return b.payload
	}
	return nil
}

// noModel is the model of a façade configured without one: it knows no
// operation, so requests are worded with the decoder's detail.
type noModel struct{}

func (noModel) Exception(string) (string, bool)                        { return "", false }
func (noModel) Member(string, []any) (string, string, bool)            { return "", "", false }
func (noModel) MemberConstraint(string, string) (*int64, *int64, bool) { return nil, nil, false }
func (noModel) Render(value any) string                                { return fmt.Sprint(value) }

// fromService reports whether st came from a saltbush service (it carries
// errdefs' ErrorInfo), not from grpc-gateway's own parsing.
func fromService(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errdefs.Domain {
			return true
		}
	}
	return false
}

// operationOf is the EKS operation a façade request was routed to
// ("/saltbush.eks.v1.AddonService/ListAddons" → "ListAddons").
func operationOf(ctx context.Context) string {
	method, ok := runtime.RPCMethod(ctx)
	if !ok {
		return ""
	}
	return method[strings.LastIndexByte(method, '/')+1:]
}

// isSyntaxError reports a body that is not JSON: the decoder (marshal.go)
// checks the body with encoding/json before protojson decodes it, so only
// encoding/json's errors are about the syntax ("proto:" ones are about
// members of valid JSON).
func isSyntaxError(msg string) bool {
	return strings.HasPrefix(msg, "invalid character") || msg == "unexpected EOF" ||
		msg == "unexpected end of JSON input" || strings.HasPrefix(msg, "json: ") ||
		// encoding/json's scanner refuses nesting deeper than it reads
		// (a depth bomb): not JSON this service takes.
		msg == "exceeded max depth"
}

// isEncodingError reports a body that encoding/json scanned but that is
// not UTF-8, which JSON text must be (RFC 8259, section 8.1): protojson is
// the first to look at the bytes inside strings.
func isEncodingError(msg string) bool {
	return strings.HasPrefix(msg, "proto:") && strings.Contains(msg, "invalid UTF-8")
}

// isObject reports whether body is a JSON object, as every EKS request
// body is; anything else is not an operation's input at all.
func isObject(body []byte) bool {
	b := bytes.TrimSpace(body)
	return len(b) > 0 && b[0] == '{'
}

// protojson's errors: `proto: (line 1:15): invalid value for string field
// addonName: 5`, `proto: syntax error (line 1:10): unexpected token 5`.
var (
	decodePosition = regexp.MustCompile(`\(line (\d+):(\d+)\)`)
	decodeValue    = regexp.MustCompile(`(?:invalid value for \w+ field \w+: |unexpected token )(.*)$`)
)

// decodeMessage words a protojson error about body as AWS does: the member
// at the error's position, named as the model names it, and the type the
// model gives it.
func decodeMessage(model Model, op string, body []byte, msg string) string {
	detail := "Could not parse the request body: " + decodeDetail.ReplaceAllString(msg, "")
	if m := unknownField.FindStringSubmatch(msg); m != nil && !strings.HasSuffix(msg, pathParameterNote) {
		return unknownMessage(model, op, body, msg, m[1], detail)
	}
	if strings.Contains(msg, "unknown field") {
		return detail
	}
	pos := decodePosition.FindStringSubmatch(msg)
	val := decodeValue.FindStringSubmatch(msg)
	if pos == nil || val == nil {
		return detail
	}
	line, _ := strconv.Atoi(pos[1])
	col, _ := strconv.Atoi(pos[2])
	off := offsetOf(body, line, col)
	path, ok := pathAt(body, off)
	if !ok {
		return detail
	}
	name, typ, ok := model.Member(op, path)
	if !ok {
		return detail
	}
	value := strings.Trim(val[1], `"`)
	if value == "[" || value == "{" {
		// protojson names only the opening token of a list or object sent
		// where a scalar belongs: show the value, as AWS's messages do.
		value = valueAt(model, body, off, value)
	}
	constraint := "Member must be " + typ
	if typ == "an integer" && integerLiteral.MatchString(value) {
		// A whole number protojson refused is out of the 32-bit range: say
		// which bound of the model's it is beyond, as for a query parameter.
		constraint = rangeConstraint(model, op, name, value)
	}
	return fmt.Sprintf("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: %s", value, name, constraint)
}

// unknownField is protojson's error for a member the message lacks.
var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

// unknownMessage words the refusal of a body member the request message
// lacks. A member of AWS's model for the operation (one the newest clients
// send, such as UpdateClusterConfig's kubeApiServerConfig) is named as
// unsupported, so the caller knows it was understood and refused, never
// dropped; any other member is not the operation's at all.
func unknownMessage(model Model, op string, body []byte, msg, field, detail string) string {
	var path []any
	if pos := decodePosition.FindStringSubmatch(msg); pos != nil {
		line, _ := strconv.Atoi(pos[1])
		col, _ := strconv.Atoi(pos[2])
		if p, ok := pathAt(body, offsetOf(body, line, col)); ok {
			path = p
		}
	}
	// At a member's key the path ends in the key being read ("" before
	// it is read): the member is the unknown field.
	if n := len(path); n > 0 && (path[n-1] == "" || path[n-1] == field) {
		path = path[:n-1]
	}
	path = append(path, field)
	name, _, ok := model.Member(op, path)
	if !ok {
		return detail
	}
	return fmt.Sprintf("saltbush does not support %s in %s; leave it out of the request.", name, op)
}

// maxShownValue bounds the characters of a value a message shows.
const maxShownValue = 256

// valueAt renders the JSON value at offset in body (fallback when it does
// not decode), at most maxShownValue characters of it.
func valueAt(model Model, body []byte, offset int, fallback string) string {
	if offset < 0 || offset >= len(body) {
		return fallback
	}
	dec := json.NewDecoder(bytes.NewReader(body[offset:]))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fallback
	}
	s := model.Render(v)
	if r := []rune(s); len(r) > maxShownValue {
		s = string(r[:maxShownValue]) + "…"
	}
	return s
}

// integerLiteral is a JSON number without fraction or exponent.
var integerLiteral = regexp.MustCompile(`^-?[0-9]+$`)

// rangeConstraint is the constraint a whole number beyond 32 bits fails:
// the model's maximum or minimum of the member when it has one.
func rangeConstraint(model Model, op, member, value string) string {
	minV, maxV, ok := model.MemberConstraint(op, member)
	switch {
	case ok && maxV != nil && !strings.HasPrefix(value, "-"):
		return fmt.Sprintf("Member must have value less than or equal to %d", *maxV)
	case ok && minV != nil && strings.HasPrefix(value, "-"):
		return fmt.Sprintf("Member must have value greater than or equal to %d", *minV)
	}
	return "Member must be a 32-bit integer"
}

// offsetOf turns protojson's 1-based line and column into a byte offset.
func offsetOf(body []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(body[off:], '\n')
		if i < 0 {
			return len(body)
		}
		off += i + 1
	}
	return off + col - 1
}

// pathAt is the member path (object keys, list indices) of the JSON value
// starting at offset in body.
func pathAt(body []byte, offset int) ([]any, bool) {
	type frame struct {
		object    bool
		expectKey bool
		key       string
		index     int
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*frame
	value := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.expectKey = true
		} else {
			top.index++
		}
	}
scan:
	for int(dec.InputOffset()) < offset {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if int(dec.InputOffset())-1 >= offset {
				break scan // the value at offset is this object or list
			}
			if len(stack) > 0 && !stack[len(stack)-1].object {
				stack[len(stack)-1].index++
			}
			stack = append(stack, &frame{object: tok == json.Delim('{'), expectKey: true, index: -1})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].expectKey = true
			}
			continue
		}
		if top := len(stack) - 1; top >= 0 && stack[top].object && stack[top].expectKey {
			stack[top].key, _ = tok.(string)
			stack[top].expectKey = false
			continue
		}
		value()
	}
	var path []any
	for _, f := range stack {
		if f.object {
			path = append(path, f.key)
		} else {
			path = append(path, f.index)
		}
	}
	return path, len(path) > 0
}

var (
	// grpc-gateway's query parser: `parsing field "max_results": strconv.ParseInt: parsing "abc": invalid syntax`.
	queryParseError = regexp.MustCompile(`^parsing (?:field|list) "([a-z0-9_]+)": (.*)$`)
	tooManyValues   = regexp.MustCompile(`^too many values for field "([a-z0-9_]+)": (.*)$`)
	// the generated path-label parsers: `type mismatch, parameter: cluster_name, error: …`.
	pathParseError = regexp.MustCompile(`^type mismatch, parameter: ([a-z0-9_]+), error: (.*)$`)
	// strconv's error: `strconv.ParseInt: parsing "abc": invalid syntax`.
	strconvError = regexp.MustCompile(`^strconv\.Parse(Int|Uint|Bool|Float): parsing "(.*)": (invalid syntax|value out of range)$`)
)

// parseMessage says, as AWS does, which member failed which constraint
// when a query parameter or path label does not parse as its type.
func parseMessage(model Model, op, member, detail string) string {
	value, constraint := detail, "Member must be of the member's type"
	if m := strconvError.FindStringSubmatch(detail); m != nil {
		value = m[2]
		switch m[1] {
		case "Bool":
			constraint = "Member must be a boolean (true or false)"
		case "Float":
			constraint = "Member must be a number"
		default:
			constraint = "Member must be an integer"
			if m[3] == "value out of range" {
				constraint = rangeConstraint(model, op, member, value)
			}
		}
	}
	return fmt.Sprintf("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: %s", value, member, constraint)
}

// jsonName is the JSON name protoc gives a field (max_results →
// maxResults), the member name AWS's messages use.
func jsonName(field string) string {
	var b strings.Builder
	upper := false
	for _, r := range field {
		switch {
		case r == '_':
			upper = true
		case upper:
			b.WriteString(strings.ToUpper(string(r)))
			upper = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
