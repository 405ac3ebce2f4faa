// Package kubetest runs a real Kubernetes control plane for tests: an
// embedded etcd, the kube-apiserver, kube-controller-manager and
// kube-scheduler binaries built by `make kube`, and one simulated part, a
// kubelet double that plays the nodes.
//
// Everything but the kubelet is the real program, so what a test sees
// (server-side apply conflicts, Deployment status, garbage collection,
// namespace deletion, the audit log) is what a cluster does. The kubelet
// double behaves as a kubelet does: a pod whose Secret volume is missing stays
// ContainerCreating, an image that cannot be pulled backs off, a crashing
// container restarts with a growing restart count (see Kubelet).
//
// A package's tests share one cluster per test binary:
//
//	func TestMain(m *testing.M) { kubetest.Main(m, kubetest.Options{}) }
//
//	func TestSomething(t *testing.T) {
//		c := kubetest.Shared(t)
//		client := kubernetes.NewForConfigOrDie(c.UserConfig("agent-a", "system:masters"))
//		...
//	}
//
// The binaries are found in $SALTBUSH_KUBE_BIN, else in bin/kube under the
// repository root (the Makefile's unit target sets the variable). When they
// are missing Start fails and says to run `make kube`; it never skips.
package kubetest
