// Package profiling serves a process's Go runtime profiles
// (net/http/pprof) on a listener of their own: `saltbush serve
// --profiling-addr` and the load program's processes use it.
package profiling

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Serve serves CPU, heap, goroutine, block and mutex profiles and
// execution traces on addr until ctx ends. The profiles show the
// process's internals and take no credentials, so they get a listener of
// their own, which callers bind to loopback, never a port that serves
// clients.
func Serve(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve profiles: %w", err)
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
