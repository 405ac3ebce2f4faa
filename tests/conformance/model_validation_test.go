package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/server/validation"
	"github.com/saltbush/saltbush/server/validation/eksmodel"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// The model-driven validation test (docs/contracts.md, "Input
// validation"): AWS's EKS model, read from this machine, says what every
// operation's input may hold; for every operation the façade serves and
// every constraint of a member its request message carries, a raw
// SigV4-signed request that breaks only that constraint must get the
// exception the model lists, a message naming the member and the
// constraint, and leave etcd exactly as it was.

// eksModel is the part of botocore's service-2.json the test reads.
type eksModel struct {
	Operations map[string]struct {
		HTTP struct {
			Method     string `json:"method"`
			RequestURI string `json:"requestUri"`
		} `json:"http"`
		Input  *modelRef  `json:"input"`
		Errors []modelRef `json:"errors"`
	} `json:"operations"`
	Shapes map[string]modelShape `json:"shapes"`
}

type modelRef struct {
	Shape        string `json:"shape"`
	Location     string `json:"location"`
	LocationName string `json:"locationName"`
}

type modelShape struct {
	Type     string              `json:"type"`
	Min      *int64              `json:"min"`
	Max      *int64              `json:"max"`
	Pattern  string              `json:"pattern"`
	Enum     []string            `json:"enum"`
	Required []string            `json:"required"`
	Members  map[string]modelRef `json:"members"`
	Member   *modelRef           `json:"member"`
	Key      *modelRef           `json:"key"`
	Value    *modelRef           `json:"value"`
}

// readEKSModel reads the model the validation table was generated from:
// the newest this machine has, botocore's (or SALTBUSH_EKS_MODEL) merged
// with the Go SDK's EKS module (eksmodel), and its encoding, whose hash the
// table records.
func readEKSModel(t testing.TB) (*eksModel, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := eksmodel.Locate(ctx, ".", os.Getenv("SALTBUSH_EKS_MODEL"))
	if err != nil {
		t.Fatalf("find the EKS model's sources (set SALTBUSH_EKS_MODEL to botocore's model): %v", err)
	}
	merged, _, err := eksmodel.Load(src)
	if err != nil {
		t.Fatalf("read the EKS model: %v", err)
	}
	raw, err := merged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m := &eksModel{}
	if err := json.Unmarshal(raw, m); err != nil {
		t.Fatalf("decode the merged model: %v", err)
	}
	return m, raw
}

// validationExceptionOf is the exception the model lists for op that AWS
// answers validation errors with: InvalidParameterException, else
// BadRequestException (the tag operations), else InvalidRequestException,
// else ClientException, else InvalidParameterException.
func (m *eksModel) validationExceptionOf(op string) string {
	for _, cand := range []string{"InvalidParameterException", "BadRequestException", "InvalidRequestException", "ClientException"} {
		if slices.ContainsFunc(m.Operations[op].Errors, func(r modelRef) bool { return r.Shape == cand }) {
			return cand
		}
	}
	return "InvalidParameterException"
}

// servedMethod is one EKS RPC with an HTTP rule: what the façade serves.
type servedMethod struct {
	fullName string // /saltbush.eks.v1.AddonService/CreateAddon
	desc     protoreflect.MethodDescriptor
}

func servedEKSMethods(t *testing.T) []servedMethod {
	t.Helper()
	var out []servedMethod
	protoregistry.GlobalFiles.RangeFilesByPackage("saltbush.eks.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				if rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule); !ok || rule == nil {
					continue
				}
				out = append(out, servedMethod{fullName: "/" + string(sd.FullName()) + "/" + string(md.Name()), desc: md})
			}
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].fullName < out[j].fullName })
	if len(out) == 0 {
		t.Fatal("no saltbush.eks.v1 method with an HTTP rule is registered")
	}
	return out
}

// modelCase is one request that breaks one constraint.
type modelCase struct {
	name string
	// request is the operation's input as JSON values by member name.
	request map[string]any
	// path is the member as AWS's message names it, constraint the words
	// the message must hold.
	path, constraint string
}

