package kubetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
)

// The cluster's fixed network and identity settings.
const (
	// ServiceClusterIPRange is the range Services get cluster IPs from.
	ServiceClusterIPRange = "10.96.0.0/16"
	// KubernetesServiceIP is the cluster IP of the default/kubernetes
	// Service (the first of the range); the serving certificate names it.
	KubernetesServiceIP = "10.96.0.1"
	// ServiceAccountIssuer is the issuer of service-account tokens.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// AdminUser is the user name of Admin's certificate (group
	// system:masters).
	AdminUser = "kubetest-admin"
)

// maxNodes bounds Options.Nodes: node i gets the addresses 10.0.0.i and
// 10.244.i.0/24.
const maxNodes = 200

// Options configure Start.
type Options struct {
	// Nodes is the number of nodes the kubelet double plays; 1 when zero.
	Nodes int
	// ExtraAPIServerArgs are appended to the kube-apiserver's flags, e.g. to
	// add authentication or authorization webhooks. A later scalar flag
	// overrides an earlier one; list flags append. If they set
	// --authorization-mode or --authorization-config, the default
	// --authorization-mode=Node,RBAC is left out (keep Node and RBAC in
	// yours: the kubelet double and the controllers rely on them).
	ExtraAPIServerArgs []string
	// Address is the IP address the kube-apiserver binds and advertises;
	// 127.0.0.1 when "". A test whose real nodes live in a network
	// namespace of its own gives the host's address on their link, so that
	// kubelets and pods (through the kubernetes Service, whose endpoint it
	// becomes) reach the apiserver.
	Address string
	// RealNodes leaves the kubelet double out: the test joins real
	// kubelets (tests/nodetest) and Start does not wait for nodes. The
	// apiserver then reaches aggregated APIs and webhooks at their pods'
	// addresses rather than at Service IPs (which only the nodes route),
	// and authenticates to kubelets with a client certificate.
	RealNodes bool
	// ServiceAccountIssuer replaces ServiceAccountIssuer as the issuer of
	// the cluster's service-account tokens, and its JWKS URI is the
	// issuer's /keys, as saltbush hosts a cluster's issuer
	// (images/k3s/oidc.yaml.example sets K3s so).
	ServiceAccountIssuer string
}

// Cluster is a running control plane: embedded etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and the kubelet double. Its
// methods may be called from concurrent tests.
type Cluster struct {
	dir      string
	host     string
	address  net.IP
	ca       *certificateAuthority
	auditLog string

	etcd              *embedetcd.Server
	etcdLog           *os.File
	apiServer         *Process
	controllerManager *Process
	scheduler         *Process
	kubelet           *Kubelet

	admin           *rest.Config
	adminKubeconfig string

	mu            sync.Mutex // guards kubeconfigSeq
	kubeconfigSeq int

	// gcProbing and gcProven are waitReady's garbage collector probe
	// (only its goroutine touches them).
	gcProbing, gcProven bool

	stopOnce sync.Once

	// What the apiserver was started with, for a restart
	// (RotateServiceAccountKey): the issuer, binaries, PKI files, extra
	// flags and the port it serves on.
	issuer string
	binDir string
	files  pkiFiles
	extra  []string
	port   *loopport.Reservation
}

