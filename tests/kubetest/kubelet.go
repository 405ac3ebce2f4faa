package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// The double's node settings.
const (
	// NodeNamePrefix starts the name of every node the double plays:
	// kubelet-double-1, kubelet-double-2, ...
	NodeNamePrefix = "kubelet-double-"
	// KubeletVersion is the kubelet version the nodes report.
	KubeletVersion = "v1.37.2"
	// InstanceType is the node.kubernetes.io/instance-type label of every
	// node (8 vCPU, 32 GiB, as the capacity says).
	InstanceType = "m5.2xlarge"
	// nodeLeaseNamespace holds the nodes' heartbeat Leases.
	nodeLeaseNamespace = corev1.NamespaceNodeLease
	// leaseDuration and leaseRenewInterval are the kubelet's defaults: the
	// lease is renewed every quarter of its duration, well inside the node
	// lifecycle controller's grace period, so the node is never tainted.
	leaseDuration      = 40 * time.Second
	leaseRenewInterval = 10 * time.Second
	// nodeStatusInterval is how often the Ready condition's heartbeat is
	// refreshed when nothing changed (the kubelet's report frequency is
	// longer; the Lease is the heartbeat the controller relies on).
	nodeStatusInterval = time.Minute
	// clientQPS and clientBurst are the kubelet's default API rate limits.
	clientQPS   = 50
	clientBurst = 100
)

// Behavior is what the double's container runtime does with an image.
type Behavior int

const (
	// Run starts containers of the image; they run and are ready (a
	// readiness probe counts as passing). Containers of pods that do not
	// restart (Jobs) exit 0 after a moment. The default.
	Run Behavior = iota
	// ImagePullBackOff fails every pull of the image and counts it absent
	// from the nodes: a container that starts with it waits ErrImagePull,
	// then ImagePullBackOff, retries with a growing back-off and is never
	// ready. A running container keeps running (nothing pulls it again).
	ImagePullBackOff
	// CrashLoopBackOff makes containers of the image exit with code 1 as
	// soon as they start: they restart with a growing back-off (restart
	// count rising, last state terminated with exit code 1, waiting
	// CrashLoopBackOff) and are never ready; a running container crashes at
	// once.
	CrashLoopBackOff
)

// String returns the behaviour's name.
func (b Behavior) String() string {
	switch b {
	case Run:
		return "Run"
	case ImagePullBackOff:
		return "ImagePullBackOff"
	case CrashLoopBackOff:
		return "CrashLoopBackOff"
	}
	return fmt.Sprintf("Behavior(%d)", int(b))
}

// Kubelet is the kubelet double: the only simulated part of the cluster.
// It registers Options.Nodes Nodes, keeps them Ready with Lease heartbeats,
// and runs the pods the scheduler binds to them as a kubelet does, not
// more kindly:
//
//   - A pod starts only when every non-optional Secret and ConfigMap its
//     volumes name (projected sources included, with the keys their items
//     name) exists, and its ServiceAccount exists if it projects a token
//     (automounted tokens are projected volumes too). Until then it stays
//     Pending, its containers waiting ContainerCreating (PodInitializing if
//     it has init containers), with a FailedMount Event; it starts when the
//     objects appear.
//   - A container whose env or envFrom names a missing non-optional Secret
//     or ConfigMap (or key) waits CreateContainerConfigError (Event Failed)
//     until it appears; the pod's other containers start.
//   - Init containers run to completion in order first (sidecars, init
//     containers with restartPolicy Always, keep running); then the
//     containers start: Pulling/Pulled, Created, Started Events, the pod
//     Running with an IP from its node's range (the node's IP for
//     hostNetwork pods), conditions PodReadyToStartContainers, Initialized,
//     ContainersReady and Ready (readiness gates honoured).
//   - What an image does is set with SetImageBehavior.
//   - A pod being deleted has its containers stopped (Killing Events), its
//     terminal status written, and is deleted with grace period 0, as a
//     kubelet does once its containers have exited: they exit at once.
//
// Pull and restart back-offs start at 1 s and double up to 30 s (a tenth of
// the kubelet's), so tests see several restarts quickly; as the kubelet,
// the double restarts a container at once the first time it exits and
// backs off from the second exit on. What the double reports is checked
// against a real kubelet's (tests/nodetest, TestKubeletDoubleAgrees).
// Pods on nodes the double does not own are ignored. Not simulated:
// probes (they pass), resource admission (the scheduler already fits
// pods), logs and exec, volumes other than Secrets and ConfigMaps (they
// mount), eviction.
type Kubelet struct {
	log   *log.Logger
	nodes []*kubeletNode
	// byName indexes nodes; both are fixed once startKubelet returns.
	byName map[string]*kubeletNode

	factory         informers.SharedInformerFactory
	pods            corelisters.PodLister
	secrets         corelisters.SecretLister
	configMaps      corelisters.ConfigMapLister
	serviceAccounts corelisters.ServiceAccountLister
	// queue holds namespace/name keys of pods to sync; only runPodWorker
	// takes keys from it.
	queue workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex // guards behaviors
	behaviors map[string]Behavior

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	logFile *os.File
}

