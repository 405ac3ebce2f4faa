package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/saltbush/saltbush/server"
)

// The embedded etcd's member name and cluster token: server/server.go
// (startEmbeddedEtcd) names the member, store/embedetcd/embedetcd.go sets
// the token. A restored data directory must carry both, or the embedded
// member would not recognise it as its own.
const (
	embeddedMemberName   = "saltbush"
	embeddedClusterToken = "saltbush"
	// The peer URL recorded in a restored single member's membership. The
	// embedded member listens on a free port each start and has no peers, so
	// this address is never dialled.
	embeddedPeerURL = "http://127.0.0.1:2380"
)

// defaultRevisionBump is what a restore adds to the snapshot's revision:
// more writes than etcd commits between two snapshots, so every revision
// after the restore is newer than any a guest agent or a watch saw before
// it (docs/operations.md, "Backup and restore").
const defaultRevisionBump = 1_000_000_000

func newAdminEtcdCommand(af *adminFlags) *cobra.Command {
	cmd := group(&cobra.Command{Use: "etcd", Short: "Back up and restore saltbush's etcd (docs/operations.md, \"Backup and restore\")"})
	snap := group(&cobra.Command{Use: "snapshot", Short: "etcd snapshots: save from a running etcd, inspect, restore into an embedded data directory"})
	cmd.AddCommand(snap)

	var dataDir, cacert, cert, key, username, password string
	var endpoints []string
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of the embedded etcd (DATA_DIR/etcd-endpoints) or of one external member (--etcd-endpoints)",
		Long: "Saves a point-in-time snapshot of saltbush's etcd into FILE (written to FILE.part, then renamed), " +
			"as `etcdctl snapshot save` does, and prints its revision, key count, size and hash. Without " +
			"--etcd-endpoints it reaches the embedded etcd of the `saltbush serve` running on --data-dir. An " +
			"external cluster is snapshotted from one member: name exactly one endpoint. Back up the master key " +
			"with the snapshot: without it the sealed secrets in it cannot be opened.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			eps := endpoints
			if len(eps) == 0 {
				path := server.Config{DataDir: dataDir}.EtcdEndpointsFile()
				b, err := os.ReadFile(path) //nolint:gosec // G304: the data directory the operator names
				if err != nil {
					return fmt.Errorf("the embedded etcd's endpoints (is saltbush serve running on %s?): %w", dataDir, err)
				}
				eps = strings.Split(strings.TrimSpace(string(b)), ",")
			}
			if len(eps) != 1 {
				return fmt.Errorf("a snapshot is taken from one member; name one of %v with --etcd-endpoints", eps)
			}
			cfg := clientv3.Config{Endpoints: eps, Username: username, Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
			if cacert != "" || cert != "" || key != "" {
				tlsCfg, err := (&transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: cacert}).ClientConfig()
				if err != nil {
					return fmt.Errorf("etcd TLS: %w", err)
				}
				cfg.TLS = tlsCfg
			}
			mgr := snapshot.NewV3(zap.NewNop())
			if _, err := mgr.Save(cmd.Context(), cfg, args[0]); err != nil {
				return fmt.Errorf("snapshot %s: %w", eps[0], err)
			}
			return printSnapshotStatus(cmd, af, mgr, args[0])
		},
	}
	f := save.Flags()
	f.StringVar(&dataDir, "data-dir", "./data", "data directory of the saltbush serve whose embedded etcd to snapshot")
	f.StringSliceVar(&endpoints, "etcd-endpoints", nil, "the one external etcd member to snapshot (instead of the embedded etcd)")
	f.StringVar(&cacert, "etcd-cacert", "", "CA bundle that signed the etcd server certificate")
	f.StringVar(&cert, "etcd-cert", "", "client certificate presented to etcd")
	f.StringVar(&key, "etcd-key", "", "key of --etcd-cert")
	f.StringVar(&username, "etcd-username", "", "etcd user, when etcd auth is on")
	f.StringVar(&password, "etcd-password", "", "password of --etcd-username (prefer SALTBUSH_ETCD_PASSWORD)")

	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Print a snapshot file's revision, key count, size and hash (checking its integrity)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return printSnapshotStatus(cmd, af, snapshot.NewV3(zap.NewNop()), args[0])
		},
	}

	var restoreDir string
	var bump uint64
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a snapshot into a new embedded-etcd data directory (DATA_DIR/etcd)",
		Long: "Writes DATA_DIR/etcd from the snapshot FILE, as `etcdutl snapshot restore` does, with the embedded " +
			"member's name and cluster token, so that `saltbush serve --data-dir DATA_DIR` starts on it. " +
			"DATA_DIR/etcd must not exist (move the old one aside): saltbush serve must be stopped. The revision " +
			"is bumped by --bump-revision and marked compacted, so guest agents, which refuse a desired set older " +
			"than the one they hold, take the restored one. Put the master key of the backup in " +
			"DATA_DIR/master.key (or give it with --master-key-file / SALTBUSH_MASTER_KEY). For an external " +
			"cluster use `etcdutl snapshot restore` on every member (docs/operations.md).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := filepath.Join(restoreDir, "etcd")
			if _, err := os.Stat(dir); err == nil {
				return fmt.Errorf("%s exists: stop saltbush serve and move it aside first", dir)
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if err := os.MkdirAll(restoreDir, 0o700); err != nil {
				return err
			}
			mgr := snapshot.NewV3(zap.NewNop())
			if err := mgr.Restore(snapshot.RestoreConfig{
				SnapshotPath: args[0], Name: embeddedMemberName, OutputDataDir: dir, PeerURLs: []string{embeddedPeerURL},
				InitialCluster: embeddedMemberName + "=" + embeddedPeerURL, InitialClusterToken: embeddedClusterToken,
				RevisionBump: bump, MarkCompacted: bump > 0,
			}); err != nil {
				return fmt.Errorf("restore %s into %s: %w", args[0], dir, err)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s (revision bumped by %d)\n", args[0], dir, bump)
			return err
		},
	}
	restore.Flags().StringVar(&restoreDir, "data-dir", "./data", "data directory of the saltbush serve to restore (DATA_DIR/etcd is written)")
	restore.Flags().Uint64Var(&bump, "bump-revision", defaultRevisionBump, "add this to the snapshot's revision and mark it compacted (0: keep the snapshot's revision; agents would refuse the restored desired sets)")

	snap.AddCommand(save, status, restore)
	return cmd
}

// printSnapshotStatus prints a snapshot file's status (reading it checks
// its integrity) in the form -o chooses.
func printSnapshotStatus(cmd *cobra.Command, af *adminFlags, mgr snapshot.Manager, path string) error {
	st, err := mgr.Status(path)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	hash := fmt.Sprintf("%08x", st.Hash)
	return af.printDoc(cmd, map[string]any{
		"file": path, "revision": st.Revision, "totalKeys": st.TotalKey, "totalSize": st.TotalSize,
		"hash": hash, "storageVersion": st.Version,
	}, []table{record("",
		field{"File", path},
		field{"Revision", strconv.FormatInt(st.Revision, 10)},
		field{"Total keys", strconv.Itoa(st.TotalKey)},
		field{"Total size", strconv.FormatInt(st.TotalSize, 10) + " bytes"},
		field{"Hash", hash},
		field{"Storage version", st.Version},
	)})
}
