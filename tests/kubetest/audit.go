package kubetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// auditPolicy logs every write at Metadata level (who, what, which object,
// the outcome; no bodies) and nothing else, so the log answers "who wrote
// this object" and stays small. RequestReceived is omitted: an event per
// request (ResponseComplete) is enough.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// AuditEvent is one completed write request from the apiserver's audit log.
type AuditEvent struct {
	// AuditID is the apiserver's identifier of the request.
	AuditID string
	// User and Groups are the authenticated identity (for a client
	// certificate: its common name and organizations, plus
	// system:authenticated).
	User   string
	Groups []string
	// UserAgent is the client's User-Agent header.
	UserAgent string
	// Verb is the Kubernetes verb: create, update, patch, delete or
	// deletecollection.
	Verb string
	// RequestURI is the request's path and query.
	RequestURI string
	// ObjectRef is the object written.
	ObjectRef AuditObjectRef
	// Code is the HTTP status of the response (0 if the apiserver recorded
	// none).
	Code int
	// RequestReceivedTimestamp is when the apiserver received the request,
	// StageTimestamp when it completed the response (microsecond precision).
	RequestReceivedTimestamp time.Time
	StageTimestamp           time.Time
}

// AuditObjectRef names the object of an audited request.
type AuditObjectRef struct {
	APIGroup    string
	APIVersion  string
	Resource    string
	Namespace   string
	Name        string
	Subresource string
}

// auditLine is the part of an audit.k8s.io/v1 Event the harness reads.
type auditLine struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		APIVersion  string `json:"apiVersion"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// parseAuditLog returns the ResponseComplete events of a JSON-lines audit
// log, in the order written. A last line without its newline is a write in
// progress and is left for the next read.
func parseAuditLog(path string) ([]AuditEvent, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var events []AuditEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("audit log %s line %d: %w", path, n, err)
		}
		if l.Stage != "ResponseComplete" {
			continue
		}
		e := AuditEvent{
			AuditID:                  l.AuditID,
			User:                     l.User.Username,
			Groups:                   l.User.Groups,
			UserAgent:                l.UserAgent,
			Verb:                     l.Verb,
			RequestURI:               l.RequestURI,
			RequestReceivedTimestamp: l.RequestReceivedTimestamp,
			StageTimestamp:           l.StageTimestamp,
		}
		if r := l.ObjectRef; r != nil {
			e.ObjectRef = AuditObjectRef{
				APIGroup: r.APIGroup, APIVersion: r.APIVersion, Resource: r.Resource,
				Namespace: r.Namespace, Name: r.Name, Subresource: r.Subresource,
			}
		}
		if l.ResponseStatus != nil {
			e.Code = l.ResponseStatus.Code
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return events, nil
}
