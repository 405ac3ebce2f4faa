package apply

import (
	"reflect"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

func TestRemovePath(t *testing.T) {
	deployment := func() map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "d", "labels": map[string]any{"a": "1", "b": "2"}},
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
				"containers": []any{
					map[string]any{"name": "app", "image": "app:1", "args": []any{"-v", "-x"}},
					map[string]any{"name": "side", "image": "side:1"},
				}}}},
		}
	}
	container := func(name string) *value.FieldList {
		return &value.FieldList{{Name: "name", Value: value.NewValueInterface(name)}}
	}
	tests := []struct {
		name string
		path fieldpath.Path
		want func(m map[string]any)
	}{
		{"a scalar", fieldpath.MakePathOrDie("spec", "replicas"), func(m map[string]any) {
			delete(m["spec"].(map[string]any), "replicas")
		}},
		{"a label", fieldpath.MakePathOrDie("metadata", "labels", "a"), func(m map[string]any) {
			delete(m["metadata"].(map[string]any)["labels"].(map[string]any), "a")
		}},
		{"a field of a keyed list item", fieldpath.MakePathOrDie("spec", "template", "spec", "containers", container("side"), "image"), func(m map[string]any) {
			delete(m["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[1].(map[string]any), "image")
		}},
		{"a keyed list item", fieldpath.MakePathOrDie("spec", "template", "spec", "containers", container("app")), func(m map[string]any) {
			ps := m["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			ps["containers"] = ps["containers"].([]any)[1:]
		}},
		{"a set member", fieldpath.MakePathOrDie("spec", "template", "spec", "containers", container("app"), "args", value.NewValueInterface("-x")), func(m map[string]any) {
			c := m["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["args"] = []any{"-v"}
		}},
		{"absent", fieldpath.MakePathOrDie("spec", "paused"), func(map[string]any) {}},
		{"through a missing item", fieldpath.MakePathOrDie("spec", "template", "spec", "containers", container("none"), "image"), func(map[string]any) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := deployment(), deployment()
			removePath(got, tt.path)
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

func TestKeep(t *testing.T) {
	key := &value.FieldList{{Name: "name", Value: value.NewValueInterface("app")}}
	tests := []struct {
		path fieldpath.Path
		keep bool
	}{
		{fieldpath.MakePathOrDie("metadata", "name"), true},
		{fieldpath.MakePathOrDie("metadata", "labels", AddonLabel), true},
		{fieldpath.MakePathOrDie("spec", "containers", key, "name"), true},
		{fieldpath.MakePathOrDie("spec", "containers", key, "image"), false},
		{fieldpath.MakePathOrDie("data", "message"), false},
	}
	for _, tt := range tests {
		if got := keep(tt.path); got != tt.keep {
			t.Errorf("keep(%s) = %v, want %v", tt.path, got, tt.keep)
		}
	}
}
