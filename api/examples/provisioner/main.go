// Command provisioner is an example of an internal service calling
// saltbush's gRPC API through github.com/saltbush/saltbush/api/client, and
// nothing else of saltbush: it plays the cluster provisioner's part once.
//
// It finds a cluster that the EKS façade created (CreateCluster leaves it
// CREATING: provisioning its control-plane VMs is the provisioner's job),
// records one control-plane instance as a member, marks the cluster ACTIVE
// with its Kubernetes API endpoint and CA, ensures an add-on by reference
// (as a node-group controller would), and waits until the add-on can be
// read back. Every step is safe to repeat, so a provisioner that died half
// way is simply run again.
//
// Its service certificate and policy (policy.json beside this file):
//
//	saltbush admin cert issue --service provisioner --out-dir ./pki
//	saltbush admin service put-policy provisioner policy.json
//	go run ./examples/provisioner -endpoints 127.0.0.1:9090 -cert-dir ./pki -cluster demo
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/api/client"
	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// options are the command line.
type options struct {
	endpoints  string
	certDir    string
	certName   string
	serverName string
	account    string
	cluster    string
	instance   string
	apiURL     string
	caFile     string
	addon      string
	timeout    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.endpoints, "endpoints", "127.0.0.1:9090", "saltbush gRPC addresses, host:port, comma-separated, tried in order")
	flag.StringVar(&o.certDir, "cert-dir", "./pki", "directory with ca.crt, NAME.crt and NAME.key (saltbush admin cert issue --out-dir)")
	flag.StringVar(&o.certName, "cert-name", "provisioner", "NAME of the certificate in -cert-dir: the service name it was issued for")
	flag.StringVar(&o.serverName, "server-name", "", "name to verify saltbush's certificate against (default: each endpoint's host)")
	flag.StringVar(&o.account, "account", "000000000000", "account that owns the cluster")
	flag.StringVar(&o.cluster, "cluster", "", "cluster to provision (default: the account's first CREATING cluster)")
	flag.StringVar(&o.instance, "instance", "i-0123456789abcdef0", "id of the control-plane instance to record as a member")
	flag.StringVar(&o.apiURL, "api-endpoint", "https://10.0.0.1:6443", "https URL of the cluster's Kubernetes API")
	flag.StringVar(&o.caFile, "ca-file", "", "PEM file of the cluster's CA (default: -cert-dir's ca.crt, a stand-in)")
	flag.StringVar(&o.addon, "addon", "saltbush-noop", "add-on to ensure on the cluster")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "deadline of the whole run")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "provisioner:", err)
		os.Exit(1)
	}
}

