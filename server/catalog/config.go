package catalog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"sigs.k8s.io/yaml"
)

// MaxConfigurationBytes bounds configurationValues. AWS publishes no limit;
// saltbush needs one because the string is stored verbatim in the add-on
// record, again in the Update record's params and in the idempotency entry,
// all written in one etcd transaction that must stay far below etcd's default
// 1.5 MiB request size, and because it is shipped to every agent of the
// cluster. 64 KiB is far more than any real add-on configuration.
const MaxConfigurationBytes = 64 << 10

// ConfigError reports configurationValues that cannot be used with a
// version: unparsable, too large, missing when required, or failing the
// version's JSON Schema. Callers turn it into InvalidParameterException.
type ConfigError struct {
	// Addon and Version name what the values were checked against.
	Addon   string
	Version string
	// Problems is sorted by Path, then Message.
	Problems []Problem
}

// Problem is one reason configurationValues were rejected.
type Problem struct {
	// Path is a JSON pointer into the values ("/replicaCount",
	// "/tolerations/0/effect"), "" for the document as a whole.
	Path string
	// Message says what is wrong there, in the schema library's words.
	Message string
}

// Error is one line naming every path, so that it fits in an AWS error
// message.
func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "addon %s version %s: invalid configurationValues: ", e.Addon, e.Version)
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		if p.Path == "" {
			b.WriteString(p.Message)
		} else {
			fmt.Fprintf(&b, "%s: %s", p.Path, p.Message)
		}
	}
	return b.String()
}

func (v *Version) configError(problems ...Problem) *ConfigError {
	for i := range problems {
		// Parser messages span lines; the error must fit on one.
		problems[i].Message = strings.Join(strings.Fields(problems[i].Message), " ")
	}
	slices.SortFunc(problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Message, b.Message))
	})
	return &ConfigError{Addon: v.Addon.Name, Version: v.Version, Problems: slices.Compact(problems)}
}

// ParseConfiguration checks configurationValues for this version and returns
// them as a JSON object ready for RenderParams.Values.
//
// raw may be JSON or YAML (AWS accepts both). Blank means no values, which is
// an error when the version requires configuration. Integers come back as
// int64 and other numbers as float64, so templates can compare and print
// them. Every error is a *ConfigError.
func (v *Version) ParseConfiguration(raw string) (map[string]any, error) {
	return v.parseConfiguration(raw, true)
}

// parseConfiguration is ParseConfiguration; withPlainJSON false reads
// every document as YAML, the reference plainJSON is tested against.
func (v *Version) parseConfiguration(raw string, withPlainJSON bool) (map[string]any, error) {
	if len(raw) > MaxConfigurationBytes {
		return nil, v.configError(Problem{Message: fmt.Sprintf("%d bytes exceeds the limit of %d", len(raw), MaxConfigurationBytes)})
	}
	if strings.TrimSpace(raw) == "" {
		if v.RequiresConfiguration {
			return nil, v.configError(Problem{Message: "configuration values are required by this version"})
		}
		return map[string]any{}, nil
	}
	var doc any
	ok := false
	if withPlainJSON {
		doc, ok = plainJSON(raw)
	}
	if !ok {
		var problem *ConfigError
		if doc, problem = v.decodeYAML(raw); problem != nil {
			return nil, problem
		}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, v.configError(Problem{Message: fmt.Sprintf("must be an object, not %s", jsonKind(doc))})
	}
	if err := v.schema.Validate(obj); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, v.configError(Problem{Message: err.Error()})
		}
		p := message.NewPrinter(language.English)
		var problems []Problem
		collectProblems(ve, p, &problems)
		return nil, v.configError(problems...)
	}
	return normalizeNumbers(obj).(map[string]any), nil
}

