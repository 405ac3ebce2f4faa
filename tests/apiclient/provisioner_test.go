// Package apiclient runs the contracts module's example provisioner
// (api/examples/provisioner), built inside the api module alone, against a
// real saltbush: the façade creates a cluster with the unmodified AWS SDK,
// the real `saltbush admin` CLI issues the provisioner's certificate and
// sets its policy, and the provisioner, with only api/client, finishes
// what a provisioner does. What it did is read back through the SDK.
package apiclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
)

// apiDir is the contracts module's directory (this package is
// tests/apiclient, and go test runs in it).
func apiDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "api"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// goBuild builds pkg in dir into a temporary directory and returns the
// binary. GOWORK=off: the build sees dir's module and what it requires,
// nothing else.
func goBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, out)
	}
	return bin
}

// run runs a binary with a deadline and returns its standard output; it
// fails the test when the binary fails. SALTBUSH_* variables of the test's
// environment are not passed on: the admin CLI reads its flags from them.
func run(t *testing.T, timeout time.Duration, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SALTBUSH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// deadAddress is a loopback address nothing listens on, standing for a
// replica that is down.
func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestProvisionerExample: a cluster the façade created CREATING ends
// ACTIVE with the provisioner's member, endpoint and CA, and with the
// add-on it ensured, all done by the example through api/client with the
// first of its endpoints down; run again, it changes nothing.
func TestProvisionerExample(t *testing.T) {
	const (
		clusterName = "prov-demo"
		instance    = "i-0123456789abcdef0"
		apiEndpoint = "https://10.0.0.1:6443"
		addonName   = "saltbush-noop"
		// Generous: the provisioner makes a handful of calls, but the
		// machine may be saturated by other tests.
		runTimeout = 3 * time.Minute
	)
	api := apiDir(t)
	// Built in the contracts module, as its users build it: this proves
	// the example needs nothing of the server's module.
	provisioner := goBuild(t, api, "./examples/provisioner")
	saltbush := goBuild(t, ".", "github.com/saltbush/saltbush/cmd/saltbush")

	srv := servertest.Start(t)
	sdk := srv.EKS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	created, err := sdk.CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String(clusterName),
		RoleArn:            aws.String("arn:aws:iam::" + srv.Config.DevAccount + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	})
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if created.Cluster.Status != types.ClusterStatusCreating {
		t.Fatalf("CreateCluster left the cluster %s, want CREATING", created.Cluster.Status)
	}

	// The provisioner's identity, made as an operator makes it: its
	// certificate with `cert issue` (ca.crt, provisioner.crt and
	// provisioner.key, the layout client.Config.CertDir reads) and the
	// policy shipped beside the example.
	pki := filepath.Join(t.TempDir(), "pki")
	admin := []string{"admin", "--grpc-addr", srv.GRPCAddr(), "--tls-dir", srv.Config.TLSDir(), "--timeout", "30s"}
	run(t, time.Minute, saltbush, append(admin, "cert", "issue", "--service", "provisioner", "--out-dir", pki)...)
	run(t, time.Minute, saltbush, append(admin, "service", "put-policy", "provisioner",
		filepath.Join(api, "examples", "provisioner", "policy.json"))...)

	args := []string{
		"-endpoints", deadAddress(t) + "," + srv.GRPCAddr(),
		"-cert-dir", pki,
		"-account", srv.Config.DevAccount,
		"-instance", instance,
		"-api-endpoint", apiEndpoint,
		"-addon", addonName,
		"-timeout", runTimeout.String(),
	}
	// No -cluster: the provisioner finds the CREATING cluster itself.
	out := run(t, runTimeout+time.Minute, provisioner, args...)
	t.Logf("provisioner:\n%s", out)
	if !strings.Contains(out, "add-on "+addonName+" is CREATING") {
		t.Errorf("the provisioner did not report the add-on it waited for:\n%s", out)
	}

	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		t.Helper()
		d, err := sdk.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(clusterName)})
		if err != nil {
			t.Fatalf("DescribeCluster: %v", err)
		}
		c := d.Cluster
		if c.Status != types.ClusterStatusActive || aws.ToString(c.Endpoint) != apiEndpoint {
			t.Errorf("DescribeCluster: status %s at %q, want ACTIVE at %q", c.Status, aws.ToString(c.Endpoint), apiEndpoint)
		}
		if c.CertificateAuthority == nil || aws.ToString(c.CertificateAuthority.Data) != base64.StdEncoding.EncodeToString(caPEM) {
			t.Errorf("DescribeCluster: certificateAuthority %+v, want the CA the provisioner sent", c.CertificateAuthority)
		}
		a, err := sdk.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(clusterName), AddonName: aws.String(addonName)})
		if err != nil {
			t.Fatalf("DescribeAddon %s: %v", addonName, err)
		}
		// No guest agent runs, so nothing delivers the add-on: it stays
		// CREATING, which is all the provisioner waited for.
		if aws.ToString(a.Addon.AddonName) != addonName || a.Addon.Status != types.AddonStatusCreating {
			t.Errorf("DescribeAddon: %s %s, want %s CREATING", aws.ToString(a.Addon.AddonName), a.Addon.Status, addonName)
		}
		// Members are the provisioner's business, not EKS's: the
		// internal view shows them.
		got, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).GetCluster(ctx, &controlv1.GetClusterRequest{
			Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: clusterName},
		})
		if err != nil {
			t.Fatalf("GetCluster: %v", err)
		}
		if m := got.GetCluster().GetMembers(); !slices.Equal(m, []string{instance}) {
			t.Errorf("members %q, want [%s]", m, instance)
		}
		addon, err := controlv1.NewAddonControlServiceClient(srv.GRPC(t)).GetAddon(ctx, &controlv1.GetAddonRequest{
			Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: clusterName}, AddonName: addonName,
		})
		if err != nil {
			t.Fatalf("GetAddon: %v", err)
		}
		if refs := addon.GetAddon().GetReferences(); !slices.Equal(refs, []string{"provisioner/" + clusterName}) {
			t.Errorf("add-on references %q, want [provisioner/%s]", refs, clusterName)
		}
	}
	check(t)

	// A provisioner that is run again (it died after its last call, say)
	// finds the cluster by name, ACTIVE, and changes nothing.
	out = run(t, runTimeout+time.Minute, provisioner, append(args, "-cluster", clusterName)...)
	if !strings.Contains(out, "created: false") {
		t.Errorf("the second run re-created the add-on:\n%s", out)
	}
	check(t)
}
