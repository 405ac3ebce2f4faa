package server

import (
	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/throttle"
)

// gate is what every request passes on either port once its caller is
// known: the key store's mirror the caller is authenticated against,
// authorization, the account's throttle, and the audit record.
type gate struct {
	keys     *iam.Cache
	authz    *authz.Authorizer
	throttle *throttle.Limiter
	audit    audit.Sink
}

// newGate opens the audit sink and makes the authorizer and the throttle
// over the key store's mirror.
func (s *Server) newGate(keyCache *iam.Cache) (gate, error) {
	auditSink, err := s.openAudit()
	if err != nil {
		return gate{}, err
	}
	return gate{
		keys:     keyCache,
		authz:    authz.New(keyCache),
		throttle: throttle.New(s.cfg.ThrottleRate, s.cfg.ThrottleBurst),
		audit:    auditSink,
	}, nil
}

// openAudit returns where audit records go: the log, or the configured
// JSON-lines file (closed by Close).
func (s *Server) openAudit() (audit.Sink, error) {
	if s.cfg.AuditLog == "" {
		return audit.LogSink{Logger: s.log.With("component", "audit")}, nil
	}
	var err error
	if s.auditLog, err = audit.OpenFile(s.cfg.AuditLog); err != nil {
		return nil, err
	}
	return s.auditLog, nil
}
