// Package tagtest is the behavioural suite every taggable resource passes
// (as Kubernetes' storage/testing suite is run against every storage
// implementation): TagResource, UntagResource and ListTagsForResource as
// the AWS model specifies them, through the unmodified AWS SDK against a
// real in-process saltbush (server/servertest). Each resource package runs
// Run with a Resource that makes resources of its type.
package tagtest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Resource is one taggable resource type under test.
type Resource struct {
	// EKS is a client of the account that owns the resources.
	EKS *eks.Client
	// New makes a fresh resource of the type and returns its ARN; each
	// call gets one of its own, so the cases run in parallel.
	New func(t *testing.T) string
	// Unknown returns ARNs of the type, of the client's account and
	// region, that name nothing: a name never used, the uuid of an earlier
	// incarnation.
	Unknown func(t *testing.T) []string
}

// Run runs the suite against r.
func Run(t *testing.T, r Resource) {
	s := suite{r: r}
	cases := []struct {
		name string
		run  func(t *testing.T, arn string)
	}{
		{"tag list untag", s.tagListUntag},
		{"idempotent", s.idempotent},
		{"at most 50 tags", s.fiftyTags},
		{"key and value lengths", s.lengths},
		{"aws: prefix is reserved", s.reserved},
		{"untag at most 50 keys", s.untagFifty},
		{"another account's resource is unknown", s.otherAccount},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, r.New(t))
		})
	}
	t.Run("unknown resource", func(t *testing.T) {
		t.Parallel()
		for _, arn := range r.Unknown(t) {
			s.unknown(t, arn)
		}
	})
}

type suite struct{ r Resource }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (s suite) list(t *testing.T, arn string) map[string]string {
	t.Helper()
	out, err := s.r.EKS.ListTagsForResource(ctxT(t), &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil {
		t.Fatalf("ListTagsForResource %s: %v", arn, err)
	}
	return out.Tags
}

func (s suite) tag(t *testing.T, arn string, tags map[string]string) error {
	_, err := s.r.EKS.TagResource(ctxT(t), &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: tags})
	return err
}

func (s suite) untag(t *testing.T, arn string, keys ...string) error {
	_, err := s.r.EKS.UntagResource(ctxT(t), &eks.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: keys})
	return err
}

func (s suite) mustTag(t *testing.T, arn string, tags map[string]string) {
	t.Helper()
	if err := s.tag(t, arn, tags); err != nil {
		t.Fatalf("TagResource %v: %v", tags, err)
	}
}

func (s suite) mustUntag(t *testing.T, arn string, keys ...string) {
	t.Helper()
	if err := s.untag(t, arn, keys...); err != nil {
		t.Fatalf("UntagResource %v: %v", keys, err)
	}
}

func (s suite) want(t *testing.T, arn string, want map[string]string) {
	t.Helper()
	if got := s.list(t, arn); !maps.Equal(got, want) {
		t.Errorf("tags = %v, want %v", got, want)
	}
}

// badRequest asserts a refused tag change: BadRequestException (the tag
// operations' model), and the tags unchanged.
func (s suite) badRequest(t *testing.T, arn string, err error, before map[string]string) {
	t.Helper()
	wanterr.Type[*types.BadRequestException](t, err)
	s.want(t, arn, before)
}

// tagListUntag: tags are added and overwritten by key, listed, and
// removed by key.
func (s suite) tagListUntag(t *testing.T, arn string) {
	s.want(t, arn, map[string]string{})
	s.mustTag(t, arn, map[string]string{"env": "dev", "team": "platform"})
	s.want(t, arn, map[string]string{"env": "dev", "team": "platform"})
	s.mustTag(t, arn, map[string]string{"env": "prod", "tier": ""})
	s.want(t, arn, map[string]string{"env": "prod", "team": "platform", "tier": ""})
	s.mustUntag(t, arn, "team", "tier")
	s.want(t, arn, map[string]string{"env": "prod"})
}

// idempotent: the same tags twice, and untagging a key that is not there,
// succeed and change nothing more.
func (s suite) idempotent(t *testing.T, arn string) {
	tags := map[string]string{"env": "dev"}
	s.mustTag(t, arn, tags)
	s.mustTag(t, arn, tags)
	s.want(t, arn, tags)
	s.mustUntag(t, arn, "absent")
	s.want(t, arn, tags)
	s.mustUntag(t, arn, "env")
	s.mustUntag(t, arn, "env")
	s.want(t, arn, map[string]string{})
}

