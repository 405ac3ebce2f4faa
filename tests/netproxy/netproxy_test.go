package netproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echo is a line echo server on a free loopback port.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends line and reads its echo within wait.
func (c *client) roundTrip(line string, wait time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(wait))
	got, err := c.r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// TestProxy: traffic flows; a partition holds it (nothing arrives, and
// everything held arrives after Heal); a reset cuts open connections and
// refuses new ones until Heal; latency delays each direction by at least
// its amount.
func TestProxy(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, p *Proxy)
	}{
		{"forwards", func(t *testing.T, p *Proxy) {
			c := dial(t, p.Addr())
			if got, err := c.roundTrip("hello", 10*time.Second); err != nil || got != "hello" {
				t.Fatalf("echo %q, %v", got, err)
			}
		}},
		{"partition holds then delivers", func(t *testing.T, p *Proxy) {
			c := dial(t, p.Addr())
			if _, err := c.roundTrip("before", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			p.Partition()
			if got, err := c.roundTrip("held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("during the partition: %q, %v; want nothing (a read deadline)", got, err)
			}
			// A connection made during the partition is accepted, not
			// forwarded.
			late := dial(t, p.Addr())
			if _, err := late.c.Write([]byte("late\n")); err != nil {
				t.Fatal(err)
			}
			p.Heal()
			_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
				t.Fatalf("after Heal: %q, %v; want the held line", got, err)
			}
			_ = late.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if got, err := late.r.ReadString('\n'); err != nil || got != "late\n" {
				t.Fatalf("connection made during the partition, after Heal: %q, %v", got, err)
			}
		}},
		{"reset cuts and refuses", func(t *testing.T, p *Proxy) {
			c := dial(t, p.Addr())
			if _, err := c.roundTrip("before", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			p.Reset()
			_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("an open connection after Reset read %v; want it cut", err)
			}
			// The proxy accepts and resets at once, so the reset may reach
			// the client before its connect completes: a dial failing
			// with a reset is the same refusal as a cut first write.
			if fresh, err := net.Dial("tcp", p.Addr()); err == nil {
				t.Cleanup(func() { _ = fresh.Close() })
				c := &client{c: fresh, r: bufio.NewReader(fresh)}
				if got, err := c.roundTrip("refused", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a new connection during Reset: %q, %v; want it cut", got, err)
				}
			} else if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("a new connection during Reset failed with %v; want a reset", err)
			}
			p.Heal()
			again := dial(t, p.Addr())
			if got, err := again.roundTrip("again", 10*time.Second); err != nil || got != "again" {
				t.Fatalf("after Heal: %q, %v", got, err)
			}
		}},
		{"latency delays both directions", func(t *testing.T, p *Proxy) {
			const d = 150 * time.Millisecond
			c := dial(t, p.Addr())
			p.SetLatency(d)
			start := time.Now()
			if got, err := c.roundTrip("slow", 10*time.Second); err != nil || got != "slow" {
				t.Fatalf("echo %q, %v", got, err)
			}
			// Each direction waits at least d: the proxy never forwards
			// early, however fast the machine.
			if rtt := time.Since(start); rtt < 2*d {
				t.Fatalf("round trip %s with %s per direction", rtt, d)
			}
			p.SetLatency(0)
			if got, err := c.roundTrip("fast", 10*time.Second); err != nil || got != "fast" {
				t.Fatalf("echo after latency 0: %q, %v", got, err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, Start(t, echo(t)))
		})
	}
}
