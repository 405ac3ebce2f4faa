// Package wanterr asserts what error a call returned: a typed error
// (errors.As), a sentinel (errors.Is), a gRPC status with saltbush's
// ErrorInfo, or an AWS error as the SDK reports it (its code, the HTTP
// status and X-Amzn-ErrorType). Each fails the test at the caller's line
// and returns what it found, so a test goes on to check messages and
// members.
package wanterr

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Type fails t unless err unwraps (errors.As) to a T:
// wanterr.Type[*types.ResourceNotFoundException](t, err). As returns it,
// for a test that goes on to its members.
func Type[T error](t testing.TB, err error) {
	t.Helper()
	As[T](t, err)
}

// As fails t unless err unwraps (errors.As) to a T, and returns it.
func As[T error](t testing.TB, err error) T {
	t.Helper()
	var target T
	if err == nil {
		t.Fatalf("call succeeded, want %T", target)
	}
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T), want %T", err, err, target)
	}
	return target
}

// Like is Type for tables, where the type is a value: it fails t unless
// err unwraps to the type of example (e.g. &types.InvalidRequestException{}).
func Like(t testing.TB, err error, example error) {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %T", example)
	}
	if !errors.As(err, reflect.New(reflect.TypeOf(example)).Interface()) {
		t.Fatalf("error %v (%T), want %T", err, err, example)
	}
}

// Is fails t unless err wraps want (errors.Is).
func Is(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

// Status fails t unless err is a gRPC status with code and a message and,
// when reason is set, saltbush's ErrorInfo naming that exception
// (docs/architecture.md, "Errors"). It returns the status.
func Status(t testing.TB, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != code {
		t.Errorf("code = %s (%q), want %s", st.Code(), st.Message(), code)
	}
	if st.Message() == "" {
		t.Error("empty status message")
	}
	if reason == "" {
		return st
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.GetReason() != reason {
				t.Errorf("ErrorInfo reason = %q, want %q", info.GetReason(), reason)
			}
			return st
		}
	}
	t.Errorf("status %v carries no ErrorInfo (want reason %s)", st, reason)
	return st
}

// AnyClientError is the httpStatus of AWS that accepts any 4xx status.
const AnyClientError = 0

// AWS fails t unless err is an AWS API error (smithy.APIError, modelled or
// not) with an HTTP response of httpStatus (AnyClientError: any 4xx) and,
// when code is set, that error code in both the SDK's error and the
// X-Amzn-ErrorType header. It returns the error's code and message.
func AWS(t testing.TB, err error, code string, httpStatus int) (errorCode, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error, want %s", err, err, code)
	}
	if code != "" && ae.ErrorCode() != code {
		t.Errorf("ErrorCode() = %q (message %q), want %q", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v carries no HTTP response", err)
	}
	switch got := re.HTTPStatusCode(); {
	case httpStatus == AnyClientError && (got < 400 || got >= 500):
		t.Errorf("HTTP status = %d, want a 4xx", got)
	case httpStatus != AnyClientError && got != httpStatus:
		t.Errorf("HTTP status = %d, want %d for %s", got, httpStatus, code)
	}
	if code != "" {
		if got := re.Response.Header.Get("X-Amzn-ErrorType"); got != code {
			t.Errorf("X-Amzn-ErrorType = %q, want %q", got, code)
		}
	}
	return ae.ErrorCode(), ae.ErrorMessage()
}

// Contains fails t unless err's text contains substr (the SDK's error text
// includes the message saltbush sent).
func Contains(t testing.TB, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Errorf("error %v does not say %q", err, substr)
	}
}
