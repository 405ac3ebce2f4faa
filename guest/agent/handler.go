package agent

import (
	"context"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// linkHandler is the agent's side of the stream, called on the link's
// goroutines. It updates the grant at once (so a Fence stops writes before
// run even hears of it) and passes the rest to run.
type linkHandler struct {
	a   *Agent
	ctx context.Context
}

func (h *linkHandler) Hello() *deliveryv1.Hello { return h.a.hello() }

func (h *linkHandler) Opened(endpoint string) {
	h.a.grant.Connected()
	h.a.log.Info("delivery stream open", "endpoint", endpoint)
	h.post(event{opened: true})
}

func (h *linkHandler) Received(m *deliveryv1.HostMessage) {
	g := h.a.grant
	switch msg := m.GetMessage().(type) {
	case *deliveryv1.HostMessage_Assignment:
		h.a.link.SetTiming(msg.Assignment.GetTiming())
		g.Assign(msg.Assignment)
	case *deliveryv1.HostMessage_Fence:
		g.Fence(msg.Fence)
	case *deliveryv1.HostMessage_Heartbeat:
		g.Heard()
		return // nothing for run
	default:
		g.Heard()
	}
	h.post(event{msg: m})
}

func (h *linkHandler) Closed(err error) {
	h.a.grant.Disconnected(err)
	h.a.metrics.connected.Set(0)
	if err == nil {
		err = context.Canceled
	}
	h.post(event{closed: err})
}

func (h *linkHandler) post(ev event) {
	select {
	case h.a.events <- ev:
	case <-h.ctx.Done():
	}
}
