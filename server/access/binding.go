package access

import (
	"context"
	"errors"
	"fmt"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/store"
)

// Binding is what token review and authorization need of an entry, and
// all they get: the stored record stays inside this package.
type Binding struct {
	// EntryUID is the entry incarnation's uuid.
	EntryUID string
	// Type is AWS's type name (STANDARD, EC2_LINUX, ...).
	Type string
	// Username may hold templates ({{SessionName}}, ...).
	Username string
	Groups   []string
	Policies []accesspolicy.Association
}

// Binding returns the binding of principal p on cluster incarnation
// clusterUID; ok is false when p has no entry there. The read is
// serializable (no consensus round): on the replica's etcd member it
// sees every committed write, and a just-deleted entry on another member
// is at most the member's apply lag behind.
func (s *Service) Binding(ctx context.Context, clusterUID string, p Principal) (Binding, bool, error) {
	rec := &storagev1.AccessEntryRecord{}
	if _, err := s.store.GetSerializable(ctx, store.AccessEntryKey(clusterUID, p.Canonical()), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Binding{}, false, nil
		}
		return Binding{}, false, fmt.Errorf("access entry of %s on cluster %s: %w", p.Canonical(), clusterUID, err)
	}
	return bindingOf(rec), true, nil
}

// DecodeBinding is the binding of a stored access entry record (a value
// under store.AccessEntriesPrefix), for views that mirror entries from a
// watch instead of reading them one by one.
func DecodeBinding(value []byte) (Binding, error) {
	rec := &storagev1.AccessEntryRecord{}
	if err := store.Decode(value, rec); err != nil {
		return Binding{}, err
	}
	return bindingOf(rec), nil
}

func bindingOf(rec *storagev1.AccessEntryRecord) Binding {
	b := Binding{
		EntryUID: rec.GetUid(),
		Type:     TypeName(rec.GetType()),
		Username: rec.GetUsername(),
		Groups:   rec.GetKubernetesGroups(),
		Policies: make([]accesspolicy.Association, 0, len(rec.GetPolicies())),
	}
	for _, a := range rec.GetPolicies() {
		b.Policies = append(b.Policies, accesspolicy.Association{PolicyARN: a.GetPolicyArn(), Scope: scopeOf(a)})
	}
	return b
}

// scopeOf is an association's scope. A record with no known scope type
// (none is written so) gets a namespace scope naming no namespace: it
// fails closed, never to cluster-wide.
func scopeOf(a *storagev1.AssociatedPolicyRecord) accesspolicy.Scope {
	if a.GetScopeType() == storagev1.AccessScopeType_ACCESS_SCOPE_TYPE_CLUSTER {
		return accesspolicy.Scope{Type: accesspolicy.ScopeCluster}
	}
	return accesspolicy.Scope{Type: accesspolicy.ScopeNamespace, Namespaces: a.GetNamespaces()}
}
