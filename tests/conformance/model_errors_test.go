package conformance

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestModelErrors: every operation answers with the errors its model
// lists. For every served operation whose path names a cluster, a request
// with every required member valid but the cluster name malformed, too
// long, or of no cluster must be refused with an exception the
// operation's model lists (or, for an operation that lists none of the
// validation exceptions, EKS's InvalidParameterException), and write
// nothing. An SDK deserializes an exception the model does not list for
// the operation as an unknown error, which callers matching on the
// modelled type (errors.As with *types.ClientException) miss.
func TestModelErrors(t *testing.T) {
	model, _ := readEKSModel(t)
	h := newAddonHarness(t)
	before := addonKeyspace(t, h)
	names := []struct{ name, value string }{
		{"malformed", "bad name!"},
		{"too long", strings.Repeat("a", 101)},
		{"of no cluster", "no-such-cluster"},
	}
	for _, sm := range servedEKSMethods(t) {
		op := string(sm.desc.Name())
		in := model.Shapes[model.Operations[op].Input.Shape]
		label := ""
		for _, m := range sortedMembers(in) {
			if r := in.Members[m]; r.Location == "uri" && (r.LocationName == "name" || r.LocationName == "clusterName") {
				label = m
			}
		}
		if label == "" {
			continue
		}
		allowed := slices.Clone(genericExceptions)
		for _, e := range model.Operations[op].Errors {
			allowed = append(allowed, e.Shape)
		}
		allowed = append(allowed, model.validationExceptionOf(op))
		t.Run(op, func(t *testing.T) {
			b := &caseBuilder{m: model, cluster: h.cluster, msg: sm.desc.Input()}
			base := b.requiredMembers(op)
			for _, n := range names {
				t.Run(n.name, func(t *testing.T) {
					r := copyObject(base)
					r[label] = n.value
					a := sendModel(t, h, model, op, r)
					if a.status < http.StatusBadRequest || a.status >= http.StatusInternalServerError {
						t.Fatalf("%s: %d %s %q, want a refusal", a.call, a.status, a.exception, a.message)
					}
					if !slices.Contains(allowed, a.exception) {
						t.Errorf("%s: %s %q; the model of %s lists %v", a.call, a.exception, a.message, op, allowed)
					}
				})
			}
		})
	}
	addonNoWrites(t, h, before)
}

// modelAnswer is what the façade answered a request the model-driven
// tests built.
type modelAnswer struct {
	call               string // "METHOD path body", for messages
	status             int
	exception, message string
}

// sendModel sends request as AWS's SDKs would send op (encode) and reads
// the answer.
func sendModel(t *testing.T, h *addonHarness, model *eksModel, op string, request map[string]any) modelAnswer {
	t.Helper()
	method, path, body := encode(model, op, request)
	resp := h.srv.Do(t, method, path, body)
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &out)
	return modelAnswer{call: method + " " + path + " " + string(body), status: resp.StatusCode,
		exception: resp.Header.Get("X-Amzn-Errortype"), message: out.Message}
}

// requiredMembers is a request for op with every required member valid.
func (b *caseBuilder) requiredMembers(op string) map[string]any {
	in := b.m.Shapes[b.m.Operations[op].Input.Shape]
	out := map[string]any{}
	for _, req := range in.Required {
		out[req] = b.validValue(req, b.m.Shapes[in.Members[req].Shape], fieldMessage(b.msg, req))
	}
	return out
}
