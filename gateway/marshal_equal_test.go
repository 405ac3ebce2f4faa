package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/presence"
)

// The plans (plan.go) must write every response exactly as the marshaler
// they replaced did (legacyMarshal, marshal_legacy_test.go). These tests
// compare the two byte for byte on every response type of the EKS
// services, filled at random many times over, and on a test message type
// with every kind of field protojson knows.

// eksResponseTypes lists the output message of every saltbush.eks.v1
// operation.
func eksResponseTypes(t *testing.T) []protoreflect.MessageType {
	t.Helper()
	seen := map[protoreflect.FullName]bool{}
	var out []protoreflect.MessageType
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			methods := fd.Services().Get(i).Methods()
			for j := range methods.Len() {
				name := methods.Get(j).Output().FullName()
				if seen[name] {
					continue
				}
				seen[name] = true
				mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
				if err != nil {
					t.Fatalf("response type %s: %v", name, err)
				}
				out = append(out, mt)
			}
		}
		return true
	})
	if len(out) < 30 {
		t.Fatalf("found %d EKS response types, want every operation's", len(out))
	}
	return out
}

// compareWithLegacy fails t unless m writes msg as legacyMarshal does; it
// reports whether msg could be written at all.
func compareWithLegacy(t *testing.T, m awsJSON, msg proto.Message) bool {
	t.Helper()
	want, wantErr := legacyMarshal(m.JSONPb, msg)
	got, gotErr := m.Marshal(msg)
	if (wantErr != nil) != (gotErr != nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("Marshal(%s) error %v, want %v", protojson.Format(msg), gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal(%s):\n got %s\nwant %s", protojson.Format(msg), got, want)
	}
	if wantErr == nil && !json.Valid(got) {
		t.Fatalf("Marshal wrote invalid JSON %s", got)
	}
	return wantErr == nil
}

func TestMarshalMatchesLegacyOnEveryResponse(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	for _, mt := range eksResponseTypes(t) {
		t.Run(string(mt.Descriptor().Name()), func(t *testing.T) {
			// The empty response, a nil one, and one with every member set
			// (all lists and maps of three), then random ones, sparse to
			// dense, so that members that must be present are missing at
			// every depth in some and not in others.
			compareWithLegacy(t, m, mt.New().Interface())
			compareWithLegacy(t, m, mt.Zero().Interface())
			full := mt.New()
			populate(rand.New(rand.NewPCG(1, 2)), full, 4, 1, true)
			compareWithLegacy(t, m, full.Interface())
			for seed := range 300 {
				r := rand.New(rand.NewPCG(uint64(seed), 7))
				msg := mt.New()
				populate(r, msg, 4, []float64{0.1, 0.3, 0.6, 0.9}[seed%4], false)
				if !compareWithLegacy(t, m, msg.Interface()) {
					t.Fatalf("random response %s could not be written", protojson.Format(msg.Interface()))
				}
				// The same response as a dynamic message: its lists and maps
				// of strings are read through protoreflect, not as Go values.
				dyn := dynamicpb.NewMessage(mt.Descriptor())
				b, err := proto.Marshal(msg.Interface())
				if err != nil {
					t.Fatal(err)
				}
				if err := proto.Unmarshal(b, dyn); err != nil {
					t.Fatal(err)
				}
				compareWithLegacy(t, m, dyn)
			}
		})
	}
}

func TestMarshalMatchesLegacyOnEveryKind(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	kinds := kindsDescriptor(t)
	compareWithLegacy(t, m, dynamicpb.NewMessage(kinds))
	full := dynamicpb.NewMessage(kinds)
	populate(rand.New(rand.NewPCG(1, 2)), full, 3, 1, true)
	compareWithLegacy(t, m, full)
	written := 0
	for seed := range 1000 {
		r := rand.New(rand.NewPCG(uint64(seed), 11))
		msg := dynamicpb.NewMessage(kinds)
		populate(r, msg, 3, []float64{0.1, 0.3, 0.6, 0.9}[seed%4], false)
		if compareWithLegacy(t, m, msg) {
			written++
		}
	}
	// The values are ones protojson takes: errors would hide differences.
	if written < 1000 {
		t.Errorf("only %d of 1000 random messages could be written", written)
	}
}

// TestMarshalHandPicked compares responses the random ones may not hit,
// the ones AWS's shapes make common among them.
func TestMarshalHandPicked(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	tricky := "<script>alert(\"x\" & 'y')</script> \\ / \u2028\u2029 \x00\x1f\x7f é 日本 😀 \ufffd"
	tests := []proto.Message{
		benchAddonResponse(),
		benchClusterResponse(),
		benchListAddonsResponse(),
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{AddonName: tricky, Tags: map[string]string{tricky: tricky, "a": "", "": "b"}}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{Health: &eksv1.AddonHealth{Issues: []*eksv1.AddonIssue{{}, {Code: "x"}}}}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{CreatedAt: math.Copysign(0, -1), ModifiedAt: 1e21}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{CreatedAt: 1e-7, ModifiedAt: math.Inf(1)}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{CreatedAt: math.NaN(), ModifiedAt: 5e-324}},
		&eksv1.ListAssociatedAccessPoliciesResponse{AssociatedAccessPolicies: []*eksv1.AssociatedAccessPolicy{
			{PolicyArn: "a", AccessScope: &eksv1.AccessScope{Type: "cluster"}}, {PolicyArn: "b"},
		}},
		&eksv1.UpdateAddonResponse{Update: &eksv1.Update{Id: "u", Params: []*eksv1.UpdateParam{{Type: "a", Value: "b"}}}},
		&eksv1.DescribeUpdateResponse{},
		&eksv1.ListClustersResponse{Clusters: []string{"a", "b"}, NextToken: "t"},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{PodIdentityAssociations: []string{"p"}}},
	}
	for i, msg := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) { compareWithLegacy(t, m, msg) })
	}
}

