package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/cache"
)

// Timing of the simulated runtime.
const (
	// backOffInitial and backOffMax bound pull and restart back-offs (the
	// kubelet's are 10 s and 300 s).
	backOffInitial = time.Second
	backOffMax     = 30 * time.Second
	// pullErrorShown is how long a failed pull shows ErrImagePull before
	// the pod's next sync shows ImagePullBackOff.
	pullErrorShown = 500 * time.Millisecond
	// jobRunTime is how long a container of a pod that does not restart
	// (a Job's) runs before it exits 0.
	jobRunTime = time.Second
	// apiTimeout bounds each API call of the pod worker.
	apiTimeout = 30 * time.Second
)

// Container waiting reasons and pod condition reasons, as the kubelet
// reports them.
const (
	reasonContainerCreating          = "ContainerCreating"
	reasonPodInitializing            = "PodInitializing"
	reasonCreateContainerConfigError = "CreateContainerConfigError"
	reasonErrImagePull               = "ErrImagePull"
	reasonImagePullBackOff           = "ImagePullBackOff"
	reasonErrImageNeverPull          = "ErrImageNeverPull"
	reasonCrashLoopBackOff           = "CrashLoopBackOff"
	reasonCompleted                  = "Completed"
	reasonError                      = "Error"
	reasonContainersNotInitialized   = "ContainersNotInitialized"
	reasonContainersNotReady         = "ContainersNotReady"
	reasonReadinessGatesNotReady     = "ReadinessGatesNotReady"
	reasonPodCompleted               = "PodCompleted"
)

// Event reasons, as the kubelet uses them.
const (
	eventFailedMount       = "FailedMount"
	eventPulling           = "Pulling"
	eventPulled            = "Pulled"
	eventFailed            = "Failed"
	eventBackOff           = "BackOff"
	eventCreated           = "Created"
	eventStarted           = "Started"
	eventKilling           = "Killing"
	eventErrImageNeverPull = "ErrImageNeverPull"
)

// containerKind tells regular containers from init containers.
type containerKind int

const (
	regularContainer containerKind = iota
	initContainer
	// sidecarContainer is an init container with restartPolicy Always: it
	// starts in init order and keeps running.
	sidecarContainer
)

// containerSim is the double's runtime state of one container.
type containerSim struct {
	name          string
	kind          containerKind
	fieldPath     string
	image         string
	pullPolicy    corev1.PullPolicy
	restartPolicy corev1.RestartPolicy // effective: Always, OnFailure or Never
	volumeMounts  []corev1.VolumeMountStatus

	state        corev1.ContainerState
	lastState    corev1.ContainerState
	ready        bool
	started      bool
	everStarted  bool
	restartCount int32
	containerID  string
	imageID      string
	startedAt    time.Time
	// behavior is what the image did at the last start attempt or crash; a
	// different behaviour now acts at once, back-off or not.
	behavior Behavior
	backOff  time.Duration
	// retryAt is when a container backing off (pull or crash) tries again.
	retryAt time.Time
	// pullBackOffAt is when an ErrImagePull shows as ImagePullBackOff.
	pullBackOffAt time.Time
	// finishAt is when a running container of a pod that does not restart
	// exits 0.
	finishAt time.Time
	// reportedConfigError is the CreateContainerConfigError last reported
	// in an Event, so a repeated check does not repeat it.
	reportedConfigError string
}

// podSim is the double's state of one pod.
type podSim struct {
	uid       types.UID
	node      *kubeletNode
	startTime metav1.Time
	// sandbox: volumes mounted and the pod sandbox (its network) is up.
	sandbox bool
	podIP   string
	// initialized: the init containers have completed once; they do not
	// run again.
	initialized bool
	// terminal: Succeeded or Failed, nothing runs any more.
	terminal bool
	// terminating: the pod is being deleted.
	terminating bool
	deleteSent  bool
	// mountReported holds the FailedMount messages already sent as Events.
	mountReported map[string]bool
	init          []*containerSim
	containers    []*containerSim
	// written is the status the double last wrote (its own fields only).
	written *corev1.PodStatus
}

// all returns init containers, then containers.
func (ps *podSim) all() []*containerSim {
	return append(append([]*containerSim(nil), ps.init...), ps.containers...)
}

// podWorker is the pod state of the double. Only the goroutine running
// runPodWorker touches it, so it needs no lock.
type podWorker struct {
	k    *Kubelet
	pods map[string]*podSim // by namespace/name
	// usedIPs holds the last octets of pod IPs in use, by node name.
	usedIPs map[string]map[int]bool
	// images holds the images present, by node name.
	images map[string]map[string]bool
}