// run is the whole provisioning, within o.timeout and until SIGINT or
// SIGTERM.
func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	caFile := o.caFile
	if caFile == "" {
		caFile = filepath.Join(o.certDir, "ca.crt")
	}
	caPEM, err := os.ReadFile(caFile) //nolint:gosec // G304: the CA file the operator names on the command line
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}

	c, err := client.New(ctx, client.Config{
		Endpoints:  strings.Split(o.endpoints, ","),
		CertDir:    o.certDir,
		CertName:   o.certName,
		ServerName: o.serverName,
		Account:    o.account,
	})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	name := o.cluster
	if name == "" {
		if name, err = firstCreating(ctx, c); err != nil {
			return err
		}
	}
	got, err := c.ClusterControl.GetCluster(ctx, &controlv1.GetClusterRequest{
		Cluster: &controlv1.ClusterRef{AccountId: o.account, Name: name},
	})
	if err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	info := got.GetCluster()
	switch info.GetStatus() {
	case controlv1.ClusterStatus_CLUSTER_STATUS_CREATING:
	case controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE:
		// A run that stopped after SetStatus: the rest is repeated.
	default:
		return fmt.Errorf("cluster %s is %s: only a CREATING cluster is provisioned", name, statusName(info.GetStatus()))
	}
	fmt.Printf("cluster %s (uid %s) is %s\n", name, info.GetUid(), statusName(info.GetStatus()))

	// The uid pins every call to this incarnation: if the cluster is
	// deleted and created again meanwhile, the calls fail rather than
	// touch the new one.
	ref := &controlv1.ClusterRef{AccountId: o.account, Name: name, Uid: info.GetUid()}
	added, err := c.ClusterControl.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: o.instance})
	if err != nil {
		return fmt.Errorf("add member %s to %s: %w", o.instance, name, err)
	}
	fmt.Printf("members of %s: %s\n", name, strings.Join(added.GetCluster().GetMembers(), ", "))

	set, err := c.ClusterControl.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster:                  ref,
		Status:                   controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint:                 o.apiURL,
		CertificateAuthorityData: base64.StdEncoding.EncodeToString(caPEM),
	})
	if err != nil {
		return fmt.Errorf("mark %s ACTIVE: %w", name, err)
	}
	fmt.Printf("cluster %s is %s at %s\n", name, statusName(set.GetCluster().GetStatus()), set.GetCluster().GetEndpoint())

	// The reference names who holds the add-on: ReleaseAddon with the
	// same reference gives it up, and the add-on goes with its last one.
	reference := "provisioner/" + name
	ensured, err := c.AddonControl.EnsureAddon(ctx, &controlv1.EnsureAddonRequest{Cluster: ref, AddonName: o.addon, Reference: reference})
	if err != nil {
		return fmt.Errorf("ensure add-on %s on %s: %w", o.addon, name, err)
	}
	fmt.Printf("add-on %s %s for %s (created: %t)\n", o.addon, ensured.GetAddon().GetStatus(), reference, ensured.GetCreated())

	addon, err := waitForAddon(ctx, c, name, o.addon)
	if err != nil {
		return err
	}
	fmt.Printf("add-on %s is %s: %s\n", addon.GetAddonName(), addon.GetStatus(), addon.GetAddonArn())
	return nil
}

// firstCreating is the first cluster of the account, in ListClusters'
// order, whose status is CREATING.
func firstCreating(ctx context.Context, c *client.Client) (string, error) {
	token := ""
	for {
		page, err := c.Clusters.ListClusters(ctx, &eksv1.ListClustersRequest{NextToken: token})
		if err != nil {
			return "", fmt.Errorf("list clusters: %w", err)
		}
		for _, name := range page.GetClusters() {
			d, err := c.Clusters.DescribeCluster(ctx, &eksv1.DescribeClusterRequest{Name: name})
			if status.Code(err) == codes.NotFound {
				continue // deleted since the listing
			}
			if err != nil {
				return "", fmt.Errorf("describe cluster %s: %w", name, err)
			}
			if d.GetCluster().GetStatus() == "CREATING" {
				return name, nil
			}
		}
		if token = page.GetNextToken(); token == "" {
			return "", errors.New("no cluster of the account is CREATING")
		}
	}
}

// waitForAddon reads the add-on through the EKS API until it is there,
// polling with a growing pause, until ctx ends. EnsureAddon has written
// it, and the replica that answered reads its own writes at once; the
// wait covers a call that failed over to a replica whose view has not
// caught up yet (docs/architecture.md, "Read view").
func waitForAddon(ctx context.Context, c *client.Client, cluster, name string) (*eksv1.Addon, error) {
	pause := 50 * time.Millisecond
	for {
		d, err := c.Addons.DescribeAddon(ctx, &eksv1.DescribeAddonRequest{ClusterName: cluster, AddonName: name})
		if err == nil {
			return d.GetAddon(), nil
		}
		if status.Code(err) != codes.NotFound {
			return nil, fmt.Errorf("describe add-on %s of %s: %w", name, cluster, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("add-on %s of %s: not there before the deadline: %w", name, cluster, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// statusName is CREATING for CLUSTER_STATUS_CREATING.
func statusName(s controlv1.ClusterStatus) string {
	return strings.TrimPrefix(s.String(), "CLUSTER_STATUS_")
}
