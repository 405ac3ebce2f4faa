package throttle

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name  string
		rate  float64
		burst int
		// calls are (account, offset from t0) in order; want is Allow's
		// answer for each.
		calls []call
	}{
		{"burst then refused", 1, 3, []call{
			{"a", 0, true}, {"a", 0, true}, {"a", 0, true}, {"a", 0, false},
		}},
		{"refills at the rate", 10, 1, []call{
			{"a", 0, true}, {"a", 50 * time.Millisecond, false}, {"a", 100 * time.Millisecond, true},
		}},
		{"accounts are independent", 1, 1, []call{
			{"a", 0, true}, {"a", 0, false}, {"b", 0, true}, {"b", 0, false},
		}},
		{"disabled", 0, 1, []call{
			{"a", 0, true}, {"a", 0, true}, {"a", 0, true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.rate, tc.burst)
			for i, c := range tc.calls {
				if got := l.AllowAt(c.account, t0.Add(c.at)); got != c.want {
					t.Errorf("call %d (%s at +%v) = %v, want %v", i, c.account, c.at, got, c.want)
				}
			}
		})
	}
}

type call struct {
	account string
	at      time.Duration
	want    bool
}

func TestLimiterForgetsIdleAccounts(t *testing.T) {
	l := New(100, 10) // refilled after 100ms
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 5000 {
		// Each account is seen once, 1ms apart: all but the last ~100 are
		// idle long enough to have refilled when the map is swept.
		l.AllowAt(fmt.Sprintf("acct-%d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := l.Len(); n > 2048 {
		t.Errorf("%d buckets held for 5000 accounts seen once; idle ones should be dropped", n)
	}
	// Forgetting a refilled bucket changes no decision: a busy account
	// stays limited.
	now := t0.Add(10 * time.Second)
	for range 10 {
		if !l.AllowAt("busy", now) {
			t.Fatal("burst refused")
		}
	}
	if l.AllowAt("busy", now) {
		t.Fatal("11th call within the burst window allowed")
	}
}
