// Package presence carries, inside a request message, the members its JSON
// body sent that the message cannot show.
//
// A proto3 string, number, bool, list or map without presence holds an
// empty value and an absent one alike, but AWS tells them apart: it refuses
// `"serviceAccountRoleArn": ""` (min 1) and TagResource's `"tags": {}`
// (required, min 1) where it would refuse an absent member differently or
// not at all. The façade's body decoder records such members in the message
// it decodes (Record); the model check takes them back out of the message
// (Take) before it looks at the request. The check's one input is thus the
// request message, whichever port it came through, and what follows the
// check sees the message a gRPC caller would have sent.
//
// The record is an unknown field of the message, number Field, whose bytes
// are a JSON object: the members the message does not show, spelled and
// valued as the body sent them (numbers as their literals), nested as the
// body nests them, a list of structures as a list of the same length
// (`{"resourcesVpcConfig": {"subnetIds": []}}`). A gRPC caller that sends
// the same field is checked the same way. No saltbush.eks.v1 message may
// use the number (presence_test.go checks it).
package presence

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field is the field number of the record: the highest a field may have,
// which no contract message uses.
const Field protowire.Number = protowire.MaxValidNumber

// Record adds to m, just decoded from body by protojson, the record of the
// members body sent that m does not show: a member sent with an empty
// value (`""`, `0`, `false`, `[]`, `{}`) of a field without presence, at
// any depth of the structures and lists of structures m holds. A member
// sent as null is absent, as protojson takes it. Nothing is recorded when
// m shows every member, nor for a body that is not a JSON object.
func Record(m proto.Message, body []byte) error {
	// The decoder that filled m has already refused a body that is not
	// JSON; one that is not an object has no members.
	sent := object(body)
	if sent == nil {
		return nil
	}
	pm := m.ProtoReflect()
	rec := unshown(pm, sent)
	if len(rec) == 0 {
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("presence: encode the record of %s: %w", pm.Descriptor().FullName(), err)
	}
	raw := protowire.AppendTag(pm.GetUnknown(), Field, protowire.BytesType)
	pm.SetUnknown(protowire.AppendBytes(raw, b))
	return nil
}

// Take removes the record from m and returns it, decoded as encoding/json
// decodes JSON with numbers as json.Number; ok is false when m holds none
// (or one that is not a JSON object, which is removed all the same). The
// other unknown fields of m stay.
func Take(m proto.Message) (sent map[string]any, ok bool) {
	pm := m.ProtoReflect()
	unknown := pm.GetUnknown()
	if len(unknown) == 0 {
		return nil, false
	}
	var rest, rec []byte
	found := false
	for b := unknown; len(b) > 0; {
		num, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return nil, false
		}
		valueLen := protowire.ConsumeFieldValue(num, typ, b[tagLen:])
		if valueLen < 0 {
			return nil, false
		}
		if num == Field && typ == protowire.BytesType {
			rec, _ = protowire.ConsumeBytes(b[tagLen : tagLen+valueLen])
			found = true
		} else {
			rest = append(rest, b[:tagLen+valueLen]...)
		}
		b = b[tagLen+valueLen:]
	}
	if !found {
		return nil, false
	}
	pm.SetUnknown(rest)
	sent = object(rec)
	return sent, sent != nil
}

// unshown is the part of sent, a JSON object decoded into m, that m does
// not show.
func unshown(m protoreflect.Message, sent map[string]any) map[string]any {
	out := map[string]any{}
	fields := m.Descriptor().Fields()
	for key, v := range sent {
		if v == nil {
			continue
		}
		// protojson takes a member by its JSON name or its proto name.
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			continue
		}
		if !m.Has(fd) {
			out[key] = v
			continue
		}
		if fd.Message() == nil || fd.IsMap() || wellKnown(fd.Message()) {
			// A set scalar, map or well-known value shows all of itself.
			continue
		}
		if fd.IsList() {
			if rec, ok := unshownList(m.Get(fd).List(), v); ok {
				out[key] = rec
			}
			continue
		}
		if obj, ok := v.(map[string]any); ok {
			if rec := unshown(m.Get(fd).Message(), obj); len(rec) > 0 {
				out[key] = rec
			}
		}
	}
	return out
}

// unshownList is the record of a list of structures: one object per
// element, empty for an element that shows every member; ok is false when
// no element has a member to record.
func unshownList(list protoreflect.List, v any) ([]any, bool) {
	items, isList := v.([]any)
	if !isList || len(items) != list.Len() {
		return nil, false
	}
	out := make([]any, len(items))
	some := false
	for i, item := range items {
		rec := map[string]any{}
		if obj, ok := item.(map[string]any); ok {
			rec = unshown(list.Get(i).Message(), obj)
		}
		out[i] = rec
		some = some || len(rec) > 0
	}
	return out, some
}

// wellKnown reports a google.protobuf message: its JSON form is its own
// (a ListValue is a JSON list), not one member per field.
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.FullName().Parent() == "google.protobuf"
}

// object decodes b, a JSON object, with numbers as json.Number; nil when
// b is not one.
func object(b []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil
	}
	return obj
}
