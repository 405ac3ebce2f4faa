package nodetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// maxNetworks bounds the networks one machine holds at once: network i
// uses the link 10.254.i.0/30 and the pod range 10.244.i.0/24. They are
// addresses of the test's own namespaces, never of another machine.
const maxNetworks = 64

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// Network is a network namespace of the test's own for one node, linked to
// the host by a veth pair. Close removes it (and with it the link and the
// host's route to the pods).
type Network struct {
	// Name is the namespace's name under /run/netns.
	Name string
	// HostIP is the host end of the link: give it to the apiserver
	// (kubetest.Options.Address) and to anything the node must reach.
	HostIP net.IP
	// NodeIP is the node end: the node's InternalIP.
	NodeIP net.IP
	// PodCIDR is the range the node's pods get addresses from.
	PodCIDR *net.IPNet

	hostLink string
}

// NewNetwork creates a namespace with the first free index: the namespace
// saltbush-node-i, the host link sbnode-i, the node's eth0, a route on the
// host for the pod range, and forwarding and bridge netfilter turned on
// inside the namespace only.
func NewNetwork(ctx context.Context) (*Network, error) {
	if err := Require(); err != nil {
		return nil, err
	}
	for i := range maxNetworks {
		n := &Network{
			Name:     fmt.Sprintf("saltbush-node-%d", i),
			HostIP:   net.IPv4(10, 254, byte(i), 1).To4(),
			NodeIP:   net.IPv4(10, 254, byte(i), 2).To4(),
			PodCIDR:  &net.IPNet{IP: net.IPv4(10, 244, byte(i), 0).To4(), Mask: net.CIDRMask(24, 32)},
			hostLink: fmt.Sprintf("sbnode-%d", i),
		}
		if _, err := os.Stat(n.Path()); err == nil {
			continue // another test's, or a crashed one's: see Sweep
		}
		if _, err := net.InterfaceByName(n.hostLink); err == nil {
			continue
		}
		if err := run(ctx, "ip", "netns", "add", n.Name); err != nil {
			if _, statErr := os.Stat(n.Path()); statErr == nil {
				continue // lost a race for this index
			}
			return nil, err
		}
		if err := n.setUp(ctx); err != nil {
			n.Close()
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("nodetest: all %d network namespaces saltbush-node-N are taken (see Sweep)", maxNetworks)
}

func (n *Network) setUp(ctx context.Context) error {
	hostCIDR := n.HostIP.String() + "/30"
	nodeCIDR := n.NodeIP.String() + "/30"
	steps := [][]string{
		{"ip", "link", "add", n.hostLink, "type", "veth", "peer", "name", "eth0", "netns", n.Name},
		{"ip", "addr", "add", hostCIDR, "dev", n.hostLink},
		{"ip", "link", "set", n.hostLink, "up"},
		{"ip", "-n", n.Name, "link", "set", "lo", "up"},
		{"ip", "-n", n.Name, "addr", "add", nodeCIDR, "dev", "eth0"},
		{"ip", "-n", n.Name, "link", "set", "eth0", "up"},
		// The pods' range is behind the node: the apiserver reaches
		// aggregated APIs and webhooks at pod addresses.
		{"ip", "route", "add", n.PodCIDR.String(), "via", n.NodeIP.String(), "dev", n.hostLink},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	// Inside the namespace only: /proc/sys/net is the opener's namespace's.
	for _, knob := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"} {
		if err := n.Run(ctx, "sh", "-c", "echo 1 > /proc/sys/"+knob); err != nil {
			return fmt.Errorf("nodetest: %s in %s: %w", knob, n.Name, err)
		}
	}
	return nil
}

// Path is the namespace's file, for nsenter --net.
func (n *Network) Path() string { return filepath.Join(netnsDir, n.Name) }

// Command returns a command that runs name inside the namespace. nsenter
// execs it in place, so its pid, signals and parent-death signal are the
// program's own. (Not `ip netns exec`: it remounts /sys, hiding the cgroup
// hierarchies from the kubelet.)
func (n *Network) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)...)
}

// Argv is Command's argument vector, for kubetest.StartProcess.
func (n *Network) Argv(name string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)
}

// Run runs a command inside the namespace and returns its error with its
// output.
func (n *Network) Run(ctx context.Context, name string, args ...string) error {
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close deletes the namespace; the veth pair and the host's route go with
// it. Processes still inside keep it alive until they exit: stop the node
// first.
func (n *Network) Close() {
	ctx := context.Background()
	_ = run(ctx, "ip", "netns", "delete", n.Name)
	// A host link left by a namespace that outlived its file.
	if _, err := net.InterfaceByName(n.hostLink); err == nil {
		_ = run(ctx, "ip", "link", "delete", n.hostLink)
	}
}

// run runs a program and returns its error with its output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Require reports why this machine cannot run a node, or nil: root, the
// programs a node runs, and the kernel features it uses.
func Require() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (network namespaces, mounts, cgroups)")
	}
	for _, p := range []string{"ip", "nsenter", "iptables", "containerd", "runc"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p+" (Debian packages iproute2, util-linux, iptables, containerd, runc)")
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p)+" (Debian package containernetworking-plugins)")
		}
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "overlay") {
		missing = append(missing, "overlayfs in the kernel")
	}
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil && os.Geteuid() == 0 {
		// br_netfilter shows itself only once loaded; a bridge made in a
		// namespace loads it where modules can load, so this is a hint.
		missing = append(missing, "br_netfilter (/proc/sys/net/bridge)")
	}
	if len(cgroupV1Hierarchies()) == 0 {
		missing = append(missing, "cgroup v1 hierarchies under /sys/fs/cgroup (the kubelet runs with the cgroupfs driver)")
	}
	if len(missing) > 0 {
		return errors.New("nodetest: this machine cannot run a real node; missing: " + strings.Join(missing, "; "))
	}
	return nil
}
