package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

// Options configure Start.
type Options struct {
	// Cluster is the control plane to join, started with RealNodes and
	// with Address set to Network.HostIP.
	Cluster *kubetest.Cluster
	// Network is the node's namespace (NewNetwork).
	Network *Network
	// Images are served to the node besides the pause image.
	Images []Image
	// ClusterDNS is the kubelet's cluster DNS address (the service
	// range's .10, where the coredns add-on puts its Service).
	ClusterDNS net.IP
	// KubeProxy runs the node's own kube-proxy; off, Services work only
	// once a kube-proxy add-on runs.
	KubeProxy bool
}

// Node is a running node. Stop it when done.
type Node struct {
	name    string
	dir     string
	net     *Network
	cluster *kubetest.Cluster
	cgroup  string
	client  kubernetes.Interface

	registry *registry
	stages   []Stage // the start's

	mu         sync.Mutex
	withdrawn  map[string]*remote.Descriptor // by image ref: WithdrawImage's
	containerd *kubetest.Process
	kubelet    *kubetest.Process
	kubeProxy  *kubetest.Process
}

// startTimeout bounds the wait for the node to be Ready once its programs
// run: generous, as two busy cores may be shared with other tests.
const startTimeout = 3 * time.Minute

// Start starts containerd, the kubelet and (with KubeProxy) kube-proxy in
// the network namespace and returns once the node is Ready. On failure
// the error quotes the failing program's log.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Cluster == nil || opts.Network == nil || opts.ClusterDNS == nil {
		return nil, errors.New("nodetest: Options.Cluster, Network and ClusterDNS are required")
	}
	if !opts.Cluster.Address().Equal(opts.Network.HostIP) {
		return nil, fmt.Errorf("nodetest: the apiserver is at %s, not on the node's link (%s): start it with kubetest.Options{Address: network.HostIP, RealNodes: true}",
			opts.Cluster.Address(), opts.Network.HostIP)
	}
	dir, err := os.MkdirTemp("", "nodetest-")
	if err != nil {
		return nil, fmt.Errorf("nodetest: %w", err)
	}
	n := &Node{
		name: opts.Network.Name, dir: dir, net: opts.Network, cluster: opts.Cluster,
		cgroup: "/" + opts.Network.Name, withdrawn: map[string]*remote.Descriptor{},
	}
	n.client, err = kubernetes.NewForConfig(opts.Cluster.Admin())
	if err != nil {
		return nil, fmt.Errorf("nodetest: %w", err)
	}
	started := false
	defer func() {
		if !started {
			n.Stop()
		}
	}()
	last := time.Now()
	stage := func(what string) {
		n.stages = append(n.stages, Stage{Name: what, Took: time.Since(last)})
		last = time.Now()
	}
	pause, err := buildPause(ctx, dir)
	if err != nil {
		return nil, err
	}
	stage("pause program")
	if n.registry, err = startRegistry(ctx, opts.Network.HostIP, dir, append([]Image{pause}, opts.Images...)); err != nil {
		return nil, err
	}
	stage("images built and pushed to the node's registry")
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	stage("containerd")
	// kube-proxy DaemonSets mount the node's /lib/modules (a plain
	// hostPath, which must exist); a machine without loadable modules may
	// have none. An empty one is what such a node has to offer.
	if err := os.MkdirAll("/lib/modules", 0o755); err != nil {
		return nil, fmt.Errorf("nodetest: %w", err)
	}
	if err := makeCgroupRoot(n.cgroup); err != nil {
		return nil, err
	}
	if err := n.startKubelet(opts.ClusterDNS); err != nil {
		return nil, err
	}
	if opts.KubeProxy {
		if err := n.startKubeProxy(); err != nil {
			return nil, err
		}
	}
	stage("kubelet and kube-proxy started")
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := n.waitReady(wctx); err != nil {
		return nil, err
	}
	stage("node Ready")
	started = true
	return n, nil
}

// Stages are the start's steps in order and how long each took.
func (n *Node) Stages() []Stage { return n.stages }

// Name is the node's name (its Node object's).
func (n *Node) Name() string { return n.name }

// Dir holds the node's files and the logs of its programs
// (containerd.log, kubelet.log, kube-proxy.log). Stop removes it.
func (n *Node) Dir() string { return n.dir }

// Network is the node's namespace.
func (n *Node) Network() *Network { return n.net }

// Alive returns an error quoting the log of the first of the node's
// programs that has exited, or nil.
func (n *Node) Alive() error {
	for _, p := range []*kubetest.Process{n.containerd, n.kubelet, n.kubeProxy} {
		if p == nil {
			continue
		}
		if exited, _ := p.Exited(); exited {
			return p.ExitError()
		}
	}
	return nil
}

