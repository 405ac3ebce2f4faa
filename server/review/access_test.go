package review

import (
	"testing"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/tests/wanterr"
)

func TestAttributes(t *testing.T) {
	cases := []struct {
		name    string
		req     *deliveryv1.ReviewAccessRequest
		want    accesspolicy.Attributes
		invalid bool
	}{
		{
			name: "resource request",
			req: &deliveryv1.ReviewAccessRequest{ResourceAttributes: &deliveryv1.ResourceAttributes{
				Namespace: "kube-system", Verb: "get", Group: "apps", Version: "v1", Resource: "deployments", Subresource: "scale", Name: "coredns"}},
			want: accesspolicy.Attributes{Verb: "get", APIGroup: "apps", Version: "v1", Resource: "deployments", Subresource: "scale",
				Name: "coredns", Namespace: "kube-system"},
		},
		{
			name: "non-resource request",
			req:  &deliveryv1.ReviewAccessRequest{NonResourceAttributes: &deliveryv1.NonResourceAttributes{Verb: "get", Path: "/healthz"}},
			want: accesspolicy.Attributes{NonResource: true, Verb: "get", Path: "/healthz"},
		},
		{name: "neither", req: &deliveryv1.ReviewAccessRequest{}, invalid: true},
		{
			name: "both",
			req: &deliveryv1.ReviewAccessRequest{ResourceAttributes: &deliveryv1.ResourceAttributes{Verb: "get"},
				NonResourceAttributes: &deliveryv1.NonResourceAttributes{Verb: "get", Path: "/"}},
			invalid: true,
		},
		{name: "resource without a verb", req: &deliveryv1.ReviewAccessRequest{ResourceAttributes: &deliveryv1.ResourceAttributes{Resource: "pods"}}, invalid: true},
		{name: "non-resource without a path", req: &deliveryv1.ReviewAccessRequest{NonResourceAttributes: &deliveryv1.NonResourceAttributes{Verb: "get"}}, invalid: true},
		{name: "non-resource without a verb", req: &deliveryv1.ReviewAccessRequest{NonResourceAttributes: &deliveryv1.NonResourceAttributes{Path: "/"}}, invalid: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := attributes(tc.req)
			if tc.invalid {
				wanterr.Is(t, err, &errdefs.Error{Exception: errdefs.InvalidParameterException})
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("attributes = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestOneExtra(t *testing.T) {
	vals := func(v ...string) *deliveryv1.ExtraValue { return &deliveryv1.ExtraValue{Values: v} }
	cases := []struct {
		name  string
		extra map[string]*deliveryv1.ExtraValue
		want  string
	}{
		{"present", map[string]*deliveryv1.ExtraValue{"canonicalArn": vals("arn:a")}, "arn:a"},
		// An aggregated API server asks with the keys lowercased.
		{"any case", map[string]*deliveryv1.ExtraValue{"canonicalarn": vals("arn:a")}, "arn:a"},
		{"absent", map[string]*deliveryv1.ExtraValue{"arn": vals("arn:a")}, ""},
		{"repeated values name nothing", map[string]*deliveryv1.ExtraValue{"canonicalArn": vals("arn:a", "arn:b")}, ""},
		{"no value", map[string]*deliveryv1.ExtraValue{"canonicalArn": vals()}, ""},
		{"two spellings name nothing", map[string]*deliveryv1.ExtraValue{"canonicalArn": vals("arn:a"), "canonicalarn": vals("arn:a")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := one(tc.extra, extraCanonicalARN); got != tc.want {
				t.Errorf("one = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClusterRules(t *testing.T) {
	rec := func(st storagev1.ClusterStatus, mode string, members ...string) *storagev1.ClusterRecord {
		c := &storagev1.ClusterRecord{Status: st, AccessConfig: &storagev1.ClusterAccessConfig{AuthenticationMode: mode}}
		for _, m := range members {
			c.Members = append(c.Members, &storagev1.ClusterMember{InstanceId: m})
		}
		return c
	}
	cases := []struct {
		name                         string
		c                            *storagev1.ClusterRecord
		serving, configMap, memberI1 bool
		status                       string
	}{
		{"active in API mode", rec(storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE, "API", "i-1"), true, false, true, "ACTIVE"},
		{"updating keeps serving", rec(storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING, "API_AND_CONFIG_MAP", "i-1"), true, true, true, "UPDATING"},
		{"creating does not serve", rec(storagev1.ClusterStatus_CLUSTER_STATUS_CREATING, "CONFIG_MAP"), false, true, false, "CREATING"},
		{"deleting does not serve", rec(storagev1.ClusterStatus_CLUSTER_STATUS_DELETING, "API", "i-2"), false, false, false, "DELETING"},
		{"failed does not serve", rec(storagev1.ClusterStatus_CLUSTER_STATUS_FAILED, ""), false, false, false, "FAILED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := serving(tc.c); got != tc.serving {
				t.Errorf("serving = %v, want %v", got, tc.serving)
			}
			if got := usesConfigMap(tc.c); got != tc.configMap {
				t.Errorf("usesConfigMap = %v, want %v", got, tc.configMap)
			}
			if got := member(tc.c, "i-1"); got != tc.memberI1 {
				t.Errorf("member i-1 = %v, want %v", got, tc.memberI1)
			}
			if got := statusName(tc.c); got != tc.status {
				t.Errorf("statusName = %q, want %q", got, tc.status)
			}
		})
	}
}