// runPodWorker syncs queued pods one at a time until the queue shuts down.
func (k *Kubelet) runPodWorker(ctx context.Context) {
	defer k.wg.Done()
	w := &podWorker{
		k:       k,
		pods:    map[string]*podSim{},
		usedIPs: map[string]map[int]bool{},
		images:  map[string]map[string]bool{},
	}
	for {
		key, quit := k.queue.Get()
		if quit {
			return
		}
		next, err := w.sync(ctx, key)
		switch {
		case err != nil && ctx.Err() == nil:
			k.log.Printf("sync pod %s: %v", key, err)
			k.queue.AddRateLimited(key)
		case err == nil:
			k.queue.Forget(key)
			if next > 0 {
				k.queue.AddAfter(key, next)
			}
		}
		k.queue.Done(key)
	}
}

// sync brings one pod a step further and writes its status; it returns
// when the pod next needs a sync by time (0: only on a change).
func (w *podWorker) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pod, err := w.k.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		w.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pod %s from cache: %w", key, err)
	}
	n := w.k.byName[pod.Spec.NodeName]
	if n == nil {
		w.forget(key)
		return 0, nil
	}
	ps := w.pods[key]
	if ps != nil && ps.uid != pod.UID {
		w.forget(key)
		ps = nil
	}
	now := time.Now()
	if ps == nil {
		ps = newPodSim(pod, n, now)
		w.pods[key] = ps
	}
	if pod.DeletionTimestamp != nil {
		return 0, w.terminate(ctx, pod, ps, now)
	}
	if !ps.terminal {
		if !ps.sandbox {
			if msgs := w.mountErrors(pod); len(msgs) > 0 {
				w.reportMountErrors(pod, ps, msgs)
				return 0, w.writeStatus(ctx, pod, ps)
			}
			if err := w.createSandbox(pod, ps); err != nil {
				return 0, err
			}
		}
		w.runContainers(pod, ps, now)
		if phase := podPhase(ps); phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			ps.terminal = true
		}
	}
	if err := w.writeStatus(ctx, pod, ps); err != nil {
		return 0, err
	}
	return ps.nextSync(now), nil
}

// newPodSim is the state of a pod the double has just been given.
func newPodSim(pod *corev1.Pod, n *kubeletNode, now time.Time) *podSim {
	ps := &podSim{uid: pod.UID, node: n, startTime: apiTime(now), mountReported: map[string]bool{}}
	waiting := reasonContainerCreating
	if len(pod.Spec.InitContainers) > 0 {
		waiting = reasonPodInitializing
	}
	newContainer := func(c *corev1.Container, kind containerKind, fieldPath string) *containerSim {
		cs := &containerSim{
			name:       c.Name,
			kind:       kind,
			fieldPath:  fieldPath,
			image:      c.Image,
			pullPolicy: c.ImagePullPolicy,
			state:      corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}},
		}
		switch {
		case kind == sidecarContainer:
			cs.restartPolicy = corev1.RestartPolicyAlways
		case kind == initContainer && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			cs.restartPolicy = corev1.RestartPolicyNever
		case kind == initContainer:
			// Init containers of restarting pods retry until they succeed.
			cs.restartPolicy = corev1.RestartPolicyOnFailure
		case c.RestartPolicy != nil:
			cs.restartPolicy = corev1.RestartPolicy(*c.RestartPolicy)
		default:
			cs.restartPolicy = pod.Spec.RestartPolicy
		}
		for _, m := range c.VolumeMounts {
			vm := corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
			if m.ReadOnly {
				vm.RecursiveReadOnly = ptrTo(corev1.RecursiveReadOnlyDisabled)
			}
			cs.volumeMounts = append(cs.volumeMounts, vm)
		}
		return cs
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := initContainer
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = sidecarContainer
		}
		ps.init = append(ps.init, newContainer(c, kind, fmt.Sprintf("spec.initContainers{%s}", c.Name)))
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		ps.containers = append(ps.containers, newContainer(c, regularContainer, fmt.Sprintf("spec.containers{%s}", c.Name)))
	}
	return ps
}

// forget drops the state of a pod that is gone or no longer the double's.
func (w *podWorker) forget(key string) {
	ps := w.pods[key]
	if ps == nil {
		return
	}
	if octet, ok := w.ipOctet(ps); ok {
		delete(w.usedIPs[ps.node.name], octet)
	}
	delete(w.pods, key)
}

// ipOctet returns the last octet of a pod's IP from its node's range.
func (w *podWorker) ipOctet(ps *podSim) (int, bool) {
	prefix := fmt.Sprintf("10.244.%d.", ps.node.index)
	rest, ok := strings.CutPrefix(ps.podIP, prefix)
	if !ok {
		return 0, false
	}
	var octet int
	if _, err := fmt.Sscanf(rest, "%d", &octet); err != nil {
		return 0, false
	}
	return octet, true
}

