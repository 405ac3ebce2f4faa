package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/gateway"
	"github.com/saltbush/saltbush/gateway/sigv4"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/throttle"
	"github.com/saltbush/saltbush/server/validation"
)

// newFacade is the EKS façade: SigV4 against the key store's mirror
// (unless the configuration names another authenticator), then
// throttling, audit and the services of the table, in process; the
// validation table words the requests it cannot decode.
func (s *Server) newFacade(ctx context.Context, register gateway.Register, keyCache *iam.Cache, limiter *throttle.Limiter, auditSink audit.Sink) (http.Handler, error) {
	auth := s.cfg.Authenticator
	if auth == nil {
		auth = sigV4Auth("eks", s.cfg.Cluster.Region, keyCache)
	}
	return gateway.New(ctx, gateway.Config{
		Authenticator: auth,
		Throttle:      limiter.Allow,
		Audit:         auditSink,
		MaxBodyBytes:  s.cfg.MaxBodyBytes,
		Logger:        s.log.With("component", "gateway"),
		Registerer:    s.registry,
		Model:         validation.Model{},
	}, register)
}

// sigV4Auth is SigV4 for one signing name against the key store's
// mirror: access keys, and role sessions presented with their session
// token (an expired session is refused as ExpiredToken).
func sigV4Auth(service, region string, keyCache *iam.Cache) *gateway.SigV4 {
	return &gateway.SigV4{
		Verifier: sigv4.Verifier{Service: service, Keys: sigv4.NewSigningKeys()},
		Region:   region,
		Credentials: func(ctx context.Context, akid string) (gateway.Credential, bool, error) {
			c, ok, err := keyCache.Lookup(ctx, akid)
			return gateway.Credential{AccountID: c.AccountID, PrincipalARN: c.PrincipalARN, Secret: c.Secret}, ok, err
		},
		SessionCredentials: func(ctx context.Context, akid, token string) (gateway.Credential, bool, error) {
			c, ok, err := keyCache.LookupSession(ctx, akid, token)
			if errors.Is(err, iam.ErrSessionExpired) {
				return gateway.Credential{}, false, sigv4.ExpiredTokenError()
			}
			return gateway.Credential{AccountID: c.AccountID, PrincipalARN: c.PrincipalARN, Secret: c.Secret, SessionPolicy: c.SessionPolicy}, ok, err
		},
	}
}
