// Package etcdstore opens what saltbush keeps everything in: the embedded
// etcd (unless the configuration names an external one), a client of it
// and the store over that client.
package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/embedetcd"
)

// Config says which etcd to open and how.
type Config struct {
	// Endpoints select an external etcd; the embedded one runs when empty.
	Endpoints []string
	// DataDir holds the embedded etcd's data (DataDir/etcd).
	DataDir string
	// EndpointsFile is where the embedded etcd's client URLs are written.
	EndpointsFile string
	// UnsafeNoFsync and ElectionTimeout tune the embedded etcd.
	UnsafeNoFsync   bool
	ElectionTimeout time.Duration
	// CAFile, CertFile and KeyFile secure the connection to an external
	// etcd; Username and Password authenticate to one with auth on.
	CAFile, CertFile, KeyFile string
	Username, Password        string
	// Prefix is the root of saltbush's keyspace.
	Prefix string
	// Logger receives the embedded etcd's start.
	Logger *slog.Logger
}

// Opened is an open store and what it runs on. The caller closes Client,
// then Etcd.
type Opened struct {
	// Etcd is the embedded etcd; nil with an external one.
	Etcd   *embedetcd.Server
	Client *clientv3.Client
	Store  *store.Store
}

// Open starts the embedded etcd unless cfg names an external one, connects
// to it and opens the store. On failure it closes what it had opened.
func Open(ctx context.Context, cfg Config) (_ Opened, err error) {
	var o Opened
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	endpoints := cfg.Endpoints
	if len(endpoints) == 0 {
		if o.Etcd, endpoints, err = startEmbedded(ctx, cfg); err != nil {
			return Opened{}, err
		}
	}
	etcdTLS, err := clientTLS(cfg.CAFile, cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return Opened{}, err
	}
	o.Client, err = clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         etcdTLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		// Keep a dead member from stalling requests on a healthy cluster.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return Opened{}, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	if o.Store, err = store.New(ctx, o.Client, store.Options{Prefix: cfg.Prefix}); err != nil {
		return Opened{}, fmt.Errorf("open store: %w", err)
	}
	return o, nil
}

// close releases what Open had opened before it failed: the client, then
// the embedded etcd (the order Server.Close keeps).
func (o Opened) close() {
	if o.Client != nil {
		_ = o.Client.Close()
	}
	if o.Etcd != nil {
		o.Etcd.Close()
	}
}

// startEmbedded starts the single-member etcd in DataDir/etcd and returns
// it with its client URLs.
func startEmbedded(ctx context.Context, cfg Config) (*embedetcd.Server, []string, error) {
	dir := filepath.Join(cfg.DataDir, "etcd")
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Name:            "saltbush",
		Dir:             dir,
		UnsafeNoFsync:   cfg.UnsafeNoFsync,
		ElectionTimeout: cfg.ElectionTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	endpoints := etcd.Endpoints()
	cfg.Logger.Info("embedded etcd started", "dir", dir, "endpoints", strings.Join(endpoints, ","))
	// The embedded etcd listens on a free loopback port; the file says
	// which, so etcdctl (a snapshot backup, an inspection) can reach it.
	path := cfg.EndpointsFile
	if err := os.WriteFile(path, []byte(strings.Join(endpoints, ",")+"\n"), 0o644); err != nil { //nolint:gosec // G306: loopback URLs for etcdctl, not a secret
		return etcd, nil, fmt.Errorf("write the embedded etcd's endpoints to %s: %w", path, err)
	}
	return etcd, endpoints, nil
}

// clientTLS is the client TLS configuration for an external etcd from the
// CA, certificate and key files given, or nil when none is.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("etcd TLS: a client certificate needs its key, and a key its certificate")
	}
	info := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	return cfg, nil
}
