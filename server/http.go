package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/saltbush/saltbush/api/openapi"
	"github.com/saltbush/saltbush/server/eksauth"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/server/sts"
)

// newHTTPServer is the façade's port: the façade over the table's
// services and, beside it on the same address, the query-protocol
// endpoint, EKS Auth and the hosted OIDC issuers' documents (route says
// which request goes where).
func (s *Server) newHTTPServer(ctx context.Context, table []service, g gate, pods *podidentity.Service) (*http.Server, error) {
	facade, err := s.newFacade(ctx, registerFacade(table), g.keys, g.throttle, g.audit)
	if err != nil {
		return nil, err
	}
	issuers := oidc.NewIssuers(s.store)
	query, err := s.newQueryAPI(g, issuers)
	if err != nil {
		return nil, err
	}
	podCredentials := s.newEKSAuth(g, issuers, pods)
	return &http.Server{
		Handler:           s.route(facade, query, podCredentials, oidc.NewHandler(issuers, facade, s.log.With("component", "oidc"))),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}, nil
}

// newQueryAPI is the query-protocol endpoint beside the façade: STS
// (signing name sts, the serving region; AssumeRoleWithWebIdentity
// unsigned, its tokens verified with the hosted issuers' keys) and IAM's
// OIDC provider operations (signing name iam; IAM is global, so any region
// is taken).
func (s *Server) newQueryAPI(g gate, issuers *oidc.Issuers) (*sts.Handler, error) {
	return sts.New(sts.Config{
		STS:          sigV4Auth("sts", s.cfg.Cluster.Region, g.keys),
		IAM:          sigV4Auth("iam", "", g.keys),
		Throttle:     g.throttle.Allow,
		Audit:        g.audit,
		MaxBodyBytes: s.cfg.MaxBodyBytes,
		Keys:         s.keys,
		Authorizer:   g.authz,
		Issuers:      sts.AccountIssuers(s.store, s.keys),
		Hosted:       issuers,
		Logger:       s.log.With("component", "sts"),
	})
}

// newEKSAuth is EKS Auth beside the façade (signing name eks-auth, the
// serving region): AssumeRoleForPodIdentity for the node agents of EKS Pod
// Identity.
func (s *Server) newEKSAuth(g gate, issuers *oidc.Issuers, pods *podidentity.Service) *eksauth.Handler {
	now := s.cfg.Cluster.Now
	if now == nil {
		now = time.Now
	}
	return eksauth.NewHandler(eksauth.Config{
		Authenticator: sigV4Auth("eks-auth", s.cfg.Cluster.Region, g.keys),
		Throttle:      g.throttle.Allow,
		Audit:         g.audit,
		MaxBodyBytes:  s.cfg.MaxBodyBytes,
		Service: eksauth.NewService(s.store, issuers, pods, s.keys, g.authz, s.cfg.Cluster.Region, now,
			s.log.With("component", "eks-auth")),
		Logger: s.log.With("component", "eks-auth"),
	})
}

// route serves the façade and, beside it, the query-protocol endpoint
// (STS and IAM, told apart by the request's shape, sts.IsQueryRequest),
// EKS Auth (eksauth.IsRequest) and the hosted OIDC issuers' documents
// (oidc.IsRequest), with the health, readiness, metrics and OpenAPI
// endpoints.
func (s *Server) route(facade, query, podCredentials, issuers http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /readyz", s.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.Document)
	})
	// Only the four operational paths go through the ServeMux: it cleans a
	// path before matching and answers "/a/../b" or "//" with a redirect to
	// the cleaned one, which is not an AWS answer (and would act on a path
	// the client did not sign). Every other request reaches the façade or
	// an endpoint beside it with its path as sent, and is refused there in
	// AWS's words if it names nothing.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics", "/openapi.json":
			mux.ServeHTTP(w, r)
			return
		}
		switch {
		case sts.IsQueryRequest(r):
			query.ServeHTTP(w, r)
		case eksauth.IsRequest(r):
			podCredentials.ServeHTTP(w, r)
		case oidc.IsRequest(r):
			issuers.ServeHTTP(w, r)
		default:
			facade.ServeHTTP(w, r)
		}
	})
}
