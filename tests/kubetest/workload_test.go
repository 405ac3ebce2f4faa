package kubetest_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// A Deployment's pods are scheduled, started by the kubelet double, and
// the real controller manager reports the Deployment Available.
func TestDeploymentBecomesAvailable(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("web", "kubetest/web:1.0", 3), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "web")

	rs, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(rs.Items) != 1 {
		t.Fatalf("ReplicaSets of web: %v (err %v), want one", len(rs.Items), err)
	}
	pods, err := podsOf(ctx, client, ns, "web")
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	_, podNet, _ := net.ParseCIDR("10.244.0.0/16")
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || !podCondition(&p, corev1.PodReady) || !podCondition(&p, corev1.ContainersReady) ||
			!podCondition(&p, corev1.PodInitialized) || !podCondition(&p, corev1.PodScheduled) || !podCondition(&p, corev1.PodReadyToStartContainers) {
			t.Errorf("pod %s: phase %s conditions %+v, want Running with every condition True", p.Name, p.Status.Phase, p.Status.Conditions)
		}
		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !podNet.Contains(ip) {
			t.Errorf("pod %s: podIP %q, want one in %s", p.Name, p.Status.PodIP, podNet)
		}
		if p.Status.HostIP == "" || p.Status.StartTime == nil {
			t.Errorf("pod %s: hostIP %q startTime %v, want both set", p.Name, p.Status.HostIP, p.Status.StartTime)
		}
		if n := len(p.Status.ContainerStatuses); n != 1 || p.Status.ContainerStatuses[0].State.Running == nil || !p.Status.ContainerStatuses[0].Ready {
			t.Errorf("pod %s: container statuses %+v, want one running and ready", p.Name, p.Status.ContainerStatuses)
		}
	}
	waitEvent(t, ctx, client, ns, "web-*", "Started")
}

// A pod whose Secret volume is missing stays ContainerCreating with a
// FailedMount Event, and starts once the Secret is created.
func TestMissingSecretVolumeBlocksUntilCreated(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	d := deployment("needs-secret", "kubetest/app:1.0", 1)
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{
		Name:         "config",
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-config"}},
	}}
	d.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	event := waitEvent(t, ctx, client, ns, "needs-secret-*", "FailedMount")
	if !strings.Contains(event.Message, `secret "app-config" not found`) {
		t.Errorf("FailedMount message %q, want it to name the missing secret", event.Message)
	}
	waitUntil(t, ctx, "pod waiting ContainerCreating", func(ctx context.Context) (bool, string, error) {
		pods, err := podsOf(ctx, client, ns, "needs-secret")
		if err != nil {
			return false, "", err
		}
		for _, p := range pods {
			if p.Status.Phase == corev1.PodPending && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "ContainerCreating" && p.Status.PodIP == "" {
				return true, "", nil
			}
		}
		return false, describePods(pods), nil
	})
	// Still not ready after the kubelet has reported the failure.
	got, err := client.AppsV1().Deployments(ns).Get(ctx, "needs-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Deployment: %v", err)
	}
	if got.Status.ReadyReplicas != 0 || deploymentCondition(got, appsv1.DeploymentAvailable) {
		t.Fatalf("Deployment ready replicas %d, conditions %s: want none ready while the Secret is missing",
			got.Status.ReadyReplicas, deploymentConditions(got))
	}

	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app-config"},
		StringData: map[string]string{"config.yaml": "level: debug\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "needs-secret")
}

// A container whose env names a missing Secret key waits
// CreateContainerConfigError until the key exists.
func TestMissingEnvSecretKeyBlocksContainer(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"user": "agent"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret: %v", err)
	}
	d := deployment("needs-key", "kubetest/app:1.0", 1)
	d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{
		Name: "PASSWORD",
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password",
		}},
	}}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	waitUntil(t, ctx, "container waiting CreateContainerConfigError", func(ctx context.Context) (bool, string, error) {
		pods, err := podsOf(ctx, client, ns, "needs-key")
		if err != nil {
			return false, "", err
		}
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Waiting != nil && s.State.Waiting.Reason == "CreateContainerConfigError" &&
					strings.Contains(s.State.Waiting.Message, "couldn't find key password in Secret") {
					return true, "", nil
				}
			}
		}
		return false, describePods(pods), nil
	})
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"user": "agent", "password": "hunter2"},
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Secret: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "needs-key")
}

