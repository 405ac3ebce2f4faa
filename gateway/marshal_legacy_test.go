package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// This file keeps the response marshaler and the request decoder as they
// were before the plans (commit a0956d3, gateway/marshal.go), unchanged but
// for their names.

// legacyDecode is awsJSON.NewDecoder(r).Decode(v) as it was: the body
// read once more, checked by encoding/json, decoded by JSONPb's decoder
// (encoding/json again, then protojson).
func legacyDecode(m awsJSON, r io.Reader, v any) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
		var first json.RawMessage
		if err := json.Unmarshal(body, &first); err != nil {
			return err
		}
	}
	if err := m.JSONPb.NewDecoder(bytes.NewReader(body)).Decode(v); err != nil {
		return err
	}
	msg, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	pm := msg.ProtoReflect()
	for _, f := range m.pathBound[pm.Descriptor().FullName()] {
		if pm.Has(f) {
			// Worded like protojson's own unknown-member error, which the
			// error handler turns into AWS's 400.
			return fmt.Errorf("proto: unknown field %q (it is a path parameter)", f.JSONName())
		}
	}
	return nil
}

// legacyMarshal is awsJSON.Marshal as it was before the marshaler wrote
// responses through per-type plans (marshal.go): protojson, then the
// always-present members spliced into its bytes. It is the reference the
// plans are compared against, byte for byte (marshal_equal_test.go).
func legacyMarshal(pb *runtime.JSONPb, v any) ([]byte, error) {
	b, err := pb.Marshal(v)
	if err != nil {
		return nil, err
	}
	msg, ok := v.(proto.Message)
	if !ok || len(b) < 2 || b[0] != '{' {
		return b, nil
	}
	// Most responses need nothing added: check before touching the bytes.
	if !legacyMissingPresent(msg.ProtoReflect(), true) {
		return b, nil
	}
	return legacyFillPresent(msg.ProtoReflect(), b, true)
}

// legacyAlwaysPresent reports whether f carries the always_present option.
func legacyAlwaysPresent(f protoreflect.FieldDescriptor) bool {
	opts := f.Options()
	return opts != nil && proto.GetExtension(opts, eksv1.E_AlwaysPresent).(bool)
}

// legacyMustBePresent reports whether f is rendered even when empty; top marks
// the response message itself, whose lists are always rendered.
func legacyMustBePresent(f protoreflect.FieldDescriptor, top bool) bool {
	return legacyAlwaysPresent(f) || (top && f.IsList())
}

// legacyMissingPresent reports whether m, or a message inside it, lacks a member
// that must be present.
func legacyMissingPresent(m protoreflect.Message, top bool) bool {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		switch {
		case f.IsMap():
			if m.Get(f).Map().Len() == 0 && legacyMustBePresent(f, top) {
				return true
			}
		case f.IsList():
			list := m.Get(f).List()
			if list.Len() == 0 {
				if legacyMustBePresent(f, top) {
					return true
				}
				continue
			}
			if f.Message() == nil || legacyIsWellKnown(f.Message()) {
				continue
			}
			for j := 0; j < list.Len(); j++ {
				if legacyMissingPresent(list.Get(j).Message(), false) {
					return true
				}
			}
		case f.Message() != nil && !legacyIsWellKnown(f.Message()):
			if !m.Has(f) {
				if legacyMustBePresent(f, top) {
					return true
				}
				continue
			}
			if legacyMissingPresent(m.Get(f).Message(), false) {
				return true
			}
		}
	}
	return false
}