// TestMarshalInvalidUTF8 gets protojson's own error, as before.
func TestMarshalInvalidUTF8(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	for _, msg := range []proto.Message{
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{AddonName: "a\xffb"}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{Tags: map[string]string{"k\xff": "v"}}},
		&eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{Tags: map[string]string{"k": "v\xff"}}},
		&eksv1.ListClustersResponse{Clusters: []string{"ok", "\xc3"}},
	} {
		if _, err := m.Marshal(msg); err == nil || !strings.Contains(err.Error(), "invalid UTF-8") {
			t.Errorf("Marshal(%v) error %v, want protojson's invalid UTF-8", msg, err)
		}
		compareWithLegacy(t, m, msg)
	}
}

// TestMarshalNotAMessage: what is not a message is JSONPb's, as before.
func TestMarshalNotAMessage(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	for _, v := range []any{nil, "a<b", []string{"x"}, map[string]int{"a": 1}, (*eksv1.Addon)(nil), []*eksv1.Addon{{AddonName: "a"}}} {
		want, wantErr := legacyMarshal(m.JSONPb, v)
		got, err := m.Marshal(v)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("Marshal(%#v) = %s, %v; want %s, %v", v, got, err, want, wantErr)
		}
	}
	// A google.protobuf message as the whole response.
	for _, msg := range []proto.Message{
		&structpb.ListValue{}, structpb.NewStringValue("a"), timestamppb.New(timestamppb.Now().AsTime()), &structpb.Struct{},
	} {
		compareWithLegacy(t, m, msg)
	}
}

