package store

import (
	"fmt"
	"time"
)

// unavailable is why the store refuses its requests at once: set by
// SetUnavailable, cleared by SetAvailable.
type unavailable struct {
	since time.Time
	cause error
}

// SetUnavailable makes every request of the store but Ping fail at once
// with ErrUnavailable, naming cause, until SetAvailable. A replica's
// readiness tracker calls it once etcd has given no answer for longer than
// an election takes: without it, each request would wait out its whole
// deadline (Options.RequestTimeout) for an answer etcd cannot give, and a
// client's retries would pile up behind it. Ping still reaches etcd, so
// the tracker sees the quorum come back. Calling it again while
// unavailable keeps the first cause and time.
func (s *Store) SetUnavailable(cause error) {
	s.down.CompareAndSwap(nil, &unavailable{since: time.Now(), cause: cause})
}

// SetAvailable lets requests reach etcd again.
func (s *Store) SetAvailable() { s.down.Store(nil) }

// refuse is the error a request for key fails with while the store is
// unavailable, and nil while it is not.
func (s *Store) refuse(key string) error {
	d := s.down.Load()
	if d == nil {
		return nil
	}
	return fmt.Errorf("%s: %w: etcd has answered no request since %s (%v)", key, ErrUnavailable,
		d.since.UTC().Format(time.RFC3339), d.cause)
}