// kubeletNode is one node the double plays, with its own identity
// (system:node:<name> in system:nodes, so the Node authorizer judges its
// writes as a kubelet's) and Event recorder.
type kubeletNode struct {
	name     string
	index    int    // 1-based
	ip       string // 10.0.0.<index>
	podCIDR  string // 10.244.<index>.0/24
	uid      types.UID
	client   kubernetes.Interface
	events   record.EventBroadcaster
	recorder record.EventRecorder
}

// startKubelet registers the nodes, starts the informers and the goroutines
// that heartbeat the nodes and run their pods. ctx bounds the start only.
func startKubelet(ctx context.Context, c *Cluster, nodes int) (*Kubelet, error) {
	logFile, err := os.OpenFile(filepath.Join(c.dir, "kubelet-double.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{
		log:       log.New(logFile, "", log.LstdFlags|log.Lmicroseconds),
		byName:    map[string]*kubeletNode{},
		behaviors: map[string]Behavior{},
		cancel:    cancel,
		logFile:   logFile,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubelet-double-pods"},
		),
	}
	started := false
	defer func() {
		if !started {
			k.stop()
		}
	}()
	for i := 1; i <= nodes; i++ {
		name := fmt.Sprintf("%s%d", NodeNamePrefix, i)
		client, err := kubernetes.NewForConfig(kubeletConfig(c.UserConfig("system:node:"+name, "system:nodes")))
		if err != nil {
			return nil, fmt.Errorf("client for node %s: %w", name, err)
		}
		n := &kubeletNode{
			name:    name,
			index:   i,
			ip:      fmt.Sprintf("10.0.0.%d", i),
			podCIDR: fmt.Sprintf("10.244.%d.0/24", i),
			client:  client,
			events:  record.NewBroadcaster(record.WithContext(runCtx)),
		}
		n.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		n.recorder = n.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: name})
		k.nodes = append(k.nodes, n)
		k.byName[name] = n
	}
	for _, n := range k.nodes {
		if err := k.registerNode(ctx, n); err != nil {
			return nil, err
		}
	}

	// Reads go through one privileged identity: a node may not list every
	// Secret, but the double needs to watch them to re-check waiting pods.
	reader, err := kubernetes.NewForConfig(kubeletConfig(c.UserConfig("kubetest-kubelet-double-reader", "system:masters")))
	if err != nil {
		return nil, fmt.Errorf("reader client: %w", err)
	}
	k.factory = informers.NewSharedInformerFactory(reader, 0)
	core := k.factory.Core().V1()
	podInformer := core.Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.podChanged,
		UpdateFunc: func(_, obj any) { k.podChanged(obj) },
		DeleteFunc: k.podChanged,
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	for name, inf := range map[string]cache.SharedIndexInformer{
		"secret":         core.Secrets().Informer(),
		"configmap":      core.ConfigMaps().Informer(),
		"serviceaccount": core.ServiceAccounts().Informer(),
	} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    k.dependencyChanged,
			UpdateFunc: func(_, obj any) { k.dependencyChanged(obj) },
			DeleteFunc: k.dependencyChanged,
		}); err != nil {
			return nil, fmt.Errorf("%s informer: %w", name, err)
		}
	}
	k.pods = core.Pods().Lister()
	k.secrets = core.Secrets().Lister()
	k.configMaps = core.ConfigMaps().Lister()
	k.serviceAccounts = core.ServiceAccounts().Lister()
	k.factory.Start(runCtx.Done())
	for typ, ok := range k.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer cache of %v not synced: %w", typ, ctx.Err())
		}
	}

	k.wg.Add(1)
	go k.runPodWorker(runCtx)
	for _, n := range k.nodes {
		k.wg.Add(1)
		go k.runNodeHeartbeat(runCtx, n)
	}
	started = true
	return k, nil
}

