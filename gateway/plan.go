package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// The façade writes every response through a plan of its message type: the
// JSON name, kind and always-present rule of each field, and the plans of
// the messages inside it, read from the descriptors once. Writing a
// response then only reads field values; it no longer sorts fields, looks
// up JSON names and options, or re-scans protojson's output to splice the
// always-present members in (BenchmarkMarshal, docs/performance.md).
//
// The output is byte for byte what protojson (the zero MarshalOptions, as
// grpc-gateway's JSONPb calls it) followed by the splicing of the
// always-present members used to produce (marshal_equal_test.go keeps
// that implementation as the reference):
//   - members in declaration order, each written as protojson writes it;
//   - in a message that lacks members that must be present, those members
//     first, in declaration order, then the members protojson writes;
//   - google.protobuf types written by protojson itself, since their JSON
//     form is not an object of their fields, and nothing added inside them
//     or inside map values.

// messagePlan is how one message type is written.
type messagePlan struct {
	name protoreflect.FullName
	// wellKnown marks a google.protobuf type: protojson writes it.
	wellKnown bool
	// fields are in declaration order, the order protojson writes them in.
	fields []fieldPlan
	// emptyFilled is the message's JSON when it is unset but must be
	// present: an object of its own always-present members, e.g.
	// `{"issues":[]}` for AddonHealth.
	emptyFilled string
	// goType is the generated Go type of the message (a pointer to its
	// struct) when it has fields read as Go values (fieldPlan.goField),
	// nil otherwise.
	goType reflect.Type
}

// fieldPlan is how one field is written.
type fieldPlan struct {
	desc protoreflect.FieldDescriptor
	// member is the field's JSON name quoted, with the colon: `"addonName":`.
	member []byte
	isList bool
	isMap  bool
	// alwaysPresent is the field's (saltbush.eks.v1.always_present) option.
	alwaysPresent bool
	// value is the field's value, a list's item, or a map's value.
	value valuePlan
	// mapKey is the kind of a map's keys.
	mapKey protoreflect.Kind
	// goField is the index in the generated struct of a field whose Go
	// type is []string or map[string]string, -1 for any other. Those, the
	// names, ARNs and tags of most AWS responses, are read as Go values:
	// protoreflect copies every string of a list or map it hands out onto
	// the heap.
	goField int
}

// valuePlan is how one singular value is written.
type valuePlan struct {
	kind protoreflect.Kind
	// enum is set for EnumKind.
	enum protoreflect.EnumDescriptor
	// message is set for MessageKind and GroupKind.
	message *messagePlan
}

// fillable reports whether a field of this value is a message that the
// always-present rules apply inside of.
func (v *valuePlan) fillable() bool {
	return v.message != nil && !v.message.wellKnown
}

// mustBePresent reports whether f is written even when empty; top marks the
// response message itself, whose lists are always written.
func (f *fieldPlan) mustBePresent(top bool) bool {
	return f.alwaysPresent || (top && f.isList)
}

// emptyValue is what an empty field that must be present is written as;
// ok is false for a field that stays absent all the same (a scalar, or a
// google.protobuf message).
func (f *fieldPlan) emptyValue() (value string, ok bool) {
	switch {
	case f.isMap:
		return "{}", true
	case f.isList:
		return "[]", true
	case f.value.fillable():
		return f.value.message.emptyFilled, true
	}
	return "", false
}

// planCache owns the plans, built on first use of each message type and
// never changed after, and the writers' buffers.
type planCache struct {
	// plans maps a protoreflect.MessageDescriptor to its *messagePlan.
	plans sync.Map
	// writers holds *jsonWriter values with their buffers.
	writers sync.Pool
	// sep is what protojson writes between members and items: "," or ", ".
	// It picks one per binary, deliberately (protobuf's internal/detrand),
	// and the bytes must stay the same as it writes them.
	sep string
	// opts writes the google.protobuf types, as the zero MarshalOptions
	// grpc-gateway's JSONPb uses.
	opts protojson.MarshalOptions
}

// maxPooledBuffer bounds the buffers kept for reuse: a rare huge response
// does not pin its buffer for the life of the process.
const maxPooledBuffer = 64 << 10

func newPlanCache() *planCache {
	c := &planCache{sep: protojsonSeparator()}
	c.writers.New = func() any { return &jsonWriter{buf: make([]byte, 0, 2048)} }
	return c
}

