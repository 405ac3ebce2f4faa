package store_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/store"
)

// TestSentinelsClassify pins the wire error of every store sentinel: the
// store classifies its own errors (errdefs does not import it), and the
// exception, message and code must stay what they were.
func TestSentinelsClassify(t *testing.T) {
	tests := []struct {
		err       error
		text      string
		exception string
		message   string
		code      codes.Code
	}{
		{store.ErrInvalidToken, "invalid continuation token", errdefs.InvalidParameterException, "The nextToken provided is not valid.", codes.InvalidArgument},
		{store.ErrNotFound, "not found", errdefs.ResourceNotFoundException, "The specified resource could not be found.", codes.NotFound},
		{store.ErrExists, "already exists", errdefs.ResourceInUseException, "The specified resource already exists.", codes.AlreadyExists},
		{store.ErrConflict, "conflict", errdefs.ResourceInUseException, "The resource was modified concurrently; retry the request.", codes.Aborted},
		{store.ErrUnavailable, "store unavailable", errdefs.ServiceUnavailableException, "The service is unavailable. Try again later.", codes.Unavailable},
		{store.ErrCorrupt, "corrupt record", errdefs.ServerException, "An internal error occurred.", codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			if tc.err.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", tc.err.Error(), tc.text)
			}
			wrapped := fmt.Errorf("clusters/a: %w", tc.err)
			if !errors.Is(wrapped, tc.err) {
				t.Fatal("errors.Is does not see the sentinel through a wrap")
			}
			e := errdefs.Classify(wrapped)
			if e.Exception != tc.exception || e.Message != tc.message {
				t.Errorf("Classify = %s %q, want %s %q", e.Exception, e.Message, tc.exception, tc.message)
			}
			if !errors.Is(e, tc.err) {
				t.Error("the API error does not unwrap to the sentinel")
			}
			if got := status.Code(errdefs.ToGRPC(wrapped)); got != tc.code {
				t.Errorf("gRPC code = %v, want %v", got, tc.code)
			}
		})
	}
	// Sentinels stay distinct from one another.
	if errors.Is(store.ErrExists, store.ErrConflict) || errors.Is(store.ErrNotFound, store.ErrExists) {
		t.Error("distinct sentinels match each other")
	}
}
