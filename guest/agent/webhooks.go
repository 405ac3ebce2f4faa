package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/hostlink"
	"github.com/saltbush/saltbush/guest/podwebhook"
	"github.com/saltbush/saltbush/guest/webhook"
)

// reviewHost asks saltbush's AccessReviewService on the delivery stream's
// connection. Any member may ask, executor or standby: reviews change
// nothing, so they need no grant.
type reviewHost struct{ link *hostlink.Link }

func (h reviewHost) client() (deliveryv1.AccessReviewServiceClient, error) {
	c := h.link.Conn()
	if c == nil {
		return nil, webhook.ErrUnreachable
	}
	return deliveryv1.NewAccessReviewServiceClient(c), nil
}

func (h reviewHost) ReviewToken(ctx context.Context, req *deliveryv1.ReviewTokenRequest) (*deliveryv1.ReviewTokenResponse, error) {
	c, err := h.client()
	if err != nil {
		return nil, err
	}
	return c.ReviewToken(ctx, req)
}

func (h reviewHost) ReviewAccess(ctx context.Context, req *deliveryv1.ReviewAccessRequest) (*deliveryv1.ReviewAccessResponse, error) {
	c, err := h.client()
	if err != nil {
		return nil, err
	}
	return c.ReviewAccess(ctx, req)
}

// ServeWebhooks serves the authentication and authorization webhooks on
// ln with the TLS material p until ctx ends. The aws-auth ConfigMap is
// watched meanwhile.
func (a *Agent) ServeWebhooks(ctx context.Context, ln net.Listener, p *webhook.PKI) error {
	go a.awsAuth.Run(ctx)
	return a.webhooks.Serve(ctx, ln, p)
}

// ServePodWebhook serves the pod identity webhook on ln (TLS with the
// cluster's webhook CA, package podwebhook) until ctx ends. The executor
// points the cluster's webhook configuration at ln's address.
func (a *Agent) ServePodWebhook(ctx context.Context, ln net.Listener) error {
	url := "https://" + ln.Addr().String() + podwebhook.MutatePath
	a.podWebhookURL.Store(&url)
	go a.podWebhook.Run(ctx)
	srv := &http.Server{Handler: a.podWebhook.Handler(), TLSConfig: a.podWebhook.TLSConfig(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// podWebhookStep applies the cluster's webhook CA and configuration, as
// the executor, when due.
func (a *Agent) podWebhookStep(ctx context.Context) {
	if !a.webhookDue || a.podWebhook == nil || time.Now().Before(a.webhookRetryAt) {
		return
	}
	url := a.podWebhookURL.Load()
	if url == nil {
		a.webhookRetryAt = time.Now().Add(keysRetry) // not listening yet
		return
	}
	if err := podwebhook.Ensure(ctx, a.kube.Client, *url); err != nil {
		a.log.Warn("pod identity webhook configuration", "err", err)
		a.webhookRetryAt = time.Now().Add(keysRetry)
		return
	}
	a.webhookDue = false
}
