package main

import (
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// histogram counts durations in logarithmic buckets 2 % wide, from 1 µs to
// about two minutes: quantiles within 1 % in constant memory, so a long run
// measures its own memory, not the latencies it kept.
type histogram struct {
	counts [histBuckets]int64
	n      int64
	max    time.Duration
}

const (
	histBase    = 1.02
	histBuckets = 950
)

var histLogBase = math.Log(histBase)

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log(us)/histLogBase), histBuckets-1)
}

// bucketValue is the middle of bucket i (geometric).
func bucketValue(i int) time.Duration {
	return time.Duration(math.Pow(histBase, float64(i)+0.5) * float64(time.Microsecond))
}

func (h *histogram) add(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile is the nearest-rank quantile q (0 < q ≤ 1); 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}

// opStats is one operation's record: all of the run, and the current
// sample interval (which the sampler takes and resets).
type opStats struct {
	mu       sync.Mutex
	total    histogram
	interval histogram
	// errors counts failures by errKey; intervalErrs those of the interval.
	errors       map[errKey]int64
	intervalErrs int64
	// examples are the first message of each errKey that had one.
	examples map[errKey]string
}

// errKey is one kind of failure of one operation: the AWS exception name,
// the gRPC code or the transport failure, whether the client's own model
// of its clusters predicted it (a race it knows about), and whether the
// AWS SDK's standard retryer would have retried it (sdkRetryable).
type errKey struct {
	kind      string
	expected  bool
	retryable bool
}

// recorder holds every operation's opStats. Its map is built once, before
// any goroutine records, and only read afterwards.
type recorder struct {
	order []string
	ops   map[string]*opStats
}

func newRecorder(ops []string) *recorder {
	r := &recorder{order: ops, ops: make(map[string]*opStats, len(ops))}
	for _, op := range ops {
		r.ops[op] = &opStats{errors: map[errKey]int64{}, examples: map[errKey]string{}}
	}
	return r
}

// recordKind notes one call of op: its latency, and its failure when kind
// names one ("" for success; errKind names an error), of which example is
// the message (the first of each kind is kept, for the report).
func (r *recorder) recordKind(op string, d time.Duration, kind string, expected, retryable bool, example string) {
	s := r.ops[op]
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind != "" {
		k := errKey{kind, expected, retryable}
		s.errors[k]++
		s.intervalErrs++
		if _, ok := s.examples[k]; !ok && example != "" {
			s.examples[k] = example
		}
		return
	}
	s.total.add(d)
	s.interval.add(d)
}

// countError notes a failure that has no latency (a stream the host
// ended, a Fence).
func (r *recorder) countError(op, kind string, expected bool) {
	s := r.ops[op]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors[errKey{kind: kind, expected: expected}]++
	s.intervalErrs++
}

// intervalSnapshot is what one sample interval saw of an operation.
type intervalSnapshot struct {
	hist histogram
	errs int64
}

// takeInterval returns each operation's interval and starts the next.
func (r *recorder) takeInterval() map[string]intervalSnapshot {
	out := make(map[string]intervalSnapshot, len(r.ops))
	for op, s := range r.ops {
		s.mu.Lock()
		out[op] = intervalSnapshot{hist: s.interval, errs: s.intervalErrs}
		s.interval = histogram{}
		s.intervalErrs = 0
		s.mu.Unlock()
	}
	return out
}

// reset forgets everything recorded (what setup did before the load).
func (r *recorder) reset() {
	for _, s := range r.ops {
		s.mu.Lock()
		s.total, s.interval, s.intervalErrs = histogram{}, histogram{}, 0
		clear(s.errors)
		clear(s.examples)
		s.mu.Unlock()
	}
}

// merged is the operations ops as one: their calls together.
func (r *recorder) merged(ops []string) opSummary {
	var h histogram
	sum := opSummary{Op: "all SDK operations"}
	for _, op := range ops {
		s := r.ops[op]
		s.mu.Lock()
		h.merge(&s.total)
		for k, n := range s.errors {
			if k.expected {
				sum.Predicted += n
			} else {
				sum.Unexpected += n
			}
		}
		s.mu.Unlock()
	}
	sum.Count, sum.P50, sum.P99, sum.Max = h.n, h.quantile(0.50), h.quantile(0.99), h.max
	return sum
}

// opSummary is an operation's whole run.
type opSummary struct {
	Op string
	// Count is the successful calls, which the latencies are of.
	Count                 int64
	P50, P99, Max         time.Duration
	Errors                []errCount
	Unexpected, Predicted int64
}

type errCount struct {
	Kind     string
	Expected bool
	// Retryable says the AWS SDK's standard retryer would have retried
	// these (SDK operations only): an application using the SDK's
	// defaults would not have seen them, unless they lasted.
	Retryable bool
	N         int64
	// Example is the first one's message ("" for the agents', whose
	// kind says it all).
	Example string
}

func (r *recorder) summary() []opSummary {
	var out []opSummary
	for _, op := range r.order {
		s := r.ops[op]
		s.mu.Lock()
		sum := opSummary{Op: op, Count: s.total.n, P50: s.total.quantile(0.50), P99: s.total.quantile(0.99), Max: s.total.max}
		for k, n := range s.errors {
			sum.Errors = append(sum.Errors, errCount{Kind: k.kind, Expected: k.expected, Retryable: k.retryable, N: n, Example: s.examples[k]})
			if k.expected {
				sum.Predicted += n
			} else {
				sum.Unexpected += n
			}
		}
		s.mu.Unlock()
		slices.SortFunc(sum.Errors, func(a, b errCount) int {
			if a.N != b.N {
				return int(b.N - a.N)
			}
			return strings.Compare(a.Kind, b.Kind)
		})
		out = append(out, sum)
	}
	return out
}

// sdkRetryable says whether the AWS SDK for Go's standard retryer deems
// err retryable (its default checks: connection errors, 5xx, throttling).
// The load's clients retry nothing (env.sdk), so that each failure is
// counted as the server returned it; this says which of them an
// application with the SDK's defaults would have retried instead of
// seeing.
func sdkRetryable(err error) bool {
	return err != nil && retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// errKind names a failure as a reader looks it up: the AWS exception
// (X-Amzn-ErrorType), else a timeout, a transport failure (no response),
// or the HTTP status; "" for nil. The SDK wraps a request it could not
// send in a ResponseError too, of an empty response (status 0): the
// send's failure is looked for first.
func errKind(err error) string {
	if err == nil {
		return ""
	}
	var apiErr smithy.APIError
	var netErr net.Error
	var sendErr *smithyhttp.RequestSendError
	var respErr *awshttp.ResponseError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "Timeout"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	case errors.As(err, &sendErr):
		return "Transport"
	case errors.As(err, &respErr):
		return "HTTP " + strconv.Itoa(respErr.HTTPStatusCode())
	}
	return "Transport"
}
