package validation

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/saltbush/saltbush/api/saltbush/eks/v1" // registers the served operations
)

// TestTableKeepsUpWithSDK: the table must not lag the newest client. For
// every operation the façade serves, the compiled AWS SDK for Go v2 (the
// client's own input types, read by reflection, not the sources genmodel
// parses) must find each member it can send in the table, and each enum
// value it knows among the table's values for that member. A table
// generated from an older model (ListInsights without ROLLBACK_READINESS,
// UpdateClusterVersion without rollbackConfig) fails here.
func TestTableKeepsUpWithSDK(t *testing.T) {
	client := reflect.TypeOf(&eks.Client{})
	served := servedOperations(t)
	for _, op := range served {
		t.Run(op, func(t *testing.T) {
			m, ok := client.MethodByName(op)
			if !ok {
				t.Skipf("the SDK has no %s: an operation of saltbush's own", op)
			}
			in := m.Type.In(2).Elem() // (client, ctx, *Input, ...optFns)
			o, ok := operations[op]
			if !ok {
				t.Fatalf("%s is served but not in the table", op)
			}
			var lags []string
			walkSDK(in, o.input, op, map[reflect.Type]bool{}, &lags)
			if len(lags) > 0 {
				t.Errorf("the table lags the SDK (regenerate it: make model-table):\n%s", strings.Join(lags, "\n"))
			}
		})
	}
}

// walkSDK compares the SDK's type t, sent as member path, with the table's
// shape name.
func walkSDK(t reflect.Type, name, path string, seen map[reflect.Type]bool, lags *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s, ok := shapes[name]
	if !ok {
		*lags = append(*lags, path+": shape "+name+" is not in the table")
		return
	}
	if values := enumValues(t); values != nil {
		for _, v := range values {
			if !slices.Contains(s.enum, v) {
				*lags = append(*lags, path+": the SDK sends "+v+", not among "+name+"'s values "+strings.Join(s.enum, ", "))
			}
		}
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // a blob
			return
		}
		walkSDK(t.Elem(), s.member, path+".member", seen, lags)
	case reflect.Map:
		walkSDK(t.Elem(), s.value, path+".value", seen, lags)
	case reflect.Struct:
		if t.PkgPath() == "time" || seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Name == "ResultMetadata" {
				continue
			}
			j := slices.IndexFunc(s.members, func(m member) bool { return strings.EqualFold(m.name, f.Name) })
			if j < 0 {
				*lags = append(*lags, path+"."+f.Name+": the SDK sends it, "+name+" has no such member")
				continue
			}
			walkSDK(f.Type, s.members[j].shape, path+"."+s.members[j].name, seen, lags)
		}
	}
}

// enumValues are the values of an SDK enum type (one with a Values
// method), nil for any other type.
func enumValues(t reflect.Type) []string {
	m, ok := t.MethodByName("Values")
	if !ok || t.Kind() != reflect.String {
		return nil
	}
	out := m.Func.Call([]reflect.Value{reflect.Zero(t)})[0]
	values := make([]string, out.Len())
	for i := range values {
		values[i] = out.Index(i).String()
	}
	return values
}

// servedOperations are the EKS operations with an HTTP rule: what the
// façade serves.
func servedOperations(t *testing.T) []string {
	t.Helper()
	var out []string
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				if rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule); ok && rule != nil {
					out = append(out, string(md.Name()))
				}
			}
		}
		return true
	})
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatal("no saltbush.eks.v1 method with an HTTP rule is registered")
	}
	return out
}
