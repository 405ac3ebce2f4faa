// Package listen binds saltbush's two ports and names them: the TLS the
// gRPC port serves (the names its certificate is valid for) and the
// host:port names clients reach the façade by.
package listen

import (
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc/credentials"

	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/token"
)

// Bind binds the gRPC port, then the façade's (HTTP) port. When the second
// fails the first is closed.
func Bind(grpcAddr, httpAddr string) (grpcLis, httpLis net.Listener, err error) {
	if grpcLis, err = net.Listen("tcp", grpcAddr); err != nil {
		return nil, nil, fmt.Errorf("listen gRPC on %s: %w", grpcAddr, err)
	}
	if httpLis, err = net.Listen("tcp", httpAddr); err != nil {
		_ = grpcLis.Close()
		return nil, nil, fmt.Errorf("listen HTTP on %s: %w", httpAddr, err)
	}
	return grpcLis, httpLis, nil
}

// GRPCCredentials is the gRPC port's TLS: mTLS with certificates from ca,
// the serving one valid for GRPCServerNames(addr, extra).
func GRPCCredentials(ca *pki.Authority, addr string, extra []string) credentials.TransportCredentials {
	return credentials.NewTLS(ca.ServerTLSConfig(GRPCServerNames(addr, extra)))
}

// GRPCServerNames are the names the gRPC port's certificate is valid for:
// the loopback names, the host of addr (the configured listen address)
// unless it is a wildcard, the machine's host name, and extra (configured
// names).
func GRPCServerNames(addr string, extra []string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		hosts = append(hosts, h)
	}
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	return append(hosts, extra...)
}

// FacadeHosts are the host:port names a client reaches the bound façade
// by, as `aws eks get-token` puts them in a token when its STS endpoint
// URL is the façade's (the development profile's is): the bound address,
// for a loopback or wildcard listener the loopback names too, and for a
// wildcard listener the machine's host name.
func FacadeHosts(bound string) token.Hosts {
	hosts := token.Hosts{bound: true}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return hosts
	}
	ip := net.ParseIP(host)
	if ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
			hosts[h+":"+port] = true
		}
	}
	if name, err := os.Hostname(); err == nil && ip != nil && ip.IsUnspecified() {
		// Listening on every address: clients may name the machine.
		hosts[net.JoinHostPort(name, port)] = true
	}
	return hosts
}
