package server

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/saltbush/saltbush/store"
)

// ReplaceReadView attaches a new read view that lists and watches through
// client (a test's slow or cut link) and runs it until the server closes.
// The replica's own view keeps running, detached.
func (s *Server) ReplaceReadView(client *clientv3.Client, maxWait time.Duration) *store.View {
	v := store.NewView(s.store, store.ViewOptions{Client: client, MaxWait: maxWait, Logger: s.log.With("component", "read-view")})
	go v.Run(s.background)
	return v
}
