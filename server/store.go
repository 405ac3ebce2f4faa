package server

import (
	"context"

	"github.com/saltbush/saltbush/server/internal/etcdstore"
)

// openStore starts the embedded etcd unless the configuration names an
// external one, connects to it, opens the store and starts the store's
// read view.
func (s *Server) openStore(ctx context.Context) error {
	opened, err := etcdstore.Open(ctx, etcdstore.Config{
		Endpoints:       s.cfg.EtcdEndpoints,
		DataDir:         s.cfg.DataDir,
		EndpointsFile:   s.cfg.EtcdEndpointsFile(),
		UnsafeNoFsync:   s.cfg.EtcdUnsafeNoFsync,
		ElectionTimeout: s.cfg.EtcdElectionTimeout,
		CAFile:          s.cfg.EtcdCAFile,
		CertFile:        s.cfg.EtcdCertFile,
		KeyFile:         s.cfg.EtcdKeyFile,
		Username:        s.cfg.EtcdUsername,
		Password:        s.cfg.EtcdPassword,
		Prefix:          s.cfg.EtcdPrefix,
		Logger:          s.log,
	})
	if err != nil {
		return err
	}
	s.etcd, s.client, s.store = opened.Etcd, opened.Client, opened.Store
	return s.startReadView()
}
