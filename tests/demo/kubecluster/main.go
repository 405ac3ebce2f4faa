// Command kubecluster runs the test control plane of tests/kubetest for
// `make demo`: a real kube-apiserver, kube-controller-manager and
// kube-scheduler on an embedded etcd, and the kubelet double — the one
// simulated part: it plays the nodes, marking pods Running and Ready as a
// kubelet would, without running any container. It writes the admin
// kubeconfig and the cluster CA into --dir, then a file named "ready",
// and runs until interrupted.
//
// With --authentication-webhook-config and --authorization-webhook-config
// (the two files `saltbush-agent webhook-config` prints) the apiserver
// asks the guest agent's webhooks who a bearer token is and whether a
// request is allowed, with the flags tests/access uses
// (kubetest.WebhookAPIServerArgs) and images/k3s sets for K3s;
// --apiserver-arg adds any other kube-apiserver flag.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/saltbush/saltbush/tests/kubetest"
)

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	dir := flag.String("dir", "", "directory for kubeconfig, ca.crt, host and ready")
	authn := flag.String("authentication-webhook-config", "", "kubeconfig of the agent's authentication (TokenReview) webhook")
	authz := flag.String("authorization-webhook-config", "", "kubeconfig of the agent's authorization (SubjectAccessReview) webhook")
	var extra repeated
	flag.Var(&extra, "apiserver-arg", "an extra kube-apiserver flag, e.g. --v=2 (repeatable)")
	flag.Parse()
	if err := run(*dir, *authn, *authz, extra); err != nil {
		fmt.Fprintln(os.Stderr, "kubecluster:", err)
		os.Exit(1)
	}
}

func run(dir, authn, authz string, extra []string) error {
	if dir == "" {
		return fmt.Errorf("--dir is required")
	}
	if (authn == "") != (authz == "") {
		return fmt.Errorf("--authentication-webhook-config and --authorization-webhook-config go together")
	}
	var args []string
	if authn != "" {
		args = kubetest.WebhookAPIServerArgs(authn, authz)
	}
	args = append(args, extra...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	c, err := kubetest.Start(startCtx, kubetest.Options{ExtraAPIServerArgs: args})
	cancel()
	if err != nil {
		return err
	}
	defer c.Stop()
	kubeconfig, err := os.ReadFile(c.AdminKubeconfig())
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"kubeconfig": kubeconfig, "ca.crt": c.CACert(), "host": []byte(c.Host())} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600); err != nil {
		return err
	}
	fmt.Printf("control plane at %s (nodes: %v, played by the kubelet double)\n", c.Host(), c.Kubelet().NodeNames())
	if authn != "" {
		fmt.Println("the apiserver asks the guest agent's webhooks about bearer tokens (TokenReview) and requests RBAC does not allow (SubjectAccessReview)")
	}
	<-ctx.Done()
	return nil
}
