package podidentity_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/server/tagging/tagtest"
)

// TestTagging runs the tagging suite against the pod identity association
// as a resource: each case an association on a cluster of its own.
func TestTagging(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	role := "arn:aws:iam::" + srv.Config.DevAccount + ":role/pods"
	var n atomic.Int64
	newAssociation := func(t *testing.T) string {
		t.Helper()
		cluster := fmt.Sprintf("tags-%d", n.Add(1))
		tagtest.Cluster(t, srv, cluster, types.AuthenticationModeApi)
		out, err := client.CreatePodIdentityAssociation(t.Context(), &eks.CreatePodIdentityAssociationInput{
			ClusterName: aws.String(cluster), Namespace: aws.String("apps"), ServiceAccount: aws.String("web"), RoleArn: aws.String(role)})
		if err != nil {
			t.Fatalf("CreatePodIdentityAssociation: %v", err)
		}
		return aws.ToString(out.Association.AssociationArn)
	}
	tagtest.Run(t, tagtest.Resource{
		EKS: client,
		New: newAssociation,
		Unknown: func(t *testing.T) []string {
			arn := newAssociation(t)
			cut := strings.LastIndex(arn, "/") + 1
			return []string{
				// An id never made, on a cluster that exists.
				arn[:cut] + podidentity.NewID(),
				// A cluster that does not exist.
				strings.Replace(arn, ":podidentityassociation/tags-", ":podidentityassociation/gone-", 1),
			}
		},
	})
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := podidentity.NewID()
		if len(id) != 19 || !strings.HasPrefix(id, "a-") || strings.Trim(id[2:], "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			t.Fatalf("NewID() = %q, want a- and 17 lowercase alphanumerics", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}
