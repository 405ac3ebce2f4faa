package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveProfiling serves Go's runtime profiles (net/http/pprof: CPU, heap,
// goroutines, blocking, mutexes, execution traces) on addr until ctx
// ends, as etcd's --enable-pprof and kube-apiserver's --profiling do. The
// profiles show the process's internals and take no credentials, so they
// get a listener of their own that an operator binds to loopback, never
// the façade's port.
func serveProfiling(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--profiling-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
