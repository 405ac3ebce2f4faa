package conformance

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/server/servertest"
)

// TestDevProfileEndpoints: the AWS profile the first start writes sends
// EKS, STS and IAM calls to saltbush's façade (which answers all three,
// server/sts), so `aws eks get-token` with that profile presigns its URL
// for the façade, whose own address token review accepts
// (server/token's HTTPHosts), and GetCallerIdentity answers the dev user.
func TestDevProfileEndpoints(t *testing.T) {
	srv := servertest.Start(t)
	dir := filepath.Join(srv.Config.DataDir, "aws")
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithSharedConfigFiles([]string{filepath.Join(dir, "config")}),
		config.WithSharedCredentialsFiles([]string{filepath.Join(dir, "credentials")}),
		config.WithSharedConfigProfile("saltbush"))
	if err != nil {
		t.Fatalf("load the written profile: %v", err)
	}
	if _, err := eks.NewFromConfig(cfg).ListClusters(ctxT(t), &eks.ListClustersInput{}); err != nil {
		t.Errorf("EKS through the profile's endpoint: %v", err)
	}
	req, err := sts.NewPresignClient(sts.NewFromConfig(cfg)).PresignGetCallerIdentity(ctxT(t), &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Scheme + "://" + u.Host; got != srv.URL {
		t.Errorf("STS through the profile presigns %s, want the façade %s", got, srv.URL)
	}
	id, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctxT(t), &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity through the profile: %v", err)
	}
	if got, want := aws.ToString(id.Arn), srv.Dev(t).PrincipalARN; got != want {
		t.Errorf("GetCallerIdentity Arn = %s, want the dev user %s", got, want)
	}
}
