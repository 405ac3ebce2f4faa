package nodetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// RequireEnv names the environment variable that makes a machine that
// cannot run a node fail the tests instead of skipping them; CI sets it
// (.ci/run), so the real-node tests never silently stop running there.
const RequireEnv = "SALTBUSH_REQUIRE_NODE"

// ServiceCIDR is the cluster's service range (kubetest's), and ClusterDNS
// its .10, where the coredns add-on puts its Service and where the node's
// kubelet points pods.
const ServiceCIDR = kubetest.ServiceClusterIPRange

// ClusterDNS is ServiceCIDR's .10.
var ClusterDNS = net.IPv4(10, 96, 0, 10).To4()

// MainOptions configure Main.
type MainOptions struct {
	// KubeProxy runs the node's own kube-proxy.
	KubeProxy bool
	// ExtraAPIServerArgs go to kubetest.Options.
	ExtraAPIServerArgs []string
	// PodCredentials puts a Front on the node's link whose issuer
	// (Front.Issuer) is the control plane's service-account issuer, and
	// serves the credential images (CredentialImages) trusting the front's
	// CA: pods then exchange their tokens at the saltbush a test puts
	// behind the front.
	PodCredentials bool
}

// Env is what Main (or StartEnv) started: a control plane and one real
// node, with the catalogue's images.
type Env struct {
	Cluster *kubetest.Cluster
	Node    *Node
	// Front is the saltbush front with MainOptions.PodCredentials.
	Front *Front
	// Stages are the start's steps in order and how long each took.
	Stages []Stage

	stop func()
}

// Stage is one step of StartEnv.
type Stage struct {
	Name string
	Took time.Duration
}

// Stop stops the node and the control plane and removes the network.
func (e *Env) Stop() { e.stop() }

// mainStartTimeout bounds Main's start: the images are built and the
// programs started on two cores that other test binaries share (about
// four minutes once, with three other packages' tests running beside).
const mainStartTimeout = 10 * time.Minute

// shared is the Env of this test binary, or why there is none. Like
// kubetest's, the package's only global state: TestMain cannot hand
// tests anything else.
var shared struct {
	mu      sync.Mutex
	env     *Env
	skipped string
}

// Main starts a control plane and a node for the test binary, runs its
// tests and stops them. Where the machine cannot run a node (Require) and
// RequireEnv is unset, the tests run and Shared skips each, saying why.
func Main(m *testing.M, opts MainOptions) {
	os.Exit(runMain(m, opts))
}

// RunTests is Main without the exit: it returns the tests' status, so a
// TestMain that set something up first can tear it down before exiting.
func RunTests(m *testing.M, opts MainOptions) int { return runMain(m, opts) }

func runMain(m *testing.M, opts MainOptions) int {
	if err := Require(); err != nil {
		if os.Getenv(RequireEnv) != "" {
			fmt.Fprintf(os.Stderr, "%v (%s is set: failing, not skipping)\n", err, RequireEnv)
			return 1
		}
		shared.mu.Lock()
		shared.skipped = err.Error()
		shared.mu.Unlock()
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
	defer cancel()
	began := time.Now()
	env, err := StartEnv(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	// The start is most of a real-node package's time; this says where
	// it goes.
	for _, st := range env.Stages {
		fmt.Fprintf(os.Stderr, "nodetest: %s in %s\n", st.Name, st.Took.Round(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "nodetest: started in %s\n", time.Since(began).Round(time.Millisecond))
	shared.mu.Lock()
	shared.env = env
	shared.mu.Unlock()
	return m.Run()
}

// StartEnv brings up the network, the control plane on its host end and
// the node, with the catalogue's images; Env.Stop undoes it in reverse.
// Main calls it for a test binary; a benchmark may call it on its own.
func StartEnv(ctx context.Context, opts MainOptions) (*Env, error) {
	env := &Env{}
	var undo []func()
	env.stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) (*Env, error) {
		env.stop()
		return nil, err
	}
	last := time.Now()
	stage := func(what string) {
		env.Stages = append(env.Stages, Stage{Name: what, Took: time.Since(last)})
		last = time.Now()
	}
	network, err := NewNetwork(ctx)
	if err != nil {
		return nil, err
	}
	undo = append(undo, network.Close)
	stage("network namespace")
	imgDir, err := os.MkdirTemp("", "nodetest-images-")
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = os.RemoveAll(imgDir) })
	kopts := kubetest.Options{Address: network.HostIP.String(), RealNodes: true, ExtraAPIServerArgs: opts.ExtraAPIServerArgs}
	if opts.PodCredentials {
		if env.Front, err = startFront(network.HostIP, imgDir); err != nil {
			return fail(err)
		}
		undo = append(undo, env.Front.close)
		kopts.ServiceAccountIssuer = env.Front.Issuer()
	}
	cluster, err := kubetest.Start(ctx, kopts)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, cluster.Stop)
	env.Cluster = cluster
	stage("control plane")
	images, err := CatalogImages(ctx, imgDir)
	if err != nil {
		return fail(err)
	}
	if opts.PodCredentials {
		creds, err := CredentialImages(ctx, imgDir, env.Front.CAFile())
		if err != nil {
			return fail(err)
		}
		images = append(images, creds...)
	}
	stage("probe program")
	node, err := Start(ctx, Options{Cluster: cluster, Network: network, Images: images, ClusterDNS: ClusterDNS, KubeProxy: opts.KubeProxy})
	if err != nil {
		return fail(err)
	}
	undo = append(undo, node.Stop)
	env.Node = node
	env.Stages = append(env.Stages, node.Stages()...)
	return env, nil
}

// Shared returns the Env Main started. It skips the test, saying why,
// where the machine cannot run a node, and fails it if the node's or the
// control plane's programs have exited.
func Shared(tb testing.TB) *Env {
	tb.Helper()
	shared.mu.Lock()
	env, skipped := shared.env, shared.skipped
	shared.mu.Unlock()
	if skipped != "" {
		tb.Skipf("%s (set %s to fail instead)", skipped, RequireEnv)
	}
	if env == nil {
		tb.Fatal("nodetest.Shared: no node: the package's TestMain must call nodetest.Main")
	}
	if err := env.Cluster.Alive(); err != nil {
		tb.Fatalf("nodetest.Shared: %v", err)
	}
	if err := env.Node.Alive(); err != nil {
		tb.Fatalf("nodetest.Shared: %v", err)
	}
	return env
}
