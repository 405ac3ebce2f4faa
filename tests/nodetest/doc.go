// Package nodetest runs a real Kubernetes node for tests: Debian's
// containerd, runc and CNI plugins, and the kubelet and kube-proxy that
// `make kube` builds from the pinned k8s.io/kubernetes, joined to a
// tests/kubetest control plane. Pods really run: their images are built
// locally from Go modules (`make node`: coredns, metrics-server; kube-proxy
// from the pinned Kubernetes; a pause program of this package) and served
// to the node's containerd by the registry program of this package (run
// apart from the test binary, so the race detector does not slow its
// hundreds of megabytes down), which the node's registry configuration
// puts in place of the host the catalogue's host-less image names stand
// for, as an operator's mirror would. Nothing is pulled from elsewhere.
// WithdrawImage and RestoreImage take an image away from the node and
// give it back, as image garbage collection and a registry outage would.
//
// The node lives in a network namespace of its own (NewNetwork), linked to
// the host by a veth pair: the host end carries the apiserver's address
// (kubetest.Options.Address), the node end the node's, and the host routes
// the node's pod range to it. The namespace has no default route, so no
// packet of the node or its pods can leave the machine; the host does not
// forward. containerd, the kubelet and kube-proxy run inside it (entered
// with nsenter), so host-network pods share the node's network, not the
// test machine's.
//
// A node needs root and these kernel features: network namespaces, veth,
// bridge, br_netfilter, overlayfs and iptables (nf_tables); and cgroup v1
// hierarchies (the kubelet runs with the cgroupfs driver under a cgroup of
// its own). Require says why a machine cannot run one; the tests that need
// a node fail (never skip) in CI, where SALTBUSH_REQUIRE_NODE is set.
//
// Settings the machine needs (each found by a failure): containerd's
// restrict_oom_score_adj (root here may lack CAP_SYS_RESOURCE, and the
// kubelet asks for oom_score_adj -998), the kubelet's failCgroupV1: false
// on a cgroup v1 host, low eviction thresholds and no image garbage
// collection (test machines' disks are often mostly full), the apiserver
// reaching kubelets by address with a client certificate and aggregated
// APIs with the aggregation layer's (kubetest.Options.RealNodes), and
// conntrack limits left alone by kube-proxy (the kernel refuses to change
// them outside its initial network namespace).
package nodetest