// createSandbox gives the pod its network: an IP from the node's range,
// or the node's own for hostNetwork pods.
func (w *podWorker) createSandbox(pod *corev1.Pod, ps *podSim) error {
	if pod.Spec.HostNetwork {
		ps.podIP = ps.node.ip
		ps.sandbox = true
		return nil
	}
	used := w.usedIPs[ps.node.name]
	if used == nil {
		used = map[int]bool{}
		w.usedIPs[ps.node.name] = used
	}
	// .0 is the network, .1 the node's bridge, .255 broadcast.
	for octet := 2; octet < 255; octet++ {
		if !used[octet] {
			used[octet] = true
			ps.podIP = fmt.Sprintf("10.244.%d.%d", ps.node.index, octet)
			ps.sandbox = true
			return nil
		}
	}
	return fmt.Errorf("node %s: no free pod IP in %s", ps.node.name, ps.node.podCIDR)
}

// mountErrors returns what keeps the pod's volumes from mounting, as the
// kubelet words it: missing non-optional Secrets and ConfigMaps (or the
// keys their items name), directly or as projected sources, and a missing
// ServiceAccount for a projected token. Automounted tokens are covered: the
// ServiceAccount admission plugin turns them into projected volumes.
func (w *podWorker) mountErrors(pod *corev1.Pod) []string {
	var msgs []string
	fail := func(volume, msg string) {
		msgs = append(msgs, fmt.Sprintf("MountVolume.SetUp failed for volume %q : %s", volume, msg))
	}
	for _, vol := range pod.Spec.Volumes {
		switch {
		case vol.Secret != nil:
			if msg := w.secretError(pod.Namespace, vol.Secret.SecretName, vol.Secret.Items, isTrue(vol.Secret.Optional)); msg != "" {
				fail(vol.Name, msg)
			}
		case vol.ConfigMap != nil:
			if msg := w.configMapError(pod.Namespace, vol.ConfigMap.Name, vol.ConfigMap.Items, isTrue(vol.ConfigMap.Optional)); msg != "" {
				fail(vol.Name, msg)
			}
		case vol.Projected != nil:
			for _, src := range vol.Projected.Sources {
				var msg string
				switch {
				case src.Secret != nil:
					msg = w.secretError(pod.Namespace, src.Secret.Name, src.Secret.Items, isTrue(src.Secret.Optional))
				case src.ConfigMap != nil:
					msg = w.configMapError(pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, isTrue(src.ConfigMap.Optional))
				case src.ServiceAccountToken != nil:
					sa := pod.Spec.ServiceAccountName
					if sa == "" {
						sa = "default"
					}
					if _, err := w.k.serviceAccounts.ServiceAccounts(pod.Namespace).Get(sa); err != nil {
						msg = fmt.Sprintf("failed to fetch token: serviceaccounts %q not found", sa)
					}
				}
				if msg != "" {
					fail(vol.Name, msg)
					break
				}
			}
		}
	}
	return msgs
}

// secretError is why a Secret volume (or projection) cannot be made.
func (w *podWorker) secretError(namespace, name string, items []corev1.KeyToPath, optional bool) string {
	s, err := w.k.secrets.Secrets(namespace).Get(name)
	if err != nil {
		if optional {
			return ""
		}
		return fmt.Sprintf("secret %q not found", name)
	}
	for _, item := range items {
		if _, ok := s.Data[item.Key]; !ok && !optional {
			return "references non-existent secret key: " + item.Key
		}
	}
	return ""
}

// configMapError is why a ConfigMap volume (or projection) cannot be made.
func (w *podWorker) configMapError(namespace, name string, items []corev1.KeyToPath, optional bool) string {
	cm, err := w.k.configMaps.ConfigMaps(namespace).Get(name)
	if err != nil {
		if optional {
			return ""
		}
		return fmt.Sprintf("configmap %q not found", name)
	}
	for _, item := range items {
		_, inData := cm.Data[item.Key]
		_, inBinary := cm.BinaryData[item.Key]
		if !inData && !inBinary && !optional {
			return "configmap references non-existent config key: " + item.Key
		}
	}
	return ""
}

