package kubetest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// testNodes is the number of nodes of the shared cluster: more than one, so
// the DaemonSet test shows one pod per node.
const testNodes = 2

// testTimeout bounds each test's waits: generous, since a loaded machine
// slows every step (tests never assert how long a step took).
const testTimeout = 2 * time.Minute

func TestMain(m *testing.M) {
	kubetest.Main(m, kubetest.Options{
		Nodes: testNodes,
		// As on EKS: each node may write only its own Node, Lease and pods,
		// which the kubelet double's per-node identities must satisfy.
		ExtraAPIServerArgs: []string{"--enable-admission-plugins=NodeRestriction"},
	})
}

// setup returns the shared cluster, an admin client, a fresh namespace
// (deleted when the test ends) and a context bounded by testTimeout.
func setup(t *testing.T) (*kubetest.Cluster, kubernetes.Interface, string, context.Context) {
	t.Helper()
	c := kubetest.Shared(t)
	client := kubernetes.NewForConfigOrDie(c.Admin())
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubetest-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is done by now; the deletion needs its own.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return c, client, ns.Name, ctx
}

// waitUntil polls check until it reports done, failing the test with the
// last state it described when ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, check func(ctx context.Context) (done bool, state string, err error)) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	state := "not checked yet"
	for {
		done, s, err := check(ctx)
		if err != nil && ctx.Err() == nil {
			s = "error: " + err.Error()
		}
		if s != "" {
			state = s
		}
		if done && err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last seen: %s", what, ctx.Err(), state)
		case <-tick.C:
		}
	}
}

// deployment is a Deployment of replicas pods of one container.
func deployment(name, image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "main", Image: image}},
				},
			},
		},
	}
}

// waitDeploymentAvailable waits until the controller manager reports every
// replica of the Deployment's current generation updated and available.
func waitDeploymentAvailable(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	waitUntil(t, ctx, "Deployment "+ns+"/"+name+" available", func(ctx context.Context) (bool, string, error) {
		var err error
		d, err = client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		want := *d.Spec.Replicas
		s := d.Status
		state := fmt.Sprintf("generation %d observed %d, replicas %d updated %d ready %d available %d, conditions %s",
			d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, deploymentConditions(d))
		return s.ObservedGeneration >= d.Generation && s.Replicas == want && s.UpdatedReplicas == want &&
			s.ReadyReplicas == want && s.AvailableReplicas == want && deploymentCondition(d, appsv1.DeploymentAvailable), state, nil
	})
	return d
}

// deploymentCondition reports whether a condition of the Deployment is True.
func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deploymentConditions describes the Deployment's conditions.
func deploymentConditions(d *appsv1.Deployment) string {
	var parts []string
	for _, c := range d.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// podsOf lists the pods matching the app label.
func podsOf(ctx context.Context, client kubernetes.Interface, ns, app string) ([]corev1.Pod, error) {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"app": app}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// podCondition reports whether a condition of the pod is True.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describePods summarises pods: phase, readiness and container states.
func describePods(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		var cs []string
		for _, s := range p.Status.ContainerStatuses {
			state := "unknown"
			switch {
			case s.State.Waiting != nil:
				state = "waiting " + s.State.Waiting.Reason
			case s.State.Running != nil:
				state = "running"
			case s.State.Terminated != nil:
				state = fmt.Sprintf("terminated %s (%d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
			}
			cs = append(cs, fmt.Sprintf("%s %s ready=%v restarts=%d", s.Name, state, s.Ready, s.RestartCount))
		}
		parts = append(parts, fmt.Sprintf("%s on %q %s ready=%v [%s]", p.Name, p.Spec.NodeName, p.Status.Phase,
			podCondition(&p, corev1.PodReady), strings.Join(cs, "; ")))
	}
	if len(parts) == 0 {
		return "no pods"
	}
	return strings.Join(parts, " | ")
}

// waitEvent waits for an Event with reason about an object named name
// (whose name starts with prefix, when name ends with "*").
func waitEvent(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	waitUntil(t, ctx, fmt.Sprintf("Event %s about %s/%s", reason, ns, name), func(ctx context.Context) (bool, string, error) {
		list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range list.Items {
			prefix, wildcard := strings.CutSuffix(name, "*")
			if e.Reason == reason && (e.InvolvedObject.Name == name || (wildcard && strings.HasPrefix(e.InvolvedObject.Name, prefix))) {
				found = e
				return true, "", nil
			}
			seen = append(seen, e.InvolvedObject.Name+":"+e.Reason)
		}
		return false, fmt.Sprintf("events %v", seen), nil
	})
	return found
}
