// Package validation checks EKS requests against AWS's EKS service model
// (docs/contracts.md, "Input validation"): the lengths, sizes, ranges,
// enums, patterns and required members of every operation's input shape,
// from a table generated from the model (model_gen.go, by genmodel). Every
// EKS shell calls Check first, before any lookup, so the façade and the gRPC
// port refuse the same requests with the same AWS message, and a refused
// request writes nothing.
//
// Presence: a proto3 string, list or map without presence cannot tell ""
// or empty from absent, but AWS refuses `"serviceAccountRoleArn": ""`
// where the model says min 1 (an empty map it does not require, such as
// a create's `"tags": {}`, it takes as absent; TagResource's required
// tags it refuses). The façade's decoder records in the request message
// the members its body sent that the message cannot show (package
// presence); Check takes that record out of the message and reads those
// members from it, so an empty member the body held is checked as present.
// Check's one input is the message, whichever port it came through. Without
// a record presence is the proto's: an `optional` field that is set, a
// message that is set; an empty string, list or map of a field without
// presence is absent, as it is for a gRPC caller.
package validation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/presence"
)

type kind int

const (
	kindString kind = iota + 1
	kindInteger
	kindNumber
	kindBoolean
	kindTimestamp
	kindBlob
	kindList
	kindMap
	kindStructure
)

// shape is one shape of the model with its constraints.
type shape struct {
	kind     kind
	min, max *int64
	pattern  string
	enum     []string
	required []string
	members  []member
	// member, key and value name the element shapes of lists and maps.
	member, key, value string
}

// member is a structure member: its name (the JSON name in a body, the
// name AWS's messages use for every location), its shape, and where REST
// puts it ("uri", "querystring", "header"; "" for the body).
type member struct {
	name, shape, location, locationName string
}

// operation is an operation's input shape, the exception it answers
// validation errors with, and that exception's members it fills.
type operation struct {
	input, exception string
	// fields pairs the exception's modelled members with the input
	// members that fill them ({"clusterName", "name"}).
	fields [][2]string
	// errors are every exception the model lists for the operation.
	errors []string
}

func ptr(v int64) *int64 { return &v }

