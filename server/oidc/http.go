package oidc

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
)

// Paths under an issuer URL that saltbush serves: the discovery document,
// and the key set it names as jwks_uri (EKS's issuers serve theirs at
// {issuer}/keys).
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	KeysPath      = "/keys"
)

// Discovery is an issuer's OpenID Provider metadata, in the shape a
// Kubernetes apiserver (and EKS's issuer) serves it.
type Discovery struct {
	Issuer                           string   `json:"issuer"`
	JWKSURI                          string   `json:"jwks_uri"`
	AuthorizationEndpoint            string   `json:"authorization_endpoint"`
	ResponseTypesSupported           []string `json:"response_types_supported"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
}

// NewDiscovery is the discovery document of issuer.
func NewDiscovery(issuer string) Discovery {
	return Discovery{
		Issuer: issuer, JWKSURI: issuer + KeysPath,
		// Service-account tokens are issued by TokenRequest, not by an
		// OAuth flow; Kubernetes names that endpoint so.
		AuthorizationEndpoint:            "urn:kubernetes:programmatic_authorization",
		ResponseTypesSupported:           []string{"id_token"},
		SubjectTypesSupported:            []string{"public"},
		IDTokenSigningAlgValuesSupported: []string{"RS256"},
		ClaimsSupported:                  []string{"sub", "iss"},
	}
}

// Handler serves the discovery document and JWKS of every hosted issuer,
// unauthenticated, as OIDC relying parties fetch them.
type Handler struct {
	issuers *Issuers
	// next answers a path that is no hosted issuer's (the façade, which
	// refuses it in AWS's words).
	next http.Handler
	log  *slog.Logger
}

// NewHandler returns the issuers' HTTP handler; requests for no hosted
// issuer go to next.
func NewHandler(issuers *Issuers, next http.Handler, log *slog.Logger) *Handler {
	return &Handler{issuers: issuers, next: next, log: log}
}

// IsRequest reports whether r asks for an issuer's document: a GET (or
// HEAD) of a path ending in DiscoveryPath or KeysPath. Whether an issuer
// is there is decided by ServeHTTP.
func IsRequest(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return strings.HasSuffix(r.URL.Path, DiscoveryPath) || strings.HasSuffix(r.URL.Path, KeysPath)
}

// ServeHTTP answers for the issuer https://{Host}{path without the
// document's suffix}: the issuer URL is where it is served, by definition
// of OIDC discovery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, doc := r.URL.Path, ""
	switch {
	case strings.HasSuffix(path, DiscoveryPath):
		path, doc = strings.TrimSuffix(path, DiscoveryPath), DiscoveryPath
	case strings.HasSuffix(path, KeysPath):
		path, doc = strings.TrimSuffix(path, KeysPath), KeysPath
	default:
		h.next.ServeHTTP(w, r)
		return
	}
	issuer := "https://" + r.Host + path
	iss, err := h.issuers.Get(r.Context(), issuer)
	switch {
	case errors.Is(err, ErrUnknownIssuer):
		h.next.ServeHTTP(w, r)
		return
	case err != nil:
		h.log.ErrorContext(r.Context(), "issuer lookup failed", "issuer", issuer, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"message": "Service Unavailable"})
		return
	}
	// Relying parties cache keys; an hour is what EKS's issuers say too,
	// and a rotation publishes the new key beside the old one first.
	w.Header().Set("Cache-Control", "public, max-age=3600")
	if doc == KeysPath {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(iss.Keys.JSON())
		return
	}
	writeJSON(w, http.StatusOK, NewDiscovery(issuer))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