// TestMarshalSeparators: protojson writes "," or ", " between members,
// one or the other per binary (protobuf's internal/detrand); the members
// the always-present rule added were joined by plain commas. Both forms
// are checked here whichever this binary has.
func TestMarshalSeparators(t *testing.T) {
	msg := &eksv1.ListAssociatedAccessPoliciesResponse{ClusterName: "c", AssociatedAccessPolicies: []*eksv1.AssociatedAccessPolicy{
		{PolicyArn: "a", AccessScope: &eksv1.AccessScope{Type: "cluster"}, AssociatedAt: 1.5}, {PolicyArn: "b"},
	}}
	addon := &eksv1.DescribeAddonResponse{Addon: &eksv1.Addon{AddonName: "a", Status: "ACTIVE", Tags: map[string]string{"x": "1", "y": "2"}}}
	tests := []struct {
		sep  string
		msg  proto.Message
		want string
	}{
		{",", msg, `{"clusterName":"c","associatedAccessPolicies":[{"policyArn":"a","accessScope":{"namespaces":[],"type":"cluster"},"associatedAt":1.5},{"policyArn":"b"}]}`},
		{", ", msg, `{"clusterName":"c", "associatedAccessPolicies":[{"policyArn":"a", "accessScope":{"namespaces":[],"type":"cluster"}, "associatedAt":1.5},{"policyArn":"b"}]}`},
		{",", addon, `{"addon":{"health":{"issues":[]},"addonName":"a","status":"ACTIVE","tags":{"x":"1","y":"2"}}}`},
		{", ", addon, `{"addon":{"health":{"issues":[]},"addonName":"a", "status":"ACTIVE", "tags":{"x":"1", "y":"2"}}}`},
		{", ", &eksv1.ListClustersResponse{NextToken: "t"}, `{"clusters":[],"nextToken":"t"}`},
		{", ", &eksv1.ListClustersResponse{Clusters: []string{"a", "b"}, NextToken: "t"}, `{"clusters":["a", "b"], "nextToken":"t"}`},
	}
	for _, tc := range tests {
		m := newAWSJSON(protojson.UnmarshalOptions{})
		m.plans.sep = tc.sep
		got, err := m.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("with %q: Marshal =\n%s\nwant\n%s", tc.sep, got, tc.want)
		}
		if m.plans.sep == protojsonSeparator() {
			compareWithLegacy(t, m, tc.msg)
		}
	}
}

