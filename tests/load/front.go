package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// frontDialTimeout bounds the dial of a replica: on loopback a replica
// that is down refuses at once, so this only bounds a stalled accept.
const frontDialTimeout = time.Second

// front is the SDK clients' way to the façades in a rolling run
// (-saltbush-from): a TCP balancer over the replicas' HTTP addresses, as
// a deployment's load balancer in front of its replicas. It gives each
// connection it accepts to the next replica, round robin, whose dial
// succeeds, skipping one that refuses (being restarted), and then pumps
// bytes both ways until either side closes. It reads no HTTP: a request
// in flight when its replica goes away fails as it would behind a real
// TCP balancer, and the client sees what the replica's graceful shutdown
// does to its connections.
type front struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64

	// conns counts the connections accepted, skipped the dials of a
	// replica that failed (and were passed over), stranded the
	// connections no replica took (closed at once).
	conns, skipped, stranded atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{} // both ends of every pumped connection
	closed bool
	wg     sync.WaitGroup
}

// frontCounts are what a front did, for the report.
type frontCounts struct {
	Conns, Skipped, Stranded int64
}

// since is what c counted after earlier.
func (c frontCounts) since(earlier frontCounts) frontCounts {
	return frontCounts{Conns: c.Conns - earlier.Conns, Skipped: c.Skipped - earlier.Skipped, Stranded: c.Stranded - earlier.Stranded}
}

// startFront listens on a loopback port of the kernel's choosing (the
// front itself never restarts) and serves until close.
func startFront(backends []string) (*front, error) {
	if len(backends) == 0 {
		return nil, errors.New("front: no replica to balance")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("front: %w", err)
	}
	f := &front{ln: ln, backends: backends, open: map[net.Conn]struct{}{}}
	f.wg.Go(f.serve)
	return f, nil
}

// url is the base URL the SDK clients are given.
func (f *front) url() string { return "http://" + f.ln.Addr().String() }

func (f *front) counts() frontCounts {
	return frontCounts{Conns: f.conns.Load(), Skipped: f.skipped.Load(), Stranded: f.stranded.Load()}
}

func (f *front) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			// Closed by close; any other accept error on loopback is
			// as final for a harness.
			return
		}
		f.conns.Add(1)
		f.wg.Go(func() { f.handle(c) })
	}
}

// handle gives c to the next replica that answers, and pumps.
func (f *front) handle(c net.Conn) {
	first := f.next.Add(1) - 1
	var b net.Conn
	for i := range uint64(len(f.backends)) {
		addr := f.backends[(first+i)%uint64(len(f.backends))]
		var err error
		if b, err = net.DialTimeout("tcp", addr, frontDialTimeout); err == nil {
			break
		}
		f.skipped.Add(1)
	}
	if b == nil {
		f.stranded.Add(1)
		_ = c.Close()
		return
	}
	if !f.track(c, b) {
		return // closing: track closed both
	}
	defer f.untrack(c, b)
	done := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pump(b, c)
	go pump(c, b)
	// Either side closing ends the connection, as a balancer that
	// proxies whole connections does; closing both ends the other pump.
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

// track registers a pumped connection's two ends, so that close ends
// them; false (both closed) once the front is closing.
func (f *front) track(c, b net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		_ = b.Close()
		return false
	}
	f.open[c], f.open[b] = struct{}{}, struct{}{}
	return true
}

func (f *front) untrack(c, b net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.open, c)
	delete(f.open, b)
}

// close stops accepting, ends every connection and waits for the
// front's goroutines. Later calls do nothing.
func (f *front) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	_ = f.ln.Close()
	for c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
