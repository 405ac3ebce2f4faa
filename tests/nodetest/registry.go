package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/nodetest/ociimage"
)

// registry is the node's image registry: go-containerregistry's
// in-memory registry, served on the host end of the node's link, where
// the node's containerd pulls from as from a mirror. It is a program of
// its own (./registry), built without the race detector.
type registry struct {
	host string // ip:port
	proc *kubetest.Process
}

// registryStartTimeout bounds building and storing the images: a few
// seconds alone, more on two cores other tests share.
const registryStartTimeout = 3 * time.Minute

// startRegistry builds the registry program into dir and starts it on ip
// (port picked by the kernel) with images; it returns once every image
// is served.
func startRegistry(ctx context.Context, ip net.IP, dir string, images []Image) (*registry, error) {
	var entries []ociimage.Entry
	for _, img := range images {
		target, err := repositoryTag(img.Ref)
		if err != nil {
			return nil, err
		}
		entries = append(entries, ociimage.Entry{Target: target, Image: img})
	}
	spec, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("nodetest: registry: %w", err)
	}
	specFile, ready := filepath.Join(dir, "registry-images.json"), filepath.Join(dir, "registry-address")
	if err := os.WriteFile(specFile, spec, 0o644); err != nil {
		return nil, fmt.Errorf("nodetest: registry: %w", err)
	}
	bin, err := buildProgram(ctx, dir, "registry")
	if err != nil {
		return nil, err
	}
	p, err := kubetest.StartProcess("registry", bin, []string{"-listen", net.JoinHostPort(ip.String(), "0"),
		"-images", specFile, "-ready", ready}, filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, registryStartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr, err := os.ReadFile(ready); err == nil {
			return &registry{host: string(addr), proc: p}, nil
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return nil, fmt.Errorf("nodetest: the registry stored no images in time: %w; end of its log:\n%s", ctx.Err(), p.LogTail())
		case <-p.Done():
			return nil, fmt.Errorf("nodetest: registry: %w; end of its log:\n%s", p.ExitError(), p.LogTail())
		case <-tick.C:
		}
	}
}

// repositoryTag is where the registry keeps ref: its repository path and
// tag. Only the catalogue's form is served: a host-less name with a tag.
func repositoryTag(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("nodetest: image %q: %w", ref, err)
	}
	tagged, ok := named.(reference.Tagged)
	if reference.Domain(named) != defaultDomain() || reference.FamiliarString(named) != ref || !ok {
		return "", fmt.Errorf("nodetest: image %q: only host-less names with a tag are served (the catalogue's form)", ref)
	}
	return reference.Path(named) + ":" + tagged.Tag(), nil
}

// tag is where the registry serves ref.
func (r *registry) tag(ref string) (name.Tag, error) {
	target, err := repositoryTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(r.host+"/"+target, name.Insecure)
}

// close stops serving.
func (r *registry) close() { r.proc.Stop() }

// defaultDomain is the registry host a host-less image name stands for,
// as containerd normalizes names (the same library's answer).
func defaultDomain() string {
	named, err := reference.ParseNormalizedNamed("pause")
	if err != nil {
		panic(err) // a constant name
	}
	return reference.Domain(named)
}

// writeMirrorConfig writes containerd's registry host configuration: the
// default domain is served by the registry and nothing else, so a pull of
// an image the test did not build fails at once, on loopback's
// equivalent, and never leaves the machine.
func writeMirrorConfig(dir, registryHost string) error {
	d := filepath.Join(dir, defaultDomain())
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("nodetest: %w", err)
	}
	url := "http://" + registryHost
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", url, url)
	if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("nodetest: %w", err)
	}
	return nil
}
