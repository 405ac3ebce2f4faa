package main

import (
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	const header = `{"metadata": {"apiVersion": "2017-11-01", "protocol": "rest-json"}, `
	tests := []struct {
		name  string
		model string
		// want are lines the generated file must hold; wantErr a substring
		// of the error when generation must fail.
		want    []string
		wantErr string
	}{
		{
			name: "exception and its fields",
			model: header + `"operations": {
				"TagResource": {"input": {"shape": "TagReq"}, "errors": [{"shape": "NotFoundException"}, {"shape": "BadRequestException"}]},
				"ListAddons": {"input": {"shape": "ListReq"}, "errors": [{"shape": "InvalidRequestException"}, {"shape": "InvalidParameterException"}]},
				"ListPolicies": {"input": {"shape": "PolReq"}, "errors": [{"shape": "ServerException"}]}},
				"shapes": {
				"TagReq": {"type": "structure", "required": ["resourceArn"], "members": {"resourceArn": {"shape": "S", "location": "uri", "locationName": "resourceArn"}}},
				"ListReq": {"type": "structure", "members": {"clusterName": {"shape": "S", "location": "uri", "locationName": "name"}, "maxResults": {"shape": "Max"}}},
				"PolReq": {"type": "structure", "members": {}},
				"S": {"type": "string"},
				"Max": {"type": "integer", "min": 1, "max": 100},
				"BadRequestException": {"type": "structure", "members": {"message": {"shape": "S"}}},
				"InvalidParameterException": {"type": "structure", "members": {"message": {"shape": "S"}, "clusterName": {"shape": "S"}, "addonName": {"shape": "S"}}}}}`,
			want: []string{
				`"TagResource":  {input: "TagReq", exception: "BadRequestException", errors: []string{"BadRequestException", "NotFoundException"}},`,
				`"ListAddons":   {input: "ListReq", exception: "InvalidParameterException", fields: [][2]string{{"clusterName", "clusterName"}}, errors: []string{"InvalidParameterException", "InvalidRequestException"}},`,
				`"ListPolicies": {input: "PolReq", exception: "InvalidParameterException", errors: []string{"ServerException"}},`,
				`"Max":     {kind: kindInteger, min: ptr(1), max: ptr(100)},`,
			},
		},
		{
			name: "cluster operation fills clusterName from name",
			model: header + `"operations": {"DescribeCluster": {"input": {"shape": "Req"}, "errors": [{"shape": "InvalidParameterException"}]}},
				"shapes": {"Req": {"type": "structure", "members": {"name": {"shape": "S", "location": "uri", "locationName": "name"}}},
				"S": {"type": "string"},
				"InvalidParameterException": {"type": "structure", "members": {"message": {"shape": "S"}, "clusterName": {"shape": "S"}}}}}`,
			want: []string{`fields: [][2]string{{"clusterName", "name"}}`},
		},
		{
			name: "pattern that is not RE2",
			model: header + `"operations": {"Op": {"input": {"shape": "Req"}}},
				"shapes": {"Req": {"type": "structure", "members": {"a": {"shape": "P"}}}, "P": {"type": "string", "pattern": "(?<=a)b"}}}`,
			wantErr: "is not RE2",
		},
		{
			name:    "not the EKS model",
			model:   `{"metadata": {"apiVersion": "2011-06-15", "protocol": "query"}, "operations": {}, "shapes": {}}`,
			wantErr: "not EKS's rest-json model",
		},
		{
			name:    "shape missing",
			model:   header + `"operations": {"Op": {"input": {"shape": "Nope"}}}, "shapes": {}}`,
			wantErr: "shape Nope is not in the model",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, err := generate([]byte(tc.model), "test", nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("generate: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("generate: %v", err)
			}
			for _, line := range tc.want {
				if !strings.Contains(string(src), line) {
					t.Errorf("generated file lacks %s:\n%s", line, src)
				}
			}
		})
	}
}
