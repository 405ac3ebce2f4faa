package nodetest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Client is an admin client of the control plane.
func (e *Env) Client(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	k, err := kubernetes.NewForConfig(e.Cluster.Admin())
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// Namespace creates a namespace named after the test and deletes it when
// the test ends (its pods stop on the node).
func (e *Env) Namespace(tb testing.TB) string {
	tb.Helper()
	k := e.Client(tb)
	name := strings.Trim(strings.ToLower(nonName.Replace(tb.Name())), "-")
	if len(name) > 63 {
		name = strings.Trim(name[:63], "-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("namespace %s: %v", name, err)
	}
	tb.Cleanup(func() {
		_ = k.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

var nonName = strings.NewReplacer("/", "-", "_", "-", ".", "-")

// ProbePod is a pod of the probe image running args (probe's commands:
// serve, lookup, lookup-loop, get, sleep). It never restarts, so its phase
// says how the command ended.
func ProbePod(name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "probe", Image: ProbeImage, Args: args, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
}

// RunPod creates the pod in ns and waits (bounded by ctx) until it has
// ended; it returns its phase and log. The test fails if it does not end.
func (e *Env) RunPod(ctx context.Context, tb testing.TB, ns string, pod *corev1.Pod) (corev1.PodPhase, string) {
	tb.Helper()
	k := e.Client(tb)
	if _, err := k.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create pod %s: %v", pod.Name, err)
	}
	var phase corev1.PodPhase
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := k.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		tb.Fatalf("pod %s/%s did not end (phase %q): %v\n%s", ns, pod.Name, phase, err, e.Node.LogTails())
	}
	logs, err := k.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		tb.Fatalf("logs of %s/%s: %v", ns, pod.Name, err)
	}
	return phase, string(logs)
}

// WebService runs a two-replica Deployment of the probe's HTTP server in
// ns behind a ClusterIP Service named web (port 80), waits (bounded by
// ctx) until its pods are ready and returns the Service's cluster IP. A
// GET of it answers with the name of the pod that served it.
func (e *Env) WebService(ctx context.Context, tb testing.TB, ns string) string {
	tb.Helper()
	k := e.Client(tb)
	replicas := int32(2)
	labels := map[string]string{"app": "web"}
	_, err := k.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: ProbeImage, Args: []string{"serve", ":8080"},
					Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("deployment %s/web: %v", ns, err)
	}
	svc, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("service %s/web: %v", ns, err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := k.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == replicas, nil
	})
	if err != nil {
		tb.Fatalf("deployment %s/web not ready: %v\n%s", ns, err, e.Node.LogTails())
	}
	return svc.Spec.ClusterIP
}
