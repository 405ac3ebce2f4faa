package nodetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"text/template"
	"time"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// PauseImage is the sandbox image of every pod (containerd's
// sandbox_image): this package's pause program.
const PauseImage = "saltbush/pause:3.10"

func (n *Node) containerdSocket() string { return filepath.Join(n.dir, "containerd.sock") }

// containerdConfig is containerd 1.6's configuration (version 2) with
// everything under the node's directory, except what the version writes
// regardless (shim sockets under /run/containerd/s).
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
# Snapshotters this machine has no use for, and /opt/containerd.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = "{{.Socket}}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Pause}}"
  # The kubelet asks for oom_score_adj -998; root without
  # CAP_SYS_RESOURCE may not lower it, and every sandbox would fail.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.Dir}}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{.Dir}}/certs.d"
`))

// cniConfig is the pod network: a bridge with the node's pod range,
// the node's side the pods' gateway. No masquerading: nothing the pods
// may reach is outside the node's link.
var cniConfig = template.Must(template.New("cni").Parse(`{
  "cniVersion": "0.4.0",
  "name": "{{.Name}}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{.Dir}}/cni/ipam",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`))

func writeTemplate(t *template.Template, path string, data any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("nodetest: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("nodetest: %w", err)
	}
	if err := t.Execute(f, data); err != nil {
		_ = f.Close()
		return fmt.Errorf("nodetest: %s: %w", path, err)
	}
	return f.Close()
}

// startContainerd writes its configuration, the pod network and the
// registry configuration, starts it in the namespace and waits until its
// socket answers.
func (n *Node) startContainerd(ctx context.Context) error {
	data := map[string]string{
		"Dir": n.dir, "Socket": n.containerdSocket(), "Pause": PauseImage, "CNIBin": cniBinDir,
		"Name": n.name, "PodCIDR": n.net.PodCIDR.String(),
	}
	cfg := filepath.Join(n.dir, "containerd.toml")
	if err := writeTemplate(containerdConfig, cfg, data); err != nil {
		return err
	}
	if err := writeTemplate(cniConfig, filepath.Join(n.dir, "cni", "net.d", "10-"+n.name+".conflist"), data); err != nil {
		return err
	}
	if err := writeMirrorConfig(filepath.Join(n.dir, "certs.d"), n.registry.host); err != nil {
		return err
	}
	path, args := n.net.Argv("containerd", "--config", cfg)
	p, err := kubetest.StartProcess("containerd", path, args, filepath.Join(n.dir, "containerd.log"))
	if err != nil {
		return err
	}
	n.containerd = p
	return waitSocket(ctx, p, n.containerdSocket())
}

// waitSocket waits until a unix socket accepts, the process exits or
// ctx ends.
func waitSocket(ctx context.Context, p *kubetest.Process, sock string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodetest: %s does not answer on %s: %w; end of %s:\n%s", filepath.Base(p.LogPath()), sock, ctx.Err(), p.LogPath(), p.LogTail())
		case <-p.Done():
			return fmt.Errorf("nodetest: %w", p.ExitError())
		case <-tick.C:
		}
	}
}

// kubeletConfig is the KubeletConfiguration. Authentication and
// authorization are a cluster's (x509 clients of the cluster CA, tokens
// and permissions asked of the apiserver), so metrics-server, kubectl
// logs and exec are checked as on any cluster.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{{.NodeIP}}"
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "{{.CA}}"}
authorization:
  mode: Webhook
tlsCertFile: "{{.Cert}}"
tlsPrivateKeyFile: "{{.Key}}"
containerRuntimeEndpoint: "unix://{{.Socket}}"
imageServiceEndpoint: "unix://{{.Socket}}"
cgroupDriver: cgroupfs
cgroupRoot: "{{.Cgroup}}"
# A cgroup v1 host: supported still, with a warning.
failCgroupV1: false
failSwapOn: false
clusterDNS: ["{{.DNS}}"]
clusterDomain: cluster.local
resolvConf: "{{.Dir}}/resolv.conf"
podLogsDir: "{{.Dir}}/pod-logs"
# Test machines' disks are often mostly full: no disk pressure, and the
# images served to the node are never collected.
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
`))

