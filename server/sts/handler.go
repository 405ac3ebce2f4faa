// Package sts is the façade's AWS query-protocol endpoint: AWS STS
// (GetCallerIdentity, AssumeRole, AssumeRoleWithWebIdentity) and IAM's
// OpenID Connect provider operations (ListOpenIDConnectProviders,
// GetOpenIDConnectProvider, CreateOpenIDConnectProvider,
// DeleteOpenIDConnectProvider, UpdateOpenIDConnectProviderThumbprint,
// Add/RemoveClientID…, Tag/Untag… and ListOpenIDConnectProviderTags), on
// the same address as the EKS REST API (docs/architecture.md, "Identity
// and authorization"; docs/operations.md, "STS and IAM on the façade").
// EKS Auth (server/eksauth) and the hosted issuers' documents
// (server/oidc) are served beside it on that address too.
//
// A query-protocol request is a POST to "/" with a form body
// (Action=…&Version=…), or a GET of "/?Action=…". It is signed with SigV4
// for the signing name of its API (sts or iam), but for
// AssumeRoleWithWebIdentity, which AWS answers unsigned (the web identity
// token is the caller's proof); the answer is XML in the shape of
// botocore's models (sts/2011-06-15, iam/2010-05-08): the operation's
// result in its resultWrapper, ResponseMetadata/RequestId, and errors as
// ErrorResponse documents.
package sts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/gateway"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/oidc"
)

// Keys issues role sessions (iam.Service).
type Keys interface {
	AssumeRole(ctx context.Context, in iam.AssumeRoleInput) (iam.Session, error)
}

// Config is what the endpoint needs.
type Config struct {
	// STS and IAM authenticate requests signed for the signing names sts
	// and iam (gateway.SigV4 with the matching service).
	STS, IAM gateway.Authenticator
	// Throttle is asked once per authenticated request, as the EKS
	// façade asks it; no throttling when nil.
	Throttle func(account string) bool
	// Audit receives a record of every AssumeRole call; none when nil.
	Audit audit.Sink
	// MaxBodyBytes limits request bodies; 1 MiB when zero.
	MaxBodyBytes int64
	// Keys issues sessions.
	Keys Keys
	// Authorizer decides the caller's own permissions (sts:AssumeRole on
	// the role, iam:GetOpenIDConnectProvider, ...).
	Authorizer *authz.Authorizer
	// Issuers lists an account's OIDC providers.
	Issuers Issuers
	// Hosted holds the keys of the issuers saltbush hosts, which
	// AssumeRoleWithWebIdentity verifies tokens with; without it every
	// token is refused (IDPCommunicationError).
	Hosted *oidc.Issuers
	// Logger receives one line per failed request.
	Logger *slog.Logger
}

// Handler serves the query-protocol endpoint.
type Handler struct {
	cfg Config
}

