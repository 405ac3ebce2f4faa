package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/saltbush/saltbush/server/internal/listen"
)

// listen binds the gRPC and HTTP ports.
func (s *Server) listen() error {
	var err error
	if s.grpcLis, s.httpLis, err = listen.Bind(s.cfg.GRPCAddr, s.cfg.HTTPAddr); err != nil {
		return err
	}
	if s.tokens != nil {
		// Before serving: nothing reads the verifier yet.
		s.tokens.HTTPHosts = listen.FacadeHosts(s.HTTPAddr())
	}
	return nil
}

// Serve serves gRPC and HTTP until ctx ends or a server fails, then shuts
// both down gracefully (in-flight requests finish within ShutdownTimeout)
// and stops etcd.
func (s *Server) Serve(ctx context.Context) error {
	errc := s.servePorts()
	s.ready.Serving()
	s.log.Info("saltbush serving", "http", s.HTTPAddr(), "grpc", s.GRPCAddr())
	loopsCtx, stopLoops := context.WithCancel(ctx)
	sweeperDone := s.startLoops(loopsCtx)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopLoops()
	s.shutdown(sweeperDone)
	return err
}

// servePorts serves both ports; the channel receives the error of a port
// that fails (not the one a stop makes).
func (s *Server) servePorts() <-chan error {
	errc := make(chan error, 2)
	go func() {
		if err := s.grpcServer.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	go func() {
		if err := s.httpServer.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server: %w", err)
		}
	}()
	return errc
}

// startLoops starts what runs while the server serves, until ctx ends:
// gRPC health following etcd, certificate pruning and the add-on deadline
// sweeper. The channel closes once the sweeper has stopped (and resigned
// its election).
func (s *Server) startLoops(ctx context.Context) (sweeperDone <-chan struct{}) {
	go s.ready.Run(ctx)
	go s.pruneCertificates(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.sweeper.Run(ctx) }()
	return done
}

// certificatePruneInterval is how often a replica drops the records of
// certificates that expired (any replica may; each delete is guarded).
const certificatePruneInterval = time.Hour

// pruneCertificates keeps pki/issued and pki/revoked from growing forever.
func (s *Server) pruneCertificates(ctx context.Context) {
	t := time.NewTicker(certificatePruneInterval)
	defer t.Stop()
	for {
		if n, err := s.ca.PruneExpired(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("prune expired certificate records", "err", err)
		} else if n > 0 {
			s.log.Info("pruned expired certificate records", "records", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
