// Package gateway is the EKS REST-JSON façade: the grpc-gateway mux that
// serves AWS's paths from the generated handlers, configured so AWS clients
// see AWS on the wire (docs/contracts.md, "Façade wire rules"), with AWS-shaped errors, request limits
// and the authentication step that sets the caller.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/gateway/sigv4"
	"github.com/saltbush/saltbush/identity"
)

// Authenticator decides who an HTTP request acts for, from the request and
// its complete body (SigV4 signs the payload hash). It runs before routing;
// an error is rendered as the AWS error it wraps.
type Authenticator interface {
	Authenticate(r *http.Request, payload []byte) (identity.Caller, error)
}

// Credential is what an access key stands for.
type Credential struct {
	AccountID    string
	PrincipalARN string
	Secret       string
	// SessionPolicy is a role session's session policy ("" for none).
	SessionPolicy string
}

// SigV4 authenticates requests by their AWS Signature Version 4 (header or
// presigned query) against the key store: the account and principal come
// only from the verified key, never from anything else in the request.
type SigV4 struct {
	// Verifier checks signatures; its Lookup is ignored (Credentials is
	// used instead).
	Verifier sigv4.Verifier
	// Region is the region the façade serves: a signature scoped to
	// another one is refused, as AWS refuses it.
	Region string
	// Credentials returns an active key's credential; ok is false for an
	// unknown or inactive key.
	Credentials func(ctx context.Context, accessKeyID string) (Credential, bool, error)
	// SessionCredentials returns the credential of temporary credentials
	// presented with their session token (X-Amz-Security-Token); ok is
	// false for an unknown, mismatched or revoked session, and an expired
	// one is sigv4.ExpiredTokenError. Requests with a session token are
	// refused when nil.
	SessionCredentials func(ctx context.Context, accessKeyID, sessionToken string) (Credential, bool, error)
}

// Authenticate implements Authenticator.
func (s *SigV4) Authenticate(r *http.Request, payload []byte) (identity.Caller, error) {
	var cred Credential
	v := s.Verifier
	v.Lookup = func(ctx context.Context, akid string) (string, bool, error) {
		c, ok, err := s.Credentials(ctx, akid)
		cred = c
		return c.Secret, ok, err
	}
	if s.SessionCredentials != nil {
		v.SessionLookup = func(ctx context.Context, akid, token string) (string, bool, error) {
			c, ok, err := s.SessionCredentials(ctx, akid, token)
			cred = c
			return c.Secret, ok, err
		}
	}
	res, err := v.Verify(r.Context(), r, payload)
	if err != nil {
		var se *sigv4.Error
		if errors.As(err, &se) {
			return identity.Caller{}, &errdefs.Error{Exception: se.Exception, Message: se.Message}
		}
		return identity.Caller{}, fmt.Errorf("verify request signature: %w", err)
	}
	if s.Region != "" && res.Region != s.Region {
		return identity.Caller{}, &errdefs.Error{Exception: errdefs.InvalidSignatureException,
			Message: fmt.Sprintf("Credential should be scoped to a valid region, not '%s'. ", res.Region)}
	}
	return identity.Caller{AccountID: cred.AccountID, PrincipalARN: cred.PrincipalARN, AccessKeyID: res.AccessKeyID,
		SessionPolicy: cred.SessionPolicy}, nil
}

// Config configures the façade.
type Config struct {
	// Authenticator sets the caller of each request.
	Authenticator Authenticator
	// Throttle is asked once per authenticated request, before routing
	// (so before any etcd work); false answers ThrottlingException. No
	// throttling when nil.
	Throttle func(account string) bool
	// Audit receives one record per mutating request; none when nil.
	Audit audit.Sink
	// MaxBodyBytes limits request bodies; 1 MiB when zero.
	MaxBodyBytes int64
	// Logger receives one line per failed request.
	Logger *slog.Logger
	// Registerer receives the façade's metrics; none when nil.
	Registerer prometheus.Registerer
	// Model words a request grpc-gateway could not decode or parse in
	// AWS's terms (parse.go). When nil such a request is refused as
	// InvalidParameterException with the decoder's own detail.
	Model Model
}

