package oidc

import (
	"errors"
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Leeway is the clock skew allowed on a token's exp, nbf and iat.
const Leeway = time.Minute

// MaxTokenBytes bounds a token before it is parsed (STS's
// WebIdentityToken is at most 20000 characters).
const MaxTokenBytes = 20000

// signatureAlgorithms are those a Kubernetes apiserver signs with.
var signatureAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512,
}

// Failure says why a token was refused, in the terms the APIs answer with.
type Failure int

// Failures.
const (
	// Malformed: not a signed JWT, or its claims cannot be read.
	Malformed Failure = iota + 1
	// UnknownKey: no key of the issuer has the token's kid.
	UnknownKey
	// BadSignature: the signature does not verify with the issuer's key.
	BadSignature
	// WrongIssuer: iss is not the issuer.
	WrongIssuer
	// WrongAudience: aud does not include the audience asked for.
	WrongAudience
	// Expired: exp has passed (beyond the leeway), or there is no exp.
	Expired
	// NotYetValid: nbf or iat is in the future (beyond the leeway).
	NotYetValid
)

// TokenError is a refused token.
type TokenError struct {
	Failure Failure
	// Message says why, in words safe to show the caller.
	Message string
}

func (e *TokenError) Error() string { return e.Message }

func refuse(f Failure, format string, args ...any) error {
	return &TokenError{Failure: f, Message: fmt.Sprintf(format, args...)}
}

// FailureOf returns the failure of a TokenError, 0 for any other error.
func FailureOf(err error) Failure {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Failure
	}
	return 0
}

// Claims are what saltbush reads from a verified service-account token.
type Claims struct {
	Issuer    string
	Subject   string
	Audience  []string
	Expiry    time.Time
	IssuedAt  time.Time
	NotBefore time.Time
	// Kubernetes names the pod and service account the token is bound to
	// (the kubernetes.io claim of a projected token).
	Kubernetes KubernetesClaims
}

// KubernetesClaims is the kubernetes.io claim.
type KubernetesClaims struct {
	Namespace      string           `json:"namespace"`
	ServiceAccount ObjectRef        `json:"serviceaccount"`
	Pod            *ObjectRef       `json:"pod,omitempty"`
	Node           *ObjectRef       `json:"node,omitempty"`
	Secret         *ObjectRef       `json:"secret,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

// ObjectRef names a Kubernetes object.
type ObjectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Expect is what a token must say.
type Expect struct {
	// Issuer is the exact iss.
	Issuer string
	// Audience must be among the token's aud; any audience when empty.
	Audience string
	// Now is the time the token is judged at.
	Now time.Time
}

// Verify checks a compact JWS token against keys: its kid names one of the
// keys, the signature verifies, iss is the issuer, aud holds the audience,
// exp is present and not passed and nbf/iat are not in the future (each
// within Leeway). Only then are its claims returned.
func Verify(token string, keys *KeySet, want Expect) (Claims, error) {
	if len(token) > MaxTokenBytes {
		return Claims{}, refuse(Malformed, "The token is longer than %d characters.", MaxTokenBytes)
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return Claims{}, refuse(Malformed, "The token is not a signed JWT.")
	}
	if len(tok.Headers) != 1 {
		return Claims{}, refuse(Malformed, "The token must carry exactly one signature.")
	}
	kid := tok.Headers[0].KeyID
	key, ok := keys.key(kid)
	if !ok {
		return Claims{}, refuse(UnknownKey, "No key of the issuer has the token's kid %q.", clip(kid))
	}
	var std jwt.Claims
	var ext struct {
		Kubernetes KubernetesClaims `json:"kubernetes.io"`
	}
	if err := tok.Claims(key.Key, &std, &ext); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			return Claims{}, refuse(BadSignature, "The token's signature does not verify with the issuer's key %q.", clip(kid))
		}
		return Claims{}, refuse(Malformed, "The token's claims cannot be read.")
	}
	if std.Issuer != want.Issuer {
		return Claims{}, refuse(WrongIssuer, "The token's issuer %q is not %q.", clip(std.Issuer), want.Issuer)
	}
	if want.Audience != "" && !slices.Contains([]string(std.Audience), want.Audience) {
		return Claims{}, refuse(WrongAudience, "Incorrect token audience: the token is not for %s.", want.Audience)
	}
	if std.Expiry == nil {
		return Claims{}, refuse(Expired, "The token has no expiration time.")
	}
	if exp := std.Expiry.Time(); !want.Now.Before(exp.Add(Leeway)) {
		return Claims{}, refuse(Expired, "Token expired: current date/time %s must be before the expiration date/time %s",
			want.Now.UTC().Format(time.RFC3339), exp.UTC().Format(time.RFC3339))
	}
	if std.NotBefore != nil && want.Now.Add(Leeway).Before(std.NotBefore.Time()) {
		return Claims{}, refuse(NotYetValid, "The token is not valid before %s.", std.NotBefore.Time().UTC().Format(time.RFC3339))
	}
	if std.IssuedAt != nil && want.Now.Add(Leeway).Before(std.IssuedAt.Time()) {
		return Claims{}, refuse(NotYetValid, "The token was issued in the future, at %s.", std.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	c := Claims{Issuer: std.Issuer, Subject: std.Subject, Audience: std.Audience, Expiry: std.Expiry.Time(), Kubernetes: ext.Kubernetes}
	if std.IssuedAt != nil {
		c.IssuedAt = std.IssuedAt.Time()
	}
	if std.NotBefore != nil {
		c.NotBefore = std.NotBefore.Time()
	}
	return c, nil
}

// UnverifiedIssuer reads a token's iss without verifying anything, to
// find the keys it must then be verified with.
func UnverifiedIssuer(token string) (string, error) {
	if len(token) > MaxTokenBytes {
		return "", refuse(Malformed, "The token is longer than %d characters.", MaxTokenBytes)
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil {
		return "", refuse(Malformed, "The token is not a signed JWT.")
	}
	var std jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&std); err != nil {
		return "", refuse(Malformed, "The token's claims cannot be read.")
	}
	if std.Issuer == "" {
		return "", refuse(Malformed, "The token has no issuer.")
	}
	return std.Issuer, nil
}