// An image that cannot be pulled leaves the pod ErrImagePull then
// ImagePullBackOff, never ready; when it can be pulled the pod starts.
func TestImagePullBackOff(t *testing.T) {
	t.Parallel()
	c, client, ns, ctx := setup(t)
	const image = "kubetest/unpullable:1.0"
	c.Kubelet().SetImageBehavior(image, kubetest.ImagePullBackOff)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("unpullable", image, 1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	waitUntil(t, ctx, "container waiting ImagePullBackOff", func(ctx context.Context) (bool, string, error) {
		pods, err := podsOf(ctx, client, ns, "unpullable")
		if err != nil {
			return false, "", err
		}
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				if s.Ready || podCondition(&p, corev1.PodReady) {
					return false, "", fmt.Errorf("pod %s ready with an unpullable image", p.Name)
				}
				if s.State.Waiting != nil && s.State.Waiting.Reason == "ImagePullBackOff" && p.Status.Phase == corev1.PodPending {
					return true, "", nil
				}
			}
		}
		return false, describePods(pods), nil
	})
	failed := waitEvent(t, ctx, client, ns, "unpullable-*", "Failed")
	if !strings.Contains(failed.Message, image) && !strings.Contains(failed.Message, "ErrImagePull") && !strings.Contains(failed.Message, "ImagePullBackOff") {
		t.Errorf("Failed event message %q, want it about the image pull", failed.Message)
	}
	waitEvent(t, ctx, client, ns, "unpullable-*", "BackOff")

	c.Kubelet().SetImageBehavior(image, kubetest.Run)
	waitDeploymentAvailable(t, ctx, client, ns, "unpullable")
}

// A healthy pod whose image turns CrashLoopBackOff restarts with a growing
// restart count and is not ready; turned back to Run it is ready again.
func TestCrashLoopBackOffAndRecovery(t *testing.T) {
	t.Parallel()
	c, client, ns, ctx := setup(t)
	const image = "kubetest/flaky:2.0"
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("flaky", image, 1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "flaky")

	// By repository: every tag of kubetest/flaky crashes.
	c.Kubelet().SetImageBehavior("kubetest/flaky", kubetest.CrashLoopBackOff)
	waitUntil(t, ctx, "container crash-looping with restarts", func(ctx context.Context) (bool, string, error) {
		pods, err := podsOf(ctx, client, ns, "flaky")
		if err != nil {
			return false, "", err
		}
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				last := s.LastTerminationState.Terminated
				if s.State.Waiting != nil && s.State.Waiting.Reason == "CrashLoopBackOff" && s.RestartCount >= 2 &&
					last != nil && last.ExitCode == 1 && !s.Ready && !podCondition(&p, corev1.PodReady) && p.Status.Phase == corev1.PodRunning {
					return true, "", nil
				}
			}
		}
		return false, describePods(pods), nil
	})
	waitUntil(t, ctx, "Deployment unavailable", func(ctx context.Context) (bool, string, error) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return d.Status.AvailableReplicas == 0 && !deploymentCondition(d, appsv1.DeploymentAvailable),
			fmt.Sprintf("available %d, conditions %s", d.Status.AvailableReplicas, deploymentConditions(d)), nil
	})
	waitEvent(t, ctx, client, ns, "flaky-*", "BackOff")

	c.Kubelet().SetImageBehavior("kubetest/flaky", kubetest.Run)
	waitDeploymentAvailable(t, ctx, client, ns, "flaky")
}