// Start starts a cluster in a new temporary directory and returns once it
// serves: /readyz answers 200, the controller manager has created the
// default ServiceAccount in namespace default and every node of the kubelet
// double is Ready and untainted. ctx bounds the start; Stop the cluster when
// done. On failure the error quotes the end of the failing program's log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Nodes < 0 || opts.Nodes > maxNodes {
		return nil, fmt.Errorf("kubetest: Options.Nodes %d out of range 1..%d", opts.Nodes, maxNodes)
	}
	binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: temporary directory: %w", err)
	}
	c := &Cluster{dir: dir, auditLog: filepath.Join(dir, "audit.log"), issuer: opts.ServiceAccountIssuer}
	if c.issuer == "" {
		c.issuer = ServiceAccountIssuer
	}
	started := false
	defer func() {
		if !started {
			c.Stop()
		}
	}()

	if err := c.startEtcd(ctx); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	address := net.ParseIP(opts.Address)
	if opts.Address == "" {
		address = net.IPv4(127, 0, 0, 1)
	}
	if address == nil {
		return nil, fmt.Errorf("kubetest: Options.Address %q is not an IP address", opts.Address)
	}
	c.address = address
	files, err := c.writePKI()
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	extra := opts.ExtraAPIServerArgs
	if opts.RealNodes {
		extra = append(slices.Clone(extra), realNodeArgs(files)...)
	}
	c.binDir, c.files, c.extra = binDir, files, extra
	if err := c.startAPIServer(ctx, binDir, files, extra); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if err := c.startControllers(binDir, files); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if !opts.RealNodes {
		c.kubelet, err = startKubelet(ctx, c, opts.Nodes)
		if err != nil {
			return nil, fmt.Errorf("kubetest: kubelet double: %w", err)
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	started = true
	return c, nil
}

// startEtcd starts the embedded etcd, its log going to etcd.log (not the
// test's output).
func (c *Cluster) startEtcd(ctx context.Context) error {
	logFile, err := os.OpenFile(filepath.Join(c.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcd log: %w", err)
	}
	c.etcdLog = logFile
	logger := zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logFile), zap.InfoLevel))
	c.etcd, err = embedetcd.Start(ctx, embedetcd.Config{
		Dir:             filepath.Join(c.dir, "etcd"),
		UnsafeNoFsync:   true,
		ElectionTimeout: 100 * time.Millisecond,
		Logger:          logger,
	})
	return err
}

// pkiFiles are the paths of the key material the programs read.
type pkiFiles struct {
	caCert, servingCert, servingKey, saKey, saPub string
	// kubeletClientCert and kubeletClientKey are the apiserver's identity
	// towards real kubelets (logs, exec, port-forward).
	kubeletClientCert, kubeletClientKey string
	// frontProxyCA, proxyClientCert and proxyClientKey are the aggregation
	// layer's: the apiserver authenticates to aggregated API servers
	// (metrics-server) with the client certificate, and they trust the
	// user it names in request headers because the front-proxy CA
	// (published in kube-system/extension-apiserver-authentication)
	// signed it.
	frontProxyCA, proxyClientCert, proxyClientKey string
}

