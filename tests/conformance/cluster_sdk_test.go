package conformance

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const roleARN = "arn:aws:iam::000000000000:role/eks-cluster"

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createInput(name string) *eks.CreateClusterInput {
	return &eks.CreateClusterInput{
		Name:               aws.String(name),
		RoleArn:            aws.String(roleARN),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	}
}

func TestClusterLifecycleWithSDK(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := ctxT(t)

	before := time.Now().Add(-time.Second)
	out, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name:               aws.String("prod-1"),
		Version:            aws.String("1.35"),
		RoleArn:            aws.String(roleARN),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a"}, EndpointPrivateAccess: aws.Bool(true)},
		Tags:               map[string]string{"team": "platform"},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: types.AuthenticationModeApi},
		ComputeConfig:      &types.ComputeConfigRequest{Enabled: aws.Bool(true), NodePools: []string{"system"}, NodeRoleArn: aws.String("arn:aws:iam::000000000000:role/node")},
		StorageConfig:      &types.StorageConfigRequest{BlockStorage: &types.BlockStorage{Enabled: aws.Bool(true)}},
		Logging: &types.Logging{ClusterLogging: []types.LogSetup{
			{Types: []types.LogType{types.LogTypeApi, types.LogTypeAudit}, Enabled: aws.Bool(true)},
		}},
	})
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	c := out.Cluster
	if got, want := aws.ToString(c.Arn), "arn:aws:eks:us-east-1:000000000000:cluster/prod-1"; got != want {
		t.Errorf("arn = %q, want %q", got, want)
	}
	if c.Status != types.ClusterStatusCreating {
		t.Errorf("status = %q, want CREATING", c.Status)
	}
	if c.CreatedAt == nil || c.CreatedAt.Before(before) || c.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("createdAt = %v, want about now", c.CreatedAt)
	}
	if aws.ToString(c.Version) != "1.35" || c.Tags["team"] != "platform" || aws.ToString(c.RoleArn) != roleARN {
		t.Errorf("echoed fields wrong: version=%q tags=%v roleArn=%q", aws.ToString(c.Version), c.Tags, aws.ToString(c.RoleArn))
	}
	if c.ResourcesVpcConfig == nil || !c.ResourcesVpcConfig.EndpointPrivateAccess || !c.ResourcesVpcConfig.EndpointPublicAccess {
		t.Errorf("resourcesVpcConfig = %+v, want private and (default) public access", c.ResourcesVpcConfig)
	}
	if c.AccessConfig == nil || c.AccessConfig.AuthenticationMode != types.AuthenticationModeApi ||
		!aws.ToBool(c.AccessConfig.BootstrapClusterCreatorAdminPermissions) {
		t.Errorf("accessConfig = %+v", c.AccessConfig)
	}
	// AWS's normalised form: the enabled types, then the rest disabled.
	if c.Logging == nil || len(c.Logging.ClusterLogging) != 2 ||
		fmt.Sprint(c.Logging.ClusterLogging[0].Types) != "[api audit]" || !aws.ToBool(c.Logging.ClusterLogging[0].Enabled) ||
		fmt.Sprint(c.Logging.ClusterLogging[1].Types) != "[authenticator controllerManager scheduler]" || aws.ToBool(c.Logging.ClusterLogging[1].Enabled) {
		t.Errorf("logging = %+v", c.Logging)
	}
	if c.ComputeConfig == nil || !aws.ToBool(c.ComputeConfig.Enabled) || aws.ToString(c.ComputeConfig.NodeRoleArn) != "arn:aws:iam::000000000000:role/node" ||
		c.StorageConfig == nil || c.StorageConfig.BlockStorage == nil || !aws.ToBool(c.StorageConfig.BlockStorage.Enabled) {
		t.Errorf("Auto Mode configuration not echoed: compute=%+v storage=%+v", c.ComputeConfig, c.StorageConfig)
	}
	if c.Id != nil {
		t.Errorf("id = %q; AWS sends one only for a local cluster on an Outpost", aws.ToString(c.Id))
	}

	desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("prod-1")})
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if aws.ToString(desc.Cluster.Arn) != aws.ToString(c.Arn) || !desc.Cluster.CreatedAt.Equal(*c.CreatedAt) {
		t.Errorf("describe differs from create: arn %q vs %q, createdAt %v vs %v",
			aws.ToString(desc.Cluster.Arn), aws.ToString(c.Arn), desc.Cluster.CreatedAt, c.CreatedAt)
	}
	if aws.ToString(desc.Cluster.Version) != "1.35" {
		t.Errorf("version = %q", aws.ToString(desc.Cluster.Version))
	}

	// The provisioner marks it ACTIVE through the internal API.
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: "000000000000", Name: "prod-1"}
	caData := testCAData(t)
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: ref, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.10:6443", CertificateAuthorityData: caData, PlatformVersion: "k3s.1",
	}); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
	if err := eks.NewClusterActiveWaiter(client).Wait(ctx, &eks.DescribeClusterInput{Name: aws.String("prod-1")}, 30*time.Second,
		func(o *eks.ClusterActiveWaiterOptions) {
			o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
		}); err != nil {
		t.Fatalf("ClusterActive waiter: %v", err)
	}
	// What update-kubeconfig reads is there.
	active, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("prod-1")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(active.Cluster.Endpoint) != "https://10.0.0.10:6443" || active.Cluster.CertificateAuthority == nil ||
		aws.ToString(active.Cluster.CertificateAuthority.Data) != caData || aws.ToString(active.Cluster.PlatformVersion) != "k3s.1" {
		t.Errorf("ACTIVE cluster endpoint=%q ca=%v platform=%q", aws.ToString(active.Cluster.Endpoint),
			active.Cluster.CertificateAuthority, aws.ToString(active.Cluster.PlatformVersion))
	}

	list, err := client.ListClusters(ctx, &eks.ListClustersInput{})
	if err != nil {
		t.Fatalf("ListClusters: %v", err)
	}
	if len(list.Clusters) != 1 || list.Clusters[0] != "prod-1" || list.NextToken != nil {
		t.Errorf("ListClusters = %v next=%v", list.Clusters, list.NextToken)
	}

	del, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("prod-1")})
	if err != nil {
		t.Fatalf("DeleteCluster: %v", err)
	}
	if del.Cluster.Status != types.ClusterStatusDeleting {
		t.Errorf("status after delete = %q, want DELETING", del.Cluster.Status)
	}
	// Deleting again is harmless and still DELETING.
	if again, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("prod-1")}); err != nil || again.Cluster.Status != types.ClusterStatusDeleting {
		t.Errorf("second DeleteCluster = %v, %v", again, err)
	}
	// Teardown confirmed: the purge removes it, and the SDK's waiter agrees.
	if _, err := control.FinalizeDeletion(ctx, &controlv1.FinalizeDeletionRequest{Cluster: ref}); err != nil {
		t.Fatalf("FinalizeDeletion: %v", err)
	}
	if err := eks.NewClusterDeletedWaiter(client).Wait(ctx, &eks.DescribeClusterInput{Name: aws.String("prod-1")}, 30*time.Second,
		func(o *eks.ClusterDeletedWaiterOptions) {
			o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
		}); err != nil {
		t.Fatalf("ClusterDeleted waiter: %v", err)
	}
}

