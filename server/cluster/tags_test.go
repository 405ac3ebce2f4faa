package cluster_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/server/tagging/tagtest"
)

// TestTagging runs the tagging suite against the cluster as a resource.
func TestTagging(t *testing.T) {
	srv := servertest.Start(t)
	var n atomic.Int64
	tagtest.Run(t, tagtest.Resource{
		EKS: srv.EKS(t),
		New: func(t *testing.T) string {
			return tagtest.Cluster(t, srv, fmt.Sprintf("tags-%d", n.Add(1)), types.AuthenticationModeApi)
		},
		Unknown: func(t *testing.T) []string {
			return []string{"arn:aws:eks:" + srv.Config.Cluster.Region + ":" + srv.Config.DevAccount + ":cluster/never-made"}
		},
	})
}
