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
			base := map[string]any{}
			for _, req := range in.Required {
				base[req] = b.validValue(req, model.Shapes[in.Members[req].Shape], fieldMessage(b.msg, req))
			}
			for _, n := range names {
				t.Run(n.name, func(t *testing.T) {
					r := copyObject(base)
					r[label] = n.value
					method, path, body := encode(model, op, r)
					resp := h.srv.Do(t, method, path, body)
					defer func() { _ = resp.Body.Close() }()
					raw, _ := io.ReadAll(resp.Body)
					var out struct {
						Message string `json:"message"`
					}
					_ = json.Unmarshal(raw, &out)
					got := resp.Header.Get("X-Amzn-Errortype")
					if resp.StatusCode < http.StatusBadRequest || resp.StatusCode >= http.StatusInternalServerError {
						t.Fatalf("%s %s: %d %s %q, want a refusal", method, path, resp.StatusCode, got, out.Message)
					}
					if !slices.Contains(allowed, got) {
						t.Errorf("%s %s: %s %q; the model of %s lists %v", method, path, got, out.Message, op, allowed)
					}
				})
			}
		})
	}
	addonNoWrites(t, h, before)
}
