package iam

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/store"
)

// Service identities (spiffe://saltbush/service/{name}) are not IAM
// principals of any account: their policy says which accounts they may act
// for (saltbush:ActForAccount on arn:aws:iam::{account}:root) and what they
// may do there or on the control API.
func serviceKey(name string) string { return "iam/services/" + name }

// PutServicePolicy creates or replaces the policy of a service identity.
func (s *Service) PutServicePolicy(ctx context.Context, name, document string) (*storagev1.ServiceRecord, error) {
	if err := identity.ValidateName("service name", name); err != nil {
		return nil, errdefs.InvalidParameter("%v.", err)
	}
	if _, err := policy.Parse([]byte(document)); err != nil {
		return nil, errdefs.InvalidParameter("Policy of service %s: %v.", name, err)
	}
	now := timestamppb.New(s.now())
	var out *storagev1.ServiceRecord
	_, err := store.Update(ctx, s.store, serviceKey(name), &storagev1.ServiceRecord{},
		func(r *storagev1.ServiceRecord, _ *store.Txn) error {
			if r.GetName() == "" {
				r.Name, r.CreatedAt = name, now
			}
			if r.GetDocument() != document {
				r.Document, r.ModifiedAt = document, now
			}
			out = r
			return nil
		})
	if errors.Is(err, store.ErrNotFound) {
		rec := &storagev1.ServiceRecord{Name: name, Document: document, CreatedAt: now, ModifiedAt: now}
		if _, err := s.store.Create(ctx, serviceKey(name), rec); err != nil {
			if errors.Is(err, store.ErrExists) {
				return nil, errdefs.Conflict("Service %s was created concurrently; retry.", name)
			}
			return nil, fmt.Errorf("put policy of service %s: %w", name, err)
		}
		return rec, nil
	}
	if err != nil {
		return nil, fmt.Errorf("put policy of service %s: %w", name, err)
	}
	return out, nil
}

// ServicePolicy returns the parsed policy of a service identity; ok is
// false when the service has none (it may then do nothing).
func (s *Service) ServicePolicy(ctx context.Context, name string) (*policy.Document, bool, error) {
	rec := &storagev1.ServiceRecord{}
	if _, err := s.store.Get(ctx, serviceKey(name), rec); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("policy of service %s: %w", name, err)
	}
	doc, err := policy.Parse([]byte(rec.GetDocument()))
	if err != nil {
		return nil, false, fmt.Errorf("stored policy of service %s: %w", name, err)
	}
	return doc, true, nil
}