// caseBuilder makes valid values and violations for one operation.
type caseBuilder struct {
	m       *eksModel
	cluster string
	msg     protoreflect.MessageDescriptor
	// required are the input's required members (cases sets them).
	required map[string]bool
}

// validValue is a value of shape s (of the member named member, whose
// proto message is md when it is one) that satisfies every constraint.
func (b *caseBuilder) validValue(member string, s modelShape, md protoreflect.MessageDescriptor) any {
	switch s.Type {
	case "string":
		if len(s.Enum) > 0 {
			return s.Enum[0]
		}
		switch member {
		case "clusterName", "name":
			return b.cluster
		}
		v := "a"
		if s.Min != nil && *s.Min > 1 {
			v = strings.Repeat("a", int(*s.Min))
		}
		return v
	case "integer", "long":
		if s.Min != nil {
			return *s.Min
		}
		return 1
	case "boolean":
		return true
	case "timestamp":
		return 1700000000
	case "list":
		item := b.validValue("", b.m.Shapes[s.Member.Shape], fieldMessage(md, member))
		n := 1
		if s.Min != nil && *s.Min > 1 {
			n = int(*s.Min)
		}
		list := make([]any, n)
		for i := range list {
			list[i] = item
		}
		return list
	case "map":
		return map[string]any{"k": b.validValue("", b.m.Shapes[s.Value.Shape], nil)}
	case "structure":
		obj := map[string]any{}
		for _, req := range s.Required {
			mr := s.Members[req]
			obj[req] = b.validValue(req, b.m.Shapes[mr.Shape], fieldMessage(md, req))
		}
		return obj
	}
	return nil
}

func fieldMessage(md protoreflect.MessageDescriptor, jsonName string) protoreflect.MessageDescriptor {
	if md == nil {
		return nil
	}
	if f := md.Fields().ByJSONName(jsonName); f != nil && f.Message() != nil && !f.IsMap() {
		return f.Message()
	}
	return nil
}

