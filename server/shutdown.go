package server

import (
	"context"
	"sync"
	"time"
)

// sweeperStopWait bounds how long shutdown waits for the add-on sweeper to
// resign its election.
const sweeperStopWait = 5 * time.Second

// shutdown stops a server that served, once Serve's loops have been told to
// stop, in this order: agent streams end, the sweeper resigns, gRPC health
// turns NOT_SERVING, both ports drain (within ShutdownTimeout), then Close
// releases the rest.
func (s *Server) shutdown(sweeperDone <-chan struct{}) {
	s.endAgentStreams()
	s.awaitSweeper(sweeperDone)
	s.ready.Shutdown()
	s.drainPorts()
	s.Close()
	s.log.Info("saltbush stopped")
}

// endAgentStreams ends the agent streams first, at once: held open, each
// would keep gRPC's graceful stop waiting for the whole shutdown timeout,
// and its agent on a replica that is going away. Their agents connect to
// another replica and take their sessions over there
// (docs/delivery-protocol.md).
func (s *Server) endAgentStreams() {
	if s.deliveries != nil {
		s.deliveries.Shutdown()
	}
}

// awaitSweeper waits for the sweeper to resign its election before the
// etcd client closes, so a successor takes over at once. The wait is
// bounded: with etcd unreachable, an interrupted Campaign resigns on the
// client's own context (etcd's concurrency package does that), which ends
// only when shutdown closes the client.
func (s *Server) awaitSweeper(sweeperDone <-chan struct{}) {
	select {
	case <-sweeperDone:
	case <-time.After(sweeperStopWait):
		s.log.Warn("add-on sweeper did not resign in time (etcd unreachable?); shutting down without it")
	}
}

// drainPorts lets both ports' in-flight requests finish, together, within
// ShutdownTimeout; gRPC calls still running then are cut.
func (s *Server) drainPorts() {
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.httpServer.Shutdown(ctx); err != nil {
			s.log.Warn("HTTP shutdown", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { s.grpcServer.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcServer.Stop()
		}
	}()
	wg.Wait()
}

// Close releases everything without waiting for requests (Serve calls it
// after a graceful shutdown).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.grpcServer != nil {
			s.grpcServer.Stop()
		}
		if s.httpServer != nil {
			_ = s.httpServer.Close()
		}
		if s.grpcLis != nil {
			_ = s.grpcLis.Close()
		}
		if s.httpLis != nil {
			_ = s.httpLis.Close()
		}
		if s.stopBackground != nil {
			s.stopBackground()
		}
		if s.client != nil {
			_ = s.client.Close()
		}
		if s.auditLog != nil {
			_ = s.auditLog.Close()
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
	})
}