// Operations returns the name of every operation in the table, sorted.
func Operations() []string {
	names := make([]string, 0, len(operations))
	for n := range operations {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Exception returns the exception operation answers validation errors
// with; ok is false for an operation the model does not have.
func Exception(operationName string) (string, bool) {
	op, ok := operations[operationName]
	return op.exception, ok
}

// Errors returns the exceptions the model lists for operation, sorted;
// ok is false for an operation the model does not have.
func Errors(operationName string) ([]string, bool) {
	op, ok := operations[operationName]
	return slices.Clone(op.errors), ok
}

// Conform answers err as operation's model allows: a refusal of the
// request's values (InvalidParameterException, BadRequestException,
// InvalidRequestException, ClientException) that the operation's model
// does not list becomes the exception the operation answers validation
// errors with, same message and members. The checks behind an operation
// are shared (a cluster name is checked the same way for CreateCluster,
// which lists InvalidParameterException, and DescribeCluster, which lists
// ClientException); which exception an operation answers is its model's.
// Every EKS shell passes its errors through Conform at the boundary.
func Conform(operationName string, err error) error {
	var e *errdefs.Error
	op, ok := operations[operationName]
	if !ok || !errors.As(err, &e) || slices.Contains(op.errors, e.Exception) ||
		!slices.Contains(validationExceptions, e.Exception) || !slices.Contains(op.errors, op.exception) {
		return err
	}
	return e.AsException(op.exception)
}

// validationExceptions are the exceptions that refuse a request's values,
// as eksmodel.ValidationExceptions lists them (the server does not link
// the model reader).
var validationExceptions = []string{
	"InvalidParameterException", "BadRequestException", "InvalidRequestException", "ClientException",
}

// Source returns the model source that alone gave an item of the merged
// model ("enum Category ROLLBACK_READINESS", "operation CancelUpdate",
// "member UpdateClusterVersionRequest.rollbackConfig"), "" for an item both
// sources have or neither.
func Source(item string) string { return provenance[item] }

// MemberConstraint returns the integer range of an operation's input
// member named name, for messages about a value that could not be parsed.
func MemberConstraint(operationName, name string) (minV, maxV *int64, ok bool) {
	op, ok := operations[operationName]
	if !ok {
		return nil, nil, false
	}
	for _, m := range shapes[op.input].members {
		if m.name == name {
			s := shapes[m.shape]
			return s.min, s.max, true
		}
	}
	return nil, nil, false
}

// Check validates req, an EKS request message named for its operation
// (CreateAddonRequest for CreateAddon), against the model. It returns nil
// or an *errdefs.Error with the operation's validation exception and AWS's
// message ("1 validation error detected: Value '…' at 'maxResults' failed
// to satisfy constraint: Member must have value less than or equal to
// 100"). A request of an operation the model does not have is an error: an
// operation served must be in the table. Check removes the presence record
// from req (presence.Take): what follows the check sees the message a gRPC
// caller would have sent.
func Check(_ context.Context, req proto.Message) error {
	name := string(req.ProtoReflect().Descriptor().Name())
	opName, found := strings.CutSuffix(name, "Request")
	op, ok := operations[opName]
	if !found || !ok {
		return fmt.Errorf("validation: %s is not the input of an operation of the EKS model", name)
	}
	value, err := requestValue(req)
	if err != nil {
		// protojson refuses a string that is not UTF-8; the body's JSON
		// decoder already refused one in the body, so this is a path label
		// or query parameter: the caller's mistake, named by member.
		if member, bad := invalidUTF8(req.ProtoReflect(), ""); bad {
			return &errdefs.Error{Exception: op.exception, Message: fmt.Sprintf(
				"1 validation error detected: Value at '%s' failed to satisfy constraint: Member must be valid UTF-8", member)}
		}
		return err
	}
	var v violations
	v.check(op.input, value, "")
	if len(v) == 0 {
		return nil
	}
	e := &errdefs.Error{Exception: op.exception, Message: v.message()}
	for _, f := range op.fields {
		if s, ok := value[f[1]].(string); ok && s != "" {
			e = e.WithField(f[0], s)
		}
	}
	return e
}

// requestValue is req as JSON values (protojson, JSON names), with the
// members its presence record holds: those the façade's body sent that
// the message leaves out because they are empty.
func requestValue(req proto.Message) (map[string]any, error) {
	sent, recorded := presence.Take(req)
	value, ok := flatValue(req.ProtoReflect())
	if !ok {
		b, err := protojson.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("validation: encode %s: %w", req.ProtoReflect().Descriptor().FullName(), err)
		}
		if value, err = decodeObject(b); err != nil || value == nil {
			return nil, fmt.Errorf("validation: decode %s: %w", req.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	if recorded {
		overlay(value, sent)
	}
	return value, nil
}

// flatValue is what protojson.Marshal and decodeObject make of m, built
// directly from its fields: strings, 32-bit integers, bools, and lists,
// string-keyed maps and messages of them (every EKS request but those
// using a well-known type), so that validating a request costs no JSON
// encoding and decoding. It reports false for anything else, and for a
// string that is not UTF-8 (protojson's error then names it), and the
// caller takes the JSON round trip.
func flatValue(m protoreflect.Message) (map[string]any, bool) {
	value := map[string]any{}
	ok := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		var x any
		if x, ok = flatField(fd, v); ok {
			value[fd.JSONName()] = x
		}
		return ok
	})
	return value, ok
}

func flatField(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, bool) {
	switch {
	case fd.IsList():
		l := v.List()
		out := make([]any, l.Len())
		for i := range l.Len() {
			x, ok := flatScalar(fd, l.Get(i))
			if !ok {
				return nil, false
			}
			out[i] = x
		}
		return out, true
	case fd.IsMap():
		if fd.MapKey().Kind() != protoreflect.StringKind {
			return nil, false
		}
		out := make(map[string]any, v.Map().Len())
		ok := true
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			key := k.String()
			x, valid := flatScalar(fd.MapValue(), mv)
			if !valid || !utf8.ValidString(key) {
				ok = false
				return false
			}
			out[key] = x
			return true
		})
		return out, ok
	}
	return flatScalar(fd, v)
}