// violations returns the cases breaking each constraint of the member at
// path (shape s), each built by set from a bad value of the member; loc
// is the member's REST location ("" for the body).
func (b *caseBuilder) violations(path, member, loc string, s modelShape, md protoreflect.MessageDescriptor, set func(any) map[string]any) []modelCase {
	var out []modelCase
	add := func(name string, v any, constraint string) {
		out = append(out, modelCase{name: path + " " + name, request: set(v), path: path, constraint: constraint})
	}
	switch s.Type {
	case "string":
		if s.Min != nil && *s.Min >= 1 && loc == "" {
			add("too short", strings.Repeat("a", int(*s.Min)-1), fmt.Sprintf("Member must have length greater than or equal to %d", *s.Min))
		}
		if s.Max != nil && len(s.Enum) == 0 {
			add("too long", strings.Repeat("a", int(*s.Max)+1), fmt.Sprintf("Member must have length less than or equal to %d", *s.Max))
		}
		if s.Pattern != "" {
			re := regexp.MustCompile(`^(?:` + s.Pattern + `)$`)
			for _, cand := range []string{"-", "_a", "a b", "!", "é"} {
				if !re.MatchString(cand) {
					add("against the pattern", cand, "Member must satisfy regular expression pattern: "+s.Pattern)
					break
				}
			}
		}
		if len(s.Enum) > 0 {
			add("not in the enum", "NOT_A_VALUE", "Member must satisfy enum value set: ["+strings.Join(s.Enum, ", ")+"]")
		}
	case "integer", "long":
		if s.Min != nil {
			add("under the minimum", *s.Min-1, fmt.Sprintf("Member must have value greater than or equal to %d", *s.Min))
		}
		if s.Max != nil {
			add("over the maximum", *s.Max+1, fmt.Sprintf("Member must have value less than or equal to %d", *s.Max))
		}
	case "list":
		elem := b.m.Shapes[s.Member.Shape]
		item := b.validValue("", elem, fieldMessage(md, member))
		if s.Min != nil && *s.Min >= 1 && loc == "" {
			add("with too few items", make([]any, *s.Min-1), fmt.Sprintf("Member must have length greater than or equal to %d", *s.Min))
		}
		if s.Max != nil {
			list := make([]any, *s.Max+1)
			for i := range list {
				list[i] = item
				if str, ok := item.(string); ok && len(elem.Enum) == 0 {
					list[i] = str + strconv.Itoa(i) // distinct keys (tagKeys)
				}
			}
			add("with too many items", list, fmt.Sprintf("Member must have length less than or equal to %d", *s.Max))
		}
		elemPath := path + ".1.member"
		out = append(out, b.violations(elemPath, "", loc, elem, fieldMessage(md, member), func(v any) map[string]any {
			return set([]any{v})
		})...)
	case "map":
		key, value := b.m.Shapes[s.Key.Shape], b.m.Shapes[s.Value.Shape]
		validValue := b.validValue("", value, nil)
		// An empty map the operation does not require is taken as
		// absent (server/validation, "Presence"); one it requires is
		// refused.
		if s.Min != nil && *s.Min >= 1 && loc == "" && b.required[path] {
			add("with too few entries", map[string]any{}, fmt.Sprintf("Member must have length greater than or equal to %d", *s.Min))
		}
		if s.Max != nil {
			obj := map[string]any{}
			for i := int64(0); i <= *s.Max; i++ {
				obj["k"+strconv.FormatInt(i, 10)] = validValue
			}
			add("with too many entries", obj, fmt.Sprintf("Member must have length less than or equal to %d", *s.Max))
		}
		if key.Max != nil {
			add("with a key too long", map[string]any{strings.Repeat("k", int(*key.Max)+1): validValue}, "Map keys must satisfy constraint: [")
		}
		if value.Max != nil {
			add("with a value too long", map[string]any{"k": strings.Repeat("v", int(*value.Max)+1)}, "Map value must satisfy constraint: [")
		}
	case "structure":
		valid := b.validValue(member, s, md)
		for _, req := range s.Required {
			if loc != "" {
				continue
			}
			if md != nil && md.Fields().ByJSONName(req) == nil {
				continue
			}
			obj := copyObject(valid.(map[string]any))
			delete(obj, req)
			out = append(out, modelCase{name: path + "." + req + " missing", request: set(obj), path: path + "." + req,
				constraint: "Member must not be null"})
		}
		for _, name := range sortedMembers(s) {
			mr := s.Members[name]
			if md != nil && md.Fields().ByJSONName(name) == nil {
				continue
			}
			out = append(out, b.violations(path+"."+name, name, "", b.m.Shapes[mr.Shape], fieldMessage(md, name), func(v any) map[string]any {
				obj := copyObject(valid.(map[string]any))
				obj[name] = v
				return set(obj)
			})...)
		}
	}
	return out
}

