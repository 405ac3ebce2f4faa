package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
)

// awsJSON is protojson as grpc-gateway's JSONPb (EmitUnpopulated false, so
// absent members stay absent), with AWS's habit of sending some empty
// members anyway:
//   - a response's top-level lists are always present, as [] when empty
//     (`{"clusters": []}`), because scripts over AWS output index them;
//   - members marked `(saltbush.eks.v1.always_present)` in the contract are
//     always present, at any depth (`"tags": {}`, `"health": {"issues": []}`,
//     an update's `"errors": []`).
//
// Every other empty member stays absent.
type awsJSON struct {
	*runtime.JSONPb
}

// Marshal implements runtime.Marshaler.
func (m awsJSON) Marshal(v any) ([]byte, error) {
	b, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	msg, ok := v.(proto.Message)
	if !ok || len(b) < 2 || b[0] != '{' {
		return b, nil
	}
	// Most responses need nothing added: check before re-encoding.
	if !fillPresent(msg.ProtoReflect(), nil, true) {
		return b, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep 1527807879.988 exactly as protojson wrote it
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("re-read response JSON: %w", err)
	}
	fillPresent(msg.ProtoReflect(), obj, true)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // protojson does not escape <, >, &
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// alwaysPresent reports whether f carries the always_present option.
func alwaysPresent(f protoreflect.FieldDescriptor) bool {
	opts := f.Options()
	return opts != nil && proto.GetExtension(opts, eksv1.E_AlwaysPresent).(bool)
}

// fillPresent walks m beside its JSON object obj and adds the members that
// must be present but are missing. With obj nil it only reports whether
// anything is missing. top marks the response message itself.
func fillPresent(m protoreflect.Message, obj map[string]any, top bool) bool {
	missing := false
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		name := f.JSONName()
		switch {
		case f.IsMap():
			if m.Get(f).Map().Len() == 0 && alwaysPresent(f) {
				missing = true
				if obj != nil {
					obj[name] = map[string]any{}
				}
			}
		case f.IsList():
			list := m.Get(f).List()
			if list.Len() == 0 {
				if top || alwaysPresent(f) {
					missing = true
					if obj != nil {
						obj[name] = []any{}
					}
				}
				continue
			}
			if f.Message() == nil {
				continue
			}
			var items []any
			if obj != nil {
				items, _ = obj[name].([]any)
			}
			for j := 0; j < list.Len(); j++ {
				var child map[string]any
				if j < len(items) {
					child, _ = items[j].(map[string]any)
				}
				if obj != nil && child == nil {
					continue
				}
				if fillPresent(list.Get(j).Message(), child, false) {
					missing = true
				}
			}
		case f.Message() != nil && !isWellKnown(f.Message()):
			if !m.Has(f) {
				if !alwaysPresent(f) {
					continue
				}
				missing = true
				if obj != nil {
					child := map[string]any{}
					obj[name] = child
					fillPresent(m.Get(f).Message(), child, false)
				}
				continue
			}
			var child map[string]any
			if obj != nil {
				if child, _ = obj[name].(map[string]any); child == nil {
					continue
				}
			}
			if fillPresent(m.Get(f).Message(), child, false) {
				missing = true
			}
		}
	}
	return missing
}

// isWellKnown reports google.protobuf types, whose JSON form is not an
// object of their fields (ListValue is an array, Timestamp a string).
func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}
