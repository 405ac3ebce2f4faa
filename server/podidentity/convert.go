package podidentity

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// epochSeconds is AWS's timestamp: epoch seconds with a millisecond fraction.
func epochSeconds(t *timestamppb.Timestamp) float64 {
	if t == nil {
		return 0
	}
	return float64(t.AsTime().UnixMilli()) / 1000
}

// ToAPI renders an association in AWS's shape; disableSessionTags is
// always sent, as AWS sends it.
func ToAPI(rec *storagev1.PodIdentityAssociationRecord) *eksv1.PodIdentityAssociation {
	return &eksv1.PodIdentityAssociation{
		ClusterName:        rec.GetClusterName(),
		Namespace:          rec.GetNamespace(),
		ServiceAccount:     rec.GetServiceAccount(),
		RoleArn:            rec.GetRoleArn(),
		AssociationArn:     rec.GetArn(),
		AssociationId:      rec.GetAssociationId(),
		Tags:               rec.GetTags(),
		CreatedAt:          epochSeconds(rec.GetCreatedAt()),
		ModifiedAt:         epochSeconds(rec.GetModifiedAt()),
		OwnerArn:           rec.GetOwnerArn(),
		DisableSessionTags: proto.Bool(rec.GetDisableSessionTags()),
		TargetRoleArn:      rec.GetTargetRoleArn(),
		ExternalId:         rec.GetExternalId(),
		Policy:             rec.GetPolicy(),
	}
}

// SummaryToAPI renders an association as ListPodIdentityAssociations
// lists it.
func SummaryToAPI(rec *storagev1.PodIdentityAssociationRecord) *eksv1.PodIdentityAssociationSummary {
	return &eksv1.PodIdentityAssociationSummary{
		ClusterName:    rec.GetClusterName(),
		Namespace:      rec.GetNamespace(),
		ServiceAccount: rec.GetServiceAccount(),
		AssociationArn: rec.GetArn(),
		AssociationId:  rec.GetAssociationId(),
		OwnerArn:       rec.GetOwnerArn(),
	}
}
