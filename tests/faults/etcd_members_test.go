// Package faults runs saltbush through failures of what it depends on.
package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestThreeMemberEtcdMemberLoss runs saltbush on a 3-member etcd cluster,
// stops one member, and checks that the API keeps working with nothing
// lost, then that the member rejoins.
func TestThreeMemberEtcdMemberLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, embedetcd.ClusterConfig{Dir: t.TempDir(), Size: 3, UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("start 3-member etcd: %v", err)
	}
	defer cluster.Close()

	srv := servertest.Start(t, servertest.WithEtcdEndpoints(cluster.Endpoints()))
	client := srv.EKS(t)
	create := func(name string) error {
		_, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
			Name:               aws.String(name),
			RoleArn:            aws.String("arn:aws:iam::000000000000:role/eks"),
			ResourcesVpcConfig: &types.VpcConfigRequest{},
		})
		return err
	}

	for i := 0; i < 5; i++ {
		if err := create(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatalf("create before member loss: %v", err)
		}
	}

	for _, lost := range []int{0, 1} {
		cluster.Stop(lost)
		// Two of three members keep a quorum: every call must succeed (the
		// client retries on the surviving members).
		for i := 0; i < 5; i++ {
			name := fmt.Sprintf("without-m%d-%d", lost, i)
			if err := create(name); err != nil {
				t.Fatalf("create %s with member %d down: %v", name, lost, err)
			}
			if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)}); err != nil {
				t.Fatalf("describe %s with member %d down: %v", name, lost, err)
			}
		}
		if err := cluster.Restart(ctx, lost); err != nil {
			t.Fatalf("restart member %d: %v", lost, err)
		}
	}

	var names []string
	p := eks.NewListClustersPaginator(client, &eks.ListClustersInput{MaxResults: aws.Int32(4)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		names = append(names, page.Clusters...)
	}
	if len(names) != 15 {
		t.Errorf("listed %d clusters, want 15: %v", len(names), names)
	}

	// Duplicates are still refused: exclusivity does not depend on which
	// member answered.
	wanterr.Type[*types.ResourceInUseException](t, create("before-0"))
}