// configError is why a container's environment cannot be made (the
// kubelet's CreateContainerConfigError), or "".
func (w *podWorker) configError(pod *corev1.Pod, c *corev1.Container) string {
	ns := pod.Namespace
	for _, from := range c.EnvFrom {
		if r := from.ConfigMapRef; r != nil && !isTrue(r.Optional) {
			if _, err := w.k.configMaps.ConfigMaps(ns).Get(r.Name); err != nil {
				return fmt.Sprintf("configmap %q not found", r.Name)
			}
		}
		if r := from.SecretRef; r != nil && !isTrue(r.Optional) {
			if _, err := w.k.secrets.Secrets(ns).Get(r.Name); err != nil {
				return fmt.Sprintf("secret %q not found", r.Name)
			}
		}
	}
	for _, env := range c.Env {
		if env.ValueFrom == nil {
			continue
		}
		if r := env.ValueFrom.ConfigMapKeyRef; r != nil && !isTrue(r.Optional) {
			cm, err := w.k.configMaps.ConfigMaps(ns).Get(r.Name)
			if err != nil {
				return fmt.Sprintf("configmap %q not found", r.Name)
			}
			if _, ok := cm.Data[r.Key]; !ok {
				return fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", r.Key, ns, r.Name)
			}
		}
		if r := env.ValueFrom.SecretKeyRef; r != nil && !isTrue(r.Optional) {
			s, err := w.k.secrets.Secrets(ns).Get(r.Name)
			if err != nil {
				return fmt.Sprintf("secret %q not found", r.Name)
			}
			if _, ok := s.Data[r.Key]; !ok {
				return fmt.Sprintf("couldn't find key %s in Secret %s/%s", r.Key, ns, r.Name)
			}
		}
	}
	return ""
}

// reportMountErrors sends a FailedMount Event for each new mount error.
func (w *podWorker) reportMountErrors(pod *corev1.Pod, ps *podSim, msgs []string) {
	current := map[string]bool{}
	for _, msg := range msgs {
		current[msg] = true
		if !ps.mountReported[msg] {
			ps.node.recorder.Event(podRef(pod, ""), corev1.EventTypeWarning, eventFailedMount, msg)
		}
	}
	ps.mountReported = current
}

// runContainers runs the init containers in order, then the containers.
func (w *podWorker) runContainers(pod *corev1.Pod, ps *podSim, now time.Time) {
	w.followImageChanges(pod, ps)
	initialized := true
	for _, c := range ps.init {
		switch {
		case c.kind == sidecarContainer:
			w.step(pod, ps, c, now)
			// The next init container waits for the sidecar to start.
			if !c.started && !ps.initialized {
				initialized = false
			}
		case ps.initialized || c.succeeded():
		default:
			w.step(pod, ps, c, now)
			if !c.succeeded() {
				initialized = false
			}
		}
		if !initialized {
			break
		}
	}
	ps.initialized = initialized
	if !initialized {
		return
	}
	done := true
	for _, c := range ps.containers {
		w.step(pod, ps, c, now)
		if c.state.Terminated == nil {
			done = false
		}
	}
	// When every container of a pod that does not restart has exited, the
	// kubelet stops the sidecars.
	if done && len(ps.containers) > 0 {
		for _, c := range ps.init {
			if c.kind == sidecarContainer {
				w.stop(pod, ps, c, now)
			}
		}
	}
}

// followImageChanges restarts a container whose image was changed in the
// pod spec, as the kubelet does.
func (w *podWorker) followImageChanges(pod *corev1.Pod, ps *podSim) {
	specs := map[string]*corev1.Container{}
	for i := range pod.Spec.InitContainers {
		specs[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
	}
	for i := range pod.Spec.Containers {
		specs[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
	}
	for _, c := range ps.all() {
		spec := specs[c.name]
		if spec == nil || spec.Image == c.image || c.kind == initContainer || c.state.Terminated != nil {
			continue
		}
		if c.state.Running != nil {
			w.event(pod, ps, c, corev1.EventTypeNormal, eventKilling, "Container %s definition changed, will be restarted", c.name)
			c.lastState = corev1.ContainerState{Terminated: c.terminated(0, time.Now())}
		}
		c.image, c.pullPolicy = spec.Image, spec.ImagePullPolicy
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonContainerCreating}}
		c.ready, c.started, c.imageID, c.containerID = false, false, "", ""
		c.retryAt, c.pullBackOffAt, c.finishAt = time.Time{}, time.Time{}, time.Time{}
	}
}

// succeeded reports whether the container exited 0 for good.
func (c *containerSim) succeeded() bool {
	return c.state.Terminated != nil && c.state.Terminated.ExitCode == 0
}

