package hostlink

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		failures int
		lo, hi   time.Duration
	}{
		{failures: 0, lo: 50 * time.Millisecond, hi: 100 * time.Millisecond},
		{failures: 1, lo: 50 * time.Millisecond, hi: 100 * time.Millisecond},
		{failures: 3, lo: 200 * time.Millisecond, hi: 400 * time.Millisecond},
		{failures: 50, lo: time.Second, hi: 2 * time.Second},
	}
	for _, tt := range tests {
		for range 100 {
			d := backoff(100*time.Millisecond, 2*time.Second, tt.failures)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("backoff after %d failures %v, want within [%v, %v]", tt.failures, d, tt.lo, tt.hi)
			}
		}
	}
}
