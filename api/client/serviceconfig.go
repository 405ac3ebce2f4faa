package client

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The retry policy (gRPC's service config, gRFC A6). Five attempts is
// gRPC's own cap; the backoff before attempt n is drawn at random up to
// min(initial × 2^(n-2), max), so five attempts wait at most 1.5 s in all,
// well within DefaultCallTimeout, and the clients of a replica that went
// away do not all come back at the same instant.
const (
	retryMaxAttempts    = 5
	retryInitialBackoff = "0.1s"
	retryMaxBackoff     = "1s"
	retryMultiplier     = 2
)

// serviceConfig is the JSON of gRPC's service config, as much of it as
// the client sets.
type serviceConfig struct {
	LoadBalancingConfig []map[string]struct{} `json:"loadBalancingConfig"`
	MethodConfig        []methodConfig        `json:"methodConfig,omitempty"`
	RetryThrottling     *retryThrottling      `json:"retryThrottling,omitempty"`
}

type methodConfig struct {
	Name        []methodName `json:"name"`
	RetryPolicy retryPolicy  `json:"retryPolicy"`
}

type methodName struct {
	Service string `json:"service"`
	Method  string `json:"method"`
}

type retryPolicy struct {
	MaxAttempts          int      `json:"maxAttempts"`
	InitialBackoff       string   `json:"initialBackoff"`
	MaxBackoff           string   `json:"maxBackoff"`
	BackoffMultiplier    float64  `json:"backoffMultiplier"`
	RetryableStatusCodes []string `json:"retryableStatusCodes"`
}

type retryThrottling struct {
	MaxTokens  int     `json:"maxTokens"`
	TokenRatio float64 `json:"tokenRatio"`
}

// buildServiceConfig is the client's service config for the services of
// descs.
//
// Balancing is pick_first over the endpoints in their order: the client
// stays on one replica while it answers, because a replica reads its own
// writes but another replica's only once etcd's watch has delivered them
// (docs/architecture.md, "Read view"), and a provisioner that writes then
// reads must see its write. When that replica fails, pick_first connects
// to the next endpoint.
//
// Retries are only for UNAVAILABLE, and only on the methods whose proto
// declares them NO_SIDE_EFFECTS or IDEMPOTENT. UNAVAILABLE is what a
// replica that is shutting down or unreachable answers, and what saltbush
// answers when etcd has no leader or timed out; it says "try again", but
// not "nothing happened": etcd may have applied a write whose answer
// timed out. Repeating a read or an idempotent write (AddMember,
// EnsureAddon) is harmless whatever happened; repeating CreateAccessKey
// would make a second key whose secret nobody saw. Other codes are not
// retried at all: DEADLINE_EXCEEDED has used the caller's time, ABORTED
// (a lost read-modify-write race) needs the caller to read again, and
// the rest are answers. gRPC still retries any call transparently when it
// never reached the server (a connection refused before the request was
// sent), which is safe for every method.
//
// Retry throttling (per client): each call that fails with UNAVAILABLE
// takes one of 10 tokens and each success gives back 0.1, and no retry is
// made while 5 or fewer are left. When most calls fail, the client stops
// multiplying its load on a saltbush that may be failing for lack of
// capacity.
func buildServiceConfig(descs []*grpc.ServiceDesc) (string, error) {
	names, err := retryableMethods(descs)
	if err != nil {
		return "", err
	}
	sc := serviceConfig{
		LoadBalancingConfig: []map[string]struct{}{{"pick_first": {}}},
		RetryThrottling:     &retryThrottling{MaxTokens: 10, TokenRatio: 0.1},
	}
	if len(names) > 0 {
		sc.MethodConfig = []methodConfig{{
			Name: names,
			RetryPolicy: retryPolicy{
				MaxAttempts:          retryMaxAttempts,
				InitialBackoff:       retryInitialBackoff,
				MaxBackoff:           retryMaxBackoff,
				BackoffMultiplier:    retryMultiplier,
				RetryableStatusCodes: []string{"UNAVAILABLE"},
			},
		}}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return "", fmt.Errorf("client: service config: %w", err)
	}
	return string(b), nil
}

// retryableMethods are the unary methods of descs whose proto declares
// idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT. The level is read from
// the generated descriptors, so a method's retry follows its contract and
// a new method is not retried until its proto says it may be.
func retryableMethods(descs []*grpc.ServiceDesc) ([]methodName, error) {
	var out []methodName
	for _, sd := range descs {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		if err != nil {
			return nil, fmt.Errorf("client: descriptor of %s: %w", sd.ServiceName, err)
		}
		svc, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("client: %s is not a service", sd.ServiceName)
		}
		methods := svc.Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			if m.IsStreamingClient() || m.IsStreamingServer() {
				continue
			}
			opts, _ := m.Options().(*descriptorpb.MethodOptions)
			switch opts.GetIdempotencyLevel() {
			case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
				out = append(out, methodName{Service: sd.ServiceName, Method: string(m.Name())})
			}
		}
	}
	return out, nil
}
