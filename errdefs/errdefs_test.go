package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/errdefs"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		exception string
		http      int
		code      codes.Code
	}{
		{"api error passes through", errdefs.NotFound("No cluster found for name: x."), errdefs.ResourceNotFoundException, 404, codes.NotFound},
		{"wrapped api error", fmt.Errorf("op: %w", errdefs.ResourceInUse("busy")), errdefs.ResourceInUseException, 409, codes.AlreadyExists},
		{"bad paging token", fmt.Errorf("list: %w", errdefs.KindInvalidToken), errdefs.InvalidParameterException, 400, codes.InvalidArgument},
		{"store unavailable", fmt.Errorf("get: %w", errdefs.KindUnavailable), errdefs.ServiceUnavailableException, 503, codes.Unavailable},
		{"deadline", context.DeadlineExceeded, errdefs.ServiceUnavailableException, 503, codes.Unavailable},
		{"lost CAS race", fmt.Errorf("k: %w", errdefs.KindConflict), errdefs.ResourceInUseException, 409, codes.Aborted},
		{"conflict api error", fmt.Errorf("op: %w", errdefs.Conflict("modified")), errdefs.ResourceInUseException, 409, codes.Aborted},
		{"conflict wins over the deadline it ran into", fmt.Errorf("k: %w: %w", errdefs.KindConflict, context.DeadlineExceeded), errdefs.ResourceInUseException, 409, codes.Aborted},
		{"missing key", fmt.Errorf("k: %w", errdefs.KindNotFound), errdefs.ResourceNotFoundException, 404, codes.NotFound},
		{"existing key", fmt.Errorf("k: %w", errdefs.KindExists), errdefs.ResourceInUseException, 409, codes.AlreadyExists},
		{"cancelled", context.Canceled, errdefs.ClientException, 400, codes.InvalidArgument},
		{"unknown error hides internals", errors.New("disk on fire"), errdefs.ServerException, 500, codes.Internal},
		{"invalid request", errdefs.InvalidRequest("deleting"), errdefs.InvalidRequestException, 400, codes.FailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := errdefs.Classify(tc.err)
			if e.Exception != tc.exception {
				t.Fatalf("exception = %s, want %s", e.Exception, tc.exception)
			}
			if got := errdefs.HTTPStatus(e.Exception); got != tc.http {
				t.Errorf("HTTP status = %d, want %d", got, tc.http)
			}
			wire := errdefs.ToGRPC(tc.err)
			st := status.Convert(wire)
			if st.Code() != tc.code {
				t.Errorf("gRPC code = %v, want %v", st.Code(), tc.code)
			}
			back := errdefs.FromGRPC(st)
			if back.Exception != tc.exception || back.Message != e.Message {
				t.Errorf("round trip = %s %q, want %s %q", back.Exception, back.Message, tc.exception, e.Message)
			}
			if tc.exception == errdefs.ServerException && back.Message != "An internal error occurred." {
				t.Errorf("server error leaks %q", back.Message)
			}
		})
	}
}

func TestFieldsSurviveTheWire(t *testing.T) {
	err := errdefs.NotFound("No cluster found for name: a.").WithField("clusterName", "a")
	back := errdefs.FromGRPC(status.Convert(errdefs.ToGRPC(err)))
	if back.Fields["clusterName"] != "a" {
		t.Errorf("fields = %v", back.Fields)
	}
}

func TestFromGRPCWithoutErrorInfo(t *testing.T) {
	tests := []struct {
		code codes.Code
		want string
	}{
		{codes.InvalidArgument, errdefs.InvalidParameterException},
		{codes.NotFound, errdefs.ResourceNotFoundException},
		{codes.Unavailable, errdefs.ServiceUnavailableException},
		{codes.ResourceExhausted, errdefs.ThrottlingException},
		{codes.Unknown, errdefs.ServerException},
	}
	for _, tc := range tests {
		t.Run(tc.code.String(), func(t *testing.T) {
			if got := errdefs.FromGRPC(status.New(tc.code, "m")).Exception; got != tc.want {
				t.Errorf("%v -> %s, want %s", tc.code, got, tc.want)
			}
		})
	}
}

// A gRPC status buried in a cause chain (a raw etcd error) must neither pick
// the wire error nor leak its text.
func TestToGRPCIgnoresBuriedStatus(t *testing.T) {
	buried := fmt.Errorf("accounts/x/clusters/y: etcd: %w", status.Error(codes.ResourceExhausted, "etcdserver: too many requests"))
	st := status.Convert(errdefs.ToGRPC(fmt.Errorf("create cluster %q: %w", "y", buried)))
	if st.Code() != codes.Internal || st.Message() != "An internal error occurred." {
		t.Errorf("ToGRPC = %v %q, want Internal with a generic message", st.Code(), st.Message())
	}
	// A status returned as is (a handler's own) passes through.
	own := status.Error(codes.Unauthenticated, "no")
	if got := errdefs.ToGRPC(own); status.Code(got) != codes.Unauthenticated {
		t.Errorf("ToGRPC(own status) = %v", got)
	}
}

func TestWithFieldAndWrap(t *testing.T) {
	api := errdefs.NotFound("No cluster found for name: a.")
	internal := errors.New("etcd: request timed out")
	cases := []struct {
		name       string
		err        error
		wantField  bool
		wantText   string
		wantIsSame bool
	}{
		{name: "nil stays nil", err: nil},
		{name: "API error gains the member and keeps its message", err: api, wantField: true,
			wantText: "ResourceNotFoundException: No cluster found for name: a."},
		{name: "wrapped API error too", err: fmt.Errorf("read: %w", api), wantField: true,
			wantText: "ResourceNotFoundException: No cluster found for name: a."},
		{name: "internal error is wrapped with context", err: internal, wantText: "read cluster \"a\": etcd: request timed out",
			wantIsSame: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withField := errdefs.WithField(tc.err, "clusterName", "a")
			wrapped := errdefs.Wrap(withField, "read cluster %q", "a")
			if tc.err == nil {
				if withField != nil || wrapped != nil {
					t.Fatalf("WithField, Wrap of nil = %v, %v", withField, wrapped)
				}
				return
			}
			var e *errdefs.Error
			if got := errors.As(wrapped, &e) && e.Fields["clusterName"] == "a"; got != tc.wantField {
				t.Errorf("clusterName member present = %v, want %v (%v)", got, tc.wantField, wrapped)
			}
			if wrapped.Error() != tc.wantText {
				t.Errorf("Error() = %q, want %q", wrapped.Error(), tc.wantText)
			}
			if tc.wantIsSame && !errors.Is(wrapped, tc.err) {
				t.Errorf("Wrap lost the cause %v", tc.err)
			}
		})
	}
}