// protojsonSeparator is the separator protojson writes in this binary.
func protojsonSeparator() string {
	b, err := protojson.Marshal(&eksv1.ListClustersResponse{Clusters: []string{"a", "b"}})
	if err == nil && bytes.Contains(b, []byte(`"a", "b"`)) {
		return ", "
	}
	return ","
}

// plan returns the plan of md, building it (and the plans of the messages
// inside it) the first time.
func (c *planCache) plan(md protoreflect.MessageDescriptor) (*messagePlan, error) {
	if p, ok := c.plans.Load(md); ok {
		return p.(*messagePlan), nil
	}
	built := map[protoreflect.MessageDescriptor]*messagePlan{}
	p, err := c.build(md, built)
	if err != nil {
		return nil, err
	}
	visiting := map[*messagePlan]bool{}
	for _, bp := range built {
		if err := bp.fillEmpty(visiting); err != nil {
			return nil, err
		}
	}
	// Publish only complete plans. Two callers may build the same type at
	// once; the plans are equal, so whichever is stored first is kept.
	for d, bp := range built {
		c.plans.LoadOrStore(d, bp)
	}
	return p, nil
}

// build makes the plan of md; built holds the plans of this build, so that
// a message type that contains itself refers to its own plan.
func (c *planCache) build(md protoreflect.MessageDescriptor, built map[protoreflect.MessageDescriptor]*messagePlan) (*messagePlan, error) {
	if p, ok := c.plans.Load(md); ok {
		return p.(*messagePlan), nil
	}
	if p, ok := built[md]; ok {
		return p, nil
	}
	p := &messagePlan{name: md.FullName(), wellKnown: md.ParentFile().Package() == "google.protobuf"}
	built[md] = p
	if p.wellKnown {
		return p, nil
	}
	goFields := map[protoreflect.FieldNumber]int{}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil && mt.Descriptor() == md {
		goType := reflect.TypeOf(mt.Zero().Interface())
		if goFields = stringFields(goType); len(goFields) > 0 {
			p.goType = goType
		}
	}
	// protojson writes set extensions and checks required fields; no EKS
	// message has either (proto3), so the plans need not.
	if md.ExtensionRanges().Len() > 0 {
		return nil, fmt.Errorf("gateway: JSON plan of %s: extension ranges are not supported", md.FullName())
	}
	fields := md.Fields()
	p.fields = make([]fieldPlan, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			return nil, fmt.Errorf("gateway: JSON plan of %s: required field %s is not supported", md.FullName(), fd.Name())
		}
		member, err := appendJSONString(nil, fd.JSONName())
		if err != nil {
			return nil, fmt.Errorf("gateway: JSON plan of %s: field %s: %w", md.FullName(), fd.Name(), err)
		}
		f := fieldPlan{
			desc:          fd,
			member:        append(member, ':'),
			isList:        fd.IsList(),
			isMap:         fd.IsMap(),
			alwaysPresent: alwaysPresent(fd),
			goField:       -1,
		}
		valueDesc := fd
		if f.isMap {
			f.mapKey = fd.MapKey().Kind()
			valueDesc = fd.MapValue()
		}
		if f.value, err = c.valuePlan(valueDesc, built); err != nil {
			return nil, err
		}
		stringList := f.isList && f.value.kind == protoreflect.StringKind
		stringMap := f.isMap && f.mapKey == protoreflect.StringKind && f.value.kind == protoreflect.StringKind
		if goField, ok := goFields[fd.Number()]; ok && (stringList || stringMap) {
			f.goField = goField
		}
		p.fields[i] = f
	}
	return p, nil
}

// stringFields maps the field numbers of the []string and
// map[string]string fields of a generated message's struct to their
// indices in it. The number is the second item of the field's protobuf
// struct tag (`protobuf:"bytes,14,rep,name=tags,proto3"`).
func stringFields(goType reflect.Type) map[protoreflect.FieldNumber]int {
	out := map[protoreflect.FieldNumber]int{}
	if goType.Kind() != reflect.Pointer || goType.Elem().Kind() != reflect.Struct {
		return out
	}
	st := goType.Elem()
	for i := range st.NumField() {
		sf := st.Field(i)
		if sf.Type != reflect.TypeFor[[]string]() && sf.Type != reflect.TypeFor[map[string]string]() {
			continue
		}
		parts := strings.Split(sf.Tag.Get("protobuf"), ",")
		if len(parts) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(parts[1], 10, 32); err == nil {
			out[protoreflect.FieldNumber(n)] = i
		}
	}
	return out
}