func sortedMembers(s modelShape) []string {
	names := make([]string, 0, len(s.Members))
	for n := range s.Members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func copyObject(o map[string]any) map[string]any {
	c := make(map[string]any, len(o))
	for k, v := range o {
		c[k] = v
	}
	return c
}

// cases are the violations of every member of op's input that the
// request message carries, each with every other member valid.
func (b *caseBuilder) cases(t *testing.T, op string) []modelCase {
	t.Helper()
	in := b.m.Shapes[b.m.Operations[op].Input.Shape]
	base := map[string]any{}
	b.required = map[string]bool{}
	for _, req := range in.Required {
		b.required[req] = true
		mr := in.Members[req]
		if b.msg.Fields().ByJSONName(req) == nil {
			t.Errorf("%s: the request message %s lacks the model's required member %s", op, b.msg.FullName(), req)
			continue
		}
		base[req] = b.validValue(req, b.m.Shapes[mr.Shape], fieldMessage(b.msg, req))
	}
	var out []modelCase
	for _, req := range in.Required {
		if in.Members[req].Location == "uri" {
			continue // a path label is never absent on the wire
		}
		r := copyObject(base)
		delete(r, req)
		out = append(out, modelCase{name: req + " missing", request: r, path: req, constraint: "Member must not be null"})
	}
	for _, name := range sortedMembers(in) {
		mr := in.Members[name]
		if b.msg.Fields().ByJSONName(name) == nil {
			continue // not in the contract: the façade refuses it as unknown
		}
		out = append(out, b.violations(name, name, mr.Location, b.m.Shapes[mr.Shape], fieldMessage(b.msg, name), func(v any) map[string]any {
			r := copyObject(base)
			r[name] = v
			return r
		})...)
	}
	return out
}

// encode turns a request into the REST call AWS's SDKs would send.
func encode(m *eksModel, op string, request map[string]any) (method, path string, body []byte) {
	o := m.Operations[op]
	in := m.Shapes[o.Input.Shape]
	uri, rawQuery, _ := strings.Cut(o.HTTP.RequestURI, "?")
	query := url.Values{}
	if rawQuery != "" {
		query, _ = url.ParseQuery(rawQuery)
	}
	bodyMembers := map[string]any{}
	for name, v := range request {
		mr := in.Members[name]
		switch mr.Location {
		case "uri":
			uri = strings.Replace(uri, "{"+mr.LocationName+"}", url.PathEscape(fmt.Sprint(v)), 1)
		case "querystring":
			if list, ok := v.([]any); ok {
				for _, it := range list {
					query.Add(mr.LocationName, fmt.Sprint(it))
				}
				continue
			}
			query.Set(mr.LocationName, fmt.Sprint(v))
		default:
			bodyMembers[name] = v
		}
	}
	if q := query.Encode(); q != "" {
		uri += "?" + q
	}
	if o.HTTP.Method == http.MethodPost || o.HTTP.Method == http.MethodPut {
		body, _ = json.Marshal(bodyMembers)
	}
	return o.HTTP.Method, uri, body
}

var validationMessage = regexp.MustCompile(`^[12] validation errors? detected: `)

func TestModelValidation(t *testing.T) {
	model, raw := readEKSModel(t)
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != validation.ModelSHA256 {
		t.Fatalf("server/validation's table was generated from another model (%s, sha256 %s) than this machine's (sha256 %s): run 'make model-table'",
			validation.ModelSource, validation.ModelSHA256, got)
	}
	table := validation.Operations()
	h := newAddonHarness(t)
	before := addonKeyspace(t, h)
	grpcConn := h.srv.GRPC(t)

	for _, sm := range servedEKSMethods(t) {
		op := string(sm.desc.Name())
		t.Run(op, func(t *testing.T) {
			if _, ok := model.Operations[op]; !ok {
				t.Fatalf("%s is served but is not an operation of the EKS model", sm.fullName)
			}
			if !slices.Contains(table, op) {
				t.Fatalf("%s is served but not in server/validation's table: run 'make model-table'", op)
			}
			exception := model.validationExceptionOf(op)
			if got, _ := validation.Exception(op); got != exception {
				t.Errorf("table's exception for %s: %s, the model's: %s", op, got, exception)
			}
			b := &caseBuilder{m: model, cluster: h.cluster, msg: sm.desc.Input()}
			cases := b.cases(t, op)
			served := true
			for _, c := range cases {
				if !served {
					break
				}
				t.Run(c.name, func(t *testing.T) {
					method, path, body := encode(model, op, c.request)
					resp := h.srv.Do(t, method, path, body)
					defer func() { _ = resp.Body.Close() }()
					b, _ := io.ReadAll(resp.Body)
					var out struct {
						Message string `json:"message"`
					}
					_ = json.Unmarshal(b, &out)
					if resp.Header.Get("X-Amzn-Errortype") == "UnknownOperationException" {
						t.Logf("%s %s: not routed; %s is not served", method, path, op)
						served = false
						return
					}
					if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-Errortype") != exception {
						t.Fatalf("%s %s %s: %d %s %q, want 400 %s", method, path, body, resp.StatusCode,
							resp.Header.Get("X-Amzn-Errortype"), out.Message, exception)
					}
					// One error, or two where a value too short is also
					// against the pattern ("" for a cluster name).
					if !validationMessage.MatchString(out.Message) ||
						!strings.Contains(out.Message, "at '"+c.path+"' failed to satisfy constraint: "+c.constraint) {
						t.Errorf("%s %s %s: message %q, want one error at '%s': %s", method, path, body, out.Message, c.path, c.constraint)
					}
				})
			}
			if served && len(cases) > 0 {
				addonNoWrites(t, h, before)
			}
			// The gRPC port refuses the same: an empty request lacks every
			// required member.
			in := model.Shapes[model.Operations[op].Input.Shape]
			if len(in.Required) == 0 {
				return
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(sm.desc.Input().FullName())
			if err != nil {
				t.Fatalf("request type: %v", err)
			}
			rt, err := protoregistry.GlobalTypes.FindMessageByName(sm.desc.Output().FullName())
			if err != nil {
				t.Fatalf("response type: %v", err)
			}
			err = grpcConn.Invoke(ctxT(t), sm.fullName, mt.New().Interface(), rt.New().Interface())
			if status.Code(err) == codes.Unimplemented {
				t.Logf("%s: not served on gRPC", sm.fullName)
				return
			}
			wantCode := map[string]codes.Code{"InvalidRequestException": codes.FailedPrecondition}[exception]
			if wantCode == codes.OK {
				wantCode = codes.InvalidArgument
			}
			st := wanterr.Status(t, err, wantCode, exception)
			if !strings.Contains(st.Message(), "failed to satisfy constraint: Member must not be null") {
				t.Errorf("%s over gRPC without its required members: %q", op, st.Message())
			}
		})
	}
}

// TestRequestParseErrors: what grpc-gateway cannot parse (a query
// parameter, a body) is answered in AWS's words with the operation's
// exception, naming the member, never the proto field or Go's parser.
func TestRequestParseErrors(t *testing.T) {
	h := newAddonHarness(t)
	arn := "arn:aws:eks:" + h.srv.Config.Cluster.Region + ":" + h.account + ":cluster/" + h.cluster
	tagPath := "/tags/" + url.PathEscape(arn)
	tests := []struct {
		name         string
		method, path string
		body         string
		exception    string
		message      string
	}{
		{
			name: "query integer not a number", method: http.MethodGet, path: "/clusters?maxResults=abc",
			exception: "InvalidParameterException",
			message:   "1 validation error detected: Value 'abc' at 'maxResults' failed to satisfy constraint: Member must be an integer",
		},
		{
			name: "query integer beyond 32 bits", method: http.MethodGet, path: "/clusters/" + h.cluster + "/addons?maxResults=99999999999",
			exception: "InvalidParameterException",
			message:   "1 validation error detected: Value '99999999999' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100",
		},
		{
			name: "query boolean not a boolean", method: http.MethodDelete, path: "/clusters/" + h.cluster + "/addons/coredns?preserve=maybe",
			exception: "InvalidParameterException",
			message:   "1 validation error detected: Value 'maybe' at 'preserve' failed to satisfy constraint: Member must be a boolean (true or false)",
		},
		{
			name: "tag body member of the wrong type", method: http.MethodPost, path: tagPath, body: `{"tags": 5}`,
			exception: "BadRequestException",
			message:   "1 validation error detected: Value '5' at 'tags' failed to satisfy constraint: Member must be a map",
		},
		{
			name: "tag body member unknown", method: http.MethodPost, path: tagPath, body: `{"tags": {"a": "b"}, "colour": "red"}`,
			exception: "BadRequestException", message: `Could not parse the request body: unknown field "colour"`,
		},
		{
			name: "tag body not JSON", method: http.MethodPost, path: tagPath, body: `{"tags": {`,
			exception: "SerializationException", message: "The request body is not valid JSON.",
		},
		{
			name: "add-on body member of the wrong type", method: http.MethodPost, path: "/clusters/" + h.cluster + "/addons",
			body: `{"addonName": 5}`, exception: "InvalidParameterException",
			message: "1 validation error detected: Value '5' at 'addonName' failed to satisfy constraint: Member must be a string",
		},
		{
			name: "add-on list element member of the wrong type", method: http.MethodPost, path: "/clusters/" + h.cluster + "/addons",
			body:      `{"addonName": "coredns", "podIdentityAssociations": [{"serviceAccount": "a", "roleArn": 5}]}`,
			exception: "InvalidParameterException",
			message:   "1 validation error detected: Value '5' at 'podIdentityAssociations.1.member.roleArn' failed to satisfy constraint: Member must be a string",
		},
		{
			name: "tag body member map value of the wrong type", method: http.MethodPost, path: tagPath, body: `{"tags": {"a": 1}}`,
			exception: "BadRequestException",
			message:   "1 validation error detected: Value '1' at 'tags' failed to satisfy constraint: Member must be a map of strings",
		},
		{
			name: "body a JSON list", method: http.MethodPost, path: "/clusters", body: `[1, 2]`,
			exception: "SerializationException", message: "The request body is not a JSON object.",
		},
		{
			name: "query parameter given twice", method: http.MethodGet, path: "/clusters?maxResults=1&maxResults=2",
			exception: "InvalidParameterException",
			message:   "1 validation error detected: Value '1, 2' at 'maxResults' failed to satisfy constraint: Member must have one value",
		},
		{
			name: "add-on body not JSON", method: http.MethodPost, path: "/clusters/" + h.cluster + "/addons",
			body: `addonName=coredns`, exception: "SerializationException", message: "The request body is not valid JSON.",
		},
	}
	before := addonKeyspace(t, h)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			resp := h.srv.Do(t, tc.method, tc.path, body)
			defer func() { _ = resp.Body.Close() }()
			var out struct {
				Message string `json:"message"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatalf("decode the error body: %v", err)
			}
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Amzn-Errortype") != tc.exception {
				t.Fatalf("%d %s %q, want 400 %s", resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), out.Message, tc.exception)
			}
			if !strings.HasPrefix(out.Message, tc.message) {
				t.Errorf("message %q, want %q", out.Message, tc.message)
			}
			for _, internal := range []string{"strconv", "proto:", "max_results", "parsing field", "(line "} {
				if strings.Contains(out.Message, internal) {
					t.Errorf("message %q shows %q", out.Message, internal)
				}
			}
		})
	}
	addonNoWrites(t, h, before)
}

// TestModelValidationWithSDK: inputs the model forbids, sent by the
// unmodified Go SDK (which checks only required members itself), are
// refused as AWS refuses them and write nothing.
func TestModelValidationWithSDK(t *testing.T) {
	h := newAddonHarness(t)
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	before := addonKeyspace(t, h)
	ctx := ctxT(t)
	twoNetworks := &ekstypes.RemoteNetworkConfigRequest{RemoteNodeNetworks: []ekstypes.RemoteNodeNetwork{
		{Cidrs: []string{"10.0.0.0/8"}}, {Cidrs: []string{"172.16.0.0/12"}},
	}}
	twoPodNetworks := &ekstypes.RemoteNetworkConfigRequest{RemotePodNetworks: []ekstypes.RemotePodNetwork{
		{Cidrs: []string{"10.0.0.0/8"}}, {Cidrs: []string{"172.16.0.0/12"}},
	}}
	tests := []struct {
		name      string
		call      func() error
		exception string
		message   string
	}{
		{
			name: "CreateAddon empty serviceAccountRoleArn", exception: "InvalidParameterException",
			call: func() error {
				_, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
					ServiceAccountRoleArn: aws.String("")})
				return err
			},
			message: "1 validation error detected: Value '' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "UpdateAddon empty serviceAccountRoleArn", exception: "InvalidParameterException",
			call: func() error {
				_, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
					ServiceAccountRoleArn: aws.String("")})
				return err
			},
			message: "1 validation error detected: Value '' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			// An empty map the operation does not require is taken as
			// absent (eksctl sends "tags": {} with every create): only
			// the role ARN is refused.
			name: "CreateAddon empty tags and an empty serviceAccountRoleArn", exception: "InvalidParameterException",
			call: func() error {
				_, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
					Tags: map[string]string{}, ServiceAccountRoleArn: aws.String("")})
				return err
			},
			message: "1 validation error detected: Value '' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "CreateCluster empty tags and two remote node networks", exception: "InvalidParameterException",
			call: func() error {
				in := createInput("model-new")
				in.Tags = map[string]string{}
				in.RemoteNetworkConfig = twoNetworks
				_, err := h.eks.CreateCluster(ctx, in)
				return err
			},
			message: "1 validation error detected: Value '[{cidrs=[10.0.0.0/8]}, {cidrs=[172.16.0.0/12]}]' at 'remoteNetworkConfig.remoteNodeNetworks' " +
				"failed to satisfy constraint: Member must have length less than or equal to 1",
		},
		{
			name: "UpdateClusterConfig two remote pod networks", exception: "InvalidParameterException",
			call: func() error {
				_, err := h.eks.UpdateClusterConfig(ctx, &eks.UpdateClusterConfigInput{Name: aws.String(h.cluster), RemoteNetworkConfig: twoPodNetworks})
				return err
			},
			message: "1 validation error detected: Value '[{cidrs=[10.0.0.0/8]}, {cidrs=[172.16.0.0/12]}]' at 'remoteNetworkConfig.remotePodNetworks' " +
				"failed to satisfy constraint: Member must have length less than or equal to 1",
		},
		{
			name: "TagResource empty tags", exception: "BadRequestException",
			call: func() error {
				arn := "arn:aws:eks:" + h.srv.Config.Cluster.Region + ":" + h.account + ":cluster/" + h.cluster
				_, err := h.eks.TagResource(ctx, &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: map[string]string{}})
				return err
			},
			message: "1 validation error detected: Value '{}' at 'tags' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "ListAddons maxResults over 100", exception: "InvalidParameterException",
			call: func() error {
				_, err := h.eks.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(h.cluster), MaxResults: aws.Int32(101)})
				return err
			},
			message: "1 validation error detected: Value '101' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg := wanterr.AWS(t, tc.call(), tc.exception, http.StatusBadRequest)
			if msg != tc.message {
				t.Errorf("message\n%s\nwant\n%s", msg, tc.message)
			}
		})
	}
	addonNoWrites(t, h, before)
}

// TestModelValidationOverGRPC: the gRPC port refuses what the façade
// refuses, with the same exception (in the status's ErrorInfo) and
// message; presence is the proto's there (an optional field set to "").
func TestModelValidationOverGRPC(t *testing.T) {
	h := newAddonHarness(t)
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	before := addonKeyspace(t, h)
	ctx := ctxT(t)
	conn := h.srv.GRPC(t)
	addons, tags := eksv1.NewAddonServiceClient(conn), eksv1.NewTagServiceClient(conn)
	many := map[string]string{}
	for i := range 51 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	arn := "arn:aws:eks:" + h.srv.Config.Cluster.Region + ":" + h.account + ":cluster/" + h.cluster
	tests := []struct {
		name      string
		call      func() error
		code      codes.Code
		exception string
		message   string
	}{
		{
			name: "UpdateAddon optional serviceAccountRoleArn set to empty", code: codes.InvalidArgument, exception: "InvalidParameterException",
			call: func() error {
				_, err := addons.UpdateAddon(ctx, &eksv1.UpdateAddonRequest{ClusterName: h.cluster, AddonName: "coredns", ServiceAccountRoleArn: proto.String("")})
				return err
			},
			message: "1 validation error detected: Value '' at 'serviceAccountRoleArn' failed to satisfy constraint: Member must have length greater than or equal to 1",
		},
		{
			name: "ListAddons maxResults 0", code: codes.InvalidArgument, exception: "InvalidParameterException",
			call: func() error {
				_, err := addons.ListAddons(ctx, &eksv1.ListAddonsRequest{ClusterName: h.cluster, MaxResults: proto.Int32(0)})
				return err
			},
			message: "1 validation error detected: Value '0' at 'maxResults' failed to satisfy constraint: Member must have value greater than or equal to 1",
		},
		{
			name: "TagResource 51 tags", code: codes.InvalidArgument, exception: "BadRequestException",
			call: func() error {
				_, err := tags.TagResource(ctx, &eksv1.TagResourceRequest{ResourceArn: arn, Tags: many})
				return err
			},
			message: "at 'tags' failed to satisfy constraint: Member must have length less than or equal to 50",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := wanterr.Status(t, tc.call(), tc.code, tc.exception)
			if !strings.Contains(st.Message(), tc.message) {
				t.Errorf("message %q, want %q", st.Message(), tc.message)
			}
		})
	}
	addonNoWrites(t, h, before)
}
