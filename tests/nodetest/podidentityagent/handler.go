package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The link-local addresses pods reach the agent at, on every node.
const (
	agentIPv4 = "169.254.170.23"
	agentIPv6 = "fd00:ec2::23"
)

// requestRate is the requests per second each credential listener takes
// (the real agent's 1000, with a burst of half).
const requestRate = 1000

// containerCredentials is the answer the SDKs' container credential
// providers read from AWS_CONTAINER_CREDENTIALS_FULL_URI.
type containerCredentials struct {
	AccessKeyID     string `json:"AccessKeyId,omitempty"`
	SecretAccessKey string `json:"SecretAccessKey,omitempty"`
	Token           string `json:"Token,omitempty"`
	AccountID       string `json:"AccountId,omitempty"`
	Expiration      string `json:"Expiration,omitempty"`
}

// containerAnswer maps credentials to that answer; the expiration is
// RFC 3339 in UTC (with fractions of a second only when it has some).
func containerAnswer(c Credentials) containerCredentials {
	return containerCredentials{
		AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Token: c.SessionToken,
		AccountID: c.AccountID, Expiration: c.Expiration.UTC().Format(time.RFC3339Nano),
	}
}

// statusError is a refusal of the agent's own: its HTTP status and text.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &statusError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

// errorAnswer maps a failure to the status and text/plain body the real
// agent answers: its own refusals as they are; an EKS Auth error with EKS
// Auth's own HTTP status and "[request-id]: (Code): message, fault: f";
// anything else (no answer, an invalid one, the agent's own credentials
// missing) 500 with the error.
func errorAnswer(err error) (string, int) {
	var se *statusError
	if errors.As(err, &se) {
		return se.msg, se.status
	}
	var ae *apiError
	if errors.As(err, &ae) {
		status := ae.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		return fmt.Sprintf("[%s]: (%s): %s, fault: %s", ae.RequestID, ae.Code, ae.Message, ae.fault()), status
	}
	return err.Error(), http.StatusInternalServerError
}

// validateHost refuses a request not addressed to the agent's link-local
// addresses (its Host header), as the real agent does.
func validateHost(host string, allowed []string) error {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, a := range allowed {
		if a == host {
			return nil
		}
	}
	return &statusError{status: http.StatusForbidden, msg: fmt.Sprintf(
		"Access Denied. Called agent through invalid address, please use either %s address not %s", allowed, host)}
}

// validateToken checks only what the real agent checks before calling EKS
// Auth: a token is there, parses as a JWT, and is neither expired nor not
// yet valid. Its signature is EKS Auth's business.
func validateToken(token string, now time.Time) error {
	if token == "" {
		return badRequest("Service account token cannot be empty")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return badRequest("Service account token cannot be parsed: token contains an invalid number of segments")
	}
	var header map[string]any
	if err := decodeSegment(parts[0], &header); err != nil {
		return badRequest("Service account token cannot be parsed: could not JSON decode header: %v", err)
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
		Nbf *json.Number `json:"nbf"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return badRequest("Service account token cannot be parsed: could not JSON decode claim: %v", err)
	}
	if claims.Exp != nil {
		exp, err := epochSeconds(*claims.Exp)
		if err != nil {
			return badRequest("Service account token cannot be parsed: exp: %v", err)
		}
		if !now.Before(exp) {
			return badRequest("Service account token failed basic claim validations: token has invalid claims: token is expired")
		}
	}
	if claims.Nbf != nil {
		nbf, err := epochSeconds(*claims.Nbf)
		if err != nil {
			return badRequest("Service account token cannot be parsed: nbf: %v", err)
		}
		if now.Before(nbf) {
			return badRequest("Service account token failed basic claim validations: token has invalid claims: token is not valid yet")
		}
	}
	return nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// credentialHandler serves GET /v1/credentials on one listener.
type credentialHandler struct {
	cache   *credentialCache
	hosts   []string // the addresses a request may be addressed to
	limiter *rate.Limiter
	now     func() time.Time
	metrics *metrics
}

func newCredentialHandler(cache *credentialCache, hosts []string, m *metrics) *credentialHandler {
	return &credentialHandler{cache: cache, hosts: hosts, limiter: rate.NewLimiter(requestRate, requestRate/2), now: time.Now, metrics: m}
}

func (h *credentialHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.limiter.Allow() {
		h.metrics.response(http.StatusTooManyRequests)
		http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		return
	}
	logger.Info("handling new request request from "+r.RemoteAddr, "client-addr", r.RemoteAddr)
	creds, err := h.credentials(r.Context(), r.Host, r.Header.Get("Authorization"))
	if err != nil {
		msg, code := errorAnswer(err)
		logger.Error("Error fetching credentials", "error", err, "status", code)
		h.metrics.response(code)
		http.Error(w, msg, code)
		return
	}
	body, err := json.Marshal(containerAnswer(creds))
	if err != nil {
		h.metrics.response(http.StatusInternalServerError)
		http.Error(w, "Unable to serialize credentials", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	h.metrics.response(http.StatusOK)
	_, _ = w.Write(body)
}

func (h *credentialHandler) credentials(ctx context.Context, host, token string) (Credentials, error) {
	if err := validateHost(host, h.hosts); err != nil {
		return Credentials{}, err
	}
	if err := validateToken(token, h.now()); err != nil {
		return Credentials{}, err
	}
	return h.cache.get(ctx, token)
}

// metrics counts answers by status, for /metrics.
type metrics struct {
	mu        sync.Mutex
	responses map[int]uint64
}

func (m *metrics) response(code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.responses == nil {
		m.responses = map[int]uint64{}
	}
	m.responses[code]++
}
