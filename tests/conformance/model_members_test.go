package conformance

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestNewestMembersRefused: a member the newest EKS model gives a served
// operation's input and saltbush's request message lacks (CreateCluster's
// kubeApiServerConfig, resourcesVpcConfig.controlPlaneEgressMode) is never
// dropped: a request that sends it, with every required member valid, is
// refused with the operation's validation exception and a message naming
// the member as AWS's messages name it, and writes nothing.
func TestNewestMembersRefused(t *testing.T) {
	model, _ := readEKSModel(t)
	h := newAddonHarness(t)
	before := addonKeyspace(t, h)
	tried := 0
	for _, sm := range servedEKSMethods(t) {
		op := string(sm.desc.Name())
		in := model.Shapes[model.Operations[op].Input.Shape]
		b := &caseBuilder{m: model, cluster: h.cluster, msg: sm.desc.Input()}
		base := map[string]any{}
		for _, req := range in.Required {
			base[req] = b.validValue(req, model.Shapes[in.Members[req].Shape], fieldMessage(b.msg, req))
		}
		for _, miss := range missingMembers(model, in, sm.desc.Input(), "") {
			tried++
			t.Run(op+"/"+miss.path, func(t *testing.T) {
				r := copyObject(base)
				setPath(r, strings.Split(miss.path, "."), b.validValue(miss.name, miss.shape, nil))
				method, path, body := encode(model, op, r)
				resp := h.srv.Do(t, method, path, body)
				defer func() { _ = resp.Body.Close() }()
				raw, _ := io.ReadAll(resp.Body)
				var out struct {
					Message string `json:"message"`
				}
				_ = json.Unmarshal(raw, &out)
				want := model.validationExceptionOf(op)
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-Errortype") != want {
					t.Fatalf("%s %s %s: %d %s %q, want 400 %s", method, path, body, resp.StatusCode,
						resp.Header.Get("X-Amzn-Errortype"), out.Message, want)
				}
				if wantMsg := "saltbush does not support " + miss.path + " in " + op; !strings.Contains(out.Message, wantMsg) {
					t.Fatalf("message %q, want %q", out.Message, wantMsg)
				}
			})
		}
	}
	if tried == 0 {
		t.Fatal("no served operation lacks a member of the model: the test has nothing to try")
	}
	addonNoWrites(t, h, before)
}

// missingMember is a body member of the model the request message lacks.
type missingMember struct {
	path, name string
	shape      modelShape
}

// missingMembers walks the body members of shape s beside message md:
// the members md lacks, and inside the structures both have, theirs.
func missingMembers(m *eksModel, s modelShape, md protoreflect.MessageDescriptor, prefix string) []missingMember {
	var out []missingMember
	for _, name := range sortedMembers(s) {
		ref := s.Members[name]
		if ref.Location != "" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		fd := md.Fields().ByJSONName(name)
		ms := m.Shapes[ref.Shape]
		switch {
		case fd == nil:
			out = append(out, missingMember{path: path, name: name, shape: ms})
		case ms.Type == "structure" && fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			out = append(out, missingMembers(m, ms, fd.Message(), path)...)
		}
	}
	return out
}

// setPath sets the member at path in the request object, making the
// objects on the way.
func setPath(obj map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		next, ok := obj[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[k] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = v
}
