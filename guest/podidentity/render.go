// Package podidentity records a cluster's pod identity associations on the
// Kubernetes service accounts they name (docs/agent.md, "Pod identity"): the
// executor server-side-applies, under a field manager of its own, a label
// and annotations naming the association and its role, and applies them
// away again when the association leaves the desired set. It never creates
// or deletes a service account or a namespace: an association names a
// service account of the cluster's workloads, which they (or an add-on's
// bundle) create; one that does not exist yet is recorded the moment it
// appears (Watcher).
package podidentity

import (
	"cmp"
	"maps"
	"slices"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// FieldManager owns the label and annotations the agent records. It is not
// the add-ons' "eks": a server-side apply states every field its manager
// owns, so an apply of only these under "eks" would drop an add-on's own
// fields of the same service account, and the add-on's next apply would
// drop these.
const FieldManager = "eks-pod-identity"

// Prefix is the prefix of every key the agent records. The annotations are
// saltbush's own, not IRSA's eks.amazonaws.com/role-arn: that one makes
// the EKS pod identity webhook of IRSA inject web-identity credentials for
// the role, which is another mechanism with other trust (the role trusts
// the cluster's OIDC issuer, not pods.eks.amazonaws.com).
const Prefix = "pod-identity.saltbush.io/"

// The label and annotations on an associated service account.
const (
	// LabelAssociationID is the association's id; the agent finds the
	// service accounts it recorded anything on by this label.
	LabelAssociationID = Prefix + "association-id"
	// AnnotationAssociationARN is the association's ARN.
	AnnotationAssociationARN = Prefix + "association-arn"
	// AnnotationRoleARN is the IAM role whose credentials the service
	// account's pods get.
	AnnotationRoleARN = Prefix + "role-arn"
	// AnnotationTargetRoleARN is the role assumed from the first one's
	// session (role chaining); absent without one.
	AnnotationTargetRoleARN = Prefix + "target-role-arn"
	// AnnotationExternalID is the chained AssumeRole's external id; absent
	// without one.
	AnnotationExternalID = Prefix + "external-id"
	// AnnotationDisableSessionTags is "true" when the association disables
	// session tags; absent otherwise.
	AnnotationDisableSessionTags = Prefix + "disable-session-tags"
	// AnnotationOwnerARN is the owning add-on's ARN; absent for an
	// association made directly.
	AnnotationOwnerARN = Prefix + "owner-arn"
)

// Key names a service account.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Record is what one service account should carry.
type Record struct {
	Key
	Association *deliveryv1.DesiredPodIdentityAssociation
	Labels      map[string]string
	Annotations map[string]string
}

// Render is what the associations of a desired set ask of the cluster's
// service accounts: one Record per service account. saltbush keeps a
// service account to one association (its exclusivity key); should two
// name the same one all the same, the lowest association id wins and the
// others are returned as dropped.
func Render(associations []*deliveryv1.DesiredPodIdentityAssociation) (map[Key]Record, []*deliveryv1.DesiredPodIdentityAssociation) {
	sorted := slices.Clone(associations)
	slices.SortFunc(sorted, func(a, b *deliveryv1.DesiredPodIdentityAssociation) int {
		return cmp.Compare(a.GetAssociationId(), b.GetAssociationId())
	})
	out := make(map[Key]Record, len(sorted))
	var dropped []*deliveryv1.DesiredPodIdentityAssociation
	for _, a := range sorted {
		k := Key{Namespace: a.GetNamespace(), Name: a.GetServiceAccount()}
		if _, taken := out[k]; taken {
			dropped = append(dropped, a)
			continue
		}
		out[k] = Record{Key: k, Association: a, Labels: map[string]string{LabelAssociationID: a.GetAssociationId()},
			Annotations: annotations(a)}
	}
	return out, dropped
}

func annotations(a *deliveryv1.DesiredPodIdentityAssociation) map[string]string {
	m := map[string]string{
		AnnotationAssociationARN: a.GetAssociationArn(),
		AnnotationRoleARN:        a.GetRoleArn(),
	}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set(AnnotationTargetRoleARN, a.GetTargetRoleArn())
	set(AnnotationExternalID, a.GetExternalId())
	set(AnnotationOwnerARN, a.GetOwnerArn())
	if a.GetDisableSessionTags() {
		m[AnnotationDisableSessionTags] = "true"
	}
	return m
}

// ours is the part of m under Prefix.
func ours(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if len(k) > len(Prefix) && k[:len(Prefix)] == Prefix {
			out[k] = v
		}
	}
	return out
}

// carries reports whether a service account with these labels and
// annotations carries exactly what r asks under Prefix.
func carries(labels, annotations map[string]string, r Record) bool {
	return maps.Equal(ours(labels), r.Labels) && maps.Equal(ours(annotations), r.Annotations)
}
