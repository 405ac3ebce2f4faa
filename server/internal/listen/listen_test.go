package listen

import (
	"net"
	"os"
	"testing"
)

func TestFacadeHosts(t *testing.T) {
	name, _ := os.Hostname()
	tests := []struct {
		name, bound string
		want, not   []string
	}{
		{"loopback", "127.0.0.1:8080", []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}, []string{net.JoinHostPort(name, "8080")}},
		{"every address", "0.0.0.0:8080", []string{"0.0.0.0:8080", "127.0.0.1:8080", "localhost:8080", net.JoinHostPort(name, "8080")}, nil},
		{"one interface", "10.0.0.5:8080", []string{"10.0.0.5:8080"}, []string{"localhost:8080", "127.0.0.1:8080"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FacadeHosts(tc.bound)
			for _, h := range tc.want {
				if !got[h] {
					t.Errorf("FacadeHosts(%s) lacks %s: %v", tc.bound, h, got)
				}
			}
			for _, h := range tc.not {
				if got[h] {
					t.Errorf("FacadeHosts(%s) has %s: %v", tc.bound, h, got)
				}
			}
		})
	}
}

func TestGRPCServerNames(t *testing.T) {
	name, _ := os.Hostname()
	for _, tc := range []struct {
		addr      string
		want, not []string
	}{
		{"10.0.0.5:9090", []string{"localhost", "127.0.0.1", "::1", "10.0.0.5", name, "grpc.example"}, nil},
		{"0.0.0.0:9090", []string{"localhost", name, "grpc.example"}, []string{"0.0.0.0"}},
		{"[::]:9090", []string{"localhost", name, "grpc.example"}, []string{"::"}},
	} {
		got := map[string]bool{}
		for _, h := range GRPCServerNames(tc.addr, []string{"grpc.example"}) {
			got[h] = true
		}
		for _, h := range tc.want {
			if !got[h] {
				t.Errorf("GRPCServerNames(%s) lacks %s: %v", tc.addr, h, got)
			}
		}
		for _, h := range tc.not {
			if got[h] {
				t.Errorf("GRPCServerNames(%s) has %s: %v", tc.addr, h, got)
			}
		}
	}
}

func TestBindClosesTheGRPCPortWhenHTTPFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := free.Addr().String()
	_ = free.Close()
	if _, _, err := Bind(grpcAddr, taken.Addr().String()); err == nil {
		t.Fatal("Bind on a taken HTTP port succeeded")
	}
	// The gRPC port is free again: Bind closed it.
	again, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("gRPC port %s still held after a failed Bind: %v", grpcAddr, err)
	}
	_ = again.Close()
}
