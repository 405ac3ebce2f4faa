package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// outcome is one scripted answer of EKS Auth: credentials named key
// lasting life from the moment they are fetched, or err.
type outcome struct {
	key  string
	life time.Duration
	err  error
}

// script is EKS Auth as a queue of outcomes, on a clock the test moves.
type script struct {
	mu       sync.Mutex
	now      time.Time
	outcomes []outcome
	calls    int
}

func (s *script) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *script) fetch(_ context.Context, _ string) (Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.outcomes) == 0 {
		return Credentials{}, errors.New("unscripted fetch")
	}
	o := s.outcomes[0]
	s.outcomes = s.outcomes[1:]
	if o.err != nil {
		return Credentials{}, o.err
	}
	return Credentials{AccessKeyID: o.key, Expiration: s.now.Add(o.life)}, nil
}

// step is one request at t0+at: it gets key (or an error containing
// wantErr), and calls EKS Auth or not.
type step struct {
	at      time.Duration
	want    string
	wantErr string
	fetched bool
}

var (
	throttled      = &apiError{Status: 429, Code: "ThrottlingException", Message: "Rate exceeded"}
	invalidToken   = &apiError{Status: 400, Code: "InvalidTokenException", Message: "bad"}
	errUnreachable = errors.New("dial tcp: connection refused")
)

