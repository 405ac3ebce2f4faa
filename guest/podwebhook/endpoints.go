package podwebhook

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// endpointVariables are the SDKs' service-specific endpoint variables of
// the APIs saltbush serves for pods: STS (web identity), EKS, and EKS Auth
// (the node agent of Pod Identity). Other services keep AWS's endpoints.
var endpointVariables = []string{"AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_EKS", "AWS_ENDPOINT_URL_EKS_AUTH"}

// credentialVariables mark a container the webhook gave credentials to.
var credentialVariables = []string{"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI"}

type patchOperation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// withEndpoints adds endpoint's variables to every container the
// webhook's patch gives credentials to (its patch replaces
// /spec/containers and /spec/initContainers whole), keeping any the pod
// sets itself.
func withEndpoints(patch []byte, endpoint string) ([]byte, error) {
	var ops []patchOperation
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("the webhook's patch: %w", err)
	}
	for i, op := range ops {
		if op.Op != "add" || (op.Path != "/spec/containers" && op.Path != "/spec/initContainers") {
			continue
		}
		var containers []corev1.Container
		if err := json.Unmarshal(op.Value, &containers); err != nil {
			return nil, fmt.Errorf("the webhook's patch of %s: %w", op.Path, err)
		}
		for j := range containers {
			addEndpoints(&containers[j], endpoint)
		}
		v, err := json.Marshal(containers)
		if err != nil {
			return nil, err
		}
		ops[i].Value = v
	}
	return json.Marshal(ops)
}

func addEndpoints(c *corev1.Container, endpoint string) {
	has := func(name string) bool {
		return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	}
	if !slices.ContainsFunc(credentialVariables, has) {
		return
	}
	for _, name := range endpointVariables {
		if !has(name) {
			c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: endpoint})
		}
	}
}
