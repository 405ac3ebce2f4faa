// Package storetest gives a test a real store: an embedded etcd member (no
// fsync, short election timeout) in a temporary directory, and a store.Store
// on it, both closed when the test ends. It is the one way package tests of
// saltbush's services get etcd; there is no fake store.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// New returns a store on a fresh embedded etcd.
func New(tb testing.TB) *store.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir: tb.TempDir(), UnsafeNoFsync: true, ElectionTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(etcd.Close)
	client, err := etcd.Client()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	st, err := store.New(ctx, client, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