// flatScalar is one value of fd's kind (an element, for a list or map).
func flatScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) (any, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := v.String()
		return s, utf8.ValidString(s)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return json.Number(strconv.FormatInt(v.Int(), 10)), true
	case protoreflect.BoolKind:
		return v.Bool(), true
	case protoreflect.MessageKind:
		// Well-known types have JSON forms of their own.
		if fd.Message().FullName().Parent() == "google.protobuf" {
			return nil, false
		}
		return flatValue(v.Message())
	}
	return nil, false
}

func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// overlay adds to dst the members of sent that dst lacks (the empty ones
// protojson omits), and does so inside objects and lists both hold.
func overlay(dst, sent map[string]any) {
	for k, sv := range sent {
		dv, ok := dst[k]
		if !ok {
			if sv != nil {
				dst[k] = sv
			}
			continue
		}
		switch d := dv.(type) {
		case map[string]any:
			if s, ok := sv.(map[string]any); ok {
				overlay(d, s)
			}
		case []any:
			if s, ok := sv.([]any); ok && len(s) == len(d) {
				for i := range d {
					do, ok1 := d[i].(map[string]any)
					so, ok2 := s[i].(map[string]any)
					if ok1 && ok2 {
						overlay(do, so)
					}
				}
			}
		}
	}
}

// violations are the failed constraints of one request, in the order
// found.
type violations []string

func (v violations) message() string {
	noun := "validation error"
	if len(v) > 1 {
		noun = "validation errors"
	}
	return fmt.Sprintf("%d %s detected: %s", len(v), noun, strings.Join(v, "; "))
}

func (v *violations) add(value any, path, constraint string) {
	if value == nil {
		*v = append(*v, fmt.Sprintf("Value null at '%s' failed to satisfy constraint: %s", path, constraint))
		return
	}
	*v = append(*v, fmt.Sprintf("Value '%s' at '%s' failed to satisfy constraint: %s", render(value), path, constraint))
}