// New returns the endpoint.
func New(cfg Config) (*Handler, error) {
	if cfg.STS == nil || cfg.IAM == nil || cfg.Keys == nil || cfg.Authorizer == nil || cfg.Issuers == nil {
		return nil, errors.New("sts: authenticators, keys, authorizer and issuers are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg}, nil
}

// operation answers one Action: the result document (its resultWrapper
// content) or an error.
type operation struct {
	// mutates marks an operation that is audited.
	mutates bool
	// unsigned marks an operation AWS answers without a signature (the
	// caller proves who it is otherwise: a web identity token).
	unsigned bool
	run      func(h *Handler, ctx context.Context, p params) (any, error)
}

var operations = map[api]map[string]operation{
	apiSTS: {
		"GetCallerIdentity":         {run: (*Handler).getCallerIdentity},
		"AssumeRole":                {mutates: true, run: (*Handler).assumeRole},
		"AssumeRoleWithWebIdentity": {mutates: true, unsigned: true, run: (*Handler).assumeRoleWithWebIdentity},
	},
	apiIAM: iamOperations,
}

// ServeHTTP reads, authenticates, throttles and answers one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := uuid.NewString()
	w.Header().Set("X-Amzn-Requestid", rid)
	ctx := withRequestID(r.Context(), rid)
	a := apiSTS

	fail := func(err error) {
		qe := toQueryError(err, a)
		if qe.status >= 500 {
			h.cfg.Logger.ErrorContext(ctx, "query request failed", "err", err, "request_id", rid)
		}
		h.cfg.Logger.InfoContext(ctx, "request failed", "method", r.Method, "api", a.name, "status", qe.status,
			"code", qe.code, "message", qe.message, "request_id", rid)
		writeError(w, a, rid, qe)
	}

	if r.ContentLength > h.cfg.MaxBodyBytes {
		fail(&errdefs.Error{Exception: "RequestEntityTooLargeException", Message: "Request body exceeds the size limit."})
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		fail(&errdefs.Error{Exception: "RequestEntityTooLargeException", Message: "Request body exceeds the size limit."})
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(payload))
	form, perr := requestParams(r, payload)
	if form.Get("Version") == apiIAM.version {
		a = apiIAM
	}
	auth := h.cfg.STS
	if a == apiIAM {
		auth = h.cfg.IAM
	}
	ctx, entry := audit.Open(ctx)
	if op, ok := operations[a][form.Get("Action")]; ok && op.unsigned && perr == nil && form.Get("Version") == a.version {
		h.serveUnsigned(ctx, w, rid, a, form.Get("Action"), op, params(form), entry, fail)
		return
	}
	caller, err := auth.Authenticate(r.WithContext(ctx), payload)
	if err != nil {
		fail(err)
		return
	}
	if perr != nil {
		fail(senderError(http.StatusBadRequest, "MalformedQueryString", "The request's parameters are not a valid URL-encoded form."))
		return
	}
	if h.cfg.Throttle != nil && !h.cfg.Throttle(caller.AccountID) {
		fail(errdefs.Throttling("Rate exceeded"))
		return
	}
	ctx = identity.NewContext(ctx, caller)

	action := form.Get("Action")
	op, ok := operations[a][action]
	switch {
	case action == "":
		fail(senderError(http.StatusBadRequest, "MissingAction", "Missing Action"))
		return
	case !ok || form.Get("Version") != a.version:
		fail(senderError(http.StatusBadRequest, "InvalidAction", "Could not find operation %s for version %s", clip(action), clip(form.Get("Version"))))
		return
	}
	result, err := op.run(h, ctx, params(form))
	if op.mutates && h.cfg.Audit != nil {
		h.audit(ctx, rid, a, action, caller, entry, err)
	}
	if err != nil {
		fail(err)
		return
	}
	writeXML(w, http.StatusOK, result)
}

// serveUnsigned answers an operation that needs no signature: it is
// throttled in a bucket of its own (no account is known before it runs)
// and audited as the principal it names (identity.Caller in its context
// is set by the operation once it has verified who asks).
func (h *Handler) serveUnsigned(ctx context.Context, w http.ResponseWriter, rid string, a api, action string, op operation,
	p params, entry *audit.Entry, fail func(error)) {
	if h.cfg.Throttle != nil && !h.cfg.Throttle(unsignedBucket(p)) {
		fail(errdefs.Throttling("Rate exceeded"))
		return
	}
	holder := &callerHolder{}
	ctx = context.WithValue(ctx, callerHolderKey{}, holder)
	result, err := op.run(h, ctx, p)
	if op.mutates && h.cfg.Audit != nil {
		h.audit(ctx, rid, a, action, holder.caller, entry, err)
	}
	if err != nil {
		fail(err)
		return
	}
	writeXML(w, http.StatusOK, result)
}

// unsignedBucket is the throttle's bucket for an unsigned request: the
// account of the role it names (so one account's pods cannot starve
// another's), or one bucket for requests naming none.
func unsignedBucket(p params) string {
	arn, _ := p.get("RoleArn")
	if m := roleAccount.FindStringSubmatch(arn); m != nil {
		return "unsigned/" + m[1]
	}
	return "unsigned"
}

// callerHolder lets an unsigned operation say, for the audit record, who
// it found the caller to be.
type callerHolder struct{ caller identity.Caller }

type callerHolderKey struct{}

// noteCaller records who an unsigned request turned out to be.
func noteCaller(ctx context.Context, c identity.Caller) {
	if h, ok := ctx.Value(callerHolderKey{}).(*callerHolder); ok {
		h.caller = c
	}
}

// requestParams returns the request's parameters: the form body of a POST
// (with any query parameters beside it), the query of a GET.
func requestParams(r *http.Request, payload []byte) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return url.Values{}, err
	}
	if r.Method != http.MethodPost {
		return q, nil
	}
	body, err := url.ParseQuery(string(payload))
	if err != nil {
		return q, err
	}
	for k, vs := range q {
		if _, dup := body[k]; !dup {
			body[k] = vs
		}
	}
	return body, nil
}

func (h *Handler) audit(ctx context.Context, rid string, a api, action string, who identity.Caller, e *audit.Entry, err error) {
	noted, resource := e.Noted()
	if noted == "" {
		noted = a.name + ":" + action
	}
	outcome := "Success"
	if err != nil {
		outcome = toQueryError(err, a).code
	}
	h.cfg.Audit.Write(ctx, audit.Record{
		Time: time.Now().UTC(), RequestID: rid, Source: "facade", Operation: a.name + " " + action,
		Principal: who.PrincipalARN, Account: who.AccountID, Action: noted, Resource: resource, Outcome: outcome,
	})
}

// clip bounds client text echoed in messages, cutting at a character
// boundary so the message stays UTF-8.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