// TestMarshalConcurrent writes responses from many goroutines at once
// (plans are built on first use, buffers shared through the pool); run
// with -race.
func TestMarshalConcurrent(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	msgs := []proto.Message{benchAddonResponse(), benchClusterResponse(), benchListAddonsResponse()}
	var wants [][]byte
	for _, msg := range msgs {
		b, err := legacyMarshal(m.JSONPb, msg)
		if err != nil {
			t.Fatal(err)
		}
		wants = append(wants, b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % len(msgs)
				got, err := m.Marshal(msgs[k])
				if err == nil && !bytes.Equal(got, wants[k]) {
					err = fmt.Errorf("got %s, want %s", got, wants[k])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPlansOfEveryResponse: every response type has a plan (no
// unsupported feature), and a plan is built once.
func TestPlansOfEveryResponse(t *testing.T) {
	c := newPlanCache()
	for _, mt := range eksResponseTypes(t) {
		p, err := c.plan(mt.Descriptor())
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.plan(mt.Descriptor())
		if err != nil || again != p {
			t.Fatalf("second plan of %s: %p, %v; want the first, %p", mt.Descriptor().FullName(), again, err, p)
		}
	}
	addon, err := c.plan((&eksv1.Addon{}).ProtoReflect().Descriptor())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := addon.emptyFilled, `{"health":{"issues":[]},"tags":{}}`; got != want {
		t.Errorf("Addon's empty form %s, want %s", got, want)
	}
}

// Values the random responses draw from: JSON escapes, HTML characters
// (written as they are), non-ASCII, and numbers at protojson's format
// boundaries.
var (
	testStrings = []string{
		"", "coredns", "a\"b}", `back\slash`, "<b>&amp;</b>", "line\nbreak\ttab\r\b\f", "\x00\x01\x1f\x7f",
		"\u2028\u2029", "é日本語😀", "\ufffd", "arn:aws:eks:us-east-1:000000000000:cluster/a", " , : { } [ ] ",
	}
	testDoubles = []float64{
		0.5, 1800000000.123, math.Copysign(0, -1), 1e21, 1e20, 1e-6, 1e-7, 123456789012345678, 5e-324,
		math.MaxFloat64, math.NaN(), math.Inf(1), math.Inf(-1), -2.25, 3,
	}
	testInt32s  = []int32{1, -1, 42, math.MaxInt32, math.MinInt32}
	testInts    = []int64{1, -1, 42, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64}
	testUint32s = []uint32{1, 42, math.MaxInt32, math.MaxUint32}
	testUints   = []uint64{1, 42, math.MaxUint32, math.MaxInt64, math.MaxUint64}
)

// populate sets m's fields at random: each with probability density (every
// one when all is set), lists and maps of up to three (three when all),
// messages down to depth, among them present but empty ones.
func populate(r *rand.Rand, m protoreflect.Message, depth int, density float64, all bool) {
	md := m.Descriptor()
	if populateWellKnown(r, m, depth) {
		return
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !all && r.Float64() >= density {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue
		}
		n := 3
		if !all {
			n = r.IntN(4)
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range n {
				if fd.Message() != nil {
					if depth == 0 {
						break
					}
					item := l.NewElement()
					populate(r, item.Message(), depth-1, density, all)
					l.Append(item)
					continue
				}
				l.Append(scalarValue(r, fd))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range n {
				k := scalarValue(r, fd.MapKey()).MapKey()
				if fd.MapValue().Message() != nil {
					if depth == 0 {
						break
					}
					v := mp.NewValue()
					populate(r, v.Message(), depth-1, density, all)
					mp.Set(k, v)
					continue
				}
				mp.Set(k, scalarValue(r, fd.MapValue()))
			}
		case fd.Message() != nil:
			if depth == 0 {
				continue
			}
			child := m.Mutable(fd).Message()
			// Present but empty, except a Value, which protojson refuses so.
			if all || r.IntN(4) > 0 || fd.Message().FullName() == "google.protobuf.Value" {
				populate(r, child, depth-1, density, all)
			}
		default:
			m.Set(fd, scalarValue(r, fd))
		}
	}
}

// populateWellKnown fills the google.protobuf types protojson writes in
// their own JSON forms, with values it accepts; false for other types.
func populateWellKnown(r *rand.Rand, m protoreflect.Message, depth int) bool {
	var v proto.Message
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		v = &timestamppb.Timestamp{Seconds: r.Int64N(4e9), Nanos: []int32{0, 123000000, 123456000, 123456789}[r.IntN(4)]}
	case "google.protobuf.Duration":
		v = &durationpb.Duration{Seconds: r.Int64N(1e6), Nanos: []int32{0, 5e8, 1}[r.IntN(3)]}
	case "google.protobuf.Value":
		v = testValue(r, depth)
	case "google.protobuf.ListValue":
		l := testValue(r, depth+1).GetListValue()
		if l == nil {
			l = &structpb.ListValue{Values: []*structpb.Value{testValue(r, depth)}}
		}
		v = l
	case "google.protobuf.Struct":
		v = &structpb.Struct{Fields: map[string]*structpb.Value{"a": testValue(r, depth), "<b>": testValue(r, depth)}}
	case "google.protobuf.StringValue":
		v = wrapperspb.String(testStrings[r.IntN(len(testStrings))])
	case "google.protobuf.Int64Value":
		v = wrapperspb.Int64(testInts[r.IntN(len(testInts))])
	default:
		return m.Descriptor().ParentFile().Package() == "google.protobuf"
	}
	// Through the wire form: m may be a dynamic message of the same type.
	b, err := proto.Marshal(v)
	if err != nil {
		panic(err)
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, m.Interface()); err != nil {
		panic(err)
	}
	return true
}

func testValue(r *rand.Rand, depth int) *structpb.Value {
	switch k := r.IntN(6); {
	case k == 0:
		return structpb.NewNullValue()
	case k == 1:
		return structpb.NewNumberValue([]float64{1.5, -0.25, 1e21, 3}[r.IntN(4)])
	case k == 2:
		return structpb.NewStringValue(testStrings[r.IntN(len(testStrings))])
	case k == 3:
		return structpb.NewBoolValue(r.IntN(2) == 0)
	case k == 4 && depth > 0:
		return structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{testValue(r, depth-1), testValue(r, depth-1)}})
	case depth > 0:
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"k": testValue(r, depth-1), "&": testValue(r, depth-1)}})
	}
	return structpb.NewStringValue("leaf")
}

// scalarValue is a random value of fd's kind.
func scalarValue(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(testStrings[r.IntN(len(testStrings))])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(testStrings[r.IntN(len(testStrings))]))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(testInt32s[r.IntN(len(testInt32s))])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(testInts[r.IntN(len(testInts))])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(testUint32s[r.IntN(len(testUint32s))])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(testUints[r.IntN(len(testUints))])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(testDoubles[r.IntN(len(testDoubles))]))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(testDoubles[r.IntN(len(testDoubles))])
	case protoreflect.EnumKind:
		// Named values, and a number the enum has no name for.
		if r.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(99)
		}
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	}
	panic(fmt.Sprintf("no test value of kind %v", fd.Kind()))
}

