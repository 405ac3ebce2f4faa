// Package podcreds_test proves the credential exchanges of pods without a
// node: a real kube-apiserver whose service-account issuer saltbush hosts
// mints the tokens (TokenRequest, as the kubelet asks for a projected
// token), the real guest agent sends the apiserver's keys to saltbush, and
// the real AWS SDK for Go v2, the AWS CLI and boto3 exchange the tokens at
// STS (AssumeRoleWithWebIdentity, IRSA) and EKS Auth
// (AssumeRoleForPodIdentity, EKS Pod Identity). tests/nodetest and
// tests/addons prove the same on real pods.
package podcreds_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/saltbush/saltbush/tests/agentproc"
)

// agentBinary is the saltbush-agent built for this test binary.
var agentBinary string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	bin, remove, err := agentproc.BuildTemp(raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	agentBinary = bin
	return m.Run()
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