// restarts reports whether the container is restarted after exiting with
// code.
func (c *containerSim) restarts(code int32) bool {
	switch c.restartPolicy {
	case corev1.RestartPolicyAlways:
		return true
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return false
}

// step moves one container on: a running one may crash or finish, a
// waiting one starts when its back-off is over or its image's behaviour
// changed.
func (w *podWorker) step(pod *corev1.Pod, ps *podSim, c *containerSim, now time.Time) {
	b := w.k.behaviorFor(c.image)
	switch {
	case c.state.Terminated != nil:
		// Exited for good: restarting ones are waiting CrashLoopBackOff.
		return
	case c.state.Running != nil:
		switch {
		case b == CrashLoopBackOff:
			w.exit(pod, ps, c, now, 1, b)
		case !c.finishAt.IsZero() && !now.Before(c.finishAt):
			w.exit(pod, ps, c, now, 0, b)
		}
		return
	}
	if b == c.behavior && !c.retryAt.IsZero() && now.Before(c.retryAt) {
		// Backing off; a failed pull shows as ImagePullBackOff from the next
		// sync on.
		if wt := c.state.Waiting; wt != nil && wt.Reason == reasonErrImagePull && !now.Before(c.pullBackOffAt) {
			c.showPullBackOff(pod, ps)
		}
		return
	}
	w.start(pod, ps, c, now, b)
}

// showPullBackOff turns ErrImagePull into ImagePullBackOff.
func (c *containerSim) showPullBackOff(pod *corev1.Pod, ps *podSim) {
	prev := c.state.Waiting.Message
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason:  reasonImagePullBackOff,
		Message: fmt.Sprintf("Back-off pulling image %q: %s: %s", c.image, reasonErrImagePull, prev),
	}}
	ps.node.recorder.Eventf(podRef(pod, c.fieldPath), corev1.EventTypeNormal, eventBackOff, "Back-off pulling image %q", c.image)
	ps.node.recorder.Eventf(podRef(pod, c.fieldPath), corev1.EventTypeWarning, eventFailed, "Error: %s", reasonImagePullBackOff)
}

// start tries to start a container: its environment must resolve and its
// image be present or pulled; then it runs (or exits at once, for an init
// container or a crashing image).
func (w *podWorker) start(pod *corev1.Pod, ps *podSim, c *containerSim, now time.Time, b Behavior) {
	c.behavior = b
	spec := containerSpec(pod, c)
	if spec == nil {
		return
	}
	if msg := w.configError(pod, spec); msg != "" {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCreateContainerConfigError, Message: msg}}
		c.ready, c.started = false, false
		// Checked again when a Secret or ConfigMap changes.
		c.retryAt = time.Time{}
		if msg != c.reportedConfigError {
			w.event(pod, ps, c, corev1.EventTypeWarning, eventFailed, "Error: %s", msg)
			c.reportedConfigError = msg
		}
		return
	}
	c.reportedConfigError = ""
	if !w.pull(pod, ps, c, now, b) {
		return
	}
	if c.everStarted {
		c.restartCount++
	}
	c.everStarted = true
	c.containerID = newContainerID()
	c.startedAt = now
	w.event(pod, ps, c, corev1.EventTypeNormal, eventCreated, "Container created")
	w.event(pod, ps, c, corev1.EventTypeNormal, eventStarted, "Container started")
	switch {
	case b == CrashLoopBackOff:
		w.exit(pod, ps, c, now, 1, b)
	case c.kind == initContainer:
		w.exit(pod, ps, c, now, 0, b)
	default:
		c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: apiTime(now)}}
		c.ready, c.started = true, true
		c.retryAt, c.pullBackOffAt = time.Time{}, time.Time{}
		if c.kind == regularContainer && c.restartPolicy != corev1.RestartPolicyAlways {
			c.finishAt = now.Add(jobRunTime)
		}
	}
}

// pull makes the image present on the node, as the pull policy says; it
// reports whether the container can be created.
func (w *podWorker) pull(pod *corev1.Pod, ps *podSim, c *containerSim, now time.Time, b Behavior) bool {
	present := w.images[ps.node.name]
	if present == nil {
		present = map[string]bool{}
		w.images[ps.node.name] = present
	}
	// An image that cannot be pulled counts as absent too (as if image
	// garbage collection had removed it), so the behaviour shows on every
	// node, whatever ran there before.
	if b == ImagePullBackOff {
		delete(present, c.image)
	}
	switch {
	case present[c.image] && c.pullPolicy != corev1.PullAlways:
		w.event(pod, ps, c, corev1.EventTypeNormal, eventPulled, "Container image %q already present on machine", c.image)
	case c.pullPolicy == corev1.PullNever:
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.image)
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonErrImageNeverPull, Message: msg}}
		c.ready, c.started = false, false
		w.event(pod, ps, c, corev1.EventTypeWarning, eventErrImageNeverPull, "%s", msg)
		return false
	case b == ImagePullBackOff:
		w.event(pod, ps, c, corev1.EventTypeNormal, eventPulling, "Pulling image %q", c.image)
		msg := fmt.Sprintf("failed to pull and unpack image %q: the kubelet double was told this image cannot be pulled", c.image)
		w.event(pod, ps, c, corev1.EventTypeWarning, eventFailed, "Failed to pull image %q: %s", c.image, msg)
		w.event(pod, ps, c, corev1.EventTypeWarning, eventFailed, "Error: %s", reasonErrImagePull)
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonErrImagePull, Message: msg}}
		c.ready, c.started = false, false
		c.backOff = nextBackOff(c.backOff)
		c.retryAt = now.Add(c.backOff)
		c.pullBackOffAt = now.Add(min(pullErrorShown, c.backOff/2))
		return false
	default:
		w.event(pod, ps, c, corev1.EventTypeNormal, eventPulling, "Pulling image %q", c.image)
		w.event(pod, ps, c, corev1.EventTypeNormal, eventPulled,
			"Successfully pulled image %q in 0s (0s including waiting). Image size: 0 bytes.", c.image)
		present[c.image] = true
	}
	c.imageID = imageID(c.image)
	return true
}