// kindsDescriptor builds a test message type, saltbush.gatewaytest.Kinds,
// with a field of every kind protojson writes: every scalar kind, optional
// and repeated, maps with every key kind, an enum, oneofs, a message that
// contains itself, google.protobuf types, and always-present members at
// every depth, in lists, and on members the rule does not apply to
// (scalars, google.protobuf messages).
func kindsDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	always := func() *descriptorpb.FieldOptions {
		opts := &descriptorpb.FieldOptions{}
		proto.SetExtension(opts, eksv1.E_AlwaysPresent, true)
		return opts
	}
	var msgs []*descriptorpb.DescriptorProto
	field := func(name string, number int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(number), Type: typ.Enum(), Label: label.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	const (
		opt = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		rep = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		msg = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	scalars := []descriptorpb.FieldDescriptorProto_Type{
		descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_BYTES,
		descriptorpb.FieldDescriptorProto_TYPE_INT32, descriptorpb.FieldDescriptorProto_TYPE_SINT32, descriptorpb.FieldDescriptorProto_TYPE_SFIXED32,
		descriptorpb.FieldDescriptorProto_TYPE_UINT32, descriptorpb.FieldDescriptorProto_TYPE_FIXED32,
		descriptorpb.FieldDescriptorProto_TYPE_INT64, descriptorpb.FieldDescriptorProto_TYPE_SINT64, descriptorpb.FieldDescriptorProto_TYPE_SFIXED64,
		descriptorpb.FieldDescriptorProto_TYPE_UINT64, descriptorpb.FieldDescriptorProto_TYPE_FIXED64,
		descriptorpb.FieldDescriptorProto_TYPE_FLOAT, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE,
	}
	// The oneof first: proto3 optional fields' synthetic oneofs come last.
	kinds := &descriptorpb.DescriptorProto{Name: proto.String("Kinds"),
		OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}}}
	const oneof = 0
	n := int32(1)
	add := func(f *descriptorpb.FieldDescriptorProto) *descriptorpb.FieldDescriptorProto {
		kinds.Field = append(kinds.Field, f)
		n++
		return f
	}
	// mapField adds map<key, value> named name, with its entry type.
	mapField := func(name string, key descriptorpb.FieldDescriptorProto_Type, value descriptorpb.FieldDescriptorProto_Type, valueType string) *descriptorpb.FieldDescriptorProto {
		entry := &descriptorpb.DescriptorProto{
			Name:    proto.String(mapEntryName(name)),
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, key, opt, ""), field("value", 2, value, opt, valueType)},
		}
		kinds.NestedType = append(kinds.NestedType, entry)
		return add(field(name, n, msg, rep, ".saltbush.gatewaytest.Kinds."+entry.GetName()))
	}
	synthetic := int32(oneof + 1)
	for _, typ := range scalars {
		name := strings.ToLower(strings.TrimPrefix(typ.String(), "TYPE_"))
		add(field("plain_"+name, n, typ, opt, ""))
		f := add(field("opt_"+name, n, typ, opt, ""))
		f.Proto3Optional = proto.Bool(true)
		f.OneofIndex = proto.Int32(synthetic)
		synthetic++
		kinds.OneofDecl = append(kinds.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("_opt_" + name)})
		add(field("list_"+name, n, typ, rep, ""))
		if typ != descriptorpb.FieldDescriptorProto_TYPE_FLOAT && typ != descriptorpb.FieldDescriptorProto_TYPE_DOUBLE &&
			typ != descriptorpb.FieldDescriptorProto_TYPE_BYTES {
			mapField("map_"+name, typ, descriptorpb.FieldDescriptorProto_TYPE_STRING, "")
		}
	}
	enumType := descriptorpb.FieldDescriptorProto_TYPE_ENUM
	add(field("colour", n, enumType, opt, ".saltbush.gatewaytest.Colour"))
	add(field("colours", n, enumType, rep, ".saltbush.gatewaytest.Colour"))
	add(field("null", n, enumType, opt, ".google.protobuf.NullValue"))
	mapField("colour_map", descriptorpb.FieldDescriptorProto_TYPE_STRING, enumType, ".saltbush.gatewaytest.Colour")
	add(field("item", n, msg, opt, ".saltbush.gatewaytest.Item"))
	add(field("items", n, msg, rep, ".saltbush.gatewaytest.Item")).Options = always()
	add(field("present_item", n, msg, opt, ".saltbush.gatewaytest.Item")).Options = always()
	add(field("present_tags", n, msg, rep, ".saltbush.gatewaytest.Kinds.PresentTagsEntry"))
	kinds.Field[len(kinds.Field)-1].Options = always()
	kinds.NestedType = append(kinds.NestedType, &descriptorpb.DescriptorProto{
		Name:    proto.String("PresentTagsEntry"),
		Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
		Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""), field("value", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "")},
	})
	add(field("present_scalar", n, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "")).Options = always()
	mapField("item_map", descriptorpb.FieldDescriptorProto_TYPE_STRING, msg, ".saltbush.gatewaytest.Item")
	mapField("value_map", descriptorpb.FieldDescriptorProto_TYPE_INT32, msg, ".google.protobuf.Value")
	add(field("self", n, msg, opt, ".saltbush.gatewaytest.Kinds"))
	add(field("selves", n, msg, rep, ".saltbush.gatewaytest.Kinds"))
	for _, wk := range []string{"Timestamp", "Duration", "Value", "Struct", "ListValue", "StringValue", "Int64Value", "Empty"} {
		add(field(strings.ToLower(wk), n, msg, opt, ".google.protobuf."+wk))
		add(field(strings.ToLower(wk)+"_list", n, msg, rep, ".google.protobuf."+wk)).Options = always()
	}
	add(field("present_stamp", n, msg, opt, ".google.protobuf.Timestamp")).Options = always()
	add(field("choice_name", n, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "")).OneofIndex = proto.Int32(oneof)
	add(field("choice_item", n, msg, opt, ".saltbush.gatewaytest.Item")).OneofIndex = proto.Int32(oneof)
	f := add(field("choice_present", n, msg, opt, ".saltbush.gatewaytest.Inner"))
	f.OneofIndex, f.Options = proto.Int32(oneof), always()
	msgs = append(msgs, kinds,
		&descriptorpb.DescriptorProto{Name: proto.String("Item"), Field: []*descriptorpb.FieldDescriptorProto{
			field("name", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
			withOptions(field("labels", 2, msg, rep, ".saltbush.gatewaytest.Item.LabelsEntry"), always()),
			withOptions(field("inner", 3, msg, opt, ".saltbush.gatewaytest.Inner"), always()),
			withOptions(field("names", 4, descriptorpb.FieldDescriptorProto_TYPE_STRING, rep, ""), always()),
			field("colour", 5, enumType, opt, ".saltbush.gatewaytest.Colour"),
		}, NestedType: []*descriptorpb.DescriptorProto{{
			Name:    proto.String("LabelsEntry"),
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""), field("value", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "")},
		}}},
		&descriptorpb.DescriptorProto{Name: proto.String("Inner"), Field: []*descriptorpb.FieldDescriptorProto{
			withOptions(field("items", 1, msg, rep, ".saltbush.gatewaytest.Item"), always()),
			field("note", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
			withOptions(field("deeper", 3, msg, opt, ".saltbush.gatewaytest.Deeper"), always()),
		}},
		&descriptorpb.DescriptorProto{Name: proto.String("Deeper"), Field: []*descriptorpb.FieldDescriptorProto{
			withOptions(field("ids", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, rep, ""), always()),
		}},
	)
	file := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("saltbush/gatewaytest/kinds.proto"),
		Package: proto.String("saltbush.gatewaytest"),
		Syntax:  proto.String("proto3"),
		Dependency: []string{
			"saltbush/eks/v1/options.proto", "google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
			"google/protobuf/struct.proto", "google/protobuf/wrappers.proto", "google/protobuf/empty.proto",
		},
		MessageType: msgs,
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Colour"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("COLOUR_UNSPECIFIED"), Number: proto.Int32(0)},
			{Name: proto.String("RED"), Number: proto.Int32(1)},
			{Name: proto.String("GREEN"), Number: proto.Int32(2)},
		}}},
	}
	fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("test descriptor: %v", err)
	}
	return fd.Messages().ByName("Kinds")
}

