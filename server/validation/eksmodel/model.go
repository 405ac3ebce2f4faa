// Package eksmodel reads AWS's EKS service model (API 2017-11-01) from the
// sources this machine has and merges them into the newest model: botocore's
// service-2.json, which alone carries the constraints (lengths, ranges,
// patterns) and every operation's errors, and the AWS SDK for Go v2's EKS
// module, whose generated schemas, enums and validators are usually newer
// (operations, members and enum values AWS added after the botocore release
// installed here). server/validation's table is generated from the merge
// (genmodel), and the conformance tests read the same merge, so what is
// validated, served and tested is what the newest client sends
// (docs/contracts.md, "Input validation").
package eksmodel

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Model is the part of the model saltbush reads, in botocore's
// service-2.json form.
type Model struct {
	Metadata   Metadata             `json:"metadata"`
	Operations map[string]Operation `json:"operations"`
	Shapes     map[string]Shape     `json:"shapes"`
}

// Metadata identifies the service and its protocol.
type Metadata struct {
	APIVersion string `json:"apiVersion"`
	Protocol   string `json:"protocol"`
}

// Operation is one operation: its HTTP binding, input shape and errors.
type Operation struct {
	HTTP   HTTP  `json:"http"`
	Input  *Ref  `json:"input,omitempty"`
	Errors []Ref `json:"errors,omitempty"`
}

// HTTP is an operation's method and request URI template.
type HTTP struct {
	Method     string `json:"method"`
	RequestURI string `json:"requestUri"`
}

// Ref names a shape and, for a structure member, where REST puts it
// ("uri", "querystring", "header"; "" for the body).
type Ref struct {
	Shape        string `json:"shape"`
	Location     string `json:"location,omitempty"`
	LocationName string `json:"locationName,omitempty"`
}

// Shape is one shape with its constraints.
type Shape struct {
	Type     string         `json:"type"`
	Min      *json.Number   `json:"min,omitempty"`
	Max      *json.Number   `json:"max,omitempty"`
	Pattern  *string        `json:"pattern,omitempty"`
	Enum     []string       `json:"enum,omitempty"`
	Required []string       `json:"required,omitempty"`
	Members  map[string]Ref `json:"members,omitempty"`
	Member   *Ref           `json:"member,omitempty"`
	Key      *Ref           `json:"key,omitempty"`
	Value    *Ref           `json:"value,omitempty"`
}

// Decode reads a model in service-2.json form.
func Decode(raw []byte) (*Model, error) {
	m := &Model{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("decode the model: %w", err)
	}
	if m.Metadata.APIVersion != "2017-11-01" || m.Metadata.Protocol != "rest-json" {
		return nil, fmt.Errorf("not EKS's rest-json model 2017-11-01: %+v", m.Metadata)
	}
	return m, nil
}

// Encode writes the model in service-2.json form, keys sorted, so the same
// model always gives the same bytes (its hash names it).
func (m *Model) Encode() ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}

// ReadBotocore reads botocore's service-2.json or service-2.json.gz.
func ReadBotocore(path string) (*Model, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the model path the caller names
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// HasError reports whether the operation's model lists the exception.
func (m *Model) HasError(operation, exception string) bool {
	for _, r := range m.Operations[operation].Errors {
		if r.Shape == exception {
			return true
		}
	}
	return false
}

// ValidationExceptions are the exceptions EKS answers a request its model
// forbids with, in the order an operation's errors are searched.
var ValidationExceptions = []string{
	"InvalidParameterException", "BadRequestException", "InvalidRequestException", "ClientException",
}

// ValidationException is the exception an operation answers a request the
// model forbids with: the first of ValidationExceptions its errors list,
// and InvalidParameterException (EKS's own validation error) for an
// operation that lists none of them.
func (m *Model) ValidationException(operation string) string {
	for _, cand := range ValidationExceptions {
		if m.HasError(operation, cand) {
			return cand
		}
	}
	return "InvalidParameterException"
}

// SortedKeys returns a map's keys, sorted.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
