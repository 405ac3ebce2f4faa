package loopport

import (
	"net"
	"strconv"
	"testing"
)

func TestReservedPortsAreOutsideTheEphemeralRangeAndDistinct(t *testing.T) {
	first, last, err := reservable()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 50 {
		r, err := Reserve("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Release)
		if r.Port() < first || r.Port() > last {
			t.Fatalf("port %d is outside %d-%d", r.Port(), first, last)
		}
		if seen[r.Port()] {
			t.Fatalf("port %d reserved twice", r.Port())
		}
		seen[r.Port()] = true
	}
}

func TestTryReserve(t *testing.T) {
	held, err := Reserve("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	// A port something listens on, not reserved here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	listening := ln.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		name string
		port int
		want bool
	}{
		{name: "reserved by another reservation", port: held.Port(), want: false},
		{name: "something listens on it", port: listening, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tryReserve("127.0.0.1", tc.port)
			if err != nil {
				t.Fatal(err)
			}
			if got := r != nil; got != tc.want {
				t.Fatalf("reserved %d: %v, want %v", tc.port, got, tc.want)
			}
			if r != nil {
				r.Release()
			}
		})
	}

	t.Run("a host that is not this machine's", func(t *testing.T) {
		// TEST-NET-1 (RFC 5737): no interface here has it.
		if r, err := Reserve("192.0.2.1"); err == nil {
			r.Release()
			t.Fatalf("reserved port %d on 192.0.2.1", r.Port())
		}
	})

	t.Run("released", func(t *testing.T) {
		port := held.Port()
		held.Release()
		r, err := tryReserve("127.0.0.1", port)
		if err != nil || r == nil {
			t.Fatalf("port %d after its release: %v, %v", port, r, err)
		}
		defer r.Release()
		if r.Addr() != "127.0.0.1:"+strconv.Itoa(port) {
			t.Fatalf("Addr %q", r.Addr())
		}
	})
}
