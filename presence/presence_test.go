package presence

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

func TestRecordAndTake(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
		body string
		// want is the record Take returns, as JSON; "" for none.
		want string
	}{
		{name: "every member shown", msg: &eksv1.CreateAddonRequest{}, body: `{"addonName": "vpc-cni", "tags": {"a": "b"}}`},
		{
			name: "an empty string", msg: &eksv1.CreateAddonRequest{},
			body: `{"addonName": "vpc-cni", "serviceAccountRoleArn": ""}`, want: `{"serviceAccountRoleArn": ""}`,
		},
		{name: "an empty map", msg: &eksv1.TagResourceRequest{}, body: `{"tags": {}}`, want: `{"tags": {}}`},
		{name: "null is absent", msg: &eksv1.CreateAddonRequest{}, body: `{"addonName": "a", "serviceAccountRoleArn": null}`},
		{name: "an optional member sent empty is shown", msg: &eksv1.UpdateAddonRequest{}, body: `{"serviceAccountRoleArn": ""}`},
		{
			name: "a member spelled by its proto name", msg: &eksv1.CreateAddonRequest{},
			body: `{"addon_name": "a", "service_account_role_arn": ""}`, want: `{"service_account_role_arn": ""}`,
		},
		{
			name: "inside a structure", msg: &eksv1.CreateClusterRequest{},
			body: `{"name": "c", "resourcesVpcConfig": {"subnetIds": [], "endpointPublicAccess": true}}`,
			want: `{"resourcesVpcConfig": {"subnetIds": []}}`,
		},
		{
			name: "inside a list of structures", msg: &eksv1.CreateAddonRequest{},
			body: `{"addonName": "a", "podIdentityAssociations": [{"serviceAccount": "s", "roleArn": "r"}, {"serviceAccount": "", "roleArn": "r"}]}`,
			want: `{"podIdentityAssociations": [{}, {"serviceAccount": ""}]}`,
		},
		{
			// enabled is optional: its false is shown.
			name: "an empty list in a list element", msg: &eksv1.UpdateClusterConfigRequest{},
			body: `{"logging": {"clusterLogging": [{"types": [], "enabled": false}]}}`,
			want: `{"logging": {"clusterLogging": [{"types": []}]}}`,
		},
		{name: "a body that is not an object", msg: &eksv1.CreateAddonRequest{}, body: `[]`},
		{name: "false in a query-bound member", msg: &eksv1.DeleteAddonRequest{}, body: `{"preserve": false}`, want: `{"preserve": false}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := protojson.Unmarshal([]byte(tc.body), tc.msg); err != nil && tc.body != `[]` {
				t.Fatalf("decode the body: %v", err)
			}
			before := proto.Clone(tc.msg)
			before.ProtoReflect().SetUnknown(nil)
			if err := Record(tc.msg, []byte(tc.body)); err != nil {
				t.Fatalf("Record: %v", err)
			}
			got, ok := Take(tc.msg)
			if tc.want == "" {
				if ok {
					t.Errorf("Take = %v, want no record", got)
				}
			} else {
				var want map[string]any
				dec := json.NewDecoder(strings.NewReader(tc.want))
				dec.UseNumber()
				if err := dec.Decode(&want); err != nil {
					t.Fatal(err)
				}
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("Take = %v %v, want %v", got, ok, want)
				}
			}
			// What Take leaves is the message a gRPC caller would send.
			if !proto.Equal(tc.msg, before) {
				t.Errorf("after Take the message is %v, want %v", tc.msg, before)
			}
		})
	}
}

func TestTakeKeepsOtherUnknownFields(t *testing.T) {
	m := &eksv1.TagResourceRequest{}
	other := protowire.AppendVarint(protowire.AppendTag(nil, 1000, protowire.VarintType), 7)
	m.ProtoReflect().SetUnknown(other)
	if err := Record(m, []byte(`{"tags": {}}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := Take(m); !ok {
		t.Fatal("Take: no record")
	}
	if got := m.ProtoReflect().GetUnknown(); string(got) != string(other) {
		t.Errorf("unknown fields after Take %x, want %x", got, other)
	}
	if _, ok := Take(m); ok {
		t.Error("a second Take found a record")
	}
}

// TestNoContractMessageUsesTheField: the record's number must stay free
// in every message of the contracts.
func TestNoContractMessageUsesTheField(t *testing.T) {
	checked := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		var walk func(protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := range ms.Len() {
				md := ms.Get(i)
				checked++
				if f := md.Fields().ByNumber(Field); f != nil {
					t.Errorf("%s uses field number %d, the presence record's", f.FullName(), Field)
				}
				walk(md.Messages())
			}
		}
		walk(fd.Messages())
		return true
	})
	if _, err := protoregistry.GlobalFiles.FindDescriptorByName("saltbush.eks.v1.CreateAddonRequest"); err != nil || checked == 0 {
		t.Fatalf("the contracts are not registered (%v): nothing checked", err)
	}
}
