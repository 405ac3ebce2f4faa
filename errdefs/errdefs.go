// Package errdefs defines saltbush's API errors: an AWS exception name, a
// message in AWS's words, and the modelled members (clusterName, addonName)
// AWS puts beside the message. Domain code returns these (wrapping store
// sentinels where a store error is the cause); the gRPC service shells
// convert them to a gRPC status once, with ToGRPC, and the façade turns that
// status into AWS's REST-JSON error with FromGRPC and HTTPStatus.
//
// errdefs is a leaf: it imports only the standard library and gRPC. Lower
// layers (the store) classify their own errors by matching a Kind with
// errors.Is; errdefs never imports them.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every saltbush API error.
const Domain = "eks.amazonaws.com"

// AWS exception shape names.
const (
	InvalidParameterException      = "InvalidParameterException"
	InvalidRequestException        = "InvalidRequestException"
	ClientException                = "ClientException"
	BadRequestException            = "BadRequestException"
	ResourceLimitExceededException = "ResourceLimitExceededException"
	AccessDeniedException          = "AccessDeniedException"
	ResourceNotFoundException      = "ResourceNotFoundException"
	NotFoundException              = "NotFoundException"
	ResourceInUseException         = "ResourceInUseException"
	ThrottlingException            = "ThrottlingException"
	ServerException                = "ServerException"
	ServiceUnavailableException    = "ServiceUnavailableException"
	// The authentication failures AWS answers before any operation runs.
	MissingAuthenticationTokenException = "MissingAuthenticationTokenException"
	UnrecognizedClientException         = "UnrecognizedClientException"
	InvalidSignatureException           = "InvalidSignatureException"
	// ExpiredTokenException refuses temporary credentials whose session
	// has expired.
	ExpiredTokenException = "ExpiredTokenException"
)

// Kind is what a lower layer's error means to the API. A layer below errdefs
// (the store) makes its sentinel errors match a Kind under errors.Is, and
// Classify maps each Kind to a generic exception; errdefs so never imports
// the layer.
type Kind string

func (k Kind) Error() string { return string(k) }

// The kinds Classify maps, in the order it checks them.
const (
	// KindInvalidToken: a continuation token is not valid (400).
	KindInvalidToken Kind = "invalid continuation token"
	// KindNotFound: the resource does not exist (404).
	KindNotFound Kind = "not found"
	// KindExists: the resource exists already (409).
	KindExists Kind = "already exists"
	// KindConflict: the resource changed concurrently (409).
	KindConflict Kind = "conflict"
	// KindUnavailable: the backing store cannot be reached (503).
	KindUnavailable Kind = "unavailable"
)

// Error is an API error. It satisfies error and unwraps to its cause.
type Error struct {
	// Exception is the AWS shape name, sent as X-Amzn-ErrorType.
	Exception string
	// Message is the human-readable text, in AWS's words where known.
	Message string
	// Fields are the modelled members of the exception (clusterName,
	// addonName, ...), rendered beside message in the body.
	Fields map[string]string
	// code overrides the exception's gRPC code (the exceptions table)
	// where one exception covers cases gRPC tells apart: a concurrent
	// modification is ResourceInUseException like an existing resource,
	// but Aborted, not AlreadyExists. Zero (codes.OK) means no override.
	code  codes.Code
	cause error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Exception, e.Message, e.cause)
	}
	return e.Exception + ": " + e.Message
}

// Unwrap returns the cause, so errors.Is sees store sentinels through it.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same exception name, so
// callers can write errors.Is(err, &errdefs.Error{Exception: ...}).
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Exception == e.Exception && t.Message == "" && t.Fields == nil
}

// WithField returns a copy of e with one more modelled member.
func (e *Error) WithField(name, value string) *Error {
	c := *e
	c.Fields = make(map[string]string, len(e.Fields)+1)
	for k, v := range e.Fields {
		c.Fields[k] = v
	}
	c.Fields[name] = value
	return &c
}

// WithField adds a modelled member (clusterName, addonName) to err when it
// is an API error; any other error passes unchanged, since only API errors
// reach the caller with their members.
func WithField(err error, name, value string) error {
	var e *Error
	if errors.As(err, &e) {
		return e.WithField(name, value)
	}
	return err
}