// mapEntryName is the name protoc gives a map field's entry type.
func mapEntryName(field string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(field, "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String() + "Entry"
}

func withOptions(f *descriptorpb.FieldDescriptorProto, opts *descriptorpb.FieldOptions) *descriptorpb.FieldDescriptorProto {
	f.Options = opts
	return f
}

// TestDecodeMatchesLegacy: the decoder takes a body to protojson without
// JSONPb's decoder in between, and the request body ServeHTTP read
// without a copy; what it decodes and every error it returns must be as
// before (parse.go words the errors by their text), with the presence
// record added.
func TestDecodeMatchesLegacy(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	bodies := []string{
		`{"addonName":"a"}`, "\n\t {\"addonName\": \"a\", \"tags\": {\"k\": \"<v>&\"}} \r\n", `{}`, ``, "   \n", "\v", "\u00a0", " \v{}",
		"\ufeff{}", `{"addonName": 5}`, "\n\n   {\"addonName\": 5}", `{"addonName":"a"} garbage`, `{"a":1}{"b":2}`,
		`[1,2]`, `"str"`, `null`, `123`, `{"unknownField":1}`, `{"clusterName":"x"}`, `{"clusterName":""}`,
		"{\"addonName\":\"\xff\"}", `{"addonName":"a","addonName":"b"}`, `{"addonName":"a"`, `{"configurationValues":"{\"x\":1}"}`,
		`{"podIdentityAssociations":[{"serviceAccount":"s","roleArn":"r"}],"resolveConflicts":"OVERWRITE"}`,
		`{"addonName":"\u00e9\ud83d\ude00"}`, `{"addonName":"\ud800"}`, `{"tags":{"a":1}}`, `{"tags":null}`,
	}
	targets := []func() any{
		func() any { return &eksv1.CreateAddonRequest{} },
		func() any { return &eksv1.UpdateAddonRequest{} },
		func() any { return &eksv1.TagResourceRequest{} },
		func() any { return &eksv1.CreateClusterRequest{} },
		func() any { return new(string) },
		func() any { return new(map[string]any) },
	}
	for _, body := range bodies {
		for _, target := range targets {
			readers := map[string]func() io.Reader{
				"strings.Reader": func() io.Reader { return strings.NewReader(body) },
				"requestBody":    func() io.Reader { return newRequestBody([]byte(body)) },
				"requestBody read from": func() io.Reader {
					rb := newRequestBody([]byte(body))
					_, _ = rb.Read(make([]byte, 1))
					return rb
				},
			}
			for name, reader := range readers {
				want, got := target(), target()
				wantErr := legacyDecode(m, reader(), want)
				legacyBody := body
				if name == "requestBody read from" {
					// Compared with the same body less the byte read.
					legacyBody = body[min(1, len(body)):]
					wantErr = legacyDecode(m, strings.NewReader(legacyBody), want)
				}
				if msg, ok := want.(proto.Message); ok && wantErr == nil {
					// And the record of the members the body sent that the
					// message cannot show (package presence).
					if err := presence.Record(msg, []byte(legacyBody)); err != nil {
						t.Fatalf("presence.Record: %v", err)
					}
				}
				gotErr := m.NewDecoder(reader()).Decode(got)
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || errors.Is(gotErr, io.EOF) != errors.Is(wantErr, io.EOF) {
					t.Errorf("%s %q into %T: error %v, want %v", name, body, got, gotErr, wantErr)
				}
				if !sameDecoded(got, want) {
					t.Errorf("%s %q into %T: decoded %v, want %v", name, body, got, got, want)
				}
			}
		}
	}
}

func sameDecoded(x, y any) bool {
	if mx, ok := x.(proto.Message); ok {
		return proto.Equal(mx, y.(proto.Message))
	}
	return reflect.DeepEqual(x, y)
}

// TestRequestBodyConsumed: after decoding, the body reads as io.ReadAll
// leaves it, empty.
func TestRequestBodyConsumed(t *testing.T) {
	m := newAWSJSON(protojson.UnmarshalOptions{})
	rb := newRequestBody([]byte(`{"addonName":"a"}`))
	var req eksv1.CreateAddonRequest
	if err := m.NewDecoder(rb).Decode(&req); err != nil || req.GetAddonName() != "a" {
		t.Fatalf("Decode = %v, %v", &req, err)
	}
	if n, err := rb.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("Read after Decode = %d, %v; want 0, EOF", n, err)
	}
}