// kubeletConfig gives a client config the kubelet's rate limits.
func kubeletConfig(cfg *rest.Config) *rest.Config {
	cfg.QPS = clientQPS
	cfg.Burst = clientBurst
	cfg.UserAgent = "kubelet-double/" + KubeletVersion
	return cfg
}

// stop ends the goroutines and informers and waits for them.
func (k *Kubelet) stop() {
	k.cancel()
	k.queue.ShutDown()
	k.wg.Wait()
	if k.factory != nil {
		k.factory.Shutdown()
	}
	for _, n := range k.nodes {
		n.events.Shutdown()
	}
	_ = k.logFile.Close()
}

// NodeNames are the names of the nodes the double plays.
func (k *Kubelet) NodeNames() []string {
	names := make([]string, len(k.nodes))
	for i, n := range k.nodes {
		names[i] = n.name
	}
	return names
}

// SetImageBehavior sets what the runtime does with image, and applies it at
// once to the pods already on the nodes: a running container whose image
// turns CrashLoopBackOff crashes (not ready), one backing off whose image
// turns Run starts (running and ready) without waiting out its back-off.
//
// image is matched against a container's image reference as written in
// the pod spec (no normalisation): first the whole string ("nginx:1.27",
// "nginx@sha256:..."), then the repository without tag or digest
// ("nginx"). The whole string wins, so SetImageBehavior("nginx",
// CrashLoopBackOff) with SetImageBehavior("nginx:1.27", Run) crashes every
// nginx but 1.27. Images with no behaviour set Run.
//
// ImagePullBackOff fails pulls and counts the image as absent from every
// node (as if image garbage collection had removed it), so every container
// that starts with it needs a pull, whatever ran before. As with a kubelet,
// a container already running is not pulled again and keeps running: to
// make a running workload fail this way, roll it to the image (or delete
// its pods).
func (k *Kubelet) SetImageBehavior(image string, b Behavior) {
	k.mu.Lock()
	k.behaviors[image] = b
	k.mu.Unlock()
	k.enqueueOwnedPods(metav1.NamespaceAll)
}

// behaviorFor is the behaviour of a container image.
func (k *Kubelet) behaviorFor(image string) Behavior {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.behaviors[image]; ok {
		return b
	}
	if b, ok := k.behaviors[imageRepository(image)]; ok {
		return b
	}
	return Run
}

// imageRepository strips the digest and tag from an image reference
// ("host:5000/team/app:1.0@sha256:..." → "host:5000/team/app").
func imageRepository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}

// podChanged queues a pod of one of the double's nodes.
func (k *Kubelet) podChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || k.byName[pod.Spec.NodeName] == nil {
		return
	}
	k.queue.Add(pod.Namespace + "/" + pod.Name)
}

// dependencyChanged queues the double's pods in the namespace of a Secret,
// ConfigMap or ServiceAccount that changed: a pod waiting for it may start.
func (k *Kubelet) dependencyChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	k.enqueueOwnedPods(m.GetNamespace())
}

// metaOf returns an object's metadata.
func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// enqueueOwnedPods queues every pod of the double's nodes in namespace
// (every namespace for NamespaceAll).
func (k *Kubelet) enqueueOwnedPods(namespace string) {
	if k.pods == nil {
		return
	}
	pods, err := k.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		if k.byName[pod.Spec.NodeName] != nil {
			k.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
}

// nodeCapacity is what every node offers.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
}

// nodeConditions are a healthy kubelet's node conditions, heartbeat now.
func nodeConditions(now metav1.Time) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
}