func TestCredentialCache_Renewal(t *testing.T) {
	tests := []struct {
		name      string
		retention time.Duration
		outcomes  []outcome
		steps     []step
	}{
		{"served until half the lifetime, then renewed", 3 * time.Hour,
			[]outcome{{key: "k1", life: time.Hour}, {key: "k2", life: time.Hour}},
			[]step{{0, "k1", "", true}, {10 * time.Minute, "k1", "", false}, {30*time.Minute - time.Second, "k1", "", false},
				{30 * time.Minute, "k2", "", true}, {59 * time.Minute, "k2", "", false}}},
		{"EKS's six-hour credentials renewed after the three-hour retention", 3 * time.Hour,
			[]outcome{{key: "k1", life: 6 * time.Hour}, {key: "k2", life: 6 * time.Hour}},
			[]step{{0, "k1", "", true}, {3*time.Hour - time.Second, "k1", "", false}, {3 * time.Hour, "k2", "", true}}},
		{"a short retention caps the wait", 10 * time.Minute,
			[]outcome{{key: "k1", life: time.Hour}, {key: "k2", life: time.Hour}},
			[]step{{0, "k1", "", true}, {9 * time.Minute, "k1", "", false}, {10 * time.Minute, "k2", "", true}}},
		{"a recoverable error keeps the credentials and retries after a minute", 3 * time.Hour,
			[]outcome{{key: "k1", life: time.Hour}, {err: throttled}, {key: "k2", life: time.Hour}},
			[]step{{0, "k1", "", true}, {30 * time.Minute, "k1", "", true}, {30*time.Minute + 59*time.Second, "k1", "", false},
				{31 * time.Minute, "k2", "", true}}},
		{"an irrecoverable error drops them", 3 * time.Hour,
			[]outcome{{key: "k1", life: time.Hour}, {err: invalidToken}, {key: "k2", life: time.Hour}},
			[]step{{0, "k1", "", true}, {30 * time.Minute, "", "InvalidTokenException", true}, {30*time.Minute + time.Second, "k2", "", true}}},
		{"an error with nothing cached is answered, and not remembered", 3 * time.Hour,
			[]outcome{{err: errUnreachable}, {key: "k1", life: time.Hour}},
			[]step{{0, "", "connection refused", true}, {time.Second, "k1", "", true}}},
		{"kept credentials are not served in their last seconds", 3 * time.Hour,
			[]outcome{{key: "k1", life: 2 * time.Minute}, {err: errUnreachable}, {err: errUnreachable}},
			[]step{{0, "k1", "", true}, {time.Minute, "k1", "", true}, {time.Minute + 44*time.Second, "k1", "", false},
				{time.Minute + 45*time.Second, "", "connection refused", true}}},
		{"credentials fetched about to expire are refused", 3 * time.Hour,
			[]outcome{{key: "k1", life: 10 * time.Second}},
			[]step{{0, "", "will expire within the next 10.00 seconds", true}}},
		{"retention 0 disables the cache", 0,
			[]outcome{{key: "k1", life: time.Hour}, {key: "k2", life: time.Hour}},
			[]step{{0, "k1", "", true}, {time.Second, "k2", "", true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{now: t0, outcomes: tc.outcomes}
			c := newCredentialCache(s.fetch, tc.retention, 100)
			c.now = s.clock
			for _, st := range tc.steps {
				s.mu.Lock()
				s.now, s.calls = t0.Add(st.at), 0
				s.mu.Unlock()
				got, err := c.get(context.Background(), "token")
				switch {
				case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
					t.Fatalf("at %v: %+v, %v; want an error containing %q", st.at, got, err, st.wantErr)
				case st.wantErr == "" && (err != nil || got.AccessKeyID != st.want):
					t.Fatalf("at %v: %q, %v; want %q", st.at, got.AccessKeyID, err, st.want)
				}
				if fetched := s.calls > 0; fetched != st.fetched {
					t.Fatalf("at %v: EKS Auth called %v, want %v", st.at, fetched, st.fetched)
				}
			}
		})
	}
}

func TestRenewAt(t *testing.T) {
	tests := []struct {
		name      string
		life      time.Duration
		retention time.Duration
		want      time.Duration
	}{
		{"six hours, default retention", 6 * time.Hour, 3 * time.Hour, 3 * time.Hour},
		{"one hour", time.Hour, 3 * time.Hour, 30 * time.Minute},
		{"fifteen minutes", 15 * time.Minute, 3 * time.Hour, 7*time.Minute + 30*time.Second},
		{"twelve hours, default retention", 12 * time.Hour, 3 * time.Hour, 3 * time.Hour},
		{"a short retention", time.Hour, 5 * time.Minute, 5 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := renewAt(t0, t0.Add(tc.life), tc.retention).Sub(t0); got != tc.want {
				t.Fatalf("renewal after %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCredentialCache_Bounded(t *testing.T) {
	tests := []struct {
		name string
		// gets are tokens requested one second apart; the cache holds 2.
		gets []string
		// then is requested last, and is or is not fetched again.
		then        string
		lives       map[string]time.Duration
		wantFetched bool
	}{
		{"the least recently used goes", []string{"a", "b", "a", "c"}, "b", nil, true},
		{"the recently used stays", []string{"a", "b", "a", "c"}, "a", nil, false},
		{"the newest stays", []string{"a", "b", "a", "c"}, "c", nil, false},
		{"expired ones go first", []string{"a", "b", "b", "c"}, "b", map[string]time.Duration{"a": 30 * time.Second}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			calls := map[string]int{}
			fetch := func(_ context.Context, token string) (Credentials, error) {
				calls[token]++
				life := time.Hour
				if l, ok := tc.lives[token]; ok {
					life = l
				}
				return Credentials{AccessKeyID: token, Expiration: now.Add(life)}, nil
			}
			c := newCredentialCache(fetch, 3*time.Hour, 2)
			c.now = func() time.Time { return now }
			for _, tok := range tc.gets {
				now = now.Add(time.Second)
				if _, err := c.get(context.Background(), tok); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(20 * time.Second) // a's short life is over
			before := calls[tc.then]
			if _, err := c.get(context.Background(), tc.then); err != nil {
				t.Fatal(err)
			}
			if fetched := calls[tc.then] > before; fetched != tc.wantFetched {
				t.Fatalf("%s fetched again = %v, want %v", tc.then, fetched, tc.wantFetched)
			}
			if _, size := c.snapshot(); size > 2 {
				t.Fatalf("%d entries, at most 2", size)
			}
		})
	}
}

// TestCredentialCache_OneFetchPerToken: the containers of a pod asking at
// once cost one call.
func TestCredentialCache_OneFetchPerToken(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	fetch := func(context.Context, string) (Credentials, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-release
		return Credentials{AccessKeyID: "k", Expiration: time.Now().Add(time.Hour)}, nil
	}
	c := newCredentialCache(fetch, 3*time.Hour, 10)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			if got, err := c.get(context.Background(), "token"); err != nil || got.AccessKeyID != "k" {
				errs <- errors.Join(err, errors.New("wrong credentials "+got.AccessKeyID))
			}
		})
	}
	// Let the requests find the fetch in flight before it ends.
	for {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls != 1 {
		t.Fatalf("%d calls to EKS Auth, want 1", calls)
	}
}
