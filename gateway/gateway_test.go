package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/saltbush/saltbush/identity"
)

// rootOf authenticates every request as one account's root: this test is
// about what happens after authentication.
type rootOf string

func (a rootOf) Authenticate(*http.Request, []byte) (identity.Caller, error) {
	return identity.RootCaller(string(a)), nil
}

func TestHandlerPanicBecomesServerException(t *testing.T) {
	h, err := New(context.Background(), Config{Authenticator: rootOf("000000000000")},
		func(_ context.Context, mux *runtime.ServeMux) error {
			return mux.HandlePath("GET", "/boom", func(http.ResponseWriter, *http.Request, map[string]string) {
				panic("boom")
			})
		})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/boom", nil))
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("X-Amzn-ErrorType") != "ServerException" {
		t.Errorf("panic answered %d %q, want 500 ServerException", rec.Code, rec.Header().Get("X-Amzn-ErrorType"))
	}
}
