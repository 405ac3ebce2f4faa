package server

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
			got := facadeHosts(tc.bound)
			for _, h := range tc.want {
				if !got[h] {
					t.Errorf("facadeHosts(%s) lacks %s: %v", tc.bound, h, got)
				}
			}
			for _, h := range tc.not {
				if got[h] {
					t.Errorf("facadeHosts(%s) has %s: %v", tc.bound, h, got)
				}
			}
		})
	}
}