func (c *planCache) valuePlan(fd protoreflect.FieldDescriptor, built map[protoreflect.MessageDescriptor]*messagePlan) (valuePlan, error) {
	v := valuePlan{kind: fd.Kind()}
	switch v.kind {
	case protoreflect.EnumKind:
		v.enum = fd.Enum()
	case protoreflect.MessageKind, protoreflect.GroupKind:
		child, err := c.build(fd.Message(), built)
		if err != nil {
			return valuePlan{}, err
		}
		v.message = child
	}
	return v, nil
}

// fillEmpty works out p.emptyFilled, after the plans of its fields.
func (p *messagePlan) fillEmpty(visiting map[*messagePlan]bool) error {
	if p.emptyFilled != "" || p.wellKnown {
		return nil
	}
	if visiting[p] {
		return fmt.Errorf("gateway: JSON plan of %s: its always-present members contain it", p.name)
	}
	visiting[p] = true
	defer delete(visiting, p)
	b := []byte{'{'}
	for i := range p.fields {
		f := &p.fields[i]
		if !f.alwaysPresent {
			continue
		}
		if f.value.fillable() && !f.isList && !f.isMap {
			if err := f.value.message.fillEmpty(visiting); err != nil {
				return err
			}
		}
		value, ok := f.emptyValue()
		if !ok {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(b, f.member...), value...)
	}
	p.emptyFilled = string(append(b, '}'))
	return nil
}

// alwaysPresent reports whether f carries the always_present option.
func alwaysPresent(f protoreflect.FieldDescriptor) bool {
	opts := f.Options()
	return opts != nil && proto.GetExtension(opts, eksv1.E_AlwaysPresent).(bool)
}

// jsonWriter writes one response into its buffer.
type jsonWriter struct {
	buf  []byte
	sep  string
	opts protojson.MarshalOptions
	// keys is scratch space for sorting map keys, used as a stack by maps
	// inside map values.
	keys []protoreflect.MapKey
	// stringKeys is scratch space for sorting a map[string]string's keys.
	stringKeys []string
}

// errInvalidUTF8 is a string that JSON cannot carry; Marshal reports
// protojson's own error for it.
var errInvalidUTF8 = errors.New("invalid UTF-8")

// message writes m. With fill, the members that must be present are
// added (not inside map values, as before); top marks the response itself.
func (w *jsonWriter) message(m protoreflect.Message, p *messagePlan, top, fill bool) error {
	if p.wellKnown {
		var err error
		w.buf, err = w.opts.MarshalAppend(w.buf, m.Interface())
		return err
	}
	w.buf = append(w.buf, '{')
	written := 0
	if fill {
		for i := range p.fields {
			f := &p.fields[i]
			if !f.mustBePresent(top) || m.Has(f.desc) {
				continue
			}
			value, ok := f.emptyValue()
			if !ok {
				continue
			}
			if written > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = append(append(w.buf, f.member...), value...)
			written++
		}
	}
	// goStruct is m's generated struct, for the fields read as Go values.
	var goStruct reflect.Value
	if p.goType != nil {
		if msg := m.Interface(); reflect.TypeOf(msg) == p.goType {
			if ptr := reflect.ValueOf(msg); !ptr.IsNil() {
				goStruct = ptr.Elem()
			}
		}
	}
	// The added members were joined by plain commas, and so is the first
	// member protojson writes after them; protojson's own members by its
	// separator.
	next := ","
	for i := range p.fields {
		f := &p.fields[i]
		if !m.Has(f.desc) {
			continue
		}
		if written > 0 {
			w.buf = append(w.buf, next...)
		}
		next = w.sep
		w.buf = append(w.buf, f.member...)
		var err error
		switch {
		case f.goField >= 0 && goStruct.IsValid() && f.isList:
			err = w.stringList(*goStruct.Field(f.goField).Addr().Interface().(*[]string))
		case f.goField >= 0 && goStruct.IsValid() && f.isMap:
			err = w.stringMap(*goStruct.Field(f.goField).Addr().Interface().(*map[string]string))
		case f.isList:
			err = w.list(m.Get(f.desc).List(), f, fill)
		case f.isMap:
			err = w.mapValue(m.Get(f.desc).Map(), f)
		default:
			err = w.value(m.Get(f.desc), &f.value, fill)
		}
		if err != nil {
			return err
		}
		written++
	}
	w.buf = append(w.buf, '}')
	return nil
}