// writePKI generates the CA, the serving certificate, the service-account
// key pair and the admin identity, and writes the files the programs read.
func (c *Cluster) writePKI() (pkiFiles, error) {
	pkiDir := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return pkiFiles{}, fmt.Errorf("pki directory: %w", err)
	}
	ca, err := newCertificateAuthority()
	if err != nil {
		return pkiFiles{}, err
	}
	c.ca = ca
	servingCert, servingKey, err := ca.servingCert(
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		uniqueIPs(net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP), c.address),
	)
	if err != nil {
		return pkiFiles{}, err
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		return pkiFiles{}, err
	}
	// As kubeadm's apiserver-kubelet-client certificate: group
	// system:masters, so the kubelets' webhook authorization allows it.
	kubeletClientCert, kubeletClientKey, err := ca.clientCert(KubeletClientUser, []string{"system:masters"})
	if err != nil {
		return pkiFiles{}, err
	}
	// A CA of its own, as kubeadm's front-proxy-ca: whoever holds a
	// certificate it signed may assert any user in headers.
	frontProxy, err := newCertificateAuthority()
	if err != nil {
		return pkiFiles{}, err
	}
	proxyClientCert, proxyClientKey, err := frontProxy.clientCert(frontProxyClientUser, nil)
	if err != nil {
		return pkiFiles{}, err
	}
	f := pkiFiles{
		caCert:            filepath.Join(pkiDir, "ca.crt"),
		servingCert:       filepath.Join(pkiDir, "apiserver.crt"),
		servingKey:        filepath.Join(pkiDir, "apiserver.key"),
		saKey:             filepath.Join(pkiDir, "sa.key"),
		saPub:             filepath.Join(pkiDir, "sa.pub"),
		kubeletClientCert: filepath.Join(pkiDir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(pkiDir, "apiserver-kubelet-client.key"),
		frontProxyCA:      filepath.Join(pkiDir, "front-proxy-ca.crt"),
		proxyClientCert:   filepath.Join(pkiDir, "front-proxy-client.crt"),
		proxyClientKey:    filepath.Join(pkiDir, "front-proxy-client.key"),
	}
	for path, data := range map[string][]byte{
		f.caCert: ca.certPEM, f.servingCert: servingCert, f.servingKey: servingKey, f.saKey: saKey, f.saPub: saPub,
		f.kubeletClientCert: kubeletClientCert, f.kubeletClientKey: kubeletClientKey,
		f.frontProxyCA: frontProxy.certPEM, f.proxyClientCert: proxyClientCert, f.proxyClientKey: proxyClientKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return pkiFiles{}, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return f, nil
}

// startAPIServer starts the kube-apiserver and waits for /readyz. Its
// port is reserved for the cluster's life (package loopport), so that a
// restart finds it free.
func (c *Cluster) startAPIServer(ctx context.Context, binDir string, f pkiFiles, extra []string) error {
	policy := filepath.Join(c.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	if c.port == nil {
		port, err := loopport.Reserve(c.address.String())
		if err != nil {
			return err
		}
		c.port = port
	}
	c.host = "https://" + c.port.Addr()
	c.admin = c.UserConfig(AdminUser, "system:masters")
	args := []string{
		"--etcd-servers=" + strings.Join(c.etcd.Endpoints(), ","),
		"--bind-address=" + c.address.String(),
		"--advertise-address=" + c.address.String(),
	}
	if c.address.IsLoopback() {
		// A loopback address cannot be an endpoint of the kubernetes
		// Service; the Service is still created, with no endpoints
		// (nothing in the cluster has a network to reach them).
		args = append(args, "--endpoint-reconciler-type=none")
	}
	args = append(args,
		"--secure-port="+strconv.Itoa(c.port.Port()),
		"--tls-cert-file="+f.servingCert,
		"--tls-private-key-file="+f.servingKey,
		"--client-ca-file="+f.caCert,
		"--service-account-issuer="+c.issuer,
		"--service-account-key-file="+f.saPub,
		"--service-account-signing-key-file="+f.saKey,
		"--service-cluster-ip-range="+ServiceClusterIPRange,
		// kube-proxy and CNI DaemonSets run privileged.
		"--allow-privileged=true",
		"--audit-log-path="+c.auditLog,
		"--audit-log-format=json",
		"--audit-policy-file="+policy,
		// Blocking: a write's event is in the log before its response
		// is sent, so a test may read the log right after a call.
		"--audit-log-mode=blocking",
		"--profiling=false",
		// Its own serving certificates would go to /var/run/kubernetes.
		"--cert-dir="+filepath.Join(c.dir, "pki"),
	)
	// The caller's authorization settings replace the default rather
	// than add to it: --authorization-mode is a list flag (a second one
	// appends), and --authorization-config may not be combined with it.
	if !hasFlag(extra, "--authorization-mode") && !hasFlag(extra, "--authorization-config") {
		args = append(args, "--authorization-mode=Node,RBAC")
	}
	if c.issuer != ServiceAccountIssuer {
		args = append(args, "--service-account-jwks-uri="+c.issuer+"/keys")
	}
	args = append(args, extra...)
	p, err := StartProcess(apiServerBinary, filepath.Join(binDir, apiServerBinary), args, filepath.Join(c.dir, apiServerBinary+".log"))
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, p); err != nil {
		p.Stop()
		return err
	}
	c.apiServer = p
	return nil
}

// RotateServiceAccountKey gives the apiserver a new service-account key
// pair and restarts it on the same address: tokens are signed with the new
// key, and the old one is no longer published or accepted (the end of a
// rotation, where the old key is rotated out). ctx bounds the restart.
func (c *Cluster) RotateServiceAccountKey(ctx context.Context) error {
	key, pub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	c.apiServer.Stop()
	for path, data := range map[string][]byte{c.files.saKey: key, c.files.saPub: pub} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("kubetest: write %s: %w", path, err)
		}
	}
	if err := c.startAPIServer(ctx, c.binDir, c.files, c.extra); err != nil {
		return fmt.Errorf("kubetest: restart the apiserver: %w", err)
	}
	return nil
}

// hasFlag reports whether args set flag (as "--flag=v" or "--flag v").
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// waitAPIServer polls /readyz until it answers 200, the process exits or
// ctx ends.
func (c *Cluster) waitAPIServer(ctx context.Context, p *Process) error {
	hc, err := rest.HTTPClientFor(c.admin)
	if err != nil {
		return fmt.Errorf("readyz client: %w", err)
	}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready (%s): %w; end of %s:\n%s", last, ctx.Err(), p.logPath, p.LogTail())
		case <-p.done:
			return p.ExitError()
		case <-tick.C:
		}
		ok, status := c.readyz(ctx, hc)
		if ok {
			return nil
		}
		last = status
	}
}

