package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

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
	// pathBound lists, per request message, the fields bound to a path
	// label of its HTTP rule; see NewDecoder.
	pathBound map[protoreflect.FullName][]protoreflect.FieldDescriptor
}

func newAWSJSON(pb *runtime.JSONPb) awsJSON {
	return awsJSON{JSONPb: pb, pathBound: pathBoundFields()}
}

// NewDecoder implements runtime.Marshaler: protojson (unknown members are
// errors), and then a member bound to a path label is refused too
// (`{"clusterName": …}` in a CreateAddon body). It is not a body member in
// AWS's model, and the path value would silently win over it.
//
// The body must be one JSON value and nothing else: JSONPb's decoder reads
// the first value of the stream and ignores what follows, so
// `{"addonName": "a"} garbage` or a second object after the first would be
// taken as the first alone although SigV4 signed, and the client sent,
// something else. encoding/json's own error for the trailing data ("invalid
// character … after top-level value") is a syntax error to the error
// handler (parse.go).
func (m awsJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
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
	})
}

// pathBoundFields reads the google.api.http rules of the saltbush.eks.v1
// services: for each request message, the fields its path template binds.
func pathBoundFields() map[protoreflect.FullName][]protoreflect.FieldDescriptor {
	out := map[protoreflect.FullName][]protoreflect.FieldDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			methods := fd.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				md := methods.Get(j)
				rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if !ok || rule == nil {
					continue
				}
				path := rule.GetPost() + rule.GetGet() + rule.GetDelete() + rule.GetPut() + rule.GetPatch()
				for _, v := range pathVariable.FindAllStringSubmatch(path, -1) {
					if f := md.Input().Fields().ByName(protoreflect.Name(v[1])); f != nil {
						out[md.Input().FullName()] = append(out[md.Input().FullName()], f)
					}
				}
			}
		}
		return true
	})
	return out
}

// pathVariable matches a path template variable: {name} or {name=...}.
var pathVariable = regexp.MustCompile(`\{([a-z0-9_]+)(?:=[^}]*)?\}`)

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
	// Most responses need nothing added: check before touching the bytes.
	if !missingPresent(msg.ProtoReflect(), true) {
		return b, nil
	}
	return fillPresent(msg.ProtoReflect(), b, true)
}

// alwaysPresent reports whether f carries the always_present option.
func alwaysPresent(f protoreflect.FieldDescriptor) bool {
	opts := f.Options()
	return opts != nil && proto.GetExtension(opts, eksv1.E_AlwaysPresent).(bool)
}

// mustBePresent reports whether f is rendered even when empty; top marks
// the response message itself, whose lists are always rendered.
func mustBePresent(f protoreflect.FieldDescriptor, top bool) bool {
	return alwaysPresent(f) || (top && f.IsList())
}

// missingPresent reports whether m, or a message inside it, lacks a member
// that must be present.
func missingPresent(m protoreflect.Message, top bool) bool {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		switch {
		case f.IsMap():
			if m.Get(f).Map().Len() == 0 && mustBePresent(f, top) {
				return true
			}
		case f.IsList():
			list := m.Get(f).List()
			if list.Len() == 0 {
				if mustBePresent(f, top) {
					return true
				}
				continue
			}
			if f.Message() == nil || isWellKnown(f.Message()) {
				continue
			}
			for j := 0; j < list.Len(); j++ {
				if missingPresent(list.Get(j).Message(), false) {
					return true
				}
			}
		case f.Message() != nil && !isWellKnown(f.Message()):
			if !m.Has(f) {
				if mustBePresent(f, top) {
					return true
				}
				continue
			}
			if missingPresent(m.Get(f).Message(), false) {
				return true
			}
		}
	}
	return false
}

// fillPresent returns m's JSON object b with the missing members added.
// It splices bytes: members are inserted after the object's "{", and only
// objects on the way to a missing member are scanned, so everything else
// stays exactly as protojson wrote it (and no generic JSON decode and
// re-encode is paid on every response).
func fillPresent(m protoreflect.Message, b []byte, top bool) ([]byte, error) {
	if len(b) == 0 {
		b = []byte("{}")
	}
	spans, err := objectMembers(b)
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
			if m.Get(f).Map().Len() == 0 && mustBePresent(f, top) && !present {
				add(name, []byte("{}"))
			}
		case f.IsList():
			list := m.Get(f).List()
			if list.Len() == 0 {
				if mustBePresent(f, top) && !present {
					add(name, []byte("[]"))
				}
				continue
			}
			if !present || f.Message() == nil || isWellKnown(f.Message()) || !listMissing(list) {
				continue
			}
			items, err := arrayItems(b[span[0]:span[1]])
			if err != nil || len(items) != list.Len() {
				return nil, fmt.Errorf("re-read response list %s: %v", name, err)
			}
			var out []byte
			out = append(out, '[')
			for j, it := range items {
				filled, err := fillPresent(list.Get(j).Message(), b[span[0]+it[0]:span[0]+it[1]], false)
				if err != nil {
					return nil, err
				}
				if j > 0 {
					out = append(out, ',')
				}
				out = append(out, filled...)
			}
			replacements = append(replacements, replacement{span, append(out, ']')})
		case f.Message() != nil && !isWellKnown(f.Message()):
			child := m.Get(f).Message()
			switch {
			case !present && mustBePresent(f, top):
				filled, err := fillPresent(child, nil, false)
				if err != nil {
					return nil, err
				}
				add(name, filled)
			case present && missingPresent(child, false):
				filled, err := fillPresent(child, b[span[0]:span[1]], false)
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

// objectMembers scans one JSON object and returns each member's value span
// [start, end) in b. Member names are compared raw: protojson writes JSON
// names (ASCII letters and digits) unescaped.
func objectMembers(b []byte) (map[string][2]int, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	spans := map[string][2]int{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return spans, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errors.New("malformed JSON object: member name expected")
		}
		end, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		name := string(b[i+1 : end-1])
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, errors.New("malformed JSON object: ':' expected")
		}
		start := skipSpace(b, i+1)
		if end, err = skipValue(b, start); err != nil {
			return nil, err
		}
		spans[name] = [2]int{start, end}
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return spans, nil
		}
		return nil, errors.New("malformed JSON object: ',' or '}' expected")
	}
}

// arrayItems scans one JSON array and returns each item's span.
func arrayItems(b []byte) ([][2]int, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errors.New("not a JSON array")
	}
	var items [][2]int
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return items, nil
	}
	for {
		end, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		items = append(items, [2]int{i, end})
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return items, nil
		}
		return nil, errors.New("malformed JSON array")
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
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
				end, err := skipValue(b, j)
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

func listMissing(list protoreflect.List) bool {
	for j := 0; j < list.Len(); j++ {
		if missingPresent(list.Get(j).Message(), false) {
			return true
		}
	}
	return false
}

// isWellKnown reports google.protobuf types, whose JSON form is not an
// object of their fields (ListValue is an array, Timestamp a string).
func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}
