package delivery

import (
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// observe sets a cluster's metrics from its watch's latest snapshot, if
// the watch is still the cluster's: an ending watch must not overwrite a
// newer one's figures (or leave labels the unsubscribe removed).
func (s *Service) observe(w *clusterWatch, sn *snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches[w.uid] != w {
		return
	}
	s.epochs.WithLabelValues(w.uid).Set(float64(sn.executor.GetEpoch()))
	s.sessions.WithLabelValues(w.uid).Set(float64(len(sn.sessions)))
	s.desired.WithLabelValues(w.uid).Set(float64(sn.desired.GetVersion()))
	if !sn.lastReport.IsZero() {
		s.lastReport.WithLabelValues(w.uid).Set(float64(sn.lastReport.UnixNano()) / 1e9)
	}
}

// observeExecutor sets the metrics of what a cluster's executor, whose
// stream a is on this replica, has applied against the desired set. The
// gauges are a's until another stream sets them or a stops being the
// executor or ends (forgetExecutor): a replica never shows a former
// executor's figures.
func (s *Service) observeExecutor(w *clusterWatch, a *agentStream, applied *deliveryv1.DesiredSet, desiredDigest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked under the lock forgetExecutor takes: a stream that stopped
	// being the executor never sets the figures again.
	if s.watches[w.uid] != w || !a.executor.Load() {
		return
	}
	inSync := 0.0
	if applied.GetDigest() == desiredDigest {
		inSync = 1
	}
	s.executorGauges[w.uid] = a
	s.appliedVersion.WithLabelValues(w.uid).Set(float64(applied.GetVersion()))
	s.inSync.WithLabelValues(w.uid).Set(inSync)
}

// forgetExecutor removes the executor metrics a set, if they are still
// its own.
func (s *Service) forgetExecutor(a *agentStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetExecutorLocked(a)
}

func (s *Service) forgetExecutorLocked(a *agentStream) {
	if s.executorGauges[a.uid] == a {
		delete(s.executorGauges, a.uid)
		s.appliedVersion.DeleteLabelValues(a.uid)
		s.inSync.DeleteLabelValues(a.uid)
	}
}
