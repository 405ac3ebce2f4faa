package nodetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// registry is the node's image registry: go-containerregistry's
// in-memory registry, served on the host end of the node's link, where
// the node's containerd pulls from as from a mirror.
type registry struct {
	host string // ip:port
	srv  *http.Server
	done chan struct{}
}

// startRegistry serves an empty registry on ip (port picked by the
// kernel).
func startRegistry(ip net.IP) (*registry, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("nodetest: registry: %w", err)
	}
	r := &registry{
		host: ln.Addr().String(),
		srv: &http.Server{
			Handler:           ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 30 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// push builds img and stores it under its repository path and tag.
func (r *registry) push(ctx context.Context, img Image) error {
	named, err := reference.ParseNormalizedNamed(img.Ref)
	if err != nil {
		return fmt.Errorf("nodetest: image %q: %w", img.Ref, err)
	}
	if reference.Domain(named) != defaultDomain() || reference.FamiliarString(named) != img.Ref {
		return fmt.Errorf("nodetest: image %q: only host-less names with a tag are served (the catalogue's form)", img.Ref)
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return fmt.Errorf("nodetest: image %q has no tag", img.Ref)
	}
	dst, err := name.NewTag(r.host+"/"+reference.Path(named)+":"+tagged.Tag(), name.Insecure)
	if err != nil {
		return fmt.Errorf("nodetest: image %q: %w", img.Ref, err)
	}
	built, err := img.build()
	if err != nil {
		return err
	}
	if err := remote.Write(dst, built, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("nodetest: push %s: %w", img.Ref, err)
	}
	return nil
}

// close stops serving.
func (r *registry) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = r.srv.Close()
	}
	<-r.done
}

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