// check validates value against the shape named name; path is the
// member's name as AWS's messages write it: "tags",
// "resourcesVpcConfig.subnetIds", "podIdentityAssociations.1.member.roleArn".
func (v *violations) check(name string, value any, path string) {
	s := shapes[name]
	if s == nil {
		return
	}
	switch s.kind {
	case kindStructure:
		obj, ok := value.(map[string]any)
		if !ok {
			return
		}
		for _, m := range s.members {
			mv, present := obj[m.name]
			if !present || mv == nil {
				if slices.Contains(s.required, m.name) {
					v.add(nil, join(path, m.name), "Member must not be null")
				}
				continue
			}
			if emptyOptionalMap(shapes[m.shape], mv) && !slices.Contains(s.required, m.name) {
				// AWS takes an empty map it does not require as absent:
				// eksctl sends "tags": {} with every create made without
				// --tags, and EKS creates. A required one (TagResource's
				// tags) is refused below its minimum.
				continue
			}
			v.check(m.shape, mv, join(path, m.name))
		}
	case kindList:
		list, ok := value.([]any)
		if !ok {
			return
		}
		for _, c := range lengthConstraints(s, int64(len(list))) {
			v.add(value, path, c)
		}
		for i, item := range list {
			v.check(s.member, item, fmt.Sprintf("%s.%d.member", path, i+1))
		}
	case kindMap:
		obj, ok := value.(map[string]any)
		if !ok {
			return
		}
		for _, c := range lengthConstraints(s, int64(len(obj))) {
			v.add(value, path, c)
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var keysBad, valuesBad bool
		for _, k := range keys {
			keysBad = keysBad || len(scalarConstraints(shapes[s.key], k)) > 0
			valuesBad = valuesBad || len(scalarConstraints(shapes[s.value], obj[k])) > 0
		}
		if keysBad {
			v.add(value, path, "Map keys must satisfy constraint: ["+strings.Join(allConstraints(shapes[s.key]), ", ")+"]")
		}
		if valuesBad {
			v.add(value, path, "Map value must satisfy constraint: ["+strings.Join(allConstraints(shapes[s.value]), ", ")+"]")
		}
	default:
		for _, c := range scalarConstraints(s, value) {
			v.add(value, path, c)
		}
	}
}

// emptyOptionalMap reports whether value is an empty map of map shape s.
func emptyOptionalMap(s *shape, value any) bool {
	obj, ok := value.(map[string]any)
	return ok && s != nil && s.kind == kindMap && len(obj) == 0
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// lengthConstraints are the failed size constraints of a list or map of n
// entries (AWS says "length" for collections too).
func lengthConstraints(s *shape, n int64) []string {
	var out []string
	if s.max != nil && n > *s.max {
		out = append(out, fmt.Sprintf("Member must have length less than or equal to %d", *s.max))
	}
	if s.min != nil && n < *s.min {
		out = append(out, fmt.Sprintf("Member must have length greater than or equal to %d", *s.min))
	}
	return out
}

// scalarConstraints are the constraints of s that value fails.
func scalarConstraints(s *shape, value any) []string {
	if s == nil {
		return nil
	}
	var out []string
	switch s.kind {
	case kindString:
		str, ok := value.(string)
		if !ok {
			return nil
		}
		n := int64(utf8.RuneCountInString(str))
		if s.max != nil && n > *s.max {
			out = append(out, fmt.Sprintf("Member must have length less than or equal to %d", *s.max))
		}
		if s.min != nil && n < *s.min {
			out = append(out, fmt.Sprintf("Member must have length greater than or equal to %d", *s.min))
		}
		if s.pattern != "" && !patternMatches(s.pattern, str) {
			out = append(out, "Member must satisfy regular expression pattern: "+s.pattern)
		}
		if len(s.enum) > 0 && !slices.Contains(s.enum, str) {
			out = append(out, "Member must satisfy enum value set: ["+strings.Join(s.enum, ", ")+"]")
		}
	case kindInteger:
		var n json.Number
		switch x := value.(type) {
		case json.Number:
			n = x
		case string: // protojson writes int64 as a string
			n = json.Number(x)
		default:
			return nil
		}
		i, err := n.Int64()
		if err != nil {
			return nil
		}
		if s.max != nil && i > *s.max {
			out = append(out, fmt.Sprintf("Member must have value less than or equal to %d", *s.max))
		}
		if s.min != nil && i < *s.min {
			out = append(out, fmt.Sprintf("Member must have value greater than or equal to %d", *s.min))
		}
	}
	return out
}

// allConstraints lists every constraint of a scalar shape, as AWS lists
// them for map keys and values.
func allConstraints(s *shape) []string {
	if s == nil {
		return nil
	}
	var out []string
	if s.max != nil {
		out = append(out, fmt.Sprintf("Member must have length less than or equal to %d", *s.max))
	}
	if s.min != nil {
		out = append(out, fmt.Sprintf("Member must have length greater than or equal to %d", *s.min))
	}
	if s.pattern != "" {
		out = append(out, "Member must satisfy regular expression pattern: "+s.pattern)
	}
	if len(s.enum) > 0 {
		out = append(out, "Member must satisfy enum value set: ["+strings.Join(s.enum, ", ")+"]")
	}
	return out
}

// patterns holds the model's patterns compiled, anchored at both ends: AWS
// matches the whole value (Java's Matcher.matches). genmodel checked that
// each compiles.
var patterns = func() map[string]*regexp.Regexp {
	out := map[string]*regexp.Regexp{}
	for _, s := range shapes {
		if s.pattern != "" {
			out[s.pattern] = regexp.MustCompile(`^(?:` + s.pattern + `)$`)
		}
	}
	return out
}()

func patternMatches(pattern, value string) bool {
	re, ok := patterns[pattern]
	return !ok || re.MatchString(value)
}

// Model is the table as the façade needs it to word, in AWS's terms, a
// request it could not decode (gateway.Model): the exception of an
// operation, a body member's name and type, an integer member's range, a
// value as the messages write it. The server's wiring hands it to the
// façade, which imports nothing of the server.
type Model struct{}

// Exception is the package's Exception.
func (Model) Exception(operationName string) (string, bool) { return Exception(operationName) }

// Member is the package's Member.
func (Model) Member(operationName string, path []any) (name, typ string, ok bool) {
	return Member(operationName, path)
}

// MemberConstraint is the package's MemberConstraint.
func (Model) MemberConstraint(operationName, name string) (minV, maxV *int64, ok bool) {
	return MemberConstraint(operationName, name)
}

// Render is the package's Render.
func (Model) Render(value any) string { return Render(value) }

// Render writes a JSON value (as encoding/json decodes it, numbers as
// json.Number) as AWS's validation messages write values, for the
// façade's messages about a body it could not decode.
func Render(value any) string { return render(value) }

// render writes a value as AWS's messages do: strings as they are, lists
// as [a, b], maps and structures as {k=v, …}.
func render(value any) string {
	switch x := value.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, it := range x {
			parts[i] = render(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + render(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case nil:
		return "null"
	}
	return fmt.Sprint(value)
}

// Member names the body member at path (object keys and list indices, as
// a JSON decoder walks them) as AWS's messages do, and says what type the
// model gives it: ("podIdentityAssociations.1.member.roleArn", "a string").
// A path into a map names the map. ok is false when the operation or the
// member is not in the model.
func Member(operationName string, path []any) (name, typ string, ok bool) {
	op, found := operations[operationName]
	if !found {
		return "", "", false
	}
	s, cur := shapes[op.input], ""
	for _, seg := range path {
		switch s.kind {
		case kindStructure:
			key, isKey := seg.(string)
			if !isKey {
				return "", "", false
			}
			i := slices.IndexFunc(s.members, func(m member) bool { return m.name == key })
			if i < 0 {
				return "", "", false
			}
			s, cur = shapes[s.members[i].shape], join(cur, key)
		case kindList:
			idx, isIndex := seg.(int)
			if !isIndex {
				return "", "", false
			}
			s, cur = shapes[s.member], fmt.Sprintf("%s.%d.member", cur, idx+1)
		case kindMap:
			_, one, _ := strings.Cut(typeName(shapes[s.value]), " ")
			return cur, "a map of " + one + "s", true
		default:
			return "", "", false
		}
		if s == nil {
			return "", "", false
		}
	}
	return cur, typeName(s), cur != ""
}

func typeName(s *shape) string {
	switch s.kind {
	case kindString:
		return "a string"
	case kindInteger:
		return "an integer"
	case kindNumber:
		return "a number"
	case kindBoolean:
		return "a boolean"
	case kindTimestamp:
		return "a timestamp"
	case kindBlob:
		return "a blob"
	case kindList:
		return "a list"
	case kindMap:
		return "a map"
	}
	return "a structure"
}

// invalidUTF8 returns the member (JSON names, dotted) of the first string
// in m, at any depth, list element or map entry, that is not UTF-8.
func invalidUTF8(m protoreflect.Message, prefix string) (string, bool) {
	var member string
	bad := func(v protoreflect.Value, fd protoreflect.FieldDescriptor) bool {
		switch fd.Kind() {
		case protoreflect.StringKind:
			return !utf8.ValidString(v.String())
		case protoreflect.MessageKind, protoreflect.GroupKind:
			name, found := invalidUTF8(v.Message(), member)
			if found {
				member = name
			}
			return found
		}
		return false
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		member = prefix + fd.JSONName()
		if prefix != "" {
			member = prefix + "." + fd.JSONName()
		}
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				if bad(v.List().Get(i), fd) {
					return false
				}
			}
		case fd.IsMap():
			found := false
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = !utf8.ValidString(k.String()) || bad(mv, fd.MapValue())
				return !found
			})
			if found {
				return false
			}
		case bad(v, fd):
			return false
		}
		member = ""
		return true
	})
	return member, member != ""
}