// A DaemonSet gets one ready pod on each node.
func TestDaemonSetOnePodPerNode(t *testing.T) {
	t.Parallel()
	c, client, ns, ctx := setup(t)
	labels := map[string]string{"app": "agent"}
	privileged := true
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true,
					Containers: []corev1.Container{{
						Name: "agent", Image: "kubetest/node-agent:1.0",
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
					}},
				},
			},
		},
	}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DaemonSet: %v", err)
	}
	nodes := c.Kubelet().NodeNames()
	waitUntil(t, ctx, "DaemonSet ready on every node", func(ctx context.Context) (bool, string, error) {
		got, err := client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s, n := got.Status, len(nodes)
		return s.ObservedGeneration >= got.Generation && int(s.DesiredNumberScheduled) == n &&
				int(s.NumberReady) == n && int(s.NumberAvailable) == n && int(s.UpdatedNumberScheduled) == n,
			fmt.Sprintf("desired %d ready %d available %d", s.DesiredNumberScheduled, s.NumberReady, s.NumberAvailable), nil
	})
	pods, err := podsOf(ctx, client, ns, "agent")
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	onNode := map[string]int{}
	for _, p := range pods {
		onNode[p.Spec.NodeName]++
		if p.Status.PodIP != p.Status.HostIP {
			t.Errorf("hostNetwork pod %s: podIP %s, want the node's %s", p.Name, p.Status.PodIP, p.Status.HostIP)
		}
	}
	for _, n := range nodes {
		if onNode[n] != 1 {
			t.Errorf("node %s has %d agent pods, want 1 (pods: %s)", n, onNode[n], describePods(pods))
		}
	}
}

// A Job's pod runs and finishes Succeeded; the Job completes.
func TestJobCompletes(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate"},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy:  corev1.RestartPolicyNever,
					InitContainers: []corev1.Container{{Name: "wait", Image: "kubetest/wait:1.0"}},
					Containers:     []corev1.Container{{Name: "migrate", Image: "kubetest/migrate:1.0"}},
				},
			},
		},
	}
	if _, err := client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Job: %v", err)
	}
	waitUntil(t, ctx, "Job complete", func(ctx context.Context) (bool, string, error) {
		got, err := client.BatchV1().Jobs(ns).Get(ctx, "migrate", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("succeeded %d active %d failed %d", got.Status.Succeeded, got.Status.Active, got.Status.Failed), nil
	})
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=migrate"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the Job: %d (err %v), want 1", len(pods.Items), err)
	}
	p := pods.Items[0]
	if p.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod phase %s, want Succeeded", p.Status.Phase)
	}
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 || s.State.Terminated.Reason != "Completed" {
			t.Errorf("container %s state %+v, want terminated Completed with exit code 0", s.Name, s.State)
		}
	}
}

// Foreground deletion of a Deployment completes: the garbage collector
// deletes its ReplicaSet and pods (which the kubelet double stops and
// deletes) before the Deployment itself.
func TestForegroundDeletion(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("doomed", "kubetest/app:1.0", 2), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "doomed")
	foreground := metav1.DeletePropagationForeground
	if err := client.AppsV1().Deployments(ns).Delete(ctx, "doomed", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatalf("delete Deployment: %v", err)
	}
	waitUntil(t, ctx, "Deployment, ReplicaSets and pods gone", func(ctx context.Context) (bool, string, error) {
		_, err := client.AppsV1().Deployments(ns).Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, "", err
		}
		deploymentGone := apierrors.IsNotFound(err)
		rs, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		pods, err := podsOf(ctx, client, ns, "doomed")
		if err != nil {
			return false, "", err
		}
		return deploymentGone && len(rs.Items) == 0 && len(pods) == 0,
			fmt.Sprintf("deployment gone %v, %d ReplicaSets, pods: %s", deploymentGone, len(rs.Items), describePods(pods)), nil
	})
}

// Deleting a namespace with a running workload completes: the namespace
// controller deletes its content, the kubelet double its pods.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel()
	_, client, ns, ctx := setup(t)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deployment("tenant", "kubetest/app:1.0", 2), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "b"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	waitDeploymentAvailable(t, ctx, client, ns, "tenant")
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	waitUntil(t, ctx, "namespace gone", func(ctx context.Context) (bool, string, error) {
		got, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		pods, _ := podsOf(ctx, client, ns, "tenant")
		return false, fmt.Sprintf("phase %s conditions %+v pods: %s", got.Status.Phase, got.Status.Conditions, describePods(pods)), nil
	})
}
