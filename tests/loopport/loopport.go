// Package loopport reserves TCP ports for the processes tests start that
// must be told their address before they listen: a kube-apiserver, an
// etcd member, an agent's webhooks (whose kubeconfigs name the port
// before the agent runs), an agent's status endpoint.
//
// Asking the kernel for a free port (listen on port 0, close, pass the
// number on) is not enough. The closed port goes back to the ephemeral
// range, from which the kernel picks the source port of every outgoing
// connection on the machine: in the seconds before the child binds it
// (an apiserver starting on a loaded machine), a connection of any
// process may take it, and the child fails with "address already in
// use". The ports reserved here come from below the ephemeral range
// (net.ipv4.ip_local_port_range), which the kernel never hands out by
// itself, and each is held by a lock on one shared file for as long as
// the reservation lasts, so that test processes running at once never
// reserve the same port.
package loopport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// lowest is the lowest port reserved: clear of the well-known and the
// commonly configured service ports.
const lowest = 10000

// Reservation is one reserved port, held until Release.
type Reservation struct {
	host string
	port int
	// lock holds the port's byte of the shared lock file, as an open file
	// description lock: it conflicts with every other open of the file,
	// in this process or another, and goes when the file is closed or
	// the process dies.
	lock *os.File
}

// Addr reserves a port on 127.0.0.1 until tb ends and returns it as
// host:port.
func Addr(tb testing.TB) string {
	tb.Helper()
	r, err := Reserve("127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Release)
	return r.Addr()
}

// URL is Addr as scheme://host:port.
func URL(tb testing.TB, scheme string) string {
	tb.Helper()
	return scheme + "://" + Addr(tb)
}

// Reserve reserves a port that nothing listens on at host, until Release.
func Reserve(host string) (*Reservation, error) {
	first, last, err := reservable()
	if err != nil {
		return nil, err
	}
	n := last - first + 1
	start := rand.IntN(n) //nolint:gosec // G404: spreads the reservations of processes starting at once; no secret
	for i := range n {
		port := first + (start+i)%n
		r, err := tryReserve(host, port)
		if err != nil {
			return nil, err
		}
		if r != nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("reserve a port on %s: every port from %d to %d is taken", host, first, last)
}

// tryReserve locks port and checks that nothing listens on it: nil
// (and no error) when it is taken.
func tryReserve(host string, port int) (*Reservation, error) {
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reserve a port: %w", err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, nil // reserved by another test
		}
		return nil, fmt.Errorf("reserve a port: lock %s: %w", lockPath(), err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, nil // something else listens there
		}
		return nil, fmt.Errorf("reserve a port: %w", err) // the host, not the port
	}
	_ = ln.Close()
	return &Reservation{host: host, port: port, lock: f}, nil
}

// Port is the reserved port.
func (r *Reservation) Port() int { return r.port }

// Addr is the reserved port on its host, as host:port.
func (r *Reservation) Addr() string { return net.JoinHostPort(r.host, strconv.Itoa(r.port)) }

// Release gives the port back. Releasing twice does nothing.
func (r *Reservation) Release() { _ = r.lock.Close() }

// lockPath is the file whose bytes are the ports' locks.
func lockPath() string { return filepath.Join(os.TempDir(), "saltbush-test-ports.lock") }

// reservable is the range ports are reserved from: below the kernel's
// ephemeral range, or above it when it starts too low.
func reservable() (int, int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, fmt.Errorf("reserve a port: the ephemeral range: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("reserve a port: ip_local_port_range is %q", b)
	}
	lo, err1 := strconv.Atoi(fields[0])
	hi, err2 := strconv.Atoi(fields[1])
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, fmt.Errorf("reserve a port: ip_local_port_range is %q", b)
	case lo-lowest >= 1000:
		return lowest, lo - 1, nil
	case 65535-hi >= 1000:
		return hi + 1, 65535, nil
	}
	return 0, 0, fmt.Errorf("reserve a port: the ephemeral range %d-%d leaves no room for reserved ports", lo, hi)
}