// Model is what the façade needs of AWS's EKS model to word a request
// grpc-gateway could not decode or parse as AWS does; the server's
// validation table implements it.
type Model interface {
	// Exception is the exception operation answers validation errors
	// with; ok is false for an operation the model does not have.
	Exception(operation string) (exception string, ok bool)
	// Member names the body member at path (object keys and list
	// indices) as AWS's messages name it, and says what type the model
	// gives it ("a string").
	Member(operation string, path []any) (name, typ string, ok bool)
	// MemberConstraint is the integer range of the operation's input
	// member named name.
	MemberConstraint(operation, name string) (minV, maxV *int64, ok bool)
	// Render writes a JSON value (numbers as json.Number) as AWS's
	// validation messages write values.
	Render(value any) string
}

// Register adds generated handlers to the mux (the in-process
// RegisterXHandlerServer functions, so no loopback hop).
type Register func(ctx context.Context, mux *runtime.ServeMux) error

// Handler is the façade's HTTP handler.
type Handler struct {
	mux     *runtime.ServeMux
	cfg     Config
	metrics *metrics
}

// New builds the façade and registers the services on it.
func New(ctx context.Context, cfg Config, registers ...Register) (*Handler, error) {
	if cfg.Authenticator == nil {
		return nil, fmt.Errorf("gateway: an authenticator is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Model == nil {
		cfg.Model = noModel{}
	}
	h := &Handler{cfg: cfg, metrics: newMetrics(cfg.Registerer)}
	h.mux = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, newAWSJSON(
			// Unknown members are an error, not silently dropped.
			protojson.UnmarshalOptions{DiscardUnknown: false},
		)),
		// SDKs escape '/' and ':' in ARN labels; keep them inside one segment.
		runtime.WithUnescapingMode(runtime.UnescapingModeAllExceptReserved),
		runtime.WithErrorHandler(h.errorHandler),
		runtime.WithRoutingErrorHandler(h.routingErrorHandler),
		// Headers never become gRPC metadata: identity and everything else the
		// services need is set by the façade itself.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithDisablePathLengthFallback(),
	)
	for _, reg := range registers {
		if err := reg(ctx, h.mux); err != nil {
			return nil, fmt.Errorf("gateway: register handlers: %w", err)
		}
	}
	return h, nil
}

type requestIDKey struct{}

// ServeHTTP authenticates, limits and routes one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rid := uuid.NewString()
	w.Header().Set("X-Amzn-Requestid", rid)
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() { h.metrics.observe(r.Method, rec.status, time.Since(start)) }()

	ctx := context.WithValue(r.Context(), requestIDKey{}, rid)
	// The in-process handlers bypass the gRPC interceptors, their recovery
	// included: a panic still gets an AWS error, not a dropped connection.
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.cfg.Logger.ErrorContext(ctx, "panic in façade handler", "panic", p, "stack", string(debug.Stack()), "request_id", rid)
			h.writeError(ctx, rec, r, &errdefs.Error{Exception: errdefs.ServerException, Message: "An internal error occurred."},
				http.StatusInternalServerError)
		}
	}()
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.writeTooLarge(ctx, rec, r)
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(rec, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.writeTooLarge(ctx, rec, r)
			return
		}
		h.writeError(ctx, rec, r, &errdefs.Error{Exception: errdefs.ClientException, Message: "Could not read the request body."},
			http.StatusBadRequest)
		return
	}
	// The body decoder takes the payload from it as it is (marshal.go), and
	// so does the error handler wording a body it could not decode
	// (parse.go).
	r.Body = newRequestBody(payload)

	// Every mutating request is audited, refused ones included.
	ctx, entry := audit.Open(ctx)
	var caller identity.Caller
	if h.cfg.Audit != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		defer func() { h.audit(ctx, r, rid, caller, entry, rec) }()
	}

	caller, err = h.cfg.Authenticator.Authenticate(r.WithContext(ctx), payload)
	if err != nil {
		e := errdefs.Classify(err)
		if e.Exception == errdefs.ServerException {
			h.cfg.Logger.ErrorContext(ctx, "authentication failed", "err", err, "request_id", rid)
		}
		h.writeError(ctx, rec, r, e, errdefs.HTTPStatus(e.Exception))
		return
	}
	if h.cfg.Throttle != nil && !h.cfg.Throttle(caller.AccountID) {
		h.writeError(ctx, rec, r, errdefs.Throttling("Rate exceeded"), http.StatusTooManyRequests)
		return
	}
	ctx = identity.NewContext(ctx, caller)
	h.mux.ServeHTTP(rec, r.WithContext(ctx))
}

