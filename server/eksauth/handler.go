package eksauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/gateway"
	"github.com/saltbush/saltbush/identity"
)

// path is the operation's route; the cluster name is matched loosely here
// and checked against the model by Validate.
var path = regexp.MustCompile(`^/clusters/([^/]*)/assume-role-for-pod-identity$`)

// IsRequest reports whether r is an EKS Auth call: a POST to the
// operation's path, which no EKS route shares.
func IsRequest(r *http.Request) bool {
	return r.Method == http.MethodPost && path.MatchString(r.URL.Path)
}

// Config is what the handler needs.
type Config struct {
	// Authenticator verifies SigV4 for the signing name eks-auth.
	Authenticator gateway.Authenticator
	// Throttle is asked once per authenticated request; none when nil.
	Throttle func(account string) bool
	// Audit receives a record of every call; none when nil.
	Audit        audit.Sink
	MaxBodyBytes int64
	Service      *Service
	Logger       *slog.Logger
}

// Handler serves EKS Auth.
type Handler struct{ cfg Config }

// NewHandler returns the EKS Auth endpoint.
func NewHandler(cfg Config) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg}
}

// statuses are the model's HTTP statuses for its errors where they differ
// from the EKS API's (errdefs.HTTPStatus).
var statuses = map[string]int{
	errdefs.AccessDeniedException:  http.StatusBadRequest,
	InvalidTokenException:          http.StatusBadRequest,
	ExpiredTokenException:          http.StatusBadRequest,
	InternalServerException:        http.StatusInternalServerError,
	gateway.SerializationException: http.StatusBadRequest,
}

type request struct {
	Token *string `json:"token"`
}

type response struct {
	Subject                subject         `json:"subject"`
	Audience               string          `json:"audience"`
	PodIdentityAssociation association     `json:"podIdentityAssociation"`
	AssumedRoleUser        assumedRoleUser `json:"assumedRoleUser"`
	Credentials            credentials     `json:"credentials"`
}

type subject struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
}

type association struct {
	AssociationARN string `json:"associationArn"`
	AssociationID  string `json:"associationId"`
}

type assumedRoleUser struct {
	ARN          string `json:"arn"`
	AssumeRoleID string `json:"assumeRoleId"`
}

type credentials struct {
	SessionToken    string `json:"sessionToken"`
	SecretAccessKey string `json:"secretAccessKey"`
	AccessKeyID     string `json:"accessKeyId"`
	// Expiration is a REST-JSON timestamp: epoch seconds.
	Expiration float64 `json:"expiration"`
}

// decodeRequest reads the body as the façade reads its bodies: JSON that
// is not an object, or anything after it, is a SerializationException; an
// unknown or mistyped member an InvalidParameterException naming it; an
// empty body has no token (Validate says so).
func decodeRequest(payload []byte) (request, error) {
	var req request
	if len(bytes.TrimSpace(payload)) == 0 {
		return req, nil
	}
	if !json.Valid(payload) {
		return req, &errdefs.Error{Exception: gateway.SerializationException, Message: "The request body is not valid JSON."}
	}
	if t := bytes.TrimSpace(payload); t[0] != '{' {
		return req, &errdefs.Error{Exception: gateway.SerializationException, Message: "The request body is not a JSON object."}
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return req, errdefs.InvalidParameter("Could not parse the request body: member %s must be a string.", typ.Field)
		}
		field, _ := strings.CutPrefix(strings.TrimPrefix(err.Error(), "json: "), "unknown field ")
		return req, errdefs.InvalidParameter("Could not parse the request body: unknown member %s.", field)
	}
	return req, nil
}

// ServeHTTP authenticates, throttles, decodes, answers and audits one call.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := uuid.NewString()
	w.Header().Set("X-Amzn-Requestid", rid)
	ctx, entry := audit.Open(r.Context())
	var who identity.Caller
	// authenticated: errors from here on are the operation's, with the
	// model's statuses; before, authentication's own (AWS's common errors,
	// 403 for an expired signing credential where the model's namesake
	// ExpiredTokenException, a pod's expired token, is 400).
	authenticated := false
	fail := func(err error) {
		e := errdefs.Classify(err)
		status, ok := statuses[e.Exception]
		switch {
		case e.Exception == "RequestEntityTooLargeException":
			status = http.StatusRequestEntityTooLarge
		case !authenticated && e.Exception != errdefs.ServerException:
			status = errdefs.HTTPStatus(e.Exception)
		case e.Exception == errdefs.ServerException:
			h.cfg.Logger.ErrorContext(ctx, "eks-auth request failed", "err", err, "request_id", rid)
			e = &errdefs.Error{Exception: InternalServerException, Message: "An internal error occurred."}
			status = http.StatusInternalServerError
		case !ok:
			status = errdefs.HTTPStatus(e.Exception)
		}
		h.cfg.Logger.InfoContext(ctx, "request failed", "api", "eks-auth", "status", status, "exception", e.Exception,
			"message", e.Message, "request_id", rid)
		gateway.WriteError(w, e, status)
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
	who, err = h.cfg.Authenticator.Authenticate(r.WithContext(ctx), payload)
	if err != nil {
		fail(err)
		return
	}
	authenticated = true
	if h.cfg.Throttle != nil && !h.cfg.Throttle(who.AccountID) {
		fail(errdefs.Throttling("Rate exceeded"))
		return
	}
	ctx = identity.NewContext(ctx, who)
	cluster := path.FindStringSubmatch(r.URL.Path)[1]
	req, err := decodeRequest(payload)
	if err != nil {
		fail(err)
		return
	}
	token := ""
	if req.Token != nil {
		token = *req.Token
	}
	res, err := h.cfg.Service.AssumeRoleForPodIdentity(ctx, cluster, token)
	h.audit(ctx, rid, who, entry, err)
	if err != nil {
		fail(err)
		return
	}
	s := res.Session
	b, _ := json.Marshal(response{
		Subject:                subject{Namespace: res.Namespace, ServiceAccount: res.ServiceAccount},
		Audience:               Audience,
		PodIdentityAssociation: association{AssociationARN: res.AssociationARN, AssociationID: res.AssociationID},
		AssumedRoleUser:        assumedRoleUser{ARN: res.AssumedRoleARN, AssumeRoleID: res.AssumedRoleID},
		Credentials: credentials{SessionToken: s.SessionToken, SecretAccessKey: s.SecretAccessKey, AccessKeyID: s.AccessKeyID,
			Expiration: float64(s.Expiration.Unix())},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (h *Handler) audit(ctx context.Context, rid string, who identity.Caller, e *audit.Entry, err error) {
	if h.cfg.Audit == nil {
		return
	}
	noted, resource := e.Noted()
	if noted == "" {
		noted = Action
	}
	outcome := "Success"
	if err != nil {
		outcome = errdefs.Classify(err).Exception
	}
	h.cfg.Audit.Write(ctx, audit.Record{
		Time: time.Now().UTC(), RequestID: rid, Source: "facade", Operation: "eks-auth AssumeRoleForPodIdentity",
		Principal: who.PrincipalARN, Account: who.AccountID, Action: noted, Resource: resource, Outcome: outcome,
	})
}
