package health

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(gen int64, rv string, labels map[string]any, status any, data any) *unstructured.Unstructured {
	meta := map[string]any{"name": "x", "resourceVersion": rv}
	if gen != 0 {
		meta["generation"] = gen
	}
	if labels != nil {
		meta["labels"] = labels
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "K", "metadata": meta}}
	if status != nil {
		u.Object["status"] = status
	}
	if data != nil {
		u.Object["data"] = data
	}
	return u
}

func TestSpecChanged(t *testing.T) {
	tests := []struct {
		name string
		o, n *unstructured.Unstructured
		want bool
	}{
		{"status only, with generations", obj(3, "1", nil, map[string]any{"a": 1}, nil), obj(3, "2", nil, map[string]any{"a": 2}, nil), false},
		{"new generation", obj(3, "1", nil, nil, nil), obj(4, "2", nil, nil, nil), true},
		{"labels", obj(3, "1", map[string]any{"a": "1"}, nil, nil), obj(3, "2", map[string]any{"a": "2"}, nil, nil), true},
		{"resync", obj(0, "1", nil, nil, nil), obj(0, "1", nil, nil, nil), false},
		{"no generations, something trimmed changed", obj(0, "1", nil, nil, nil), obj(0, "2", nil, nil, nil), true},
		{"no generations, status only", obj(0, "1", nil, map[string]any{"p": "a"}, nil), obj(0, "2", nil, map[string]any{"p": "b"}, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := specChanged(tt.o, tt.n); got != tt.want {
				t.Fatalf("specChanged = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCurrentTemplate(t *testing.T) {
	pod := func(image string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
	}
	want := map[string]string{"app": "app:2"}
	if !currentTemplate(pod("app:2"), want) {
		t.Error("a pod of the current image is not current")
	}
	if currentTemplate(pod("app:1"), want) {
		t.Error("a pod of the previous image counts as current")
	}
	if !currentTemplate(pod("app:1"), nil) {
		t.Error("without a known template every pod counts")
	}
}

func TestTrimKeepsWhatKstatusReads(t *testing.T) {
	d := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "d", "generation": int64(2), "managedFields": []any{map[string]any{"manager": "eks"}}},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": "app:2", "env": []any{"big"}}}}}},
		"status": map[string]any{"observedGeneration": int64(2)}}}
	out, err := trim(d)
	if err != nil {
		t.Fatal(err)
	}
	u := out.(*unstructured.Unstructured)
	if _, ok := u.Object["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("managed fields kept")
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 2 {
		t.Error("spec.replicas dropped")
	}
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 || cs[0].(map[string]any)["image"] != "app:2" || cs[0].(map[string]any)["env"] != nil {
		t.Errorf("template containers trimmed to %v, want name and image only", cs)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "v"}}}
	out, _ = trim(cm)
	if _, ok := out.(*unstructured.Unstructured).Object["data"]; ok {
		t.Error("ConfigMap data kept in the cache")
	}
}
