package addon

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/identity"
)

// StatusName is the EKS name of an add-on status (CREATING, ...).
func StatusName(st storagev1.AddonStatus) string {
	return strings.TrimPrefix(st.String(), "ADDON_STATUS_")
}

// epochSeconds is AWS's timestamp: epoch seconds with a millisecond fraction.
func epochSeconds(t *timestamppb.Timestamp) float64 {
	if t == nil {
		return 0
	}
	return float64(t.AsTime().UnixMilli()) / 1000
}

// ToAPI renders an add-on record in AWS's shape.
func (s *Service) ToAPI(ctx context.Context, rec *storagev1.AddonRecord) *eksv1.Addon {
	out := &eksv1.Addon{
		AddonName:             rec.GetName(),
		ClusterName:           rec.GetClusterName(),
		Status:                StatusName(rec.GetStatus()),
		AddonVersion:          rec.GetSpec().GetVersion(),
		Health:                &eksv1.AddonHealth{Issues: []*eksv1.AddonIssue{}},
		AddonArn:              rec.GetArn(),
		ServiceAccountRoleArn: rec.GetSpec().GetServiceAccountRoleArn(),
		Tags:                  rec.GetTags(),
		ConfigurationValues:   rec.GetSpec().GetConfigurationValues(),
		NamespaceConfig:       &eksv1.AddonNamespaceConfigResponse{Namespace: rec.GetSpec().GetNamespace()},
	}
	out.CreatedAt = epochSeconds(rec.GetCreatedAt())
	out.ModifiedAt = epochSeconds(rec.GetModifiedAt())
	// The owning account's view: a private add-on's publisher is the
	// operator's. A failed lookup leaves them out rather than failing a
	// change that already happened.
	who, _ := identity.FromContext(ctx)
	if a, ok, err := s.catalog.Lookup(ctx, who.AccountID, rec.GetName()); err == nil && ok {
		out.Publisher, out.Owner = a.Publisher, a.Owner
	}
	for _, i := range rec.GetIssues() {
		out.Health.Issues = append(out.Health.Issues, &eksv1.AddonIssue{
			Code: i.GetCode(), Message: i.GetMessage(), ResourceIds: i.GetResourceIds(),
		})
	}
	for _, p := range rec.GetSpec().GetPodIdentityAssociations() {
		out.PodIdentityAssociations = append(out.PodIdentityAssociations,
			s.podIdentityARN(rec.GetAccountId(), rec.GetClusterName(), p.GetAssociationId()))
	}
	return out
}

func (s *Service) podIdentityARN(account, cluster, id string) string {
	return fmt.Sprintf("arn:aws:eks:%s:%s:podidentityassociation/%s/%s", s.cfg.Region, account, cluster, id)
}

// ToControl renders the internal view of an add-on.
func ToControl(rec *storagev1.AddonRecord) *controlv1.AddonInfo {
	return &controlv1.AddonInfo{
		ClusterUid:         rec.GetClusterUid(),
		Name:               rec.GetName(),
		Uid:                rec.GetUid(),
		Generation:         rec.GetGeneration(),
		Status:             StatusName(rec.GetStatus()),
		Version:            rec.GetSpec().GetVersion(),
		ObservedGeneration: rec.GetObserved().GetGeneration(),
		ObservedPhase:      controlv1.AddonPhase(rec.GetObserved().GetPhase()),
		References:         rec.GetReferences(),
		Deleting:           rec.GetSpec().GetDeleted(),
		Preserve:           rec.GetSpec().GetPreserve(),
		UpdateId:           rec.GetUpdateId(),
	}
}

// newAssociationID makes a pod identity association id the way AWS
// formats them: "a-" and 17 lowercase alphanumerics.
func newAssociationID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 17)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "a-" + string(b)
}

// podNamespace is the namespace an add-on's pod identity associations are
// in: the add-on's own.
func podNamespace(r *storagev1.AddonRecord) string {
	if ns := r.GetSpec().GetNamespace(); ns != "" {
		return ns
	}
	return "kube-system"
}