// exit ends a started container with code: it waits out a back-off if it
// restarts, else stays terminated.
func (w *podWorker) exit(pod *corev1.Pod, ps *podSim, c *containerSim, now time.Time, code int32, b Behavior) {
	c.behavior = b
	term := c.terminated(code, now)
	c.ready, c.started, c.finishAt = false, false, time.Time{}
	if !c.restarts(code) {
		c.state = corev1.ContainerState{Terminated: term}
		return
	}
	c.lastState = corev1.ContainerState{Terminated: term}
	if c.backOff == 0 {
		// The kubelet restarts a container at once the first time it
		// exits and starts its back-off then: the status shows
		// CrashLoopBackOff only from the second exit, with restart count
		// 1 and the back-off's initial duration.
		c.backOff = backOffInitial
		w.start(pod, ps, c, now, b)
		return
	}
	c.retryAt = now.Add(c.backOff)
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason:  reasonCrashLoopBackOff,
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", c.backOff, c.name, podDesc(pod)),
	}}
	// The next exit waits twice as long.
	c.backOff = nextBackOff(c.backOff)
	w.event(pod, ps, c, corev1.EventTypeWarning, eventBackOff, "Back-off restarting failed container %s in pod %s", c.name, podDesc(pod))
}

// stop stops a running container at the kubelet's request; it exits 0.
func (w *podWorker) stop(pod *corev1.Pod, ps *podSim, c *containerSim, now time.Time) {
	if c.state.Running == nil {
		return
	}
	w.event(pod, ps, c, corev1.EventTypeNormal, eventKilling, "Stopping container %s", c.name)
	c.state = corev1.ContainerState{Terminated: c.terminated(0, now)}
	c.ready, c.started, c.finishAt = false, false, time.Time{}
}

// terminated is the container's terminated state on exiting with code.
func (c *containerSim) terminated(code int32, now time.Time) *corev1.ContainerStateTerminated {
	reason := reasonCompleted
	if code != 0 {
		reason = reasonError
	}
	return &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason,
		StartedAt: apiTime(c.startedAt), FinishedAt: apiTime(now),
		ContainerID: c.containerID,
	}
}

// nextBackOff doubles a back-off within its bounds.
func nextBackOff(d time.Duration) time.Duration {
	if d == 0 {
		return backOffInitial
	}
	return min(2*d, backOffMax)
}

// nextSync is how long until the pod's next timed step (0: none).
func (ps *podSim) nextSync(now time.Time) time.Duration {
	if ps.terminal {
		return 0
	}
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range ps.all() {
		switch {
		case c.state.Running != nil:
			consider(c.finishAt)
		case c.state.Waiting != nil:
			consider(c.retryAt)
			if c.state.Waiting.Reason == reasonErrImagePull {
				consider(c.pullBackOffAt)
			}
		}
	}
	if next.IsZero() {
		return 0
	}
	// A time already passed (the sync took a while) is due now.
	return max(next.Sub(now), 10*time.Millisecond)
}