// list writes a list field. A list of messages of which one lacked a member
// was rewritten item by item, with plain commas between the items.
func (w *jsonWriter) list(l protoreflect.List, f *fieldPlan, fill bool) error {
	sep := w.sep
	if fill && sep != "," && f.value.fillable() && listMissing(l, f.value.message) {
		sep = ","
	}
	w.buf = append(w.buf, '[')
	for i := range l.Len() {
		if i > 0 {
			w.buf = append(w.buf, sep...)
		}
		if err := w.value(l.Get(i), &f.value, fill); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, ']')
	return nil
}

// stringList writes a []string list field as list does.
func (w *jsonWriter) stringList(l []string) error {
	w.buf = append(w.buf, '[')
	for i, s := range l {
		if i > 0 {
			w.buf = append(w.buf, w.sep...)
		}
		var err error
		if w.buf, err = appendJSONString(w.buf, s); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, ']')
	return nil
}

// stringMap writes a map[string]string field as mapValue does.
func (w *jsonWriter) stringMap(mp map[string]string) error {
	keys := w.stringKeys[:0]
	for k := range mp {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Kept for the next map, without the strings of this response.
	defer func() { clear(keys); w.stringKeys = keys[:0] }()
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, w.sep...)
		}
		var err error
		if w.buf, err = appendJSONString(w.buf, k); err != nil {
			return err
		}
		w.buf = append(w.buf, ':')
		if w.buf, err = appendJSONString(w.buf, mp[k]); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

// mapValue writes a map field, keys in protojson's order. Nothing is added
// inside its values.
func (w *jsonWriter) mapValue(mp protoreflect.Map, f *fieldPlan) error {
	start := len(w.keys)
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		w.keys = append(w.keys, k)
		return true
	})
	keys := w.keys[start:]
	defer func() { clear(keys); w.keys = w.keys[:start] }()
	slices.SortFunc(keys, func(x, y protoreflect.MapKey) int { return compareMapKeys(f.mapKey, x, y) })
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, w.sep...)
		}
		var err error
		if w.buf, err = appendJSONString(w.buf, mapKeyString(f.mapKey, k)); err != nil {
			return err
		}
		w.buf = append(w.buf, ':')
		if err := w.value(mp.Get(k), &f.value, false); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

// compareMapKeys orders keys as protojson does: false before true, numbers
// ascending, strings by bytes.
func compareMapKeys(kind protoreflect.Kind, x, y protoreflect.MapKey) int {
	switch kind {
	case protoreflect.BoolKind:
		switch {
		case x.Bool() == y.Bool():
			return 0
		case !x.Bool():
			return -1
		}
		return 1
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return compareOrdered(x.Int(), y.Int())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return compareOrdered(x.Uint(), y.Uint())
	}
	return strings.Compare(x.String(), y.String())
}

