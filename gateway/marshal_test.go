package gateway

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
)

func TestAWSJSONTopLevelLists(t *testing.T) {
	m := awsJSON{&runtime.JSONPb{}}
	tests := []struct {
		name string
		msg  any
		want map[string]any
	}{
		{"empty list response", &eksv1.ListClustersResponse{}, map[string]any{"clusters": []any{}}},
		{"list with a token", &eksv1.ListClustersResponse{NextToken: "t"}, map[string]any{"clusters": []any{}, "nextToken": "t"}},
		{"full list", &eksv1.ListClustersResponse{Clusters: []string{"a"}}, map[string]any{"clusters": []any{"a"}}},
		{"nested lists stay absent", &eksv1.DescribeClusterResponse{Cluster: &eksv1.Cluster{Name: "a"}},
			map[string]any{"cluster": map[string]any{"name": "a"}}},
		{"no lists at all", &eksv1.DescribeClusterResponse{}, map[string]any{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := m.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("invalid JSON %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Marshal = %s, want %v", b, tc.want)
			}
		})
	}
}
