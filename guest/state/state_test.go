package state

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	st := &State{ClusterUID: "uid", InstanceID: "i-a",
		Desired: &deliveryv1.DesiredSet{Version: 42, Digest: "d", Addons: []*deliveryv1.DesiredAddon{{Name: "coredns", Uid: "u", Generation: 3, Manifest: []byte("kind: X\n")}}},
		Addons:  map[string]Addon{"coredns": {UID: "u", Generation: 3, Epoch: 7, Digest: "x"}}}
	if err := Save(dir, st); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir, "uid", "i-a")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Desired, st.Desired) || got.Addons["coredns"] != st.Addons["coredns"] {
		t.Fatalf("loaded %+v, saved %+v", got, st)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d files, want only %s (no temporary left)", len(entries), FileName)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, &State{ClusterUID: "uid", InstanceID: "i-a", Addons: map[string]Addon{"a": {Generation: 1}}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, uid, instance string
		want                int
	}{
		{"own state", "uid", "i-a", 1},
		{"another incarnation's state is ignored", "uid-2", "i-a", 0},
		{"another instance's state is ignored", "uid", "i-b", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Load(dir, tt.uid, tt.instance)
			if err != nil || len(st.Addons) != tt.want || st.ClusterUID != tt.uid {
				t.Fatalf("Load: %+v %v, want %d add-ons", st, err, tt.want)
			}
		})
	}
	if st, err := Load(filepath.Join(dir, "absent"), "uid", "i-a"); err != nil || st.Desired != nil {
		t.Fatalf("a missing state: %+v %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "uid", "i-a"); err == nil {
		t.Fatal("a corrupt state file loaded")
	}
}
