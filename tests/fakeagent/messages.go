package fakeagent

import deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"

// HelloMsg is the first message of a stream.
func HelloMsg(h *deliveryv1.Hello) *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Hello{Hello: h}}
}

// HeartbeatMsg says the agent is alive.
func HeartbeatMsg() *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Heartbeat{Heartbeat: &deliveryv1.Heartbeat{}}}
}

// AckMsg acknowledges set.
func AckMsg(set *deliveryv1.DesiredSet) *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Ack{Ack: &deliveryv1.Ack{Version: set.GetVersion(), Nonce: set.GetNonce()}}}
}

// NackMsg refuses set, saying why.
func NackMsg(set *deliveryv1.DesiredSet, why string) *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Nack{Nack: &deliveryv1.Nack{
		Version: set.GetVersion(), Nonce: set.GetNonce(), Error: why}}}
}

// FenceAckMsg says the agent stopped writing at epoch.
func FenceAckMsg(epoch int64) *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_FenceAck{FenceAck: &deliveryv1.FenceAck{Epoch: epoch}}}
}

// ReportMsg reports an add-on's phase at an epoch.
func ReportMsg(epoch int64, addon, uid string, gen int64, phase deliveryv1.Phase) *deliveryv1.AgentMessage {
	return &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Report{Report: &deliveryv1.Report{
		Epoch: epoch, Addon: addon, AddonUid: uid, Generation: gen, Phase: phase}}}
}
