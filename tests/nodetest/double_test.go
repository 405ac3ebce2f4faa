package nodetest_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/nodetest"
)

// TestKubeletDoubleAgrees runs the same pods on the real node and on
// tests/kubetest's kubelet double (its own control plane, started here)
// and compares what each kubelet reports once the pod has reached the
// same state: the pod's phase and conditions, the container's state,
// reason, message (names, uids and back-off durations left out), last
// state and restart count, and the reasons of the kubelet's Events. The
// fast tests judge add-ons by what the double reports; where the two
// disagree, the double is wrong.
func TestKubeletDoubleAgrees(t *testing.T) {
	env := nodetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	double, err := kubetest.Start(ctx, kubetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer double.Stop()
	real := kubeletUnderTest{name: "real kubelet", k8s: env.Client(t), ns: env.Namespace(t)}
	fake := kubeletUnderTest{name: "kubelet double", k8s: kubernetes.NewForConfigOrDie(double.Admin()), ns: "double"}
	if _, err := fake.k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fake.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const absent = "saltbush/absent:1.0" // an image the node's registry does not serve

	tests := []struct {
		name string
		args []string
		// image is the pod's image; the double is told to behave with
		// it as the real node's runtime does.
		image    string
		behavior kubetest.Behavior
		// reached is the state compared.
		reached func(cs corev1.ContainerStatus) bool
	}{
		{name: "running", image: nodetest.ProbeImage, args: []string{"sleep"}, behavior: kubetest.Run,
			reached: func(cs corev1.ContainerStatus) bool { return cs.Ready }},
		// probe exits 1 on a command it does not know.
		{name: "crash loop", image: nodetest.ProbeImage, args: []string{"crash"}, behavior: kubetest.CrashLoopBackOff,
			reached: func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
			}},
		{name: "image pull back-off", image: absent, behavior: kubetest.ImagePullBackOff,
			reached: func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ImagePullBackOff"
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			double.Kubelet().SetImageBehavior(tt.image, tt.behavior)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agree-%d", i)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "probe", Image: tt.image, Args: tt.args, ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			}
			want := real.observe(ctx, t, pod, tt.reached)
			got := fake.observe(ctx, t, pod, tt.reached)
			if want.String() != got.String() {
				t.Errorf("the kubelet double reports\n%s\nthe real kubelet\n%s", got, want)
			}
			t.Logf("both report:\n%s", want)
		})
	}
}

// kubeletUnderTest is a cluster whose kubelet a pod is run on.
type kubeletUnderTest struct {
	name string
	k8s  kubernetes.Interface
	ns   string
}

// observe creates pod and waits until its container has reached the
// state; it returns what the kubelet reported then, Events included.
func (k kubeletUnderTest) observe(ctx context.Context, t *testing.T, pod *corev1.Pod, reached func(corev1.ContainerStatus) bool) podShape {
	t.Helper()
	created, err := k.k8s.CoreV1().Pods(k.ns).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: create pod: %v", k.name, err)
	}
	began := time.Now()
	var last *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := k.k8s.CoreV1().Pods(k.ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return len(p.Status.ContainerStatuses) == 1 && reached(p.Status.ContainerStatuses[0]), nil
	})
	if err != nil {
		t.Fatalf("%s: the pod never reached the state: %v\n%+v", k.name, err, last.Status)
	}
	shape := shapeOf(last)
	reachedIn := time.Since(began)
	// Events are written after the status that goes with them, or
	// before: wait until this state's are in.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		evs, err := k.k8s.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(created.UID)).String()})
		if err != nil {
			return false, nil
		}
		shape.events = eventReasons(evs.Items)
		return shape.eventsComplete(), nil
	})
	if err != nil {
		t.Fatalf("%s: the pod's Events never complete (%v): %v", k.name, shape.events, err)
	}
	t.Logf("%s: the state in %v, its Events in %v", k.name, reachedIn.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	_ = k.k8s.CoreV1().Pods(k.ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	return shape
}

// podShape is what a kubelet reports about a one-container pod, without
// what differs between any two runs (names, uids, times, addresses).
type podShape struct {
	phase      corev1.PodPhase
	conditions []string
	state      string
	lastState  string
	restarted  bool
	ready      bool
	started    string
	ids        string
	events     []string
}

func (s podShape) String() string {
	return fmt.Sprintf("  phase %s\n  conditions %s\n  state %s\n  last state %s\n  restarted %v, ready %v, started %s, %s\n  events %s",
		s.phase, strings.Join(s.conditions, " "), s.state, s.lastState, s.restarted, s.ready, s.started, s.ids, strings.Join(s.events, " "))
}

// eventsComplete says whether the Events the state implies are in: the
// container's start for a running or crashing one, the back-off for one
// waiting in back-off.
func (s podShape) eventsComplete() bool {
	has := func(r string) bool {
		return slices.ContainsFunc(s.events, func(e string) bool { return strings.HasSuffix(e, "/"+r) })
	}
	switch {
	case strings.Contains(s.state, "ImagePullBackOff"):
		return has("BackOff") && has("Failed")
	case strings.Contains(s.state, "CrashLoopBackOff"):
		return has("BackOff") && has("Started")
	default:
		return has("Started")
	}
}

func shapeOf(p *corev1.Pod) podShape {
	s := podShape{phase: p.Status.Phase}
	for _, c := range p.Status.Conditions {
		s.conditions = append(s.conditions, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	slices.Sort(s.conditions)
	cs := p.Status.ContainerStatuses[0]
	s.state = stateString(cs.State, p)
	s.lastState = stateString(cs.LastTerminationState, p)
	s.restarted, s.ready = cs.RestartCount > 0, cs.Ready
	s.started = "unset"
	if cs.Started != nil {
		s.started = fmt.Sprint(*cs.Started)
	}
	s.ids = fmt.Sprintf("imageID set %v, containerID set %v, podIP set %v, hostIP set %v, startTime set %v, qos %s",
		cs.ImageID != "", cs.ContainerID != "", p.Status.PodIP != "", p.Status.HostIP != "", p.Status.StartTime != nil, p.Status.QOSClass)
	return s
}

// stateString is a container state with its reason, exit code and
// message; the message without the pod's identity, durations and what
// follows the first error's name (the runtime's own words).
func stateString(st corev1.ContainerState, p *corev1.Pod) string {
	switch {
	case st.Waiting != nil:
		return "waiting " + st.Waiting.Reason + ": " + normalize(st.Waiting.Message, p)
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		return fmt.Sprintf("terminated %s exit %d: %s", st.Terminated.Reason, st.Terminated.ExitCode, normalize(st.Terminated.Message, p))
	}
	return "none"
}

var (
	durations = regexp.MustCompile(`\b\d+(ms|s|m\d+s|m)\b`)
	// afterError cuts a message after its first "ErrImagePull: " and
	// the like: the rest is the runtime's error, in its own words.
	afterError = regexp.MustCompile(`(Err[A-Za-z]+|rpc error): .*`)
)

func normalize(msg string, p *corev1.Pod) string {
	msg = strings.ReplaceAll(msg, p.Name+"_"+p.Namespace+"("+string(p.UID)+")", "POD_NS(UID)")
	msg = durations.ReplaceAllString(msg, "DURATION")
	return afterError.ReplaceAllString(msg, "$1: …")
}

// eventReasons are the pod's Events as type/reason, in a stable order,
// each once (the scheduler's included: it is the same scheduler).
func eventReasons(evs []corev1.Event) []string {
	var out []string
	for _, e := range evs {
		if r := e.Type + "/" + e.Reason; !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}
