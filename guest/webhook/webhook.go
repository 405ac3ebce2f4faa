// Package webhook serves the two webhooks the cluster's kube-apiserver asks
// about its users: authentication (TokenReview, for `aws eks get-token`
// bearer tokens) and authorization (SubjectAccessReview). It answers
// neither itself: it forwards each review to saltbush's
// AccessReviewService over the agent's mutually authenticated connection,
// where the cluster's access entries (and its aws-auth ConfigMap, which
// this package reads from the apiserver and sends along) decide.
//
// The webhooks listen on loopback with TLS: a CA, serving certificate and
// apiserver client certificate of their own (pki.go), which the two
// kubeconfig files the apiserver reads carry. Answers are cached briefly
// (positive and negative TTLs, like the apiserver's own webhook caches), so
// a revoked access entry stops working within the positive TTL, the
// apiserver's own caches and one watch delivery on the host (docs/agent.md,
// "Cluster access").
//
// The webhooks fail closed: when saltbush cannot be asked (no open
// connection, an error, the deadline), a token does not authenticate and
// a request gets no opinion (so the cluster's RBAC alone decides). Nothing
// is ever allowed without saltbush's answer, and failures are not cached.
package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// Host asks saltbush. It returns ErrUnreachable when there is no
// connection to ask on.
type Host interface {
	ReviewToken(ctx context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error)
	ReviewAccess(ctx context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error)
}

// ErrUnreachable means the agent holds no connection to saltbush.
var ErrUnreachable = errors.New("saltbush is not reachable")

// Config configures a Server.
type Config struct {
	// Cluster is the agent's cluster, named in every review.
	Cluster *deliveryv1.ClusterName
	Host    Host
	// AwsAuth returns the cluster's aws-auth ConfigMap (nil when there is
	// none, or it is not known yet).
	AwsAuth func() *deliveryv1.AwsAuthConfigMap
	// CacheTTL is how long an authenticated token or an allowed request
	// is answered from memory; NegativeCacheTTL the same for a refused
	// token or "no opinion". Zero disables that cache.
	CacheTTL, NegativeCacheTTL time.Duration
	// Timeout bounds one review, asking saltbush included.
	Timeout time.Duration
	Log     *slog.Logger
	// Registerer gets the webhooks' metrics; none when nil.
	Registerer prometheus.Registerer
}

// cacheSize bounds each cache (entries): an apiserver sees few distinct
// users, and a flood of distinct tokens must not grow the agent.
const cacheSize = 4096

// maxBody bounds a review request body: a token is at most 4 KiB, and a
// SubjectAccessReview's extras are small.
const maxBody = 256 << 10

