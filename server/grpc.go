package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/saltbush/saltbush/server/internal/listen"
)

// flowWindow is the gRPC server's static HTTP/2 flow-control window, per
// stream and per connection.
const flowWindow = 1 << 20

// newGRPCServer is the public gRPC port, mTLS only. Identity comes from
// the verified client certificate (the pki interceptor), never from
// metadata; access decides what that identity may call, by the gate and
// the method classes registerGRPC gives it.
func (s *Server) newGRPCServer(g gate) *grpc.Server {
	s.access = &grpcAccess{authz: g.authz, throttle: g.throttle, audit: g.audit}
	grpcMetrics := newGRPCMetrics(s.registry)
	return grpc.NewServer(
		grpc.Creds(listen.GRPCCredentials(s.ca, s.cfg.GRPCAddr, s.cfg.GRPCServerNames)),
		grpc.ChainUnaryInterceptor(
			recoverUnary(s.log),
			grpcMetrics.unary,
			s.ca.UnaryInterceptor(),
			s.access.unary,
		),
		grpc.ChainStreamInterceptor(
			recoverStream(s.log),
			grpcMetrics.stream,
			s.ca.StreamInterceptor(),
			s.access.stream,
		),
		grpc.MaxRecvMsgSize(int(s.cfg.MaxBodyBytes)),
		// Every connection is TLS, and crypto/tls already buffers a whole
		// decrypted record, so gRPC's own 32 KiB read buffer per
		// connection only doubles the copy: with one long-lived stream per
		// guest agent it was the largest part of an idle stream's memory
		// (tests/bench: BenchmarkDeliveryStreams).
		grpc.ReadBufferSize(0),
		// Writes are batched in buffers from a shared pool, held from a
		// frame's write to the flush: with thousands of agents
		// heartbeating, thousands are held at once, and the pool keeps
		// them. One TLS record (16 KiB) per flush batches as well as the
		// default 32 KiB does.
		grpc.WriteBufferSize(16<<10),
		// Static flow-control windows, as the guest agent's link has:
		// gRPC's dynamic window sizing pings the peer after every data
		// frame a connection receives while no such ping is out, so every
		// agent heartbeat cost the replica a ping to write and its ack to
		// read. 1 MiB per stream and per connection carries requests at
		// tens of MB/s even across a 50 ms round trip.
		grpc.StaticStreamWindowSize(flowWindow), grpc.StaticConnWindowSize(flowWindow),
		// Find dead peers (agents on VMs that vanished) within a minute,
		// and refuse clients that ping more often than every 10s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
}

// registerGRPC serves every service of the table on the gRPC port, and
// gives access the method classes the table declares.
func (s *Server) registerGRPC(table []service) error {
	for _, svc := range table {
		svc.register(s.grpcServer)
	}
	var err error
	s.access.methods, err = methodTable(table)
	return err
}
