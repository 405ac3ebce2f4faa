package gateway

import (
	"bytes"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// awsJSON is protojson as grpc-gateway's JSONPb, with one AWS habit added:
// a response's top-level lists are always present, as [] when empty
// (`{"clusters": []}`), because scripts over AWS output index them without
// checking. Nested empty lists and every other absent member stay absent.
type awsJSON struct {
	*runtime.JSONPb
}

// Marshal implements runtime.Marshaler.
func (m awsJSON) Marshal(v any) ([]byte, error) {
	b, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	msg, ok := v.(proto.Message)
	if !ok || len(b) < 2 || b[0] != '{' {
		return b, nil
	}
	r := msg.ProtoReflect()
	var lists []byte
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.Cardinality() != protoreflect.Repeated || f.IsMap() || r.Get(f).List().Len() > 0 {
			continue
		}
		lists = strconv.AppendQuote(lists, f.JSONName())
		lists = append(lists, ":[],"...)
	}
	if lists == nil {
		return b, nil
	}
	if bytes.Equal(bytes.TrimSpace(b[1:]), []byte("}")) {
		lists = lists[:len(lists)-1] // no trailing comma before }
	}
	out := make([]byte, 0, len(b)+len(lists))
	out = append(out, '{')
	out = append(out, lists...)
	return append(out, b[1:]...), nil
}
