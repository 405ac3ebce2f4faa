package agent

import (
	"context"
	"time"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/issuer"
)

// keysRetry is how soon a failed read, or a key set saltbush could not
// judge, is tried again.
const keysRetry = 2 * time.Second

// keysState is run's view of the service-account issuer and keys it sends
// saltbush (package issuer). Level triggered: every new stream and every
// assignment sends them again.
type keysState struct {
	// last is what the apiserver last said; have once it said anything.
	last issuer.Keys
	have bool
	// readAt is when the apiserver is read again.
	readAt time.Time
	// sent: last was sent on this stream at this epoch; retryAt paces a
	// resend saltbush asked for (it could not judge the keys).
	sent    bool
	retryAt time.Time
	// verdict is saltbush's last answer, for the status API.
	verdict string
}

// keysStep reads the apiserver's issuer and keys when due and sends them
// when they changed or were not sent at this epoch. Only the executor
// sends them (saltbush fences them like a report).
func (a *Agent) keysStep(ctx context.Context, epoch int64) {
	now := time.Now()
	if !now.Before(a.keys.readAt) {
		rctx, cancel := context.WithTimeout(ctx, a.cfg.ReviewTimeout+5*time.Second)
		k, err := issuer.Read(rctx, a.kube.Kubernetes.Discovery().RESTClient())
		cancel()
		if err != nil {
			a.log.Warn("reading the apiserver's service-account keys", "err", err)
			a.keys.readAt = now.Add(keysRetry)
			return
		}
		a.keys.readAt = now.Add(a.cfg.KeysInterval)
		if !a.keys.have || k.Digest() != a.keys.last.Digest() {
			a.keys.last, a.keys.have, a.keys.sent = k, true, false
		}
	}
	if !a.keys.have || a.keys.sent || now.Before(a.keys.retryAt) {
		return
	}
	a.link.Send(ctx, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_ServiceAccountKeys{
		ServiceAccountKeys: &deliveryv1.ServiceAccountKeys{Epoch: epoch, Issuer: a.keys.last.Issuer, Jwks: a.keys.last.JWKS},
	}})
	a.keys.sent = true
}

// keysAnswered takes a ServiceAccountKeysResult.
func (a *Agent) keysAnswered(r *deliveryv1.ServiceAccountKeysResult) {
	a.keys.verdict = r.GetReason()
	switch r.GetReason() {
	case "accepted", "unchanged":
	case "unavailable":
		// saltbush could not judge them (etcd, or the cluster moved): say
		// them again shortly.
		a.keys.sent, a.keys.retryAt = false, time.Now().Add(keysRetry)
	default:
		// Refused (the apiserver's issuer is not the cluster's, …): said
		// again when they change or at the next epoch; the operator must
		// act, so it is a warning.
		a.log.Warn("saltbush refused the service-account keys", "reason", r.GetReason(), "message", r.GetMessage(),
			"issuer", a.keys.last.Issuer)
	}
}

// keysWake is when keysStep is due next (zero: no time of its own).
func (a *Agent) keysWake() time.Time {
	if a.keys.have && !a.keys.sent && a.keys.retryAt.After(a.keys.readAt) {
		return a.keys.retryAt
	}
	return a.keys.readAt
}
