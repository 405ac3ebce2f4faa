package agent_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saltbush/saltbush/tests/poll"
)

// TestReplicaKilled: the saltbush replica holding the agent's stream dies
// (its gRPC server stops at once, streams cut); the agent connects to the
// other endpoint and goes on: it is the executor again and applies a
// change made through the surviving replica.
func TestReplicaKilled(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2}, "i-a")
	a := e.startAgent("i-a", agentOptions{})
	st := a.waitRole(t, "EXECUTOR")
	if st.Endpoint != e.replicas[0].GRPCAddr() {
		t.Fatalf("connected to %s, want the first endpoint %s", st.Endpoint, e.replicas[0].GRPCAddr())
	}
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(noop), AddonVersion: aws.String("v1.1.0-eksbuild.1"), ConfigurationValues: noopValues("one")})
	e.waitActive(noop)

	dead := e.replicas[0]
	dead.Close()
	if err := dead.Stop(); err != nil {
		t.Logf("stop the killed replica: %v", err)
	}
	survivor := e.replicas[1]
	poll.Until(t, waitChange, "the agent on the surviving replica", func() (bool, string) {
		st, err := a.status(t)
		return err == nil && st.Endpoint == survivor.GRPCAddr() && st.Role == "EXECUTOR" && st.Writable, fmt.Sprintf("%+v %v", st, err)
	})
	e.eks = survivor.EKS(t)
	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(noop), ConfigurationValues: noopValues("two")})
	e.waitUpdate(noop, id, types.UpdateStatusSuccessful)
	cm, err := e.k8s.CoreV1().ConfigMaps(noop).Get(e.ctx(waitChange), noop, metav1.GetOptions{})
	if err != nil || cm.Data["message"] != "two" {
		t.Fatalf("ConfigMap after the update through the survivor: %v %v", cm.Data, err)
	}
}
