package delivery

import "time"

// sweep starts sweepSilent unless it runs.
func (s *Service) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sweeping {
		s.sweeping = true
		go s.sweepSilent()
	}
}

// sweepSilent runs while this replica has streams: every heartbeat
// interval it nudges each stream whose agent it has heard nothing from
// for fence-after, and the stream ends (onNudge). One goroutine and one
// ticker for all of the replica's streams: an agent is found silent
// within fence-after plus a heartbeat interval, as a ticker per stream
// found it, without waking every idle stream on its own schedule.
func (s *Service) sweepSilent() {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for range t.C {
		if !s.sweepOnce() {
			return
		}
	}
}

// sweepOnce nudges the silent streams; it reports false, and the sweep
// stops, once there are none (register starts it again).
func (s *Service) sweepOnce() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) == 0 {
		s.sweeping = false
		return false
	}
	for _, a := range s.live {
		if s.clock.since(a.heard.Load()) > s.cfg.FenceAfter {
			select {
			case a.nudge <- struct{}{}:
			default:
			}
		}
	}
	return true
}
