package conformance

import (
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
		base := b.requiredMembers(op)
		for _, miss := range missingMembers(model, in, sm.desc.Input(), "") {
			tried++
			t.Run(op+"/"+miss.path, func(t *testing.T) {
				r := copyObject(base)
				setPath(r, strings.Split(miss.path, "."), b.validValue(miss.name, miss.shape, nil))
				a := sendModel(t, h, model, op, r)
				want := model.validationExceptionOf(op)
				if a.status != http.StatusBadRequest || a.exception != want {
					t.Fatalf("%s: %d %s %q, want 400 %s", a.call, a.status, a.exception, a.message, want)
				}
				if wantMsg := "saltbush does not support " + miss.path + " in " + op; !strings.Contains(a.message, wantMsg) {
					t.Fatalf("message %q, want %q", a.message, wantMsg)
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
