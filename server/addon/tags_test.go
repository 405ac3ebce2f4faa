package addon_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/google/uuid"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/server/tagging/tagtest"
)

// TestTagging runs the tagging suite against the add-on as a resource:
// each case an add-on of a cluster of its own.
func TestTagging(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	var n atomic.Int64
	newAddon := func(t *testing.T) string {
		t.Helper()
		cluster := fmt.Sprintf("tags-%d", n.Add(1))
		tagtest.Cluster(t, srv, cluster, types.AuthenticationModeApi)
		out, err := client.CreateAddon(t.Context(), &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("coredns")})
		if err != nil {
			t.Fatalf("CreateAddon: %v", err)
		}
		return aws.ToString(out.Addon.AddonArn)
	}
	tagtest.Run(t, tagtest.Resource{
		EKS: client,
		New: newAddon,
		Unknown: func(t *testing.T) []string {
			arn := newAddon(t)
			cluster := arn[strings.Index(arn, ":addon/")+len(":addon/") : strings.LastIndex(arn, "/coredns/")]
			return []string{
				// An earlier (or later) incarnation of an add-on that exists.
				arn[:strings.LastIndex(arn, "/")+1] + uuid.NewString(),
				// An add-on the cluster does not have.
				strings.Replace(arn, "/coredns/", "/kube-proxy/", 1),
				// A cluster that does not exist.
				strings.Replace(arn, ":addon/"+cluster+"/", ":addon/never-made/", 1),
			}
		},
	})
}
