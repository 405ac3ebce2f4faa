package podidentity

import (
	"maps"
	"testing"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

const (
	arnPrefix = "arn:aws:eks:us-east-1:111122223333:podidentityassociation/prod/"
	role      = "arn:aws:iam::111122223333:role/app"
)

func assoc(id, ns, sa string) *deliveryv1.DesiredPodIdentityAssociation {
	return &deliveryv1.DesiredPodIdentityAssociation{AssociationId: id, AssociationArn: arnPrefix + id,
		Namespace: ns, ServiceAccount: sa, RoleArn: role}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name         string
		associations []*deliveryv1.DesiredPodIdentityAssociation
		want         map[Key]map[string]string // annotations
		wantDropped  []string
	}{
		{"none", nil, map[Key]map[string]string{}, nil},
		{"a plain association", []*deliveryv1.DesiredPodIdentityAssociation{assoc("a-1", "apps", "web")},
			map[Key]map[string]string{{"apps", "web"}: {
				AnnotationAssociationARN: arnPrefix + "a-1", AnnotationRoleARN: role,
			}}, nil},
		{"role chaining, session tags off, owned by an add-on", []*deliveryv1.DesiredPodIdentityAssociation{func() *deliveryv1.DesiredPodIdentityAssociation {
			a := assoc("a-1", "kube-system", "aws-node")
			a.TargetRoleArn, a.ExternalId, a.DisableSessionTags = "arn:aws:iam::444455556666:role/target", "ext-1", true
			a.OwnerArn, a.OwnerAddon = "arn:aws:eks:us-east-1:111122223333:addon/prod/vpc-cni/uid", "vpc-cni"
			return a
		}()}, map[Key]map[string]string{{"kube-system", "aws-node"}: {
			AnnotationAssociationARN: arnPrefix + "a-1", AnnotationRoleARN: role,
			AnnotationTargetRoleARN: "arn:aws:iam::444455556666:role/target", AnnotationExternalID: "ext-1",
			AnnotationDisableSessionTags: "true", AnnotationOwnerARN: "arn:aws:eks:us-east-1:111122223333:addon/prod/vpc-cni/uid",
		}}, nil},
		{"the same name in two namespaces is two service accounts", []*deliveryv1.DesiredPodIdentityAssociation{
			assoc("a-2", "b", "web"), assoc("a-1", "a", "web"),
		}, map[Key]map[string]string{
			{"a", "web"}: {AnnotationAssociationARN: arnPrefix + "a-1", AnnotationRoleARN: role},
			{"b", "web"}: {AnnotationAssociationARN: arnPrefix + "a-2", AnnotationRoleARN: role},
		}, nil},
		{"two for one service account: the lowest id wins", []*deliveryv1.DesiredPodIdentityAssociation{
			assoc("a-2", "apps", "web"), assoc("a-1", "apps", "web"),
		}, map[Key]map[string]string{{"apps", "web"}: {AnnotationAssociationARN: arnPrefix + "a-1", AnnotationRoleARN: role}},
			[]string{"a-2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := Render(tc.associations)
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d: %v", len(got), len(tc.want), got)
			}
			for k, ann := range tc.want {
				r, ok := got[k]
				if !ok {
					t.Fatalf("no record for %s", k)
				}
				if !maps.Equal(r.Annotations, ann) {
					t.Errorf("%s annotations = %v, want %v", k, r.Annotations, ann)
				}
				if id := r.Labels[LabelAssociationID]; id != r.Association.GetAssociationId() || len(r.Labels) != 1 {
					t.Errorf("%s labels = %v, want only %s=%s", k, r.Labels, LabelAssociationID, r.Association.GetAssociationId())
				}
				if r.Key != k {
					t.Errorf("record of %s names %s", k, r.Key)
				}
			}
			var ids []string
			for _, d := range dropped {
				ids = append(ids, d.GetAssociationId())
			}
			if len(ids) != len(tc.wantDropped) || (len(ids) > 0 && ids[0] != tc.wantDropped[0]) {
				t.Errorf("dropped %v, want %v", ids, tc.wantDropped)
			}
		})
	}
}

// carries compares only the agent's keys: anyone else's labels and
// annotations on the service account do not matter, a stale or missing key
// of the agent's does.
func TestCarries(t *testing.T) {
	records, _ := Render([]*deliveryv1.DesiredPodIdentityAssociation{assoc("a-1", "apps", "web")})
	r := records[Key{"apps", "web"}]
	exact := map[string]string{AnnotationAssociationARN: arnPrefix + "a-1", AnnotationRoleARN: role}
	// with is m with key set to value ("": without key).
	with := func(m map[string]string, key, value string) map[string]string {
		out := maps.Clone(m)
		if value == "" {
			delete(out, key)
		} else {
			out[key] = value
		}
		return out
	}
	label := map[string]string{LabelAssociationID: "a-1", "app": "web"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"exactly", label, exact, true},
		{"and the user's own annotations", label, with(with(exact, "team", "payments"), "eks.amazonaws.com/role-arn", "arn:aws:iam::1:role/irsa"), true},
		{"nothing yet", nil, map[string]string{"team": "payments"}, false},
		{"another role", label, with(exact, AnnotationRoleARN, "arn:aws:iam::111122223333:role/old"), false},
		{"a key the association no longer has", label, with(exact, AnnotationTargetRoleARN, "arn:aws:iam::1:role/t"), false},
		{"a key missing", label, with(exact, AnnotationAssociationARN, ""), false},
		{"another association's label", map[string]string{LabelAssociationID: "a-9"}, exact, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := carries(tc.labels, tc.annotations, r); got != tc.want {
				t.Errorf("carries = %v, want %v", got, tc.want)
			}
		})
	}
}
