package podidentity

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
)

func TestValidateCreate(t *testing.T) {
	const acct = "000000000000"
	ok := func() *eksv1.CreatePodIdentityAssociationRequest {
		return &eksv1.CreatePodIdentityAssociationRequest{ClusterName: "c", Namespace: "apps", ServiceAccount: "web",
			RoleArn: "arn:aws:iam::000000000000:role/pods"}
	}
	cases := []struct {
		name   string
		mod    func(*eksv1.CreatePodIdentityAssociationRequest)
		member string // "" means valid
	}{
		{"valid", func(*eksv1.CreatePodIdentityAssociationRequest) {}, ""},
		{"role with a path", func(r *eksv1.CreatePodIdentityAssociationRequest) {
			r.RoleArn = "arn:aws:iam::000000000000:role/ops/pods"
		}, ""},
		{"dotted service account", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.ServiceAccount = "a.b-c" }, ""},
		{"cross-account target role", func(r *eksv1.CreatePodIdentityAssociationRequest) {
			r.TargetRoleArn = "arn:aws:iam::111111111111:role/t"
		}, ""},
		{"session policy", func(r *eksv1.CreatePodIdentityAssociationRequest) {
			r.Policy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}`
		}, ""},
		{"a policy with no statement", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Policy = `{"Version":"2012-10-17"}` }, "policy"},
		{"a policy with a condition", func(r *eksv1.CreatePodIdentityAssociationRequest) {
			r.Policy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"true"}}}]}`
		}, "policy"},
		{"no namespace", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Namespace = "" }, "namespace"},
		{"no service account", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.ServiceAccount = "" }, "serviceAccount"},
		{"no role", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.RoleArn = "" }, "roleArn"},
		{"upper-case namespace", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Namespace = "Apps" }, "namespace"},
		{"64-character namespace", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Namespace = strings.Repeat("a", 64) }, "namespace"},
		{"slash in service account", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.ServiceAccount = "a/b" }, "serviceAccount"},
		{"254-character service account", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.ServiceAccount = strings.Repeat("a", 254) }, "serviceAccount"},
		{"user, not role", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.RoleArn = "arn:aws:iam::000000000000:user/u" }, "roleArn"},
		{"another account's role", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.RoleArn = "arn:aws:iam::111111111111:role/pods" }, "roleArn"},
		{"bad target role", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.TargetRoleArn = "target" }, "targetRoleArn"},
		{"policy not JSON", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Policy = "allow all" }, "policy"},
		{"policy too long", func(r *eksv1.CreatePodIdentityAssociationRequest) {
			r.Policy = `{"x":"` + strings.Repeat("a", maxPolicyLength) + `"}`
		}, "policy"},
		{"reserved tag", func(r *eksv1.CreatePodIdentityAssociationRequest) { r.Tags = map[string]string{"aws:x": "y"} }, "aws:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := ok()
			tc.mod(req)
			err := validateCreate(acct, req)
			if tc.member == "" {
				if err != nil {
					t.Fatalf("validateCreate: %v", err)
				}
				return
			}
			if !errdefs.IsException(err, errdefs.InvalidParameterException) || !strings.Contains(err.Error(), tc.member) {
				t.Fatalf("validateCreate = %v, want an InvalidParameterException naming %s", err, tc.member)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	cases := []struct {
		name, id string
		ok       bool
	}{
		{"made by NewID", NewID(), true},
		{"short", "a-123", false},
		{"long", "a-0123456789abcdefgh", false},
		{"upper case", "a-0123456789ABCDEFG", false},
		{"no prefix", "b-0123456789abcdefg", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateID("c", tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("validateID(%q) = %v, want ok %v", tc.id, err, tc.ok)
			}
			if err != nil && !errdefs.IsException(err, errdefs.InvalidParameterException) {
				t.Fatalf("validateID(%q) = %v, want InvalidParameterException", tc.id, err)
			}
		})
	}
}

func TestApplyUpdate(t *testing.T) {
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	s := &Service{cfg: Config{Now: func() time.Time { return t1 }}}
	base := func() *storagev1.PodIdentityAssociationRecord {
		return &storagev1.PodIdentityAssociationRecord{RoleArn: "r1", TargetRoleArn: "t1", ExternalId: "e1",
			ModifiedAt: timestamppb.New(t0)}
	}
	cases := []struct {
		name     string
		req      *eksv1.UpdatePodIdentityAssociationRequest
		check    func(*storagev1.PodIdentityAssociationRecord) bool
		modified bool
	}{
		{"nothing named", &eksv1.UpdatePodIdentityAssociationRequest{},
			func(r *storagev1.PodIdentityAssociationRecord) bool {
				return r.GetRoleArn() == "r1" && r.GetExternalId() == "e1"
			}, false},
		{"same role", &eksv1.UpdatePodIdentityAssociationRequest{RoleArn: proto.String("r1")},
			func(r *storagev1.PodIdentityAssociationRecord) bool { return r.GetRoleArn() == "r1" }, false},
		{"new role", &eksv1.UpdatePodIdentityAssociationRequest{RoleArn: proto.String("r2")},
			func(r *storagev1.PodIdentityAssociationRecord) bool {
				return r.GetRoleArn() == "r2" && r.GetExternalId() == "e1"
			}, true},
		{"new target gets a new external id", &eksv1.UpdatePodIdentityAssociationRequest{TargetRoleArn: proto.String("t2")},
			func(r *storagev1.PodIdentityAssociationRecord) bool {
				return r.GetTargetRoleArn() == "t2" && r.GetExternalId() != "" && r.GetExternalId() != "e1"
			}, true},
		{"cleared target clears the external id", &eksv1.UpdatePodIdentityAssociationRequest{TargetRoleArn: proto.String("")},
			func(r *storagev1.PodIdentityAssociationRecord) bool {
				return r.GetTargetRoleArn() == "" && r.GetExternalId() == ""
			}, true},
		{"session tags off", &eksv1.UpdatePodIdentityAssociationRequest{DisableSessionTags: proto.Bool(true)},
			func(r *storagev1.PodIdentityAssociationRecord) bool { return r.GetDisableSessionTags() }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			s.apply(r, tc.req)
			if !tc.check(r) {
				t.Errorf("after apply: %v", r)
			}
			if got := r.GetModifiedAt().AsTime().Equal(t1); got != tc.modified {
				t.Errorf("modifiedAt moved %v, want %v", got, tc.modified)
			}
		})
	}
}
