package access

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

// TagResource is the access entry as a taggable resource (ARN type
// "access-entry", path cluster/kind/principal-account/name/uuid). The
// uuid must be the current entry's: the ARN of a deleted entry does not
// tag its successor.
type TagResource struct{ svc *Service }

var _ tagging.Resource = TagResource{}

// Tagging returns the access entry's tagging.Resource.
func (s *Service) Tagging() TagResource { return TagResource{svc: s} }

func missing(arn tagging.ARN) *errdefs.Error {
	return errdefs.MissingResource("No access entry found for arn: %s.", arn.Raw)
}

// locate returns the key of the entry an ARN names.
func (t TagResource) locate(ctx context.Context, arn tagging.ARN) (string, error) {
	if len(arn.Path) != 5 {
		return "", missing(arn)
	}
	var principal string
	switch kind, acct, name := arn.Path[1], arn.Path[2], arn.Path[3]; kind {
	case "user", "role":
		principal = "arn:aws:iam::" + acct + ":" + kind + "/" + name
	case "root":
		principal = "arn:aws:iam::" + acct + ":root"
	default:
		return "", missing(arn)
	}
	p, err := ParsePrincipal(principal)
	if err != nil {
		return "", missing(arn)
	}
	c, _, err := t.svc.clusters.Get(ctx, &controlv1.ClusterRef{AccountId: arn.Account, Name: arn.Path[0]})
	if err != nil {
		var apiErr *errdefs.Error
		if errors.As(err, &apiErr) {
			return "", missing(arn).WithCause(err)
		}
		return "", err
	}
	return store.AccessEntryKey(c.GetUid(), p.Canonical()), nil
}

// stored is the access entry record's side of tagging: the ARN's uuid
// must be the entry's.
func (t TagResource) stored() tagging.Stored[*storagev1.AccessEntryRecord] {
	return tagging.Stored[*storagev1.AccessEntryRecord]{
		Store:   t.svc.store,
		New:     func() *storagev1.AccessEntryRecord { return &storagev1.AccessEntryRecord{} },
		Current: func(r *storagev1.AccessEntryRecord, arn tagging.ARN) bool { return r.GetUid() == arn.Path[4] },
		SetTags: func(r *storagev1.AccessEntryRecord, tags map[string]string) {
			r.Tags = tags
			r.ModifiedAt = timestamppb.New(t.svc.cfg.Now())
		},
	}
}

// Tags implements tagging.Resource.
func (t TagResource) Tags(ctx context.Context, arn tagging.ARN) (map[string]string, error) {
	key, err := t.locate(ctx, arn)
	if err != nil {
		return nil, err
	}
	return t.stored().Tags(ctx, key, arn, missing(arn), arn.Raw)
}

// UpdateTags implements tagging.Resource. Tags change the entry's AWS
// metadata, so modifiedAt moves when they change.
func (t TagResource) UpdateTags(ctx context.Context, arn tagging.ARN, set map[string]string, remove []string) error {
	key, err := t.locate(ctx, arn)
	if err != nil {
		return err
	}
	return t.stored().Update(ctx, key, arn, missing(arn), arn.Raw, set, remove)
}
