package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/saltbush/saltbush/presence"
)

// awsJSON is protojson as grpc-gateway's JSONPb (EmitUnpopulated false, so
// absent members stay absent), with AWS's habit of sending some empty
// members anyway:
//   - a response's top-level lists are always present, as [] when empty
//     (`{"clusters": []}`), because scripts over AWS output index them;
//   - members marked `(saltbush.eks.v1.always_present)` in the contract are
//     always present, at any depth (`"tags": {}`, `"health": {"issues": []}`,
//     an update's `"errors": []`).
//
// Every other empty member stays absent.
type awsJSON struct {
	// JSONPb decodes requests, and writes what is not a message.
	*runtime.JSONPb
	// pathBound lists, per request message, the fields bound to a path
	// label of its HTTP rule; see NewDecoder.
	pathBound map[protoreflect.FullName][]protoreflect.FieldDescriptor
	// plans writes responses (plan.go).
	plans *planCache
}

// newAWSJSON returns the façade's marshaler. Responses are written as
// JSONPb with the zero MarshalOptions writes them (EmitUnpopulated false:
// absent members stay absent, a zero createdAt would decode as 1970), so
// unmarshal is the only option it takes.
func newAWSJSON(unmarshal protojson.UnmarshalOptions) awsJSON {
	return awsJSON{
		JSONPb:    &runtime.JSONPb{UnmarshalOptions: unmarshal},
		pathBound: pathBoundFields(),
		plans:     newPlanCache(),
	}
}

// pathParameterNote ends the decoder's error for a body member bound to a
// path label: it is the operation's member, but not in the body.
const pathParameterNote = " (it is a path parameter)"

// NewDecoder implements runtime.Marshaler: protojson (unknown members are
// errors), and then a member bound to a path label is refused too
// (`{"clusterName": …}` in a CreateAddon body). It is not a body member in
// AWS's model, and the path value would silently win over it.
//
// The body must be one JSON value and nothing else: JSONPb's decoder reads
// the first value of the stream and ignores what follows, so
// `{"addonName": "a"} garbage` or a second object after the first would be
// taken as the first alone although SigV4 signed, and the client sent,
// something else. encoding/json's own error for the trailing data ("invalid
// character … after top-level value") is a syntax error to the error
// handler (parse.go).
//
// A body of one JSON value goes to protojson straight away: the bytes
// JSONPb's decoder would hand it are that value without the whitespace
// around it, which is what bytes.TrimSpace leaves of valid JSON, and
// encoding/json has already checked it. An empty body and a value that
// is not a message still go through JSONPb's decoder (io.EOF, which the
// generated handlers take as "no body", and its non-message decoding).
//
// The message decoded carries the record of the members the body sent
// that it cannot show (`"serviceAccountRoleArn": ""`, `"tags": {}`: package
// presence), so the services' model check sees them as AWS does.
func (m awsJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		value := bytes.TrimSpace(body)
		if len(value) > 0 && !json.Valid(body) {
			var first json.RawMessage
			if err := json.Unmarshal(body, &first); err != nil {
				return err
			}
		}
		msg, ok := v.(proto.Message)
		if !ok || len(value) == 0 {
			if err := m.JSONPb.NewDecoder(bytes.NewReader(body)).Decode(v); err != nil {
				return err
			}
		} else if err := m.UnmarshalOptions.Unmarshal(value, msg); err != nil {
			return err
		}
		if !ok {
			return nil
		}
		pm := msg.ProtoReflect()
		for _, f := range m.pathBound[pm.Descriptor().FullName()] {
			if pm.Has(f) {
				// Worded like protojson's own unknown-member error, which the
				// error handler turns into AWS's 400.
				return fmt.Errorf("proto: unknown field %q"+pathParameterNote, f.JSONName())
			}
		}
		return presence.Record(msg, value)
	})
}

// requestBody is a request body ServeHTTP has read in full (to check its
// signature): the decoder takes its bytes as they are rather than copying
// them once more.
type requestBody struct {
	bytes.Reader
	payload []byte
}

func newRequestBody(payload []byte) *requestBody {
	b := &requestBody{payload: payload}
	b.Reset(payload)
	return b
}

// Close implements io.Closer: there is nothing to release.
func (b *requestBody) Close() error { return nil }

// readBody reads the rest of r, without a copy when r is a requestBody
// nothing has read from yet.
func readBody(r io.Reader) ([]byte, error) {
	if b, ok := r.(*requestBody); ok && b.Len() == len(b.payload) {
		// Consumed, as io.ReadAll would leave it.
		if _, err := b.Seek(0, io.SeekEnd); err != nil {
			return nil, fmt.Errorf("gateway: read request body: %w", err)
		}
		return b.payload, nil
	}
	return io.ReadAll(r)
}

// pathBoundFields reads the google.api.http rules of the saltbush.eks.v1
// services: for each request message, the fields its path template binds.
func pathBoundFields() map[protoreflect.FullName][]protoreflect.FieldDescriptor {
	out := map[protoreflect.FullName][]protoreflect.FieldDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			methods := fd.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				md := methods.Get(j)
				rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if !ok || rule == nil {
					continue
				}
				path := rule.GetPost() + rule.GetGet() + rule.GetDelete() + rule.GetPut() + rule.GetPatch()
				for _, v := range pathVariable.FindAllStringSubmatch(path, -1) {
					if f := md.Input().Fields().ByName(protoreflect.Name(v[1])); f != nil {
						out[md.Input().FullName()] = append(out[md.Input().FullName()], f)
					}
				}
			}
		}
		return true
	})
	return out
}

// pathVariable matches a path template variable: {name} or {name=...}.
var pathVariable = regexp.MustCompile(`\{([a-z0-9_]+)(?:=[^}]*)?\}`)

// Marshal implements runtime.Marshaler: a response message is written
// through its plan (plan.go) into a pooled buffer, and the caller gets a
// copy of exactly its size.
func (m awsJSON) Marshal(v any) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok {
		// A response_body member or an error detail: JSONPb as before.
		return m.JSONPb.Marshal(v)
	}
	pm := msg.ProtoReflect()
	p, err := m.plans.plan(pm.Descriptor())
	if err != nil {
		return nil, err
	}
	if p.wellKnown {
		// Its JSON form is not an object, so nothing is ever added to it.
		return m.JSONPb.Marshal(v)
	}
	w := m.plans.writers.Get().(*jsonWriter)
	defer func() {
		if cap(w.buf) <= maxPooledBuffer {
			m.plans.writers.Put(w)
		}
	}()
	w.buf, w.sep, w.opts = w.buf[:0], m.plans.sep, m.plans.opts
	if err := w.message(pm, p, true, true); err != nil {
		// A value JSON cannot carry (invalid UTF-8): the error is
		// protojson's, worded as it always was.
		if _, perr := m.JSONPb.Marshal(v); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("gateway: marshal %s: %w", p.name, err)
	}
	return bytes.Clone(w.buf), nil
}
