// Package netproxy is a TCP proxy a test controls, for partitions between
// two real components: while partitioned it forwards nothing in either
// direction and accepts connections without forwarding them (they stay
// open, nothing is read), as a network partition looks to both ends —
// no reset, no error, just silence — until healed, when everything held
// back flows again.
package netproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	// open is closed while traffic flows; partitioned, it is a fresh open
	// channel that Heal closes.
	open chan struct{}
}

// Start listens on a free loopback port and forwards to target; the proxy
// stops when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	t.Cleanup(p.Close)
	go p.accept()
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition stops all traffic.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already partitioned
	}
}

// Heal lets traffic flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Heal() // release the pumps, which then see closed connections
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// gate returns when traffic may flow.
func (p *Proxy) gate() {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	p.gate() // a connection made during a partition reaches nothing yet
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	go p.pump(u, c)
	go p.pump(c, u)
}

// pump copies src to dst, holding every chunk while partitioned (nothing
// is lost, nothing gets through).
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		p.gate()
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