// resolvConf is the node's resolver configuration, which pods with
// dnsPolicy Default (coredns, which forwards other names there) inherit:
// the node's own address, where nothing answers DNS. Names outside the
// cluster do not resolve, and no query leaves the node's namespace.
const resolvConfTemplate = "nameserver %s\n"

// startKubelet writes the kubelet's identity (a client certificate for
// system:node:NAME, a serving certificate of the cluster CA for the node's
// address) and configuration, and starts it in the namespace.
func (n *Node) startKubelet(dns net.IP) error {
	bin, err := kubetest.Binary("kubelet")
	if err != nil {
		return err
	}
	pki := filepath.Join(n.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return fmt.Errorf("nodetest: %w", err)
	}
	cert, key, err := n.cluster.ServingCert([]string{n.name}, []net.IP{n.net.NodeIP})
	if err != nil {
		return fmt.Errorf("nodetest: kubelet serving certificate: %w", err)
	}
	files := map[string][]byte{
		filepath.Join(pki, "ca.crt"):        n.cluster.CACert(),
		filepath.Join(pki, "kubelet.crt"):   cert,
		filepath.Join(pki, "kubelet.key"):   key,
		filepath.Join(n.dir, "resolv.conf"): []byte(fmt.Sprintf(resolvConfTemplate, n.net.NodeIP)),
	}
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return fmt.Errorf("nodetest: %w", err)
		}
	}
	cfg := filepath.Join(n.dir, "kubelet.yaml")
	if err := writeTemplate(kubeletConfig, cfg, map[string]string{
		"NodeIP": n.net.NodeIP.String(), "CA": filepath.Join(pki, "ca.crt"), "Cert": filepath.Join(pki, "kubelet.crt"),
		"Key": filepath.Join(pki, "kubelet.key"), "Socket": n.containerdSocket(), "Cgroup": n.cgroup,
		"DNS": dns.String(), "Dir": n.dir,
	}); err != nil {
		return err
	}
	kubeconfig := n.cluster.UserKubeconfig("system:node:"+n.name, "system:nodes")
	path, args := n.net.Argv(bin,
		"--config="+cfg,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--hostname-override="+n.name,
		"--node-ip="+n.net.NodeIP.String(),
	)
	n.kubelet, err = kubetest.StartProcess("kubelet", path, args, filepath.Join(n.dir, "kubelet.log"))
	return err
}

// kubeProxyConfig is the node's own kube-proxy's configuration. Conntrack
// limits are left as the kernel has them: they are the machine's, not the
// namespace's.
var kubeProxyConfig = template.Must(template.New("kube-proxy").Parse(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "{{.Kubeconfig}}"
hostnameOverride: "{{.Name}}"
mode: iptables
clusterCIDR: "{{.PodCIDR}}"
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`))

// startKubeProxy starts the node's own kube-proxy as user
// system:kube-proxy (which the bootstrap policy binds to
// system:node-proxier).
func (n *Node) startKubeProxy() error {
	bin, err := kubetest.Binary("kube-proxy")
	if err != nil {
		return err
	}
	cfg := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := writeTemplate(kubeProxyConfig, cfg, map[string]string{
		"Kubeconfig": n.cluster.UserKubeconfig("system:kube-proxy"), "Name": n.name, "PodCIDR": n.net.PodCIDR.String(),
	}); err != nil {
		return err
	}
	path, args := n.net.Argv(bin, "--config="+cfg)
	n.kubeProxy, err = kubetest.StartProcess("kube-proxy", path, args, filepath.Join(n.dir, "kube-proxy.log"))
	return err
}
