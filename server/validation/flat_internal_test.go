package validation

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// TestFlatValueIsTheJSONRoundTrip: for every EKS request type, filled at
// random many times, flatValue either declines or builds exactly what
// protojson.Marshal and decodeObject make (the path it replaces); it takes
// some requests and declines others.
func TestFlatValueIsTheJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "my-cluster", "arn:aws:iam::111122223333:role/x", "ünïcödé", strings.Repeat("z", 300), "\xff"}
	var flat, declined int
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		d := mt.Descriptor()
		if d.ParentFile().Package() != eksv1.File_saltbush_eks_v1_addon_proto.Package() || !strings.HasSuffix(string(d.Name()), "Request") {
			return true
		}
		for range 200 {
			m := mt.New()
			fill(rng, m, strs, 0)
			got, ok := flatValue(m)
			if !ok {
				declined++
				continue
			}
			flat++
			b, err := protojson.Marshal(m.Interface())
			if err != nil {
				t.Fatalf("%s %v: flatValue took it, protojson failed: %v", d.Name(), m, err)
			}
			want, err := decodeObject(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: flatValue %#v, JSON round trip %#v", d.Name(), got, want)
			}
		}
		return true
	})
	if flat == 0 || declined == 0 {
		t.Fatalf("flatValue took %d requests and declined %d; want some of each", flat, declined)
	}
}

// fill sets each field of m at random: left unset, or values of its kind
// (lists and maps of none to three, invalid UTF-8 now and then).
func fill(rng *rand.Rand, m protoreflect.Message, strs []string, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(3) == 0 || depth > 2 {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(4) {
				if fd.Kind() == protoreflect.MessageKind {
					fill(rng, l.AppendMutable().Message(), strs, depth+1)
				} else if v, ok := scalar(rng, fd, strs); ok {
					l.Append(v)
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				key := protoreflect.ValueOfString(strs[rng.IntN(len(strs))]).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					fill(rng, mp.Mutable(key).Message(), strs, depth+1)
				} else if v, ok := scalar(rng, fd.MapValue(), strs); ok {
					mp.Set(key, v)
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(rng, m.Mutable(fd).Message(), strs, depth+1)
		default:
			if v, ok := scalar(rng, fd, strs); ok {
				m.Set(fd, v)
			}
		}
	}
}

// scalar is a random value of fd's kind (false: a kind fill leaves unset).
func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor, strs []string) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strs[rng.IntN(len(strs))]), true
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -5, 100, 2147483647}[rng.IntN(5)]), true
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0), true
	}
	return protoreflect.Value{}, false
}