// Wrap adds context to an internal error; an API error passes as it is,
// since its message is what the caller sees. A nil err stays nil.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// WithCause returns a copy of e that unwraps to cause.
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// AsException returns a copy of e answered as another exception, with that
// exception's gRPC code: the same refusal, in the exception an operation's
// model lists for it.
func (e *Error) AsException(exception string) *Error {
	c := *e
	c.Exception, c.code = exception, codes.OK
	return &c
}

func newError(exception, format string, args []any) *Error {
	return &Error{Exception: exception, Message: fmt.Sprintf(format, args...)}
}

// InvalidParameter is AWS's InvalidParameterException (400).
func InvalidParameter(format string, args ...any) *Error {
	return newError(InvalidParameterException, format, args)
}

// AccessDenied is AWS's AccessDeniedException (403): the caller is
// authenticated but no policy allows the action on the resource.
func AccessDenied(format string, args ...any) *Error {
	return newError(AccessDeniedException, format, args)
}

// Throttling is AWS's ThrottlingException (429).
func Throttling(format string, args ...any) *Error {
	return newError(ThrottlingException, format, args)
}

// InvalidRequest is AWS's InvalidRequestException (400).
func InvalidRequest(format string, args ...any) *Error {
	return newError(InvalidRequestException, format, args)
}

// NotFound is AWS's ResourceNotFoundException (404).
func NotFound(format string, args ...any) *Error {
	return newError(ResourceNotFoundException, format, args)
}

// BadRequest is AWS's BadRequestException (400), which the tag operations
// model instead of InvalidParameterException.
func BadRequest(format string, args ...any) *Error {
	return newError(BadRequestException, format, args)
}

// MissingResource is AWS's NotFoundException (404), which the tag
// operations model instead of ResourceNotFoundException.
func MissingResource(format string, args ...any) *Error {
	return newError(NotFoundException, format, args)
}

// ResourceInUse is AWS's ResourceInUseException (409): the resource exists
// already, or its state forbids the change.
func ResourceInUse(format string, args ...any) *Error {
	return newError(ResourceInUseException, format, args)
}

// Conflict is AWS's ResourceInUseException (409) for a resource modified
// concurrently (the write lost its races until the caller's deadline): on
// the gRPC port it is Aborted, which tells a client to retry the whole
// read-modify-write, where AlreadyExists would tell it to stop.
func Conflict(format string, args ...any) *Error {
	e := newError(ResourceInUseException, format, args)
	e.code = codes.Aborted
	return e
}

// ResourceLimitExceeded is AWS's ResourceLimitExceededException (400).
func ResourceLimitExceeded(format string, args ...any) *Error {
	return newError(ResourceLimitExceededException, format, args)
}

// ServiceUnavailable is AWS's ServiceUnavailableException (503).
func ServiceUnavailable(format string, args ...any) *Error {
	return newError(ServiceUnavailableException, format, args)
}

// exceptions maps each exception to its HTTP status (docs/architecture.md, "Errors") and the
// gRPC code used on the gRPC port.
var exceptions = map[string]struct {
	http int
	code codes.Code
}{
	InvalidParameterException:      {http.StatusBadRequest, codes.InvalidArgument},
	InvalidRequestException:        {http.StatusBadRequest, codes.FailedPrecondition},
	ClientException:                {http.StatusBadRequest, codes.InvalidArgument},
	BadRequestException:            {http.StatusBadRequest, codes.InvalidArgument},
	ResourceLimitExceededException: {http.StatusBadRequest, codes.ResourceExhausted},
	AccessDeniedException:          {http.StatusForbidden, codes.PermissionDenied},
	ResourceNotFoundException:      {http.StatusNotFound, codes.NotFound},
	NotFoundException:              {http.StatusNotFound, codes.NotFound},
	ResourceInUseException:         {http.StatusConflict, codes.AlreadyExists},
	ThrottlingException:            {http.StatusTooManyRequests, codes.ResourceExhausted},
	ServerException:                {http.StatusInternalServerError, codes.Internal},
	ServiceUnavailableException:    {http.StatusServiceUnavailable, codes.Unavailable},

	MissingAuthenticationTokenException: {http.StatusForbidden, codes.Unauthenticated},
	UnrecognizedClientException:         {http.StatusForbidden, codes.Unauthenticated},
	InvalidSignatureException:           {http.StatusForbidden, codes.Unauthenticated},
	ExpiredTokenException:               {http.StatusForbidden, codes.Unauthenticated},
}

