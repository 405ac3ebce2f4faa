package agent

import (
	"context"
	"net"

	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/hostlink"
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
