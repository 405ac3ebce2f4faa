package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoverUnary turns a handler panic into an Internal error and a log line
// instead of a dead process.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in gRPC handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "An internal error occurred.")
			}
		}()
		return handler(ctx, req)
	}
}

// recoverStream is recoverUnary for streams: a panic in a stream handler
// (an agent's delivery stream) ends that stream with Internal, not the
// process and every other agent's stream with it.
func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ss.Context(), "panic in gRPC stream handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "An internal error occurred.")
			}
		}()
		return handler(srv, ss)
	}
}

type grpcMetrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	open     *prometheus.GaugeVec
}

func newGRPCMetrics(reg prometheus.Registerer) *grpcMetrics {
	m := &grpcMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_grpc_requests_total",
			Help: "gRPC requests (and ended streams) by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "saltbush_grpc_request_duration_seconds",
			Help:    "gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "saltbush_grpc_streams_open",
			Help: "gRPC streams open now, by method (one delivery stream per connected guest agent).",
		}, []string{"method"}),
	}
	reg.MustRegister(m.handled, m.duration, m.open)
	return m
}

func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	return resp, err
}

// stream counts a stream while it is open and, when it ends, by its
// status code. Streams live for hours: their duration says nothing and is
// not observed.
func (m *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	open := m.open.WithLabelValues(info.FullMethod)
	open.Inc()
	defer open.Dec()
	err := handler(srv, ss)
	m.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return err
}