// terminate stops a pod being deleted: its containers exit, its terminal
// status is written, and it is deleted with grace period 0, as a kubelet
// does once the containers have stopped (the double's stop at once).
func (w *podWorker) terminate(ctx context.Context, pod *corev1.Pod, ps *podSim, now time.Time) error {
	if ps.deleteSent {
		return nil
	}
	if !ps.terminating {
		for _, c := range ps.all() {
			w.stop(pod, ps, c, now)
		}
		ps.terminating, ps.terminal = true, true
	}
	if err := w.writeStatus(ctx, pod, ps); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	err := ps.node.client.CoreV1().Pods(pod.Namespace).Delete(rctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptrTo(int64(0)),
		Preconditions:      metav1.NewUIDPreconditions(string(ps.uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	ps.deleteSent = true
	return nil
}

// containerSpec finds the spec of a container.
func containerSpec(pod *corev1.Pod, c *containerSim) *corev1.Container {
	list := pod.Spec.Containers
	if c.kind != regularContainer {
		list = pod.Spec.InitContainers
	}
	for i := range list {
		if list[i].Name == c.name {
			return &list[i]
		}
	}
	return nil
}

// podPhase is the pod's phase from its containers' states, as a
// kubelet reckons it.
func podPhase(ps *podSim) corev1.PodPhase {
	pendingInit, failedInitForGood := 0, 0
	pendingSidecars := 0
	running, waiting, stopped, stoppedForGood, succeeded := 0, 0, 0, 0, 0
	for _, c := range ps.init {
		if c.kind == sidecarContainer {
			switch {
			case c.state.Running != nil:
				running++
				if !c.started {
					pendingSidecars++
				}
			case c.state.Waiting != nil && c.lastState.Terminated == nil:
				pendingSidecars++
				waiting++
			}
			continue
		}
		switch {
		case c.state.Terminated != nil:
			if code := c.state.Terminated.ExitCode; code != 0 && !c.restarts(code) {
				failedInitForGood++
			}
		case c.state.Waiting != nil && c.lastState.Terminated != nil:
			// Failed and restarting.
		default:
			pendingInit++
		}
	}
	for _, c := range ps.containers {
		switch {
		case c.state.Running != nil:
			running++
		case c.state.Terminated != nil:
			stopped++
			code := c.state.Terminated.ExitCode
			if !c.restarts(code) {
				stoppedForGood++
			}
			if code == 0 {
				succeeded++
			}
		case c.state.Waiting != nil && c.lastState.Terminated != nil:
			stopped++
		default:
			waiting++
		}
	}
	phase := corev1.PodPending
	switch {
	case failedInitForGood > 0:
		phase = corev1.PodFailed
	case pendingInit > 0 || (pendingSidecars > 0 && !ps.initialized) || waiting > 0:
		phase = corev1.PodPending
	case running > 0:
		phase = corev1.PodRunning
	case stopped > 0 && ps.terminating && stopped == succeeded:
		phase = corev1.PodSucceeded
	case stopped > 0 && ps.terminating:
		phase = corev1.PodFailed
	case stopped > 0 && stopped != stoppedForGood:
		phase = corev1.PodRunning
	case stopped > 0 && stopped == succeeded:
		phase = corev1.PodSucceeded
	case stopped > 0:
		phase = corev1.PodFailed
	}
	// A pod being deleted ends in a terminal phase whatever its containers
	// got to.
	if ps.terminating && phase != corev1.PodSucceeded {
		phase = corev1.PodFailed
	}
	return phase
}

// ownStatus is the part of the pod's status the kubelet owns.
func (w *podWorker) ownStatus(pod *corev1.Pod, ps *podSim) corev1.PodStatus {
	st := corev1.PodStatus{
		ObservedGeneration: pod.Generation,
		HostIP:             ps.node.ip,
		HostIPs:            []corev1.HostIP{{IP: ps.node.ip}},
		StartTime:          ptrTo(ps.startTime),
	}
	if ps.sandbox {
		st.PodIP = ps.podIP
		st.PodIPs = []corev1.PodIP{{IP: ps.podIP}}
	}
	for _, c := range ps.init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.status())
	}
	for _, c := range ps.containers {
		st.ContainerStatuses = append(st.ContainerStatuses, c.status())
	}
	st.Phase = podPhase(ps)
	st.Conditions = podConditions(pod, ps, st.Phase)
	return st
}

// status is the container's status.
func (c *containerSim) status() corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name:                 c.name,
		Image:                c.image,
		ImageID:              c.imageID,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                c.ready,
		RestartCount:         c.restartCount,
		Started:              ptrTo(c.started),
		VolumeMounts:         c.volumeMounts,
	}
	// Waiting to be restarted, the status still names the container
	// that exited last, as the kubelet's does; only one never created
	// (a failed pull, a config error) has no id.
	st.ContainerID = c.containerID
	return st
}

// podConditions are the conditions the kubelet sets.
func podConditions(pod *corev1.Pod, ps *podSim, phase corev1.PodPhase) []corev1.PodCondition {
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	cond := func(t corev1.PodConditionType, ok bool, reason, message string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: pod.Generation}
	}

	var incomplete, unready []string
	for _, c := range ps.init {
		if (c.kind == initContainer && !c.succeeded()) || (c.kind == sidecarContainer && !c.started) {
			incomplete = append(incomplete, c.name)
		}
		if c.kind == sidecarContainer && !c.ready {
			unready = append(unready, c.name)
		}
	}
	for _, c := range ps.containers {
		if !c.ready {
			unready = append(unready, c.name)
		}
	}

	initialized := cond(corev1.PodInitialized, true, "", "")
	switch {
	case phase == corev1.PodSucceeded && (ps.initialized || len(incomplete) == 0):
		initialized.Reason = reasonPodCompleted
	case !ps.initialized && len(incomplete) > 0:
		initialized = cond(corev1.PodInitialized, false, reasonContainersNotInitialized,
			fmt.Sprintf("containers with incomplete status: %s", incomplete))
	}

	containersReady := cond(corev1.ContainersReady, true, "", "")
	switch {
	case terminal:
		containersReady = cond(corev1.ContainersReady, false, reasonPodCompleted, "")
	case len(unready) > 0:
		containersReady = cond(corev1.ContainersReady, false, reasonContainersNotReady,
			fmt.Sprintf("containers with unready status: %s", unready))
	}
	ready := containersReady
	ready.Type = corev1.PodReady
	if ready.Status == corev1.ConditionTrue {
		if msgs := readinessGateProblems(pod); len(msgs) > 0 {
			ready = cond(corev1.PodReady, false, reasonReadinessGatesNotReady, strings.Join(msgs, ", "))
		}
	}
	return []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, ps.sandbox && !terminal, "", ""),
		initialized,
		ready,
		containersReady,
	}
}

