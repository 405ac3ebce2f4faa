package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/saltbush/saltbush/gateway/sigv4"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/pki"
)

// startIdentity opens the key store and starts its in-memory mirror
// (authentication, throttling and authorization cost no etcd round trip)
// and the gRPC port's CA. It returns once the mirror holds every identity.
func (s *Server) startIdentity(ctx context.Context) (*iam.Cache, error) {
	masterKey, err := s.cfg.masterKey()
	if err != nil {
		return nil, err
	}
	// The key store's clock (Cluster.Now, the one tests move) decides
	// when role sessions expire; signatures' dates are checked against
	// the real time.
	if s.keys, err = iam.NewService(s.store, masterKey, s.cfg.Cluster.Now); err != nil {
		return nil, err
	}
	keyCache := s.keys.NewCache()
	cacheReady := make(chan struct{})
	go keyCache.Run(s.background, cacheReady)
	if s.ca, err = pki.New(s.store, pki.Config{MasterKey: masterKey, DefaultTTL: s.cfg.CertTTL, Logger: s.log.With("component", "pki")}); err != nil {
		return nil, err
	}
	if _, err := s.ca.Init(ctx); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	if err := s.ca.Start(s.background); err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	select {
	case <-cacheReady:
		return keyCache, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("load identities: %w", ctx.Err())
	}
}

// secretLookup adapts the key store to sigv4.Lookup: the secret of an
// active access key.
func secretLookup(keys *iam.Cache) sigv4.Lookup {
	return func(ctx context.Context, akid string) (string, bool, error) {
		c, ok, err := keys.Lookup(ctx, akid)
		return c.Secret, ok, err
	}
}

// sessionLookup adapts the key store to sigv4.SessionLookup: the secret of
// a valid role session; an expired one is refused as expired.
func sessionLookup(keys *iam.Cache) sigv4.SessionLookup {
	return func(ctx context.Context, akid, token string) (string, bool, error) {
		c, ok, err := keys.LookupSession(ctx, akid, token)
		if errors.Is(err, iam.ErrSessionExpired) {
			return "", false, sigv4.ExpiredTokenError()
		}
		return c.Secret, ok, err
	}
}
