package conformance

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/server/servertest"
)

// TestDevProfileEndpoints: the AWS profile the first start writes sends
// EKS calls to saltbush and nothing else, so `aws eks get-token` with that
// profile presigns a URL to STS (which the cluster accepts), not to
// saltbush's façade (which it would refuse).
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
	if u.Scheme != "https" || u.Host != "sts.us-east-1.amazonaws.com" {
		t.Errorf("STS through the profile presigns %s://%s, want https://sts.us-east-1.amazonaws.com", u.Scheme, u.Host)
	}
}
