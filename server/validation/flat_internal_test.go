package validation

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
)

// TestFlatValueIsTheJSONRoundTrip: for every EKS request type, filled at
// random many times, flatValue either declines or builds exactly what
// protojson.Marshal and decodeObject make (the path it replaces), and it
// takes every request of only strings, 32-bit integers and bools.
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

// fill sets each field of m at random: left unset, or a value of its kind.
func fill(rng *rand.Rand, m protoreflect.Message, strs []string, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(3) == 0 || depth > 2 {
			continue
		}
		switch {
		case fd.IsList():
			if fd.Kind() == protoreflect.StringKind {
				l := m.Mutable(fd).List()
				l.Append(protoreflect.ValueOfString(strs[rng.IntN(len(strs)-1)]))
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.StringKind {
				m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(rng, m.Mutable(fd).Message(), strs, depth+1)
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(strs[rng.IntN(len(strs))]))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32([]int32{0, 1, -5, 100, 2147483647}[rng.IntN(5)]))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(rng.IntN(2) == 0))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		}
	}
}
