package access_test

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

// TestTagging runs the tagging suite against the access entry as a
// resource: each case an entry on a cluster of its own.
func TestTagging(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	role := "arn:aws:iam::" + srv.Config.DevAccount + ":role/tagged"
	if _, err := srv.IAM().CreatePrincipal(t.Context(), role); err != nil {
		t.Fatalf("CreatePrincipal: %v", err)
	}
	var n atomic.Int64
	newEntry := func(t *testing.T) string {
		t.Helper()
		cluster := fmt.Sprintf("tags-%d", n.Add(1))
		tagtest.Cluster(t, srv, cluster, types.AuthenticationModeApi)
		out, err := client.CreateAccessEntry(t.Context(), &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role)})
		if err != nil {
			t.Fatalf("CreateAccessEntry: %v", err)
		}
		return aws.ToString(out.AccessEntry.AccessEntryArn)
	}
	tagtest.Run(t, tagtest.Resource{
		EKS: client,
		New: newEntry,
		Unknown: func(t *testing.T) []string {
			arn := newEntry(t)
			return []string{
				// An earlier (or later) incarnation of an entry that exists.
				arn[:strings.LastIndex(arn, "/")+1] + uuid.NewString(),
				// A principal with no entry.
				strings.Replace(arn, "/tagged/", "/untagged/", 1),
			}
		},
	})
}