// readyz asks /readyz once; it reports whether the answer was 200, and
// what it was otherwise.
func (c *Cluster) readyz(ctx context.Context, hc *http.Client) (bool, string) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, c.host+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, "/readyz: " + err.Error()
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "/readyz: " + resp.Status
	}
	return true, ""
}

// startControllers starts the controller manager and the scheduler, each
// with the identity the bootstrap RBAC policy grants its permissions to.
func (c *Cluster) startControllers(binDir string, f pkiFiles) error {
	kcmConfig, err := c.writeKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	c.controllerManager, err = StartProcess(controllerManagerBinary, filepath.Join(binDir, controllerManagerBinary), []string{
		"--kubeconfig=" + kcmConfig,
		"--leader-elect=false",
		// No serving: nothing scrapes its metrics or probes its health.
		"--secure-port=0",
		// Each controller gets its own service account (as kubeadm sets
		// it up), so the audit log names the controller that wrote.
		"--use-service-account-credentials=true",
		// The token controller runs only with a signing key.
		"--service-account-private-key-file=" + f.saKey,
		// Published in every namespace as the kube-root-ca.crt ConfigMap.
		"--root-ca-file=" + f.caCert,
		"--profiling=false",
	}, filepath.Join(c.dir, controllerManagerBinary+".log"))
	if err != nil {
		return err
	}
	schedConfig, err := c.writeKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	c.scheduler, err = StartProcess(schedulerBinary, filepath.Join(binDir, schedulerBinary), []string{
		"--kubeconfig=" + schedConfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
	}, filepath.Join(c.dir, schedulerBinary+".log"))
	return err
}

// waitReady waits until the controller manager has created the default
// ServiceAccount (its controllers run) and every node is Ready without the
// not-ready taint (pods can be scheduled), or a program exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(c.Admin())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.processesAlive(); err != nil {
			return err
		}
		waiting := c.notReady(ctx, client)
		if waiting == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %s: %w; end of %s:\n%s\nend of %s:\n%s", waiting, ctx.Err(),
				c.controllerManager.logPath, c.controllerManager.LogTail(), c.scheduler.logPath, c.scheduler.LogTail())
		case <-tick.C:
		}
	}
}

// notReady returns what the cluster still waits for, or "" when ready.
func (c *Cluster) notReady(ctx context.Context, client kubernetes.Interface) string {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(rctx, "default", metav1.GetOptions{}); err != nil {
		return "ServiceAccount default/default: " + err.Error()
	}
	if why := c.garbageCollectorWorks(rctx, client); why != "" {
		return why
	}
	if c.kubelet == nil {
		return "" // real nodes join later; the caller waits for them
	}
	for _, name := range c.kubelet.NodeNames() {
		node, err := client.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
		if err != nil {
			return "Node " + name + ": " + err.Error()
		}
		if !nodeReady(node) {
			return "Node " + name + " not Ready"
		}
		for _, taint := range node.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				return "Node " + name + " still has taint " + taint.Key
			}
		}
	}
	return ""
}

// garbageCollectorWorks proves that the controller manager's garbage
// collector has synced and acts: a parent ConfigMap deleted in the
// foreground is gone only once the collector has deleted its child.
// Until then deletions (of Deployments, of namespaces' content) wait, and
// the first test would pay for the collector's start. "" once proven.
func (c *Cluster) garbageCollectorWorks(ctx context.Context, client kubernetes.Interface) string {
	if c.gcProven {
		return ""
	}
	cms := client.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	const parent, child = "kubetest-gc-parent", "kubetest-gc-child"
	if !c.gcProbing {
		p, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: parent}}, metav1.CreateOptions{})
		if err != nil {
			return "garbage collector probe: " + err.Error()
		}
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: child, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: parent, UID: p.UID}}}}, metav1.CreateOptions{})
		if err != nil {
			return "garbage collector probe: " + err.Error()
		}
		fg := metav1.DeletePropagationForeground
		if err := cms.Delete(ctx, parent, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			return "garbage collector probe: " + err.Error()
		}
		c.gcProbing = true
	}
	if _, err := cms.Get(ctx, parent, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return "the garbage collector has not finished a foreground deletion yet"
	}
	c.gcProven = true
	return ""
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Alive returns an error quoting the log of the first control-plane
// program that has exited, or nil.
func (c *Cluster) Alive() error { return c.processesAlive() }

