package nodetest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// CredProbeImage is the tests' AWS workload image: this package's
// credprobe program (serve, whoami), which asks STS and EKS who it is with
// the unmodified AWS SDK for Go v2 and the credentials the pod was given.
const CredProbeImage = "saltbush/credprobe:test"

// PodIdentityAgentImage is the image the catalogue's eks-pod-identity-agent
// add-on renders for its default version (v1.3.10-eksbuild.3,
// catalog/addons/eks-pod-identity-agent): on the node it is this package's
// podidentityagent program, the stand-in for the real agent, whose image
// cannot be built here.
const PodIdentityAgentImage = "eks/eks-pod-identity-agent:v0.1.37"

// podIdentityAgentImages are the references of every version of the
// add-on, all the same stand-in: an update between versions rolls the
// DaemonSet as on EKS.
var podIdentityAgentImages = []string{PodIdentityAgentImage, "eks/eks-pod-identity-agent:v0.1.31"}

// caBundlePath is where Go's crypto/x509 looks first for the system's
// roots on Linux (Debian's bundle path). A PEM file there is all the trust
// Go programs have in an image without an operating system.
const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// CredentialImages builds credprobe and the pod identity agent stand-in
// (static, CGO_ENABLED=0) into dir and returns their images: credprobe as
// CredProbeImage, the stand-in under every reference the catalogue's
// eks-pod-identity-agent add-on renders (PodIdentityAgentImage and the
// older version's).
//
// caBundle is a PEM file of the CA that signed saltbush's HTTPS façade.
// Both images carry it as their CA bundle (caBundlePath), in place of the
// public roots a real image has: the programs use the AWS SDK's (and Go's)
// default TLS configuration, so the façade must be trusted the way a public
// AWS endpoint is, with no option in the programs or the manifests (an
// AWS_CA_BUNDLE in a pod would be a saltbush-specific setting the real
// add-on and a real workload do not have).
//
// The agent's image has the real image's layout: the program at
// /eks-pod-identity-agent and /go-runner, which the add-on's DaemonSet runs
// first (/go-runner /eks-pod-identity-agent server ...), a link to the
// same program, which acts as go-runner when invoked by that name.
func CredentialImages(ctx context.Context, dir, caBundle string) ([]Image, error) {
	ca, err := copyCABundle(dir, caBundle)
	if err != nil {
		return nil, err
	}
	caFile := File{Path: caBundlePath, Source: ca, Mode: 0o644}
	probe, err := buildProgram(ctx, dir, "credprobe")
	if err != nil {
		return nil, err
	}
	agent, err := buildProgram(ctx, dir, "podidentityagent")
	if err != nil {
		return nil, err
	}
	images := []Image{{
		Ref: CredProbeImage, Entrypoint: []string{"/credprobe"},
		Files: []File{{Path: "/credprobe", Source: probe}, caFile},
	}}
	for _, ref := range podIdentityAgentImages {
		images = append(images, Image{
			Ref: ref, Entrypoint: []string{"/eks-pod-identity-agent"},
			Files: []File{
				{Path: "/eks-pod-identity-agent", Source: agent},
				{Path: "/go-runner", Link: "/eks-pod-identity-agent"},
				caFile,
			},
		})
	}
	return images, nil
}

// CredentialImageRefs are the references CredentialImages serves, for a
// test that checks them against what the catalogue renders.
func CredentialImageRefs() []string {
	return append([]string{CredProbeImage}, podIdentityAgentImages...)
}

// copyCABundle checks that caBundle holds PEM certificates and copies it
// into dir, where the registry program reads the images' files from
// (the caller's file may be gone by then).
func copyCABundle(dir, caBundle string) (string, error) {
	data, err := os.ReadFile(caBundle)
	if err != nil {
		return "", fmt.Errorf("nodetest: CA bundle: %w", err)
	}
	n := 0
	for rest := data; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("nodetest: CA bundle %s: a %s block, want only CERTIFICATE", caBundle, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("nodetest: CA bundle %s: %w", caBundle, err)
		}
	}
	if n == 0 {
		return "", fmt.Errorf("nodetest: CA bundle %s holds no PEM certificate", caBundle)
	}
	out := filepath.Join(dir, "ca-certificates.crt")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return "", fmt.Errorf("nodetest: CA bundle: %w", err)
	}
	return out, nil
}
