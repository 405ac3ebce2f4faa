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

type grpcMetrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newGRPCMetrics(reg prometheus.Registerer) *grpcMetrics {
	m := &grpcMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_grpc_requests_total",
			Help: "gRPC requests by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "saltbush_grpc_request_duration_seconds",
			Help:    "gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
	}
	reg.MustRegister(m.handled, m.duration)
	return m
}

func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	return resp, err
}