// collectProblems flattens the validation error tree to its leaves, which are
// the concrete failures; inner nodes only say "allOf failed" and the like.
// Errors about property names point at the offending property itself, which
// is where the user has to look, rather than at the object that holds it.
func collectProblems(ve *jsonschema.ValidationError, p *message.Printer, out *[]Problem) {
	if k, ok := ve.ErrorKind.(*kind.PropertyNames); ok {
		// The causes describe the name as a standalone instance at "", so
		// their locations mean nothing here; only their messages do.
		var why []Problem
		for _, c := range ve.Causes {
			collectProblems(c, p, &why)
		}
		msgs := make([]string, len(why))
		for i, w := range why {
			msgs[i] = w.Message
		}
		*out = append(*out, Problem{
			Path:    jsonPointer(append(slices.Clone(ve.InstanceLocation), k.Property)),
			Message: fmt.Sprintf("property name %q is not allowed: %s", k.Property, strings.Join(msgs, "; ")),
		})
		return
	}
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectProblems(c, p, out)
		}
		return
	}
	if k, ok := ve.ErrorKind.(*kind.AdditionalProperties); ok {
		for _, prop := range k.Properties {
			*out = append(*out, Problem{
				Path:    jsonPointer(append(slices.Clone(ve.InstanceLocation), prop)),
				Message: fmt.Sprintf("property %q is not allowed", prop),
			})
		}
		return
	}
	*out = append(*out, Problem{Path: jsonPointer(ve.InstanceLocation), Message: ve.ErrorKind.LocalizedString(p)})
}

// jsonPointer encodes tokens as RFC 6901 does.
func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// normalizeNumbers turns json.Number into int64 when it is an integer that
// fits and float64 otherwise. Templates get numbers they can compare with
// literals (json.Number is a string to text/template) and print plainly.
// decodeYAML reads raw as one YAML (or JSON) document, as JSON values with
// json.Number numbers.
func (v *Version) decodeYAML(raw string) (any, *ConfigError) {
	// YAMLToJSON would read the first document and drop the rest silently.
	if docs := splitDocuments([]byte(raw)); len(docs) > 1 {
		return nil, v.configError(Problem{Message: fmt.Sprintf("a single JSON or YAML document is expected, found %d", len(docs))})
	}
	// Strict: a duplicated key is refused instead of the last one winning.
	j, err := yaml.YAMLToJSONStrict([]byte(raw))
	if err != nil {
		return nil, v.configError(Problem{Message: "not valid JSON or YAML: " + err.Error()})
	}
	// UseNumber keeps 3 an integer for the schema's "type": "integer".
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, v.configError(Problem{Message: "not valid JSON or YAML: " + err.Error()})
	}
	return doc, nil
}

// plainJSON reads raw when it is one JSON object with no duplicated key
// and only finite numbers: what most callers send, and what decodeYAML
// would read to the same values (JSON is YAML) at several times the cost
// of a YAML parse. Anything else (YAML, a duplicated key, a syntax error,
// a number out of float64's range, invalid UTF-8) is left to decodeYAML, whose answer,
// error messages included, is the reference.
func plainJSON(raw string) (any, bool) {
	// encoding/json would replace invalid UTF-8 where YAML refuses it.
	if t := strings.TrimSpace(raw); t == "" || t[0] != '{' || !utf8.ValidString(raw) {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	doc, ok := plainJSONValue(dec, 0)
	if !ok {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return doc, true
}

// maxJSONDepth bounds plainJSON's recursion; deeper documents (none real)
// take the YAML path, which has its own limits.
const maxJSONDepth = 100

func plainJSONValue(dec *json.Decoder, depth int) (any, bool) {
	if depth > maxJSONDepth {
		return nil, false
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, false
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				k, err := dec.Token()
				key, isKey := k.(string)
				if err != nil || !isKey {
					return nil, false
				}
				if _, dup := obj[key]; dup {
					return nil, false
				}
				val, ok := plainJSONValue(dec, depth+1)
				if !ok {
					return nil, false
				}
				obj[key] = val
			}
			_, err := dec.Token() // '}'
			return obj, err == nil
		case '[':
			arr := []any{}
			for dec.More() {
				val, ok := plainJSONValue(dec, depth+1)
				if !ok {
					return nil, false
				}
				arr = append(arr, val)
			}
			_, err := dec.Token() // ']'
			return arr, err == nil
		}
		return nil, false
	case json.Number:
		if f, err := t.Float64(); err != nil || math.IsInf(f, 0) {
			return nil, false
		}
		return t, true
	default: // string, bool, nil
		return t, true
	}
}

func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = normalizeNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = normalizeNumbers(e)
		}
		return out
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, err := t.Float64()
		if err != nil || math.IsInf(f, 0) {
			return string(t) // unreachable for input that passed the JSON decoder
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f) // "3.0" and "3e2" are integers too
		}
		return f
	default:
		return v
	}
}