// processesAlive returns an error quoting the log of the first program
// that has exited.
func (c *Cluster) processesAlive() error {
	for _, p := range []*Process{c.apiServer, c.controllerManager, c.scheduler} {
		if p == nil {
			continue
		}
		if exited, _ := p.Exited(); exited {
			return p.ExitError()
		}
	}
	return nil
}

// Stop stops the kubelet double, the programs (SIGTERM, then SIGKILL after
// a bound) and etcd, and removes the cluster's directory. Later calls do
// nothing.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.kubelet != nil {
			c.kubelet.stop()
		}
		// Controllers first, so they do not log the apiserver going away.
		var wg sync.WaitGroup
		for _, p := range []*Process{c.controllerManager, c.scheduler} {
			if p != nil {
				wg.Go(p.Stop)
			}
		}
		wg.Wait()
		if c.apiServer != nil {
			c.apiServer.Stop()
		}
		if c.port != nil {
			c.port.Release()
		}
		if c.etcd != nil {
			c.etcd.Close()
		}
		if c.etcdLog != nil {
			_ = c.etcdLog.Close()
		}
		_ = os.RemoveAll(c.dir)
	})
}

// realNodeArgs are the apiserver flags real kubelets need (Options.RealNodes).
func realNodeArgs(f pkiFiles) []string {
	return []string{
		// Aggregated APIs (metrics.k8s.io) and admission webhooks are
		// reached at their endpoints' pod addresses, which the host routes
		// to the nodes' namespace. The default, the Service's cluster IP,
		// means something only where kube-proxy runs: on the host it would
		// follow the default route off the machine.
		"--enable-aggregator-routing=true",
		// kubectl logs and exec: the node's address, never a DNS lookup of
		// its name.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--kubelet-client-certificate=" + f.kubeletClientCert,
		"--kubelet-client-key=" + f.kubeletClientKey,
		// The aggregation layer, as every real cluster has it: without
		// it, aggregated API servers see anonymous requests and refuse
		// them (the metrics API's discovery answers 403).
		"--requestheader-client-ca-file=" + f.frontProxyCA,
		"--requestheader-allowed-names=" + frontProxyClientUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.proxyClientCert,
		"--proxy-client-key-file=" + f.proxyClientKey,
	}
}

// frontProxyClientUser is the common name of the aggregation layer's
// client certificate.
const frontProxyClientUser = "front-proxy-client"

// uniqueIPs is ips without duplicates, in order.
func uniqueIPs(ips ...net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if !slices.ContainsFunc(out, ip.Equal) {
			out = append(out, ip)
		}
	}
	return out
}

// Host is the apiserver's URL (https://ADDRESS:port).
func (c *Cluster) Host() string { return c.host }

// Dir is the cluster's directory: logs of each program
// (kube-apiserver.log, ...), etcd.log, kubelet-double.log, the audit log, the PKI and
// the kubeconfigs written. Stop removes it.
func (c *Cluster) Dir() string { return c.dir }

// CACert is the PEM certificate of the cluster CA, which signs the
// apiserver's serving certificate and every client certificate.
func (c *Cluster) CACert() []byte { return append([]byte(nil), c.ca.certPEM...) }

// Kubelet is the kubelet double that plays the cluster's nodes; nil with
// Options.RealNodes.
func (c *Cluster) Kubelet() *Kubelet { return c.kubelet }

// Address is the IP address the apiserver binds and advertises.
func (c *Cluster) Address() net.IP { return slices.Clone(c.address) }

// KubeletClientUser is the user the apiserver presents to real kubelets.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// ServingCert returns a new serving certificate and key signed by the
// cluster CA for the given names and addresses (PEM): a real kubelet's, so
// that whatever trusts the cluster CA (metrics-server through its
// in-cluster CA bundle) can verify it.
func (c *Cluster) ServingCert(dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return c.ca.servingCert(dnsNames, ips)
}

// Admin returns a config for the admin user (AdminUser, group
// system:masters); each call returns a copy the caller may change.
func (c *Cluster) Admin() *rest.Config { return rest.CopyConfig(c.admin) }

