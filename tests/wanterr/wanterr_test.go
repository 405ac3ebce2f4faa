package wanterr

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recorder is a testing.TB that records failures; Fatal ends the goroutine
// of the check, as it does a test's.
type recorder struct {
	testing.TB
	failed, fatal bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(string, ...any) {
	r.failed = true
}
func (r *recorder) Error(...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) {
	r.failed, r.fatal = true, true
	runtime.Goexit()
}

// run runs check against a recorder and says whether it failed.
func run(check func(t testing.TB)) bool {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

// awsError is the error the SDK returns for an AWS error response: the
// modelled exception in a response error.
func awsError(status int, header string, apiErr error) error {
	resp := &http.Response{StatusCode: status, Header: http.Header{}}
	if header != "" {
		resp.Header.Set("X-Amzn-ErrorType", header)
	}
	return &smithy.OperationError{ServiceID: "EKS", OperationName: "DescribeCluster", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: apiErr}}}
}

func grpcError(code codes.Code, reason string) error {
	st := status.New(code, "no such add-on")
	if reason != "" {
		st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: reason})
	}
	return st.Err()
}

var errSentinel = errors.New("sentinel")

func TestChecks(t *testing.T) {
	notFound := &types.ResourceNotFoundException{Message: new("No cluster found for name: nope.")}
	cases := []struct {
		name  string
		check func(t testing.TB)
		fails bool
	}{
		{"As finds the type", func(t testing.TB) {
			Type[*types.ResourceNotFoundException](t, awsError(404, "ResourceNotFoundException", notFound))
		}, false},
		{"As refuses another type", func(t testing.TB) {
			Type[*types.ResourceInUseException](t, awsError(404, "ResourceNotFoundException", notFound))
		}, true},
		{"As refuses success", func(t testing.TB) { Type[*types.ResourceNotFoundException](t, nil) }, true},
		{"Like finds the example's type", func(t testing.TB) {
			Like(t, awsError(404, "ResourceNotFoundException", notFound), &types.ResourceNotFoundException{})
		}, false},
		{"Like refuses another type", func(t testing.TB) {
			Like(t, awsError(404, "ResourceNotFoundException", notFound), &types.InvalidParameterException{})
		}, true},
		{"Is finds a wrapped sentinel", func(t testing.TB) { Is(t, fmt.Errorf("key: %w", errSentinel), errSentinel) }, false},
		{"Is refuses another error", func(t testing.TB) { Is(t, errors.New("other"), errSentinel) }, true},
		{"Status with code and reason", func(t testing.TB) {
			Status(t, grpcError(codes.NotFound, "ResourceNotFoundException"), codes.NotFound, "ResourceNotFoundException")
		}, false},
		{"Status refuses another code", func(t testing.TB) { Status(t, grpcError(codes.NotFound, ""), codes.InvalidArgument, "") }, true},
		{"Status refuses another reason", func(t testing.TB) {
			Status(t, grpcError(codes.NotFound, "NotFoundException"), codes.NotFound, "ResourceNotFoundException")
		}, true},
		{"Status wants an ErrorInfo when a reason is given", func(t testing.TB) {
			Status(t, grpcError(codes.NotFound, ""), codes.NotFound, "ResourceNotFoundException")
		}, true},
		{"Status refuses a plain error", func(t testing.TB) { Status(t, errSentinel, codes.NotFound, "") }, true},
		{"AWS with code, status and header", func(t testing.TB) {
			AWS(t, awsError(404, "ResourceNotFoundException", notFound), "ResourceNotFoundException", 404)
		}, false},
		{"AWS refuses another status", func(t testing.TB) {
			AWS(t, awsError(400, "ResourceNotFoundException", notFound), "ResourceNotFoundException", 404)
		}, true},
		{"AWS refuses a missing X-Amzn-ErrorType", func(t testing.TB) {
			AWS(t, awsError(404, "", notFound), "ResourceNotFoundException", 404)
		}, true},
		{"AWS any client error", func(t testing.TB) { AWS(t, awsError(409, "", notFound), "", AnyClientError) }, false},
		{"AWS any client error refuses a 5xx", func(t testing.TB) { AWS(t, awsError(500, "", notFound), "", AnyClientError) }, true},
		{"Contains finds the message", func(t testing.TB) {
			Contains(t, awsError(404, "", notFound), "No cluster found for name: nope.")
		}, false},
		{"Contains refuses another message", func(t testing.TB) { Contains(t, awsError(404, "", notFound), "in use") }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.check); got != tc.fails {
				t.Errorf("failed = %v, want %v", got, tc.fails)
			}
		})
	}
}

func TestReturnsWhatItFound(t *testing.T) {
	err := awsError(404, "ResourceNotFoundException", &types.ResourceNotFoundException{Message: new("gone"), ClusterName: new("nope")})
	if e := As[*types.ResourceNotFoundException](t, err); *e.ClusterName != "nope" {
		t.Errorf("As returned %v", e)
	}
	if code, msg := AWS(t, err, "ResourceNotFoundException", 404); code != "ResourceNotFoundException" || msg != "gone" {
		t.Errorf("AWS returned %q, %q", code, msg)
	}
	if st := Status(t, grpcError(codes.NotFound, ""), codes.NotFound, ""); st.Message() != "no such add-on" {
		t.Errorf("Status returned %v", st)
	}
}
