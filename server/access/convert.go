package access

import (
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

func newUID() string { return uuid.NewString() }

// epochSeconds is AWS's timestamp: epoch seconds with a millisecond fraction.
func epochSeconds(t *timestamppb.Timestamp) float64 {
	if t == nil {
		return 0
	}
	return float64(t.AsTime().UnixMilli()) / 1000
}

// ToAPI renders an entry in AWS's shape.
func ToAPI(rec *storagev1.AccessEntryRecord) *eksv1.AccessEntry {
	return &eksv1.AccessEntry{
		ClusterName:      rec.GetClusterName(),
		PrincipalArn:     rec.GetPrincipalArn(),
		KubernetesGroups: rec.GetKubernetesGroups(),
		AccessEntryArn:   rec.GetArn(),
		CreatedAt:        epochSeconds(rec.GetCreatedAt()),
		ModifiedAt:       epochSeconds(rec.GetModifiedAt()),
		Tags:             rec.GetTags(),
		Username:         rec.GetUsername(),
		Type:             TypeName(rec.GetType()),
	}
}

// AssociationToAPI renders an association in AWS's shape; a cluster scope
// has `"namespaces": []`, as AWS returns it.
func AssociationToAPI(a *storagev1.AssociatedPolicyRecord) *eksv1.AssociatedAccessPolicy {
	sc := scopeOf(a)
	return &eksv1.AssociatedAccessPolicy{
		PolicyArn:    a.GetPolicyArn(),
		AccessScope:  &eksv1.AccessScope{Type: sc.Type, Namespaces: sc.Namespaces},
		AssociatedAt: epochSeconds(a.GetAssociatedAt()),
		ModifiedAt:   epochSeconds(a.GetModifiedAt()),
	}
}