func numbered(from, n int) map[string]string {
	tags := map[string]string{}
	for i := from; i < from+n; i++ {
		tags[fmt.Sprintf("k%02d", i)] = "v"
	}
	return tags
}

// fiftyTags: a resource holds at most 50 tags, counted after the change
// (a request that would pass the limit changes nothing); overwriting a
// key at the limit is no new tag.
func (s suite) fiftyTags(t *testing.T, arn string) {
	s.mustTag(t, arn, numbered(0, 30))
	s.badRequest(t, arn, s.tag(t, arn, numbered(30, 21)), numbered(0, 30))
	s.mustTag(t, arn, numbered(30, 20))
	s.want(t, arn, numbered(0, 50))
	s.badRequest(t, arn, s.tag(t, arn, map[string]string{"one-more": "v"}), numbered(0, 50))
	s.mustTag(t, arn, map[string]string{"k00": "changed"})
	if got := s.list(t, arn)["k00"]; got != "changed" {
		t.Errorf("k00 = %q after overwriting it at the limit", got)
	}
}

// lengths: keys of 1–128 characters, values of 0–256 (characters, not
// bytes).
func (s suite) lengths(t *testing.T, arn string) {
	key, value := strings.Repeat("k", 128), strings.Repeat("é", 256)
	s.mustTag(t, arn, map[string]string{key: value})
	before := map[string]string{key: value}
	s.badRequest(t, arn, s.tag(t, arn, map[string]string{key + "k": "v"}), before)
	s.badRequest(t, arn, s.tag(t, arn, map[string]string{"k": value + "é"}), before)
}

// reserved: keys starting with aws: (in any case) are AWS's own; they can
// be neither set nor removed.
func (s suite) reserved(t *testing.T, arn string) {
	s.mustTag(t, arn, map[string]string{"env": "dev"})
	before := map[string]string{"env": "dev"}
	for _, k := range []string{"aws:created", "AWS:created", "Aws:x"} {
		s.badRequest(t, arn, s.tag(t, arn, map[string]string{k: "v"}), before)
		s.badRequest(t, arn, s.untag(t, arn, k), before)
	}
}

// untagFifty: UntagResource names at most 50 keys.
func (s suite) untagFifty(t *testing.T, arn string) {
	s.mustTag(t, arn, map[string]string{"env": "dev"})
	keys := make([]string, 0, 51)
	for k := range numbered(0, 51) {
		keys = append(keys, k)
	}
	s.badRequest(t, arn, s.untag(t, arn, keys...), map[string]string{"env": "dev"})
	s.mustUntag(t, arn, keys[:50]...)
}

// otherAccount: the same ARN in another account names nothing the caller
// can see, and says so as it would for an absent resource.
func (s suite) otherAccount(t *testing.T, arn string) {
	parts := strings.SplitN(arn, ":", 6)
	parts[4] = "111122223333"
	s.unknown(t, strings.Join(parts, ":"))
	s.want(t, arn, map[string]string{})
}

// unknown: every operation on an ARN that names nothing is
// NotFoundException.
func (s suite) unknown(t *testing.T, arn string) {
	t.Helper()
	_, err := s.r.EKS.ListTagsForResource(ctxT(t), &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	wanterr.Type[*types.NotFoundException](t, err)
	wanterr.Type[*types.NotFoundException](t, s.tag(t, arn, map[string]string{"env": "dev"}))
	wanterr.Type[*types.NotFoundException](t, s.untag(t, arn, "env"))
}

// Cluster creates a cluster of the dev account in the given
// authentication mode, ACTIVE, and returns its ARN: what add-ons and
// access entries live on.
func Cluster(t *testing.T, srv *servertest.Server, name string, mode types.AuthenticationMode) string {
	t.Helper()
	ctx := ctxT(t)
	account := srv.Config.DevAccount
	out, err := srv.EKS(t).CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String(name), Version: aws.String("1.35"), RoleArn: aws.String("arn:aws:iam::" + account + ":role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
		AccessConfig:       &types.CreateAccessConfigRequest{AuthenticationMode: mode},
	})
	if err != nil {
		t.Fatalf("CreateCluster %s: %v", name, err)
	}
	if _, err := controlv1.NewClusterControlServiceClient(srv.GRPC(t)).SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: account, Name: name}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("cluster %s ACTIVE: %v", name, err)
	}
	return aws.ToString(out.Cluster.Arn)
}
