// Package netproxy is a TCP proxy a test controls, for faults between two
// real components:
//
//   - Partition blackholes: nothing is forwarded in either direction and
//     new connections are accepted without being forwarded (they stay
//     open, nothing is read), as a network partition looks to both ends —
//     no reset, no error, just silence — until Heal, when everything held
//     back flows again.
//   - Reset is the refusing kind of cut (a firewall's reject, a peer that
//     restarted): every connection is closed at once with a TCP reset, and
//     every new one is reset as soon as it is accepted, until Heal.
//   - SetLatency delays every chunk forwarded, in each direction, by a
//     fixed time (a round trip costs twice it); chunks stay in order and
//     are pipelined, so latency costs no throughput.
package netproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	links map[*link]bool
	// open is closed while traffic flows; partitioned, it is a fresh open
	// channel that Heal closes.
	open chan struct{}
	// resetting: connections are reset, not forwarded (Reset until Heal).
	resetting bool
	latency   time.Duration
	closed    bool
}

// link is one proxied connection: the client's and, once dialed, the
// target's.
type link struct {
	client net.Conn
	once   sync.Once

	mu       sync.Mutex
	upstream net.Conn
	// done closes (under mu) when the link is cut; the pumps then stop.
	done chan struct{}
}

// cut closes both ends, with a TCP reset when rst (SO_LINGER 0) rather
// than an orderly close.
func (l *link) cut(rst bool) {
	l.once.Do(func() {
		l.mu.Lock()
		conns := []net.Conn{l.client, l.upstream}
		close(l.done)
		l.mu.Unlock()
		for _, c := range conns {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && rst {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// connect records the target's end u, or closes it when the link was cut
// while it was dialed.
func (l *link) connect(u net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		_ = u.Close()
		return false
	default:
		l.upstream = u
		return true
	}
}

// Start listens on a free loopback port and forwards to target; the proxy
// stops when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{}), links: map[*link]bool{}}
	close(p.open)
	t.Cleanup(p.Close)
	go p.accept()
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition stops all traffic (a blackhole) until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already partitioned
	}
}

// Reset cuts every connection with a TCP reset, and resets every new one,
// until Heal.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.resetting = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.cut(true)
	}
}

// Heal lets traffic flow again, after Partition or Reset.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetting = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// SetLatency delays each chunk read from now on by d before it is
// forwarded, in both directions; 0 forwards at once again.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.cut(false)
	}
}

// gate returns true when traffic may flow, false when the link was cut
// first.
func (p *Proxy) gate(l *link) bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-l.done:
		return false
	}
}

// track records l, or cuts it (reset) when the proxy resets or is closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	refused := p.resetting || p.closed
	if !refused {
		p.links[l] = true
	}
	p.mu.Unlock()
	if refused {
		l.cut(true)
	}
	return !refused
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(&link{client: c, done: make(chan struct{})})
	}
}

func (p *Proxy) serve(l *link) {
	if !p.track(l) {
		return
	}
	defer func() {
		<-l.done
		p.forget(l)
	}()
	// A connection made during a partition reaches nothing yet.
	if !p.gate(l) {
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		l.cut(true)
		return
	}
	if !l.connect(u) {
		return // reset or closed meanwhile
	}
	go p.pump(l, u, l.client)
	go p.pump(l, l.client, u)
}

// chunk is bytes read from one end, due at the other end at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst in order: the reader holds every chunk while
// partitioned (nothing is lost, nothing gets through) and stamps it with
// the latency in force when it was read; the writer forwards each when it
// is due, holding it too while partitioned. Either end failing cuts the
// link.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	go func() {
		defer l.cut(false)
		for c := range queue {
			if wait := time.Until(c.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return
				}
			}
			if !p.gate(l) {
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer close(queue)
	buf := make([]byte, 32<<10)
	for {
		if !p.gate(l) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			latency := p.latency
			p.mu.Unlock()
			c := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(latency)}
			select {
			case queue <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}