// registerNode creates the Node, Ready from the start as a kubelet whose
// runtime and network are up registers it.
func (k *Kubelet) registerNode(ctx context.Context, n *kubeletNode) error {
	now := apiTime(time.Now())
	id := sha256.Sum256([]byte(n.name))
	machineID := hex.EncodeToString(id[:16])
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name,
			Labels: map[string]string{
				corev1.LabelOSStable:           "linux",
				corev1.LabelArchStable:         "amd64",
				corev1.LabelHostname:           n.name,
				corev1.LabelInstanceTypeStable: InstanceType,
				"beta.kubernetes.io/os":        "linux",
				"beta.kubernetes.io/arch":      "amd64",
			},
			Annotations: map[string]string{
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: []string{n.podCIDR}},
		Status: corev1.NodeStatus{
			Capacity:    nodeCapacity(),
			Allocatable: nodeCapacity(),
			Phase:       corev1.NodeRunning,
			Conditions:  nodeConditions(now),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.ip},
				{Type: corev1.NodeHostName, Address: n.name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               machineID,
				SystemUUID:              machineID,
				BootID:                  machineID,
				KernelVersion:           "6.1.0-kubelet-double",
				OSImage:                 "kubelet double",
				ContainerRuntimeVersion: "kubelet-double://" + KubeletVersion,
				KubeletVersion:          KubeletVersion,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
		},
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err == nil {
			n.uid = created.UID
			return nil
		}
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register node %s: it already exists", n.name)
		}
		k.log.Printf("register node %s: %v", n.name, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("register node %s: %w (last error: %v)", n.name, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// runNodeHeartbeat renews the node's Lease every leaseRenewInterval and
// refreshes its Ready condition every nodeStatusInterval, until ctx ends.
func (k *Kubelet) runNodeHeartbeat(ctx context.Context, n *kubeletNode) {
	defer k.wg.Done()
	var lease *coordinationv1.Lease
	lastStatus := time.Now()
	tick := time.NewTicker(leaseRenewInterval)
	defer tick.Stop()
	for {
		var err error
		if lease, err = k.renewLease(ctx, n, lease); err != nil && ctx.Err() == nil {
			k.log.Printf("node %s: renew lease: %v", n.name, err)
		}
		if time.Since(lastStatus) >= nodeStatusInterval {
			if err := k.patchNodeHeartbeat(ctx, n); err != nil && ctx.Err() == nil {
				k.log.Printf("node %s: status heartbeat: %v", n.name, err)
			} else {
				lastStatus = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewLease creates or renews the node's Lease, starting from the copy
// last written (nil: read it); it returns the copy now stored.
func (k *Kubelet) renewLease(ctx context.Context, n *kubeletNode, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	rctx, cancel := context.WithTimeout(ctx, leaseRenewInterval)
	defer cancel()
	leases := n.client.CoordinationV1().Leases(nodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	if lease == nil {
		got, err := leases.Get(rctx, n.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(rctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Name:      n.name,
					Namespace: nodeLeaseNamespace,
					// As a kubelet's: the Lease goes with its Node.
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: n.uid}},
				},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       &n.name,
					LeaseDurationSeconds: ptrTo(int32(leaseDuration / time.Second)),
					RenewTime:            &now,
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("create lease %s/%s: %w", nodeLeaseNamespace, n.name, err)
			}
			return created, nil
		case err != nil:
			return nil, fmt.Errorf("get lease %s/%s: %w", nodeLeaseNamespace, n.name, err)
		}
		lease = got
	}
	lease = lease.DeepCopy()
	lease.Spec.HolderIdentity = &n.name
	lease.Spec.LeaseDurationSeconds = ptrTo(int32(leaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	updated, err := leases.Update(rctx, lease, metav1.UpdateOptions{})
	if err != nil {
		// Read it afresh next time (a conflict, or it was deleted).
		return nil, fmt.Errorf("update lease %s/%s: %w", nodeLeaseNamespace, n.name, err)
	}
	return updated, nil
}

// patchNodeHeartbeat refreshes the heartbeat times of the node's
// conditions (a strategic merge by condition type keeps the transition
// times).
func (k *Kubelet) patchNodeHeartbeat(ctx context.Context, n *kubeletNode) error {
	rctx, cancel := context.WithTimeout(ctx, leaseRenewInterval)
	defer cancel()
	// Maps, not NodeConditions: a zero lastTransitionTime would marshal as
	// null, which a merge patch reads as "delete it".
	var conds []map[string]any
	for _, c := range nodeConditions(apiTime(time.Now())) {
		conds = append(conds, map[string]any{
			"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastHeartbeatTime": c.LastHeartbeatTime,
		})
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return fmt.Errorf("node %s heartbeat patch: %w", n.name, err)
	}
	if _, err := n.client.CoreV1().Nodes().Patch(rctx, n.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch node %s status: %w", n.name, err)
	}
	return nil
}

// apiTime is t as the API stores it (whole seconds), so a status computed
// again compares equal to the one read back.
func apiTime(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }
