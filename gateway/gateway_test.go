package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

func TestHandlerPanicBecomesServerException(t *testing.T) {
	h, err := New(context.Background(), Config{Authenticator: StaticAccount{AccountID: "000000000000"}},
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