// readinessGateProblems lists the pod's readiness gates not True.
func readinessGateProblems(pod *corev1.Pod) []string {
	var msgs []string
	for _, gate := range pod.Spec.ReadinessGates {
		var found *corev1.PodCondition
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == gate.ConditionType {
				found = &pod.Status.Conditions[i]
			}
		}
		switch {
		case found == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gate.ConditionType))
		case found.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", gate.ConditionType, found.Status))
		}
	}
	return msgs
}

// writeStatus writes the pod's status if it changed since last written.
// As the kubelet's status manager does, it reads the pod afresh and patches
// its own fields onto what it read, so conditions others set stay.
func (w *podWorker) writeStatus(ctx context.Context, pod *corev1.Pod, ps *podSim) error {
	own := w.ownStatus(pod, ps)
	if ps.written != nil && apiequality.Semantic.DeepEqual(*ps.written, own) {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	pods := ps.node.client.CoreV1().Pods(pod.Namespace)
	fresh, err := pods.Get(rctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if fresh.UID != ps.uid {
		return nil
	}
	merged := mergeStatus(fresh.Status, own, apiTime(time.Now()))
	patch, err := statusPatch(ps.uid, fresh.Status, merged)
	if err != nil {
		return fmt.Errorf("status patch of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if patch != nil {
		_, err := pods.Patch(rctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("patch status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	ps.written = &own
	return nil
}

// mergeStatus puts the kubelet's fields of own onto status: conditions are
// replaced by type (keeping their transition time while unchanged), the
// rest of status stays.
func mergeStatus(status, own corev1.PodStatus, now metav1.Time) corev1.PodStatus {
	st := *status.DeepCopy()
	st.Phase = own.Phase
	st.ObservedGeneration = own.ObservedGeneration
	st.HostIP, st.HostIPs = own.HostIP, own.HostIPs
	st.PodIP, st.PodIPs = own.PodIP, own.PodIPs
	if st.StartTime == nil {
		st.StartTime = own.StartTime
	}
	st.InitContainerStatuses = own.InitContainerStatuses
	st.ContainerStatuses = own.ContainerStatuses
	for _, c := range own.Conditions {
		c.LastTransitionTime = now
		replaced := false
		for i := range st.Conditions {
			if st.Conditions[i].Type != c.Type {
				continue
			}
			if st.Conditions[i].Status == c.Status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			replaced = true
		}
		if !replaced {
			st.Conditions = append(st.Conditions, c)
		}
	}
	return st
}

// statusPatch is the strategic merge patch from old to new status, with
// the pod's UID so it applies to this pod only (as the kubelet's); nil when
// nothing changed.
func statusPatch(uid types.UID, old, new corev1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return nil, err
	}
	sameJSON, err := json.Marshal(corev1.Pod{Status: new})
	if err != nil {
		return nil, err
	}
	if bytes.Equal(oldJSON, sameJSON) {
		return nil, nil
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: new})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
}

// event records an Event about a container.
func (w *podWorker) event(pod *corev1.Pod, ps *podSim, c *containerSim, eventType, reason, format string, args ...any) {
	ps.node.recorder.Eventf(podRef(pod, c.fieldPath), eventType, reason, format, args...)
}

// podRef refers to a pod, or to one of its containers by field path.
func podRef(pod *corev1.Pod, fieldPath string) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1",
		Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		FieldPath: fieldPath,
	}
}

// podDesc names a pod as the kubelet's messages do: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// imageID is the stable digest reference the runtime reports for an image.
func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	return imageRepository(image) + "@sha256:" + hex.EncodeToString(sum[:])
}

// newContainerID is a fresh runtime container ID.
func newContainerID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "kubelet-double://" + hex.EncodeToString(b[:])
}

// isTrue reports whether an optional flag is set.
func isTrue(b *bool) bool { return b != nil && *b }
