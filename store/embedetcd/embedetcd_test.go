package embedetcd

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A second member on a data directory in use fails at once instead of
// waiting forever for etcd's backend lock.
func TestDataDirInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	first, err := Start(ctx, Config{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second, err := Start(ctx, Config{Dir: dir, UnsafeNoFsync: true})
	if err == nil {
		second.Close()
		t.Fatal("second member on the same directory started")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("error = %v, want 'in use'", err)
	}
	t.Logf("refused after %s", time.Since(start))
	first.Close()
	// Released on close: the directory can be used again.
	again, err := Start(ctx, Config{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("restart after close: %v", err)
	}
	again.Close()
}