// audit writes the record of one mutating request.
func (h *Handler) audit(ctx context.Context, r *http.Request, rid string, who identity.Caller, e *audit.Entry, rec *statusRecorder) {
	action, resource := e.Noted()
	outcome := "Success"
	if rec.status >= 400 {
		outcome = rec.Header().Get("X-Amzn-Errortype")
	}
	h.cfg.Audit.Write(ctx, audit.Record{
		Time: time.Now().UTC(), RequestID: rid, Source: "facade", Operation: r.Method + " " + r.URL.EscapedPath(),
		Principal: who.PrincipalARN, Account: who.AccountID, Action: action, Resource: resource, Outcome: outcome,
	})
}

// errorHandler renders any handler error (service errors, body decode
// errors, unknown fields) the way AWS does.
func (h *Handler) errorHandler(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(err)
	if st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "http: request body too large") {
		// A chunked body (no Content-Length) that crossed MaxBytesReader.
		h.writeTooLarge(ctx, w, r)
		return
	}
	if e, httpStatus, ok := requestError(ctx, h.cfg.Model, st, bodyOf(r)); ok {
		// grpc-gateway's own decode and parse errors (gateway/parse.go).
		h.writeError(ctx, w, r, e, httpStatus)
		return
	}
	e := errdefs.FromGRPC(st)
	h.writeError(ctx, w, r, e, errdefs.HTTPStatus(e.Exception))
}

// decodeDetail matches protojson's "proto: (line 1:13): " and "proto:
// syntax error (line 1:13): " prefixes (its spaces are sometimes U+00A0,
// deliberately).
var decodeDetail = regexp.MustCompile(`^proto:[\s\x{00a0}]*(syntax error[\s\x{00a0}]*)?(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

func (h *Handler) routingErrorHandler(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	e := &errdefs.Error{
		Exception: "UnknownOperationException",
		Message:   fmt.Sprintf("No operation matches %s %s.", r.Method, r.URL.EscapedPath()),
	}
	if httpStatus != http.StatusMethodNotAllowed {
		httpStatus = http.StatusNotFound
	}
	h.writeError(ctx, w, r, e, httpStatus)
}

// writeTooLarge refuses a body over MaxBodyBytes, declared or streamed.
func (h *Handler) writeTooLarge(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	h.writeError(ctx, w, r, &errdefs.Error{
		Exception: "RequestEntityTooLargeException",
		Message:   fmt.Sprintf("Request body exceeds the limit of %d bytes.", h.cfg.MaxBodyBytes),
	}, http.StatusRequestEntityTooLarge)
}

// writeError writes AWS's REST-JSON error: the shape name in
// X-Amzn-ErrorType, a JSON body with message and the modelled members. No
// numeric "code" member: it breaks the Go SDK's error decoding.
func (h *Handler) writeError(ctx context.Context, w http.ResponseWriter, r *http.Request, e *errdefs.Error, httpStatus int) {
	WriteError(w, e, httpStatus)
	rid, _ := ctx.Value(requestIDKey{}).(string)
	h.cfg.Logger.InfoContext(ctx, "request failed", "method", r.Method, "path", r.URL.EscapedPath(),
		"status", httpStatus, "exception", e.Exception, "message", e.Message, "request_id", rid)
}

// WriteError writes e as AWS's REST-JSON error with httpStatus; the EKS
// Auth API beside the façade answers its errors with it too.
func WriteError(w http.ResponseWriter, e *errdefs.Error, httpStatus int) {
	body := make(map[string]string, len(e.Fields)+1)
	for k, v := range e.Fields {
		body[k] = v
	}
	body["message"] = e.Message
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", e.Exception)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "saltbush_http_requests_total",
			Help: "Façade requests by HTTP method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "saltbush_http_request_duration_seconds",
			Help:    "Façade request latency by HTTP method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

func (m *metrics) observe(method string, code int, d time.Duration) {
	m.requests.WithLabelValues(method, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
}