func TestClusterErrorsWithSDK(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := ctxT(t)
	if _, err := client.CreateCluster(ctx, createInput("taken")); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	manyTags := map[string]string{}
	for i := 0; i < 51; i++ {
		manyTags[fmt.Sprintf("k%d", i)] = "v"
	}

	tests := []struct {
		name    string
		call    func() error
		want    error // the typed SDK error
		message string
	}{
		{
			name: "duplicate name",
			call: func() error { _, err := client.CreateCluster(ctx, createInput("taken")); return err },
			want: &types.ResourceInUseException{}, message: "Cluster already exists with name: taken",
		},
		{
			name: "describe unknown",
			call: func() error {
				_, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("nope")})
				return err
			},
			want: &types.ResourceNotFoundException{}, message: "No cluster found for name: nope.",
		},
		{
			name: "delete unknown",
			call: func() error {
				_, err := client.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("nope")})
				return err
			},
			want: &types.ResourceNotFoundException{}, message: "No cluster found for name: nope.",
		},
		{
			name: "name starts with a dash",
			call: func() error { _, err := client.CreateCluster(ctx, createInput("-bad")); return err },
			want: &types.InvalidParameterException{},
		},
		{
			name: "name with a space",
			call: func() error { _, err := client.CreateCluster(ctx, createInput("bad name")); return err },
			want: &types.InvalidParameterException{},
		},
		{
			name: "name of 101 characters",
			call: func() error { _, err := client.CreateCluster(ctx, createInput(strings.Repeat("a", 101))); return err },
			want: &types.InvalidParameterException{},
		},
		{
			name: "describe invalid name",
			call: func() error {
				_, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("bad.name")})
				return err
			},
			want: &types.ClientException{}, // the validation exception DescribeCluster's model lists
		},
		{
			name: "unsupported version",
			call: func() error {
				in := createInput("v")
				in.Version = aws.String("1.10")
				_, err := client.CreateCluster(ctx, in)
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "role ARN that is not a role",
			call: func() error {
				in := createInput("r")
				in.RoleArn = aws.String("arn:aws:iam::000000000000:user/alice")
				_, err := client.CreateCluster(ctx, in)
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "51 tags",
			call: func() error {
				in := createInput("t")
				in.Tags = manyTags
				_, err := client.CreateCluster(ctx, in)
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "reserved tag prefix",
			call: func() error {
				in := createInput("t")
				in.Tags = map[string]string{"aws:owner": "me"}
				_, err := client.CreateCluster(ctx, in)
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "unknown log type",
			call: func() error {
				in := createInput("l")
				in.Logging = &types.Logging{ClusterLogging: []types.LogSetup{{Types: []types.LogType{"everything"}, Enabled: aws.Bool(true)}}}
				_, err := client.CreateCluster(ctx, in)
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "maxResults 0",
			call: func() error {
				_, err := client.ListClusters(ctx, &eks.ListClustersInput{MaxResults: aws.Int32(0)})
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "maxResults 101",
			call: func() error {
				_, err := client.ListClusters(ctx, &eks.ListClustersInput{MaxResults: aws.Int32(101)})
				return err
			},
			want: &types.InvalidParameterException{},
		},
		{
			name: "tampered nextToken",
			call: func() error {
				_, err := client.ListClusters(ctx, &eks.ListClustersInput{NextToken: aws.String("eyJ2IjoxfQAAAAAAAAAAAAAAAAAAAAAA")})
				return err
			},
			want: &types.InvalidParameterException{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wanterr.Like(t, err, tc.want)
			if tc.message != "" && !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not contain %q", err, tc.message)
			}
		})
	}

	// Nothing the failed calls tried to create exists.
	list, err := client.ListClusters(ctx, &eks.ListClustersInput{})
	if err != nil {
		t.Fatalf("ListClusters: %v", err)
	}
	if len(list.Clusters) != 1 || list.Clusters[0] != "taken" {
		t.Errorf("clusters after failed calls = %v, want [taken]", list.Clusters)
	}

	// The modelled member comes through.
	_, err = client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("nope")})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || aws.ToString(nf.ClusterName) != "nope" {
		t.Errorf("ResourceNotFoundException.ClusterName = %v (err %v), want nope", nf, err)
	}
}

func TestListClustersPagingWithSDK(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := ctxT(t)
	var want []string
	for i := 0; i < 7; i++ {
		name := fmt.Sprintf("c%02d", i)
		want = append(want, name)
		if _, err := client.CreateCluster(ctx, createInput(name)); err != nil {
			t.Fatalf("CreateCluster %s: %v", name, err)
		}
	}
	var got []string
	var pages []int
	p := eks.NewListClustersPaginator(client, &eks.ListClustersInput{MaxResults: aws.Int32(3)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		pages = append(pages, len(page.Clusters))
		got = append(got, page.Clusters...)
	}
	if fmt.Sprint(pages) != "[3 3 1]" {
		t.Errorf("page sizes = %v, want [3 3 1]", pages)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("clusters = %v, want %v", got, want)
	}
	// Exactly a page's worth: no empty trailing page.
	first, err := client.ListClusters(ctx, &eks.ListClustersInput{MaxResults: aws.Int32(7)})
	if err != nil || len(first.Clusters) != 7 || first.NextToken != nil {
		t.Errorf("ListClusters(7) = %v next=%v err=%v", first.Clusters, first.NextToken, err)
	}
	// A token cannot be altered.
	page, err := client.ListClusters(ctx, &eks.ListClustersInput{MaxResults: aws.Int32(2)})
	if err != nil || page.NextToken == nil {
		t.Fatalf("ListClusters(2) = %v, %v", page, err)
	}
	tok := []byte(*page.NextToken)
	tok[len(tok)/2] ^= 1
	_, err = client.ListClusters(ctx, &eks.ListClustersInput{NextToken: aws.String(string(tok))})
	var ip *types.InvalidParameterException
	if !errors.As(err, &ip) {
		t.Errorf("altered token: err = %v, want InvalidParameterException", err)
	}
}

func TestConcurrentCreateOneWinner(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := ctxT(t)
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, inUse := 0, 0
	var other []error
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := client.CreateCluster(ctx, createInput("contended"))
			mu.Lock()
			defer mu.Unlock()
			var riu *types.ResourceInUseException
			switch {
			case err == nil:
				wins++
			case errors.As(err, &riu):
				inUse++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || inUse != n-1 || len(other) > 0 {
		t.Errorf("wins=%d inUse=%d other=%v, want 1 winner and %d ResourceInUseException", wins, inUse, other, n-1)
	}
}

func TestCreateClusterIdempotencyWithSDK(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	ctx := ctxT(t)

	in := createInput("idem")
	in.ClientRequestToken = aws.String("token-1")
	first, err := client.CreateCluster(ctx, in)
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	// An SDK retry of a create whose response was lost: same token, same
	// parameters, gets the cluster back rather than an error.
	again, err := client.CreateCluster(ctx, in)
	if err != nil {
		t.Fatalf("retried CreateCluster: %v", err)
	}
	if !again.Cluster.CreatedAt.Equal(*first.Cluster.CreatedAt) {
		t.Errorf("retry returned a cluster created at %v, want the first one's %v", again.Cluster.CreatedAt, first.Cluster.CreatedAt)
	}
	// Same token, different parameters: refused, nothing changes.
	changed := createInput("idem")
	changed.ClientRequestToken = aws.String("token-1")
	changed.Version = aws.String("1.33")
	_, err = client.CreateCluster(ctx, changed)
	var ip *types.InvalidParameterException
	if !errors.As(err, &ip) {
		t.Fatalf("token reuse with other parameters: err = %v, want InvalidParameterException", err)
	}
	desc, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("idem")})
	if err != nil || aws.ToString(desc.Cluster.Version) != aws.ToString(first.Cluster.Version) {
		t.Errorf("cluster changed by refused request: %v, %v", desc, err)
	}
	// A different token for the same name is an ordinary duplicate.
	other := createInput("idem")
	other.ClientRequestToken = aws.String("token-2")
	_, err = client.CreateCluster(ctx, other)
	var riu *types.ResourceInUseException
	if !errors.As(err, &riu) {
		t.Errorf("new token, existing name: err = %v, want ResourceInUseException", err)
	}
}

// testCAData returns a base64 PEM CA certificate.
func testCAData(t *testing.T) string {
	t.Helper()
	return base64.StdEncoding.EncodeToString(servertest.NewPKI(t, t.TempDir()).CAPEM)
}