func compareOrdered[T int64 | uint64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// mapKeyString is a map key as a JSON member name.
func mapKeyString(kind protoreflect.Kind, k protoreflect.MapKey) string {
	switch kind {
	case protoreflect.BoolKind:
		return strconv.FormatBool(k.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(k.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(k.Uint(), 10)
	}
	return k.String()
}

// value writes one singular value as protojson does.
func (w *jsonWriter) value(v protoreflect.Value, p *valuePlan, fill bool) error {
	var err error
	switch p.kind {
	case protoreflect.BoolKind:
		w.buf = strconv.AppendBool(w.buf, v.Bool())
	case protoreflect.StringKind:
		w.buf, err = appendJSONString(w.buf, v.String())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		w.buf = strconv.AppendInt(w.buf, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		w.buf = strconv.AppendUint(w.buf, v.Uint(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		// 64-bit integers are JSON strings.
		w.buf = append(strconv.AppendInt(append(w.buf, '"'), v.Int(), 10), '"')
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		w.buf = append(strconv.AppendUint(append(w.buf, '"'), v.Uint(), 10), '"')
	case protoreflect.FloatKind:
		w.buf = appendJSONFloat(w.buf, v.Float(), 32)
	case protoreflect.DoubleKind:
		w.buf = appendJSONFloat(w.buf, v.Float(), 64)
	case protoreflect.BytesKind:
		w.buf = append(base64.StdEncoding.AppendEncode(append(w.buf, '"'), v.Bytes()), '"')
	case protoreflect.EnumKind:
		w.enum(v.Enum(), p.enum)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		err = w.message(v.Message(), p.message, false, fill)
	default:
		err = fmt.Errorf("gateway: JSON of kind %v is not supported", p.kind)
	}
	return err
}

// enum writes an enum value by name, by number when it has no name, and
// google.protobuf.NullValue as null.
func (w *jsonWriter) enum(n protoreflect.EnumNumber, ed protoreflect.EnumDescriptor) {
	if ed.FullName() == "google.protobuf.NullValue" {
		w.buf = append(w.buf, "null"...)
		return
	}
	if vd := ed.Values().ByNumber(n); vd != nil {
		// Enum value names are identifiers: nothing to escape.
		w.buf = append(append(append(w.buf, '"'), vd.Name()...), '"')
		return
	}
	w.buf = strconv.AppendInt(w.buf, int64(n), 10)
}

// listMissing reports whether an item of l lacks a member that must be
// present.
func listMissing(l protoreflect.List, p *messagePlan) bool {
	for i := range l.Len() {
		if missing(l.Get(i).Message(), p, false) {
			return true
		}
	}
	return false
}

// missing reports whether m, or a message inside it, lacks a member that
// must be present.
func missing(m protoreflect.Message, p *messagePlan, top bool) bool {
	for i := range p.fields {
		f := &p.fields[i]
		switch {
		case f.isMap:
			if f.mustBePresent(top) && !m.Has(f.desc) {
				return true
			}
		case f.isList:
			if !m.Has(f.desc) {
				if f.mustBePresent(top) {
					return true
				}
				continue
			}
			if f.value.fillable() && listMissing(m.Get(f.desc).List(), f.value.message) {
				return true
			}
		case f.value.fillable():
			if !m.Has(f.desc) {
				if f.mustBePresent(top) {
					return true
				}
				continue
			}
			if missing(m.Get(f.desc).Message(), f.value.message, false) {
				return true
			}
		}
	}
	return false
}

// appendJSONString appends s as a JSON string, escaped as protojson escapes
// it: '"', '\\' and control characters only (so '<', '>', '&', U+2028 and
// U+2029 are written as they are), control characters by their short
// escape or \u00XX. Invalid UTF-8 is an error.
func appendJSONString(out []byte, s string) ([]byte, error) {
	out = append(out, '"')
	i := indexNeedEscape(s)
	s, out = s[i:], append(out, s[:i]...)
	for len(s) > 0 {
		switch r, n := utf8.DecodeRuneInString(s); {
		case r == utf8.RuneError && n == 1:
			return out, errInvalidUTF8
		case r < ' ' || r == '"' || r == '\\':
			out = append(out, '\\')
			switch r {
			case '"', '\\':
				out = append(out, byte(r))
			case '\b':
				out = append(out, 'b')
			case '\f':
				out = append(out, 'f')
			case '\n':
				out = append(out, 'n')
			case '\r':
				out = append(out, 'r')
			case '\t':
				out = append(out, 't')
			default:
				// The other control characters, below U+0020: \u00XX.
				out = append(out, 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
			}
			s = s[n:]
		default:
			i := indexNeedEscape(s[n:])
			s, out = s[n+i:], append(out, s[:n+i]...)
		}
	}
	return append(out, '"'), nil
}

const hexDigits = "0123456789abcdef"

// indexNeedEscape is the index of the first byte of s that needs a look:
// an escape, or a possibly invalid UTF-8 sequence.
func indexNeedEscape(s string) int {
	for i, r := range s {
		if r < ' ' || r == '\\' || r == '"' || r == utf8.RuneError {
			return i
		}
	}
	return len(s)
}

// appendJSONFloat appends n as protojson does: encoding/json's number
// format, and NaN and the infinities as strings.
func appendJSONFloat(out []byte, n float64, bitSize int) []byte {
	switch {
	case math.IsNaN(n):
		return append(out, `"NaN"`...)
	case math.IsInf(n, +1):
		return append(out, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(out, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	out = strconv.AppendFloat(out, n, format, -1, bitSize)
	if format == 'e' {
		// strconv writes 1e-07; encoding/json, and so protojson, 1e-7.
		l := len(out)
		if l >= 4 && out[l-4] == 'e' && out[l-3] == '-' && out[l-2] == '0' {
			out[l-2] = out[l-1]
			out = out[:l-1]
		}
	}
	return out
}