// HTTPStatus is the status code AWS answers an exception with; unknown
// exceptions are server errors.
func HTTPStatus(exception string) int {
	if e, ok := exceptions[exception]; ok {
		return e.http
	}
	return http.StatusInternalServerError
}

// Classify turns any error into an API error. An *Error is returned as is;
// errors matching a Kind (store sentinels) and context errors that reached
// the boundary unwrapped get a generic exception; anything else is a ServerException whose message does
// not leak internals (the caller logs the original).
func Classify(err error) *Error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, KindInvalidToken):
		return InvalidParameter("The nextToken provided is not valid.").WithCause(err)
	case errors.Is(err, KindNotFound):
		return NotFound("The specified resource could not be found.").WithCause(err)
	case errors.Is(err, KindExists):
		return ResourceInUse("The specified resource already exists.").WithCause(err)
	case errors.Is(err, KindConflict):
		return Conflict("The resource was modified concurrently; retry the request.").WithCause(err)
	case errors.Is(err, KindUnavailable), errors.Is(err, context.DeadlineExceeded):
		return ServiceUnavailable("The service is unavailable. Try again later.").WithCause(err)
	case errors.Is(err, context.Canceled):
		return &Error{Exception: ClientException, Message: "The request was cancelled.", cause: err}
	default:
		return &Error{Exception: ServerException, Message: "An internal error occurred.", cause: err}
	}
}

// ToGRPC converts err to a gRPC status error carrying the exception as an
// ErrorInfo detail (reason = exception, metadata = modelled members).
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	// Only an error that is itself a status passes through. A status deep
	// in a cause chain (a raw etcd error) must not choose the wire error or
	// leak its text: Classify decides.
	var apiErr *Error
	if se, ok := err.(interface{ GRPCStatus() *status.Status }); ok && !errors.As(err, &apiErr) {
		return se.GRPCStatus().Err()
	}
	e := Classify(err)
	code := codes.Internal
	if m, ok := exceptions[e.Exception]; ok {
		code = m.code
	}
	if e.code != codes.OK {
		code = e.code
	}
	st := status.New(code, e.Message)
	withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   e.Exception,
		Domain:   Domain,
		Metadata: e.Fields,
	})
	if derr != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// FromGRPC recovers the API error from a gRPC status. A status without
// saltbush's ErrorInfo (routing, decoding and transport errors) is mapped
// from its code.
func FromGRPC(st *status.Status) *Error {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return &Error{Exception: info.GetReason(), Message: st.Message(), Fields: info.GetMetadata()}
		}
	}
	e := &Error{Message: st.Message()}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		e.Exception = InvalidParameterException
	case codes.FailedPrecondition:
		e.Exception = InvalidRequestException
	case codes.NotFound:
		e.Exception = ResourceNotFoundException
	case codes.AlreadyExists, codes.Aborted:
		e.Exception = ResourceInUseException
	case codes.ResourceExhausted:
		e.Exception = ThrottlingException
	case codes.PermissionDenied, codes.Unauthenticated:
		e.Exception = AccessDeniedException
	case codes.Unavailable, codes.DeadlineExceeded:
		e.Exception = ServiceUnavailableException
	case codes.Canceled:
		e.Exception = ClientException
	default:
		e.Exception = ServerException
	}
	return e
}

// Wire is what every gRPC service shell returns for a failed operation: err
// classified and converted with ToGRPC. Server-side failures (whose wire
// message deliberately says nothing about internals) are logged here with
// their cause, under op, so the conversion and the log happen in one place.
func Wire(ctx context.Context, log *slog.Logger, op string, err error) error {
	e := Classify(err)
	switch e.Exception {
	case ServerException, ServiceUnavailableException:
		log.ErrorContext(ctx, "operation failed", "op", op, "err", err)
	}
	return ToGRPC(e)
}

// IsException reports whether err is (or wraps) an API error of exception.
func IsException(err error, exception string) bool {
	var e *Error
	return errors.As(err, &e) && e.Exception == exception
}
