package server

import "github.com/saltbush/saltbush/server/internal/readiness"

// newReadiness follows the store's reach of etcd (internal/readiness):
// /readyz adds the read view's state, gRPC health follows every
// ReadinessInterval, and the store refuses requests at once while etcd has
// answered no probe for longer than an election takes.
func (s *Server) newReadiness() *readiness.Tracker {
	return readiness.New(readiness.Config{
		Ping:       s.store.Ping,
		Detail:     s.readViewStatus,
		Interval:   s.cfg.ReadinessInterval,
		Gate:       s.store,
		Registerer: s.registry,
		Logger:     s.log,
	})
}
