package eksmodel

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestMerge(t *testing.T) {
	n := func(v string) *json.Number { x := json.Number(v); return &x }
	boto := func() *Model {
		return &Model{
			Operations: map[string]Operation{
				"ListInsights": {Input: &Ref{Shape: "ListInsightsRequest"}, Errors: []Ref{{Shape: "InvalidParameterException"}}},
			},
			Shapes: map[string]Shape{
				"ListInsightsRequest": {Type: "structure", Required: []string{"clusterName"}, Members: map[string]Ref{
					"clusterName": {Shape: "String", Location: "uri", LocationName: "name"},
					"maxResults":  {Shape: "Max", Location: "querystring", LocationName: "maxResults"},
				}},
				"Max":      {Type: "integer", Min: n("1"), Max: n("100")},
				"String":   {Type: "string"},
				"Category": {Type: "string", Enum: []string{"UPGRADE_READINESS", "MISCONFIGURATION"}},
			},
		}
	}
	sdk := func() *Model {
		return &Model{
			Operations: map[string]Operation{
				"ListInsights": {Input: &Ref{Shape: "ListInsightsRequest"}},
				"CancelUpdate": {HTTP: HTTP{Method: "POST", RequestURI: "/clusters/{name}/updates/{updateId}/cancel-update"}, Input: &Ref{Shape: "CancelUpdateRequest"}},
			},
			Shapes: map[string]Shape{
				"ListInsightsRequest": {Type: "structure", Required: []string{"clusterName", "filter"}, Members: map[string]Ref{
					"clusterName": {Shape: "String", Location: "uri", LocationName: "name"},
					"maxResults":  {Shape: "Max", Location: "querystring", LocationName: "maxResults"},
					"filter":      {Shape: "Filter"},
				}},
				"Filter":              {Type: "structure", Members: map[string]Ref{"categories": {Shape: "Category"}}},
				"Max":                 {Type: "integer"},
				"String":              {Type: "string"},
				"Category":            {Type: "string", Enum: []string{"UPGRADE_READINESS", "MISCONFIGURATION", "ROLLBACK_READINESS"}},
				"CancelUpdateRequest": {Type: "structure", Members: map[string]Ref{"name": {Shape: "String", Location: "uri", LocationName: "name"}}},
				"ClientException":     {Type: "structure"}, "InvalidParameterException": {Type: "structure"},
				"InvalidRequestException": {Type: "structure"}, "InvalidStateException": {Type: "structure"},
				"ResourceInUseException": {Type: "structure"}, "ResourceNotFoundException": {Type: "structure"},
				"ServerException": {Type: "structure"}, "ThrottlingException": {Type: "structure"},
			},
		}
	}

	tests := []struct {
		name    string
		change  func(boto, sdk *Model)
		check   func(t *testing.T, m *Model, prov []Provenance)
		wantErr string
	}{
		{
			name: "newest of both",
			check: func(t *testing.T, m *Model, prov []Provenance) {
				if got := m.Shapes["Category"].Enum; !slices.Equal(got, []string{"UPGRADE_READINESS", "MISCONFIGURATION", "ROLLBACK_READINESS"}) {
					t.Errorf("Category: %v", got)
				}
				req := m.Shapes["ListInsightsRequest"]
				if _, ok := req.Members["filter"]; !ok {
					t.Errorf("the SDK's member filter is missing: %v", req.Members)
				}
				// botocore's constraints and required members stay; a
				// member only the SDK has is required when it says so.
				if !slices.Equal(req.Required, []string{"clusterName", "filter"}) {
					t.Errorf("required %v", req.Required)
				}
				if mx := m.Shapes["Max"]; mx.Min == nil || mx.Max == nil || mx.Max.String() != "100" {
					t.Errorf("Max lost botocore's range: %+v", mx)
				}
				op, ok := m.Operations["CancelUpdate"]
				if !ok || len(op.Errors) != len(sdkOnlyErrors["CancelUpdate"]) || op.HTTP.Method != "POST" {
					t.Errorf("CancelUpdate: %+v", op)
				}
				want := map[string]string{
					"enum Category ROLLBACK_READINESS":  "sdk",
					"member ListInsightsRequest.filter": "sdk",
					"operation CancelUpdate":            "sdk",
					"errors of CancelUpdate":            sdkOnlyErrorsSource,
					"shape Filter":                      "sdk",
					"shape CancelUpdateRequest":         "sdk",
					"shape ThrottlingException":         "sdk",
					"shape ClientException":             "sdk",
					"shape InvalidParameterException":   "sdk",
					"shape InvalidRequestException":     "sdk",
					"shape InvalidStateException":       "sdk",
					"shape ResourceInUseException":      "sdk",
					"shape ResourceNotFoundException":   "sdk",
					"shape ServerException":             "sdk",
				}
				got := map[string]string{}
				for _, p := range prov {
					got[p.Item] = p.Source
				}
				for item, src := range want {
					if got[item] != src {
						t.Errorf("provenance of %q: %q, want %q", item, got[item], src)
					}
				}
				if len(got) != len(want) {
					t.Errorf("provenance %v, want %v", got, want)
				}
			},
		},
		{
			name: "botocore newer on an item",
			change: func(boto, sdk *Model) {
				s := boto.Shapes["Category"]
				s.Enum = append(s.Enum, "NEW_IN_BOTOCORE")
				boto.Shapes["Category"] = s
			},
			check: func(t *testing.T, m *Model, prov []Provenance) {
				if !slices.Contains(m.Shapes["Category"].Enum, "NEW_IN_BOTOCORE") {
					t.Errorf("botocore's value is gone: %v", m.Shapes["Category"].Enum)
				}
				if !slices.Contains(prov, Provenance{"enum Category NEW_IN_BOTOCORE", "boto"}) {
					t.Errorf("provenance %v", prov)
				}
			},
		},
		{
			name: "an SDK-only operation whose errors nobody named",
			change: func(boto, sdk *Model) {
				sdk.Operations["Brand"] = Operation{Input: &Ref{Shape: "String"}}
			},
			wantErr: "operation Brand is in sdk only and its errors are unknown",
		},
		{
			name: "a shape of another type",
			change: func(boto, sdk *Model) {
				sdk.Shapes["Max"] = Shape{Type: "string"}
			},
			wantErr: "shape Max: a integer in boto, a string in sdk",
		},
		{
			name: "an operation with another input",
			change: func(boto, sdk *Model) {
				sdk.Operations["ListInsights"] = Operation{Input: &Ref{Shape: "Filter"}}
			},
			wantErr: "operation ListInsights: input ListInsightsRequest in boto, Filter in sdk",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, s := boto(), sdk()
			if tc.change != nil {
				tc.change(b, s)
			}
			m, prov, err := Merge(b, "boto", s, "sdk")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Merge: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Merge: %v", err)
			}
			tc.check(t, m, prov)
		})
	}
}
