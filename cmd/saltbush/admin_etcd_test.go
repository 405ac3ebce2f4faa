package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// runAdmin runs `saltbush admin ARGS...` in process as main does and
// returns what it printed (JSON: the output is not a terminal), and an
// error carrying stderr when it failed.
func runAdmin(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, append([]string{"admin"}, args...), &stdout, &stderr); code != exitOK {
		return stdout.String(), fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// TestAdminEtcdSnapshot is the embedded-etcd procedure of
// docs/operations.md ("Backup and restore"): `admin etcd snapshot save`
// from a running saltbush serve's data directory, a change after it,
// `snapshot restore` into a new data directory, and saltbush serve on it
// has the records of the snapshot, not the later one, at a revision bumped
// past the snapshot's.
func TestAdminEtcdSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := servertest.Start(t)
	dev := srv.Dev(t)
	create := func(c *eks.Client, name string) {
		t.Helper()
		if _, err := c.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(name),
			RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"), ResourcesVpcConfig: &types.VpcConfigRequest{}}); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
	}
	create(srv.EKSAs(t, dev), "kept")

	file := filepath.Join(t.TempDir(), "saltbush.db")
	out, err := runAdmin(t, ctx, "etcd", "snapshot", "save", file, "--data-dir", srv.Config.DataDir)
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	var st struct {
		Revision  int64 `json:"revision"`
		TotalKeys int   `json:"totalKeys"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Revision == 0 || st.TotalKeys == 0 {
		t.Fatalf("snapshot save printed %q (%v), want its revision and keys", out, err)
	}
	if again, err := runAdmin(t, ctx, "etcd", "snapshot", "status", file); err != nil || again != out {
		t.Errorf("snapshot status = %q, %v; want what save printed, %q", again, err, out)
	}
	create(srv.EKSAs(t, dev), "lost")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	// A live data directory is never overwritten.
	if _, err := runAdmin(t, ctx, "etcd", "snapshot", "restore", file, "--data-dir", srv.Config.DataDir); err == nil ||
		!strings.Contains(err.Error(), "exists") {
		t.Errorf("restore over an existing DATA_DIR/etcd: %v, want a refusal", err)
	}
	restored := filepath.Join(t.TempDir(), "data")
	if _, err := runAdmin(t, ctx, "etcd", "snapshot", "restore", file, "--data-dir", restored); err != nil {
		t.Fatalf("snapshot restore: %v", err)
	}
	if _, err := os.Stat(filepath.Join(restored, "etcd", "member", "wal")); err != nil {
		t.Fatalf("restored data directory: %v", err)
	}

	again := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.DataDir = restored }))
	api := again.EKSAs(t, dev) // the key from before the snapshot
	if _, err := api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("kept")}); err != nil {
		t.Errorf("DescribeCluster kept after the restore: %v", err)
	}
	_, err = api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("lost")})
	wanterr.Type[*types.ResourceNotFoundException](t, err)
	resp, err := again.Etcd(t).Get(ctx, "saltbush-admin-etcd-test")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision < st.Revision+defaultRevisionBump {
		t.Errorf("revision after the restore %d, want at least the snapshot's %d + %d", resp.Header.Revision, st.Revision, defaultRevisionBump)
	}
}
