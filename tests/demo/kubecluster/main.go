// Command kubecluster runs the test control plane of tests/kubetest for
// `make demo`: a real kube-apiserver, kube-controller-manager and
// kube-scheduler on an embedded etcd, and the kubelet double — the one
// simulated part: it plays the nodes, marking pods Running and Ready as a
// kubelet would, without running any container. It writes the admin
// kubeconfig and the cluster CA into --dir, then a file named "ready",
// and runs until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/saltbush/saltbush/tests/kubetest"
)

func main() {
	dir := flag.String("dir", "", "directory for kubeconfig, ca.crt and ready")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "kubecluster:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		return fmt.Errorf("--dir is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	c, err := kubetest.Start(startCtx, kubetest.Options{})
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
	<-ctx.Done()
	return nil
}
