// Package state is what the agent remembers across restarts: the last
// desired set it accepted (its version, digest and content, so a restart
// resumes without the host resending it and a set older than it is
// refused), the epoch it last applied under, and per add-on the generation
// it applied and what it saw of it. The file is replaced atomically (write
// a temporary file, sync, rename, sync the directory), so a crash leaves
// either the old state or the new one, never a mix.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// FileName is the state file inside the state directory.
const FileName = "state.json"

// State is the agent's persistent state.
type State struct {
	// ClusterUID and InstanceID are whose state this is: a state dir
	// reused for another cluster or instance is ignored.
	ClusterUID string `json:"clusterUid"`
	InstanceID string `json:"instanceId"`
	// Desired is the last desired set accepted (nil: none).
	Desired *deliveryv1.DesiredSet `json:"-"`
	// Addons is per add-on what this agent applied as executor.
	Addons map[string]Addon `json:"addons,omitempty"`
}

// Addon is what the agent applied of one add-on.
type Addon struct {
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	// Epoch is the executor epoch it was applied under: after a
	// different epoch (another executor may have acted since) everything
	// is applied again.
	Epoch int64 `json:"epoch"`
	// Digest identifies the applied content (manifest and conflict mode).
	Digest string `json:"digest"`
	// Removed: the add-on was deleted (or released) for this generation.
	Removed bool `json:"removed,omitempty"`
}

// file is the on-disk form: the desired set as protojson.
type file struct {
	State
	Desired json.RawMessage `json:"desired,omitempty"`
}

// Load reads the state in dir; a missing file is an empty state for the
// given cluster and instance, and so is a state of another one.
func Load(dir, clusterUID, instanceID string) (*State, error) {
	empty := &State{ClusterUID: clusterUID, InstanceID: instanceID, Addons: map[string]Addon{}}
	b, err := os.ReadFile(filepath.Join(dir, FileName)) //nolint:gosec // G304: the agent's own state directory, from its config
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("state %s: %w", filepath.Join(dir, FileName), err)
	}
	if f.ClusterUID != clusterUID || f.InstanceID != instanceID {
		return empty, nil
	}
	st := f.State
	if st.Addons == nil {
		st.Addons = map[string]Addon{}
	}
	if len(f.Desired) > 0 {
		st.Desired = &deliveryv1.DesiredSet{}
		if err := protojson.Unmarshal(f.Desired, st.Desired); err != nil {
			return nil, fmt.Errorf("state %s: desired set: %w", filepath.Join(dir, FileName), err)
		}
	}
	return &st, nil
}

// Save replaces the state in dir atomically.
func Save(dir string, st *State) error {
	f := file{State: *st}
	if st.Desired != nil {
		b, err := protojson.Marshal(st.Desired)
		if err != nil {
			return fmt.Errorf("state: desired set: %w", err)
		}
		f.Desired = b
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, FileName+".*")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename, nothing is left to remove
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close() // the write's error is the one to report
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close() // the sync's error is the one to report
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	d, err := os.Open(dir) //nolint:gosec // G304: the agent's own state directory, from its config
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer func() { _ = d.Close() }() // opened only to sync the directory
	if err := d.Sync(); err != nil {
		return fmt.Errorf("state: sync %s: %w", dir, err)
	}
	return nil
}