// legacyFillPresent returns m's JSON object b with the missing members added.
// It splices bytes: members are inserted after the object's "{", and only
// objects on the way to a missing member are scanned, so everything else
// stays exactly as protojson wrote it (and no generic JSON decode and
// re-encode is paid on every response).
func legacyFillPresent(m protoreflect.Message, b []byte, top bool) ([]byte, error) {
	if len(b) == 0 {
		b = []byte("{}")
	}
	spans, err := legacyObjectMembers(b)
	if err != nil {
		return nil, err
	}
	type replacement struct {
		span  [2]int
		value []byte
	}
	var inserts [][]byte
	var replacements []replacement
	add := func(name string, value []byte) {
		inserts = append(inserts, append(append(strconv.AppendQuote(nil, name), ':'), value...))
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		name := f.JSONName()
		span, present := spans[name]
		switch {
		case f.IsMap():
			if m.Get(f).Map().Len() == 0 && legacyMustBePresent(f, top) && !present {
				add(name, []byte("{}"))
			}
		case f.IsList():
			list := m.Get(f).List()
			if list.Len() == 0 {
				if legacyMustBePresent(f, top) && !present {
					add(name, []byte("[]"))
				}
				continue
			}
			if !present || f.Message() == nil || legacyIsWellKnown(f.Message()) || !legacyListMissing(list) {
				continue
			}
			items, err := legacyArrayItems(b[span[0]:span[1]])
			if err != nil || len(items) != list.Len() {
				return nil, fmt.Errorf("re-read response list %s: %v", name, err)
			}
			var out []byte
			out = append(out, '[')
			for j, it := range items {
				filled, err := legacyFillPresent(list.Get(j).Message(), b[span[0]+it[0]:span[0]+it[1]], false)
				if err != nil {
					return nil, err
				}
				if j > 0 {
					out = append(out, ',')
				}
				out = append(out, filled...)
			}
			replacements = append(replacements, replacement{span, append(out, ']')})
		case f.Message() != nil && !legacyIsWellKnown(f.Message()):
			child := m.Get(f).Message()
			switch {
			case !present && legacyMustBePresent(f, top):
				filled, err := legacyFillPresent(child, nil, false)
				if err != nil {
					return nil, err
				}
				add(name, filled)
			case present && legacyMissingPresent(child, false):
				filled, err := legacyFillPresent(child, b[span[0]:span[1]], false)
				if err != nil {
					return nil, err
				}
				replacements = append(replacements, replacement{span, filled})
			}
		}
	}
	slices.SortFunc(replacements, func(x, y replacement) int { return x.span[0] - y.span[0] })
	open := bytes.IndexByte(b, '{')
	out := make([]byte, 0, len(b)+64)
	out = append(out, b[:open+1]...)
	for i, in := range inserts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, in...)
	}
	if len(inserts) > 0 && len(spans) > 0 {
		out = append(out, ',')
	}
	pos := open + 1
	for _, r := range replacements {
		out = append(out, b[pos:r.span[0]]...)
		out = append(out, r.value...)
		pos = r.span[1]
	}
	return append(out, b[pos:]...), nil
}

// legacyObjectMembers scans one JSON object and returns each member's value span
// [start, end) in b. Member names are compared raw: protojson writes JSON
// names (ASCII letters and digits) unescaped.
func legacyObjectMembers(b []byte) (map[string][2]int, error) {
	i := legacySkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	spans := map[string][2]int{}
	i = legacySkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return spans, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errors.New("malformed JSON object: member name expected")
		}
		end, err := legacySkipValue(b, i)
		if err != nil {
			return nil, err
		}
		name := string(b[i+1 : end-1])
		i = legacySkipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, errors.New("malformed JSON object: ':' expected")
		}
		start := legacySkipSpace(b, i+1)
		if end, err = legacySkipValue(b, start); err != nil {
			return nil, err
		}
		spans[name] = [2]int{start, end}
		i = legacySkipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = legacySkipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return spans, nil
		}
		return nil, errors.New("malformed JSON object: ',' or '}' expected")
	}
}

// legacyArrayItems scans one JSON array and returns each item's span.
func legacyArrayItems(b []byte) ([][2]int, error) {
	i := legacySkipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errors.New("not a JSON array")
	}
	var items [][2]int
	i = legacySkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return items, nil
	}
	for {
		end, err := legacySkipValue(b, i)
		if err != nil {
			return nil, err
		}
		items = append(items, [2]int{i, end})
		i = legacySkipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = legacySkipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return items, nil
		}
		return nil, errors.New("malformed JSON array")
	}
}

func legacySkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// legacySkipValue returns the end of the JSON value starting at b[i].
func legacySkipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("unexpected end of JSON")
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, errors.New("unterminated JSON string")
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := legacySkipValue(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated JSON object or array")
	default:
		j := i
		for j < len(b) && !strings.ContainsRune(",}] \n\t\r", rune(b[j])) {
			j++
		}
		return j, nil
	}
}

func legacyListMissing(list protoreflect.List) bool {
	for j := 0; j < list.Len(); j++ {
		if legacyMissingPresent(list.Get(j).Message(), false) {
			return true
		}
	}
	return false
}

// legacyIsWellKnown reports google.protobuf types, whose JSON form is not an
// object of their fields (ListValue is an array, Timestamp a string).
func legacyIsWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}
