// Package sts_test drives saltbush's query-protocol endpoint (STS and IAM's
// OIDC provider reads, server/sts) with real clients: the AWS SDK for Go v2
// (service/sts, service/iam), the AWS CLI v1 and botocore, against a real
// in-process saltbush with real SigV4.
package sts_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/server/servertest"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stsAs is an unmodified STS client of the façade signing as c.
func stsAs(srv *servertest.Server, c servertest.Creds) *sts.Client {
	return sts.New(sts.Options{
		Region:       srv.Config.Cluster.Region,
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
}

func TestGetCallerIdentityUser(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	dev := srv.Dev(t)
	out, err := stsAs(srv, dev).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity: %v", err)
	}
	if got := aws.ToString(out.Arn); got != dev.PrincipalARN {
		t.Errorf("Arn = %q, want %q", got, dev.PrincipalARN)
	}
	if got := aws.ToString(out.Account); got != dev.AccountID {
		t.Errorf("Account = %q, want %q", got, dev.AccountID)
	}
	if got := aws.ToString(out.UserId); !strings.HasPrefix(got, "AIDA") || len(got) != 21 {
		t.Errorf("UserId = %q, want AIDA and 17 characters", got)
	}
}
