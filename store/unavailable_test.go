package store_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// TestSetUnavailableRefusesAtOnce: while the store is marked unavailable,
// every request fails with ErrUnavailable naming the cause, without
// reaching etcd (the error is the gate's, not a deadline's) and without
// changing anything; Ping still reaches etcd; SetAvailable ends it.
func TestSetUnavailableRefusesAtOnce(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	mustCreate(t, s, "a", cluster("a"))
	s.SetUnavailable(errors.New("etcdserver: no leader"))
	s.SetUnavailable(errors.New("a later cause")) // the first one is kept

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, "a", &storagev1.ClusterRecord{}); return err }},
		{"GetSerializable", func() error { _, err := s.GetSerializable(ctx, "a", &storagev1.ClusterRecord{}); return err }},
		{"Read", func() error { _, err := s.Read(ctx, "a", &storagev1.ClusterRecord{}); return err }},
		{"List", func() error { _, err := s.List(ctx, store.ListOptions{Prefix: ""}); return err }},
		{"Create", func() error { _, err := s.Create(ctx, "b", cluster("b")); return err }},
		{"Commit", func() error { _, err := s.Commit(ctx, store.NewTxn().Create("b", cluster("b"))); return err }},
		{"GuaranteedUpdate", func() error {
			_, err := s.GuaranteedUpdate(ctx, "a", &storagev1.ClusterRecord{}, func(cur proto.Message, _ *store.Txn) error {
				cur.(*storagev1.ClusterRecord).Name = "changed"
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("%s while unavailable: %v, want ErrUnavailable", tc.name, err)
			}
			if !strings.Contains(err.Error(), "etcd has answered no request since") || !strings.Contains(err.Error(), "etcdserver: no leader") {
				t.Fatalf("%s while unavailable: %q, want the refusal naming its first cause", tc.name, err)
			}
		})
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping while unavailable: %v, want it to reach etcd", err)
	}

	s.SetAvailable()
	got := &storagev1.ClusterRecord{}
	if _, err := s.Get(ctx, "a", got); err != nil || got.GetName() != "a" {
		t.Fatalf("after SetAvailable: Get(a) = %v, %v; want the record unchanged", got, err)
	}
	if _, err := s.Get(ctx, "b", &storagev1.ClusterRecord{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after SetAvailable: Get(b) = %v, want ErrNotFound: the refused creates wrote nothing", err)
	}
}
