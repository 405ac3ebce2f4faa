package nodetest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WithdrawImage makes the image ref unavailable to the node, as when
// image garbage collection removed it and its registry no longer has it:
// the node's registry stops serving the tag and the node's containerd
// forgets every name of the image. Containers running it keep running; a
// new one cannot start until RestoreImage.
func (n *Node) WithdrawImage(ctx context.Context, ref string) error {
	dst, err := n.registry.tag(ref)
	if err != nil {
		return err
	}
	// The manifest is kept to be put back: its layers stay in the
	// registry, so RestoreImage builds and uploads nothing.
	desc, err := remote.Get(dst, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("nodetest: withdraw %s: %w", ref, err)
	}
	if err := remote.Delete(dst, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("nodetest: withdraw %s from the registry: %w", ref, err)
	}
	n.mu.Lock()
	n.withdrawn[ref] = desc
	n.mu.Unlock()
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Errorf("nodetest: image %q: %w", ref, err)
	}
	// The CRI plugin keeps an image under its tag, its repository
	// digest and its id: every name whose manifest digest is the tag's.
	list, err := n.ctr(ctx, "images", "ls")
	if err != nil {
		return err
	}
	var digest string
	names := map[string]string{}
	for _, line := range strings.Split(list, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		names[f[0]] = f[2]
		if f[0] == named.String() {
			digest = f[2]
		}
	}
	if digest == "" {
		return nil // never pulled
	}
	var gone []string
	for nm, d := range names {
		if d == digest {
			gone = append(gone, nm)
		}
	}
	slices.Sort(gone)
	if _, err := n.ctr(ctx, append([]string{"images", "rm"}, gone...)...); err != nil {
		return err
	}
	return nil
}

// RestoreImage serves ref again, as it was before WithdrawImage: the
// kubelet pulls it on its next try.
func (n *Node) RestoreImage(ctx context.Context, ref string) error {
	n.mu.Lock()
	desc := n.withdrawn[ref]
	n.mu.Unlock()
	if desc == nil {
		return fmt.Errorf("nodetest: %s was not withdrawn", ref)
	}
	dst, err := n.registry.tag(ref)
	if err != nil {
		return err
	}
	if err := remote.Put(dst, desc, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("nodetest: restore %s: %w", ref, err)
	}
	n.mu.Lock()
	delete(n.withdrawn, ref)
	n.mu.Unlock()
	return nil
}

// ctr runs containerd's ctr against the node's containerd, in the CRI
// plugin's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nodetest: ctr %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}
