// Package audit writes one structured record per mutating request, façade
// or gRPC: who (principal, account, delegation), what (action, resource
// ARN), when, the outcome and the request id. The edges (gateway, gRPC
// interceptor) open a record for each request; the authorizer notes the
// action and resource it decided on; the edge writes the record to the sink
// when the request ends.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Record is one audited request.
type Record struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"requestId"`
	// Source is "facade" or "grpc"; Operation the HTTP route or gRPC method.
	Source    string `json:"source"`
	Operation string `json:"operation"`
	Principal string `json:"principal"`
	Account   string `json:"account,omitempty"`
	// Delegated is true when a service acted for Account.
	Delegated bool   `json:"delegated,omitempty"`
	Action    string `json:"action,omitempty"`
	Resource  string `json:"resource,omitempty"`
	// Outcome is "Success" or the AWS exception (or gRPC code) returned.
	Outcome string `json:"outcome"`
}

// Sink receives audit records. Write must be safe for concurrent use and
// must not block a request for long.
type Sink interface {
	Write(ctx context.Context, r Record)
}

// LogSink writes records as "audit" log lines (the default sink).
type LogSink struct{ Logger *slog.Logger }

// Write implements Sink.
func (s LogSink) Write(ctx context.Context, r Record) {
	s.Logger.LogAttrs(ctx, slog.LevelInfo, "audit",
		slog.String("request_id", r.RequestID), slog.String("source", r.Source), slog.String("operation", r.Operation),
		slog.String("principal", r.Principal), slog.String("account", r.Account), slog.Bool("delegated", r.Delegated),
		slog.String("action", r.Action), slog.String("resource", r.Resource), slog.String("outcome", r.Outcome),
		slog.Time("at", r.Time))
}

// JSONLines writes one JSON object per line to a file.
type JSONLines struct {
	mu sync.Mutex
	w  io.Writer
	c  io.Closer
}

// OpenFile appends records to path (created 0600).
func OpenFile(path string) (*JSONLines, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // G304: the audit log path from saltbush's own configuration
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return &JSONLines{w: f, c: f}, nil
}

// Write implements Sink.
func (j *JSONLines) Write(_ context.Context, r Record) {
	b, _ := json.Marshal(r)
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.w.Write(append(b, '\n'))
}

// Close closes the file, if any.
func (j *JSONLines) Close() error {
	if j.c == nil {
		return nil
	}
	return j.c.Close()
}

// Entry is the open record of one request.
type Entry struct {
	mu               sync.Mutex
	action, resource string
}

type entryKey struct{}

// Open returns ctx carrying a fresh entry for one request.
func Open(ctx context.Context) (context.Context, *Entry) {
	e := &Entry{}
	return context.WithValue(ctx, entryKey{}, e), e
}

// Note records the action and resource a request was authorized for. The
// first note wins: it is the operation itself; later ones (iam:PassRole on
// a role the request names) are checks it made along the way.
func Note(ctx context.Context, action, resource string) {
	e, ok := ctx.Value(entryKey{}).(*Entry)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.action == "" {
		e.action, e.resource = action, resource
	}
}

// Noted returns what was noted.
func (e *Entry) Noted() (action, resource string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.action, e.resource
}