// AdminKubeconfig returns the path of a kubeconfig for the admin user.
func (c *Cluster) AdminKubeconfig() string {
	c.mu.Lock()
	path := c.adminKubeconfig
	c.mu.Unlock()
	if path != "" {
		return path
	}
	path = c.UserKubeconfig(AdminUser, "system:masters")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adminKubeconfig == "" {
		c.adminKubeconfig = path
	}
	return c.adminKubeconfig
}

// UserConfig returns a config that authenticates with a new client
// certificate signed by the cluster CA: common name user, organizations
// groups. The apiserver sees user in groups (plus system:authenticated),
// so each agent in a test can have its own identity in the audit log.
// Permissions come from RBAC (or group system:masters). It panics if no
// certificate can be made (the system has no randomness).
func (c *Cluster) UserConfig(user string, groups ...string) *rest.Config {
	certPEM, keyPEM, err := c.ca.clientCert(user, groups)
	if err != nil {
		panic(fmt.Sprintf("kubetest: client certificate for %q: %v", user, err))
	}
	return &rest.Config{
		Host: c.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.ca.certPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}
}

// UserKubeconfig writes a kubeconfig with a new client certificate for
// user in groups (as UserConfig) and returns its path, in the cluster's
// directory. It panics if the file cannot be written (the cluster was
// stopped).
func (c *Cluster) UserKubeconfig(user string, groups ...string) string {
	path, err := c.writeKubeconfig(user, user, groups...)
	if err != nil {
		panic(fmt.Sprintf("kubetest: %v", err))
	}
	return path
}

// fileNameUnsafe matches what may not appear in a kubeconfig's file name.
var fileNameUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// writeKubeconfig writes a kubeconfig for user in groups, its file named
// after label and a sequence number.
func (c *Cluster) writeKubeconfig(label, user string, groups ...string) (string, error) {
	cfg := c.UserConfig(user, groups...)
	c.mu.Lock()
	c.kubeconfigSeq++
	seq := c.kubeconfigSeq
	c.mu.Unlock()
	dir := filepath.Join(c.dir, "kubeconfig")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("kubeconfig directory: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%03d-%s.yaml", seq, fileNameUnsafe.ReplaceAllString(label, "_")))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user}
	kc.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig for %q: %w", user, err)
	}
	return path, nil
}

// AuditLog is the path of the apiserver's audit log: one JSON event per
// line for every write request (create, update, patch, delete,
// deletecollection) at Metadata level.
func (c *Cluster) AuditLog() string { return c.auditLog }

// ControllerManagerLog is the path of kube-controller-manager's log (the
// garbage collector and the namespace controller log there): a test that
// waits on a deletion quotes it when the wait fails.
func (c *Cluster) ControllerManagerLog() string {
	return filepath.Join(c.dir, controllerManagerBinary+".log")
}

// AuditEvents parses the audit log: the completed write requests so far, in
// the order the apiserver logged them.
func (c *Cluster) AuditEvents() ([]AuditEvent, error) {
	return parseAuditLog(c.auditLog)
}

// WebhookAPIServerArgs are the kube-apiserver flags that point it at a
// saltbush-agent's authentication and authorization webhooks, given the two
// kubeconfig files `saltbush-agent webhook-config` writes: exactly what
// images/k3s/config.yaml.d/60-saltbush-webhooks.yaml sets for K3s,
// including the apiserver's own authorization cache (5 s allowed, 2 s not).
// Use them as Options.ExtraAPIServerArgs.
func WebhookAPIServerArgs(authn, authz string) []string {
	return webhookArgs(authn, authz, "5s", "2s")
}

// WebhookAPIServerArgsUncached are WebhookAPIServerArgs with the
// apiserver's authorization cache off, so that every request reaches the
// agent: for measuring the agent itself.
func WebhookAPIServerArgsUncached(authn, authz string) []string {
	return webhookArgs(authn, authz, "0s", "0s")
}

func webhookArgs(authn, authz, authorizedTTL, unauthorizedTTL string) []string {
	return []string{
		"--authentication-token-webhook-config-file=" + authn,
		"--authentication-token-webhook-version=v1",
		"--authentication-token-webhook-cache-ttl=0s",
		"--authorization-mode=Node,RBAC,Webhook",
		"--authorization-webhook-config-file=" + authz,
		"--authorization-webhook-version=v1",
		"--authorization-webhook-cache-authorized-ttl=" + authorizedTTL,
		"--authorization-webhook-cache-unauthorized-ttl=" + unauthorizedTTL,
	}
}
