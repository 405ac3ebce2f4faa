package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"
)

// This file turns a response into the document `-o json` and `-o yaml`
// print. protojson is made for the wire, not for people and scripts: it
// prints an int64 as a string, an enum as its full proto name
// (CLUSTER_STATUS_ACTIVE), and with EmitUnpopulated an unset message as
// null. The AWS CLI prints numbers as numbers, enums as AWS names them
// (ACTIVE) and leaves out what is absent, so the walk below does too,
// generically, from the message's descriptor.

// messageDoc is m as a JSON-shaped value: its fields under their JSON
// (lowerCamelCase) names. A field with presence (a message, a proto3
// optional, a oneof member) is left out unless set; an enum is left out at
// its zero (UNSPECIFIED) value; any other scalar is always there, so that
// a script sees "accepted": false and "deletedKeys": 0.
func messageDoc(m protoreflect.Message) map[string]any {
	doc := map[string]any{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			list := v.List()
			items := make([]any, 0, list.Len())
			for j := range list.Len() {
				items = append(items, singularDoc(fd, list.Get(j)))
			}
			doc[fd.JSONName()] = items
		case fd.IsMap():
			entries := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				entries[k.String()] = singularDoc(fd.MapValue(), mv)
				return true
			})
			doc[fd.JSONName()] = entries
		case fd.Kind() == protoreflect.EnumKind && v.Enum() == 0:
			// UNSPECIFIED says nothing: AWS leaves such a member out.
		default:
			doc[fd.JSONName()] = singularDoc(fd, v)
		}
	}
	return doc
}

// singularDoc is one value of field fd (an element, for a list or map).
func singularDoc(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		// encoding/json refuses NaN and infinities; protojson's strings
		// for them are what a JSON reader of protobuf expects.
		switch {
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "Infinity"
		case math.IsInf(f, -1):
			return "-Infinity"
		}
		return f
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BytesKind:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return enumValueName(ev)
		}
		// A number this build does not know: the number, as protojson.
		return int64(v.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageValueDoc(v.Message())
	}
	return nil
}

// timestampName is the one well-known type the admin API carries.
const timestampName protoreflect.FullName = "google.protobuf.Timestamp"

// messageValueDoc is a message-typed value: a Timestamp as RFC 3339 (UTC),
// another well-known type (Duration, Struct, wrappers, ...) as protojson
// writes it, anything else field by field.
func messageValueDoc(m protoreflect.Message) any {
	name := m.Descriptor().FullName()
	switch {
	case name == timestampName:
		return timestampOf(m).Format(time.RFC3339Nano)
	case name.Parent() == "google.protobuf":
		b, err := protojson.Marshal(m.Interface())
		if err != nil {
			return nil
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // a large integer stays exact
		var v any
		if dec.Decode(&v) != nil {
			return nil
		}
		return v
	}
	return messageDoc(m)
}

// timestampOf reads a google.protobuf.Timestamp through reflection, so a
// Timestamp of any generated package (or a dynamic message) is read alike.
func timestampOf(m protoreflect.Message) time.Time {
	fields := m.Descriptor().Fields()
	secs := m.Get(fields.ByName("seconds")).Int()
	nanos := m.Get(fields.ByName("nanos")).Int()
	return time.Unix(secs, nanos).UTC()
}

// enumValueName is a value's name as AWS spells it: without the prefix
// the proto style guide puts on every value (the enum's type name in
// SCREAMING_SNAKE_CASE and "_"), so CLUSTER_STATUS_ACTIVE of ClusterStatus
// is ACTIVE. A value without that prefix keeps its name.
func enumValueName(ev protoreflect.EnumValueDescriptor) string {
	enum, ok := ev.Parent().(protoreflect.EnumDescriptor)
	if !ok {
		return string(ev.Name())
	}
	prefix := screamingSnake(string(enum.Name())) + "_"
	name := string(ev.Name())
	if rest, found := strings.CutPrefix(name, prefix); found && rest != "" {
		return rest
	}
	return name
}

// screamingSnake is CamelCase in SCREAMING_SNAKE_CASE, with a run of
// capitals kept as one word: ClusterStatus is CLUSTER_STATUS, HTTPRoute is
// HTTP_ROUTE, AddonPhase2 is ADDON_PHASE2.
func screamingSnake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			endOfRun := unicode.IsUpper(r[i-1]) && i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || endOfRun {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(c))
	}
	return b.String()
}

// writeDoc writes doc as JSON (indented by two spaces) or YAML, keys
// sorted (encoding/json sorts map keys; sigs.k8s.io/yaml goes through it).
func writeDoc(w io.Writer, format string, doc any) error {
	switch format {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		// A trust policy's "<" or "&" stays readable, as in the AWS CLI.
		enc.SetEscapeHTML(false)
		return enc.Encode(doc)
	case formatYAML:
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("output %q: want table, json or yaml", format)
}