// Server serves the webhooks. It is safe for concurrent use.
type Server struct {
	cfg    Config
	tokens *cache.LRUExpireCache
	access *cache.LRUExpireCache
	flight singleflight.Group

	reviews  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the webhooks' server.
func New(cfg Config) (*Server, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.AwsAuth == nil {
		cfg.AwsAuth = func() *deliveryv1.AwsAuthConfigMap { return nil }
	}
	s := &Server{
		cfg:    cfg,
		tokens: cache.NewLRUExpireCache(cacheSize),
		access: cache.NewLRUExpireCache(cacheSize),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saltbush_agent_webhook_reviews_total",
			Help: "Webhook reviews answered, by review (token, access), result (authenticated, unauthenticated, allowed, no_opinion, failed) and source (cache, saltbush, none: saltbush could not be asked)."},
			[]string{"review", "result", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "saltbush_agent_webhook_duration_seconds",
			Help:    "Time to answer a webhook review, by review and source.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5}},
			[]string{"review", "source"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.reviews, s.duration} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("webhook metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Handler serves POST /authenticate and POST /authorize.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+AuthenticatePath, s.authenticate)
	mux.HandleFunc("POST "+AuthorizePath, s.authorize)
	return mux
}

// Serve serves the webhooks with TLS from p on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener, p *PKI) error {
	tlsCfg := p.ServerTLS()
	tlsCfg.NextProtos = []string{"http/1.1"}
	srv := &http.Server{
		Handler:   s.Handler(),
		TLSConfig: tlsCfg,
		// HTTP/1.1 with keep-alive: a review is one small request and one
		// small answer on a connection the apiserver keeps, and HTTP/2's
		// framing cost the agent more CPU per review than the review did.
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.cfg.Log.Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// readReview reads a review body; it reports false (and has answered)
// when the body is unreadable or too large.
func readReview(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		http.Error(w, "reading the review: "+err.Error(), http.StatusBadRequest)
		return nil, false
	case len(body) > maxBody:
		http.Error(w, "the review is too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	return body, true
}

// decode decodes a review body into v; it reports false (and has
// answered) when the body is not one.
func decode(w http.ResponseWriter, body []byte, v any) bool {
	if err := json.Unmarshal(body, v); err != nil {
		http.Error(w, "the body is not a review: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func respond(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// authenticate answers a TokenReview (authentication.k8s.io/v1 or
// v1beta1, which share their JSON).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) {
	var tr authenticationv1.TokenReview
	body, ok := readReview(w, r)
	if !ok || !decode(w, body, &tr) {
		return
	}
	if tr.APIVersion != "authentication.k8s.io/v1" && tr.APIVersion != "authentication.k8s.io/v1beta1" {
		http.Error(w, fmt.Sprintf("apiVersion %q is not authentication.k8s.io/v1 or v1beta1", tr.APIVersion), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	status := s.reviewToken(ctx, tr.Spec)
	respond(w, &authenticationv1.TokenReview{TypeMeta: metav1.TypeMeta{APIVersion: tr.APIVersion, Kind: "TokenReview"}, Status: status})
}

func (s *Server) reviewToken(ctx context.Context, spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	start := time.Now()
	req := &deliveryv1.ReviewTokenRequest{Cluster: s.cfg.Cluster, Token: spec.Token, Audiences: spec.Audiences,
		AwsAuth: s.cfg.AwsAuth()}
	// The key is the digest of the request, deterministically encoded
	// (never the token itself): the token, each audience and the aws-auth
	// ConfigMap, so an edited ConfigMap is not answered from the cache of
	// the one before, and audiences ["a", "b"] are not ["a|b"].
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return authenticationv1.TokenReviewStatus{Error: "encoding the review: " + err.Error()}
	}
	sum := sha256.Sum256(raw)
	resp, source, err := s.ask(ctx, s.tokens, hex.EncodeToString(sum[:]), func(ctx context.Context) (proto.Message, bool, error) {
		resp, err := s.cfg.Host.ReviewToken(ctx, req)
		return resp, resp.GetAuthenticated(), err
	})
	defer func() { s.duration.WithLabelValues("token", source).Observe(time.Since(start).Seconds()) }()
	if err != nil {
		s.reviews.WithLabelValues("token", "failed", source).Inc()
		s.cfg.Log.Warn("token review failed closed", "err", err)
		return authenticationv1.TokenReviewStatus{Error: "saltbush could not review the token: " + err.Error()}
	}
	tr := resp.(*deliveryv1.ReviewTokenResponse)
	if !tr.GetAuthenticated() {
		s.reviews.WithLabelValues("token", "unauthenticated", source).Inc()
		return authenticationv1.TokenReviewStatus{Error: tr.GetError()}
	}
	s.reviews.WithLabelValues("token", "authenticated", source).Inc()
	u := tr.GetUser()
	user := authenticationv1.UserInfo{Username: u.GetUsername(), UID: u.GetUid(), Groups: slices.Clone(u.GetGroups())}
	if len(u.GetExtra()) > 0 {
		user.Extra = make(map[string]authenticationv1.ExtraValue, len(u.GetExtra()))
		for k, v := range u.GetExtra() {
			user.Extra[k] = slices.Clone(v.GetValues())
		}
	}
	return authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: tr.GetAudiences()}
}

// authorize answers a SubjectAccessReview (authorization.k8s.io/v1, or
// v1beta1, whose groups are named "group").
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	var sar authorizationv1.SubjectAccessReview
	var meta metav1.TypeMeta
	body, ok := readReview(w, r)
	if !ok || !decode(w, body, &meta) {
		return
	}
	switch meta.APIVersion {
	case "authorization.k8s.io/v1":
		if !decode(w, body, &sar) {
			return
		}
	case "authorization.k8s.io/v1beta1":
		var old authorizationv1beta1.SubjectAccessReview
		if !decode(w, body, &old) {
			return
		}
		sar.Spec = fromV1beta1(old.Spec)
	default:
		http.Error(w, fmt.Sprintf("apiVersion %q is not authorization.k8s.io/v1 or v1beta1", meta.APIVersion), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	status := s.reviewAccess(ctx, sar.Spec)
	respond(w, map[string]any{"apiVersion": meta.APIVersion, "kind": "SubjectAccessReview", "status": status})
}

func fromV1beta1(o authorizationv1beta1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{User: o.User, Groups: o.Groups, UID: o.UID}
	if o.ResourceAttributes != nil {
		a := o.ResourceAttributes
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: a.Namespace, Verb: a.Verb, Group: a.Group,
			Version: a.Version, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name}
	}
	if o.NonResourceAttributes != nil {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: o.NonResourceAttributes.Path, Verb: o.NonResourceAttributes.Verb}
	}
	if len(o.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(o.Extra))
		for k, v := range o.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return spec
}

func (s *Server) reviewAccess(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	start := time.Now()
	req := &deliveryv1.ReviewAccessRequest{Cluster: s.cfg.Cluster, User: spec.User, Groups: spec.Groups, Uid: spec.UID}
	if len(spec.Extra) > 0 {
		req.Extra = make(map[string]*deliveryv1.ExtraValue, len(spec.Extra))
		for k, v := range spec.Extra {
			req.Extra[k] = &deliveryv1.ExtraValue{Values: v}
		}
	}
	if a := spec.ResourceAttributes; a != nil {
		req.ResourceAttributes = &deliveryv1.ResourceAttributes{Namespace: a.Namespace, Verb: a.Verb, Group: a.Group,
			Version: a.Version, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name}
	}
	if a := spec.NonResourceAttributes; a != nil {
		req.NonResourceAttributes = &deliveryv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
	}
	if (req.ResourceAttributes == nil) == (req.NonResourceAttributes == nil) {
		s.reviews.WithLabelValues("access", "failed", "none").Inc()
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "the review names neither or both of resourceAttributes and nonResourceAttributes"}
	}
	// The request, deterministically encoded, is the key: every field
	// the decision depends on is in it.
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "encoding the review: " + err.Error()}
	}
	sum := sha256.Sum256(raw)
	resp, source, err := s.ask(ctx, s.access, hex.EncodeToString(sum[:]), func(ctx context.Context) (proto.Message, bool, error) {
		resp, err := s.cfg.Host.ReviewAccess(ctx, req)
		return resp, resp.GetAllowed(), err
	})
	defer func() { s.duration.WithLabelValues("access", source).Observe(time.Since(start).Seconds()) }()
	if err != nil {
		s.reviews.WithLabelValues("access", "failed", source).Inc()
		s.cfg.Log.Warn("access review failed closed: no opinion", "user", spec.User, "err", err)
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "saltbush could not review the request: " + err.Error()}
	}
	ar := resp.(*deliveryv1.ReviewAccessResponse)
	result := "no_opinion"
	if ar.GetAllowed() {
		result = "allowed"
	}
	s.reviews.WithLabelValues("access", result, source).Inc()
	// saltbush never denies (ReviewAccessResponse); a denial it might
	// send one day is passed on, since it can only take access away.
	return authorizationv1.SubjectAccessReviewStatus{Allowed: ar.GetAllowed(), Denied: ar.GetDenied() && !ar.GetAllowed(),
		Reason: ar.GetReason(), EvaluationError: ar.GetEvaluationError()}
}

// ask answers from c under key, or asks saltbush with one call shared by
// every concurrent review of the same key, and caches the answer for the
// positive or negative TTL. Errors are not cached. source says where the
// answer came from.
func (s *Server) ask(ctx context.Context, c *cache.LRUExpireCache, key string,
	call func(context.Context) (proto.Message, bool, error)) (proto.Message, string, error) {
	if v, ok := c.Get(key); ok {
		return v.(proto.Message), "cache", nil
	}
	ch := s.flight.DoChan(key, func() (any, error) {
		// The call is shared by every waiter, so it must not end with
		// the first one's request: it gets a deadline of its own.
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		resp, positive, err := call(callCtx)
		if err != nil {
			return nil, err
		}
		if ttl := s.ttl(positive); ttl > 0 {
			c.Add(key, resp, ttl)
		}
		return resp, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			source := "saltbush"
			if errors.Is(res.Err, ErrUnreachable) {
				source = "none"
			}
			return nil, source, res.Err
		}
		return res.Val.(proto.Message), "saltbush", nil
	case <-ctx.Done():
		return nil, "none", ctx.Err()
	}
}

func (s *Server) ttl(positive bool) time.Duration {
	if positive {
		return s.cfg.CacheTTL
	}
	return s.cfg.NegativeCacheTTL
}