// LogTails quotes the end of each program's log, for a failing test.
func (n *Node) LogTails() string {
	var b strings.Builder
	for _, p := range []*kubetest.Process{n.containerd, n.kubelet, n.kubeProxy} {
		if p != nil {
			fmt.Fprintf(&b, "end of %s:\n%s\n", p.LogPath(), p.LogTail())
		}
	}
	return b.String()
}

// waitReady polls the Node until its Ready condition is True, a program
// exits or ctx ends.
func (n *Node) waitReady(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := "not registered yet"
	for {
		if err := n.Alive(); err != nil {
			return fmt.Errorf("nodetest: %w", err)
		}
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case err == nil && nodeReady(node):
			return nil
		case err == nil:
			last = "not Ready: " + readyMessage(node)
		case !apierrors.IsNotFound(err):
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodetest: node %s %s: %w\n%s", n.name, last, ctx.Err(), n.LogTails())
		case <-tick.C:
		}
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyMessage(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition"
}

// drainTimeout bounds Stop's wait for the kubelet to stop the node's pods.
const drainTimeout = time.Minute

// Stop deletes the pods bound to the node and waits (bounded) for the
// kubelet to stop them, stops the programs, kills whatever is left in
// the node's cgroups, unmounts and removes the node's files and its Node
// object. The Network stays: the caller closes it. Later calls do nothing.
func (n *Node) Stop() {
	if n.dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if n.kubelet != nil && n.Alive() == nil {
		n.drain(ctx)
	}
	for _, p := range []*kubetest.Process{n.kubeProxy, n.kubelet} {
		if p != nil {
			p.Stop()
		}
	}
	killCgroupRoot(n.cgroup)
	n.killShims()
	if n.containerd != nil {
		n.containerd.Stop()
	}
	if n.registry != nil {
		n.registry.close()
	}
	unmountUnder(n.dir)
	n.removePodNetns()
	_ = removeCgroupRoot(n.cgroup)
	removeLeftovers(n.dir, n.name)
	_ = os.RemoveAll(n.dir)
	if n.client != nil {
		_ = n.client.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{})
	}
	n.dir = ""
}

// drain deletes every pod bound to the node at once and waits until the
// kubelet has stopped them (the apiserver forgets a pod only once its
// kubelet confirms it stopped), so that sandboxes, their network
// namespaces and their mounts are torn down by the runtime itself.
func (n *Node) drain(ctx context.Context) {
	pods := n.client.CoreV1().Pods(metav1.NamespaceAll)
	sel := fields.OneTermEqualSelector("spec.nodeName", n.name).String()
	list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return
	}
	grace := int64(1)
	for _, p := range list.Items {
		_ = n.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// killShims kills the containerd shims of this node (they outlive
// containerd by design); their command line names the node's socket.
func (n *Node) killShims() {
	sock := []byte(n.containerdSocket())
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmdline, []byte("containerd-shim")) || !bytes.Contains(cmdline, sock) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removePodNetns removes the pods' network namespaces containerd left in
// /run/netns (named cni-…, after a crash) that no process is in. Drained
// pods' namespaces are gone already; another node's, in use, are kept.
func (n *Node) removePodNetns() {
	inUse := map[uint64]bool{}
	links, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, l := range links {
		var st syscall.Stat_t
		if syscall.Stat(l, &st) == nil {
			inUse[st.Ino] = true
		}
	}
	files, _ := filepath.Glob(filepath.Join(netnsDir, "cni-*"))
	for _, f := range files {
		var st syscall.Stat_t
		if syscall.Stat(f, &st) != nil || inUse[st.Ino] {
			continue
		}
		if syscall.Unmount(f, syscall.MNT_DETACH) == nil {
			_ = os.Remove(f)
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first
// (the kubelet's volumes, containerd's snapshots and sandbox files).
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// removeLeftovers removes what these versions write outside their
// configured directories: libcni's result cache of the node's network and
// the kubelet's /var/log/containers links into dir.
func removeLeftovers(dir, network string) {
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", network+"-*"))
	for _, f := range cached {
		_ = os.Remove(f)
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
			_ = os.Remove(l)
		}
	}
}

// buildPause builds the pause program into dir and returns its image.
func buildPause(ctx context.Context, dir string) (Image, error) {
	bin, err := buildProgram(ctx, dir, "pause")
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: PauseImage, Files: []File{{Path: "/pause", Source: bin}}, Entrypoint: []string{"/pause"}}, nil
}

// buildProgram builds one of this package's programs (a static binary)
// into dir; the Go build cache makes it cheap after the first time.
func buildProgram(ctx context.Context, dir, program string) (string, error) {
	bin := filepath.Join(dir, program)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/saltbush/saltbush/tests/nodetest/"+program)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nodetest: build %s: %v\n%s", program, err, out)
	}
	return bin, nil
}
