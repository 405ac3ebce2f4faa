package catalog

import (
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
)

// clusterDNSOffset is the cluster DNS address's place in the service CIDR:
// K3s (10.43.0.10 for its default 10.43.0.0/16), kubeadm and EKS all tell
// every kubelet that the cluster DNS server is the range's tenth address, so
// the kube-dns Service must hold exactly that one.
const clusterDNSOffset = 10

// ClusterDNSIP returns the cluster DNS address of a service IPv4 CIDR: its
// network address plus ten. The CIDR must be a network address (10.43.0.0/16,
// not 10.43.1.0/16) of a range large enough that the address is usable: the
// apiserver never allocates a range's first and last addresses, so a /28 is
// the smallest.
func ClusterDNSIP(serviceCIDR string) (string, error) {
	p, err := netip.ParsePrefix(serviceCIDR)
	switch {
	case err != nil:
		return "", fmt.Errorf("service IPv4 CIDR %q is not a CIDR block", serviceCIDR)
	case !p.Addr().Is4():
		return "", fmt.Errorf("service IPv4 CIDR %q is not IPv4", serviceCIDR)
	case p != p.Masked():
		return "", fmt.Errorf("service IPv4 CIDR %q is not a network address (did you mean %s?)", serviceCIDR, p.Masked())
	case p.Bits() > 28:
		return "", fmt.Errorf("service IPv4 CIDR %q is too small for the cluster DNS address (the network address + %d): it needs at least a /28",
			serviceCIDR, clusterDNSOffset)
	}
	a := p.Addr()
	for range clusterDNSOffset {
		a = a.Next()
	}
	return a.String(), nil
}

// MissingFactError is Render's error when a bundle needs a fact about the
// cluster that RenderParams does not carry, such as the API endpoint of a
// cluster that is not ACTIVE yet: the bundle asked for it with `required`.
// The same add-on renders once the cluster record has the fact, so a caller
// waits rather than failing the add-on.
type MissingFactError struct {
	// Fact is the name the bundle gave to required ("endpoint").
	Fact string
}

func (e *MissingFactError) Error() string {
	return "the bundle needs the cluster's " + e.Fact + ", which is not known"
}

// required is the template function `required NAME VALUE`: VALUE, or a
// MissingFactError for NAME when VALUE is empty. Bundles use it for the
// cluster facts they cannot run without, so that a missing one fails the
// render visibly instead of producing a bundle that can never work (a
// kube-proxy without an apiserver to talk to, a kube-dns Service at an address
// no kubelet uses).
func required(name string, v any) (any, error) {
	if v == nil || v == "" {
		return nil, &MissingFactError{Fact: name}
	}
	return v, nil
}

// checkFacts validates the cluster facts Render was given. The cluster
// service validated them when they were stored; checking again here keeps a
// bad one from reaching a bundle, where it would land unescaped inside a
// file such as a kubeconfig, and names it clearly. An empty fact is not an
// error here: the bundles that need it say so with required.
func checkFacts(p RenderParams) (dnsIP string, err error) {
	if p.ServiceIPv4CIDR != "" {
		if dnsIP, err = ClusterDNSIP(p.ServiceIPv4CIDR); err != nil {
			return "", err
		}
	}
	if p.Endpoint != "" {
		u, err := url.Parse(p.Endpoint)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return "", fmt.Errorf("endpoint %q is not an https URL of a host", p.Endpoint)
		}
	}
	if p.CertificateAuthorityData != "" {
		pemBytes, err := base64.StdEncoding.DecodeString(p.CertificateAuthorityData)
		if err != nil {
			return "", fmt.Errorf("certificate authority data is not base64: %v", err)
		}
		if block, _ := pem.Decode(pemBytes); block == nil || block.Type != "CERTIFICATE" {
			return "", errors.New("certificate authority data holds no PEM CERTIFICATE block")
		}
	}
	return dnsIP, nil
}
