package sts_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/saltbush/saltbush/server/servertest"
)

// iamAs is an unmodified IAM client of the façade signing as c. IAM is
// global: the SDK signs it for us-east-1 whatever the façade's region.
func iamAs(srv *servertest.Server, c servertest.Creds) *iam.Client {
	return iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
}

// TestOpenIDConnectProviders: the cluster's issuer is its account's OIDC
// provider, as eksctl's IRSA check reads it with the Go SDK.
func TestOpenIDConnectProviders(t *testing.T) {
	w := newReviewWorld(t)
	ctx := ctxT(t)
	client := iamAs(w.srv, w.srv.Dev(t))
	wantARN := "arn:aws:iam::" + account + ":oidc-provider/" + strings.TrimPrefix(issuer, "https://")

	list, err := client.ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
	if err != nil {
		t.Fatalf("ListOpenIDConnectProviders: %v", err)
	}
	if len(list.OpenIDConnectProviderList) != 1 || aws.ToString(list.OpenIDConnectProviderList[0].Arn) != wantARN {
		t.Fatalf("providers = %+v, want one, %s", list.OpenIDConnectProviderList, wantARN)
	}

	got, err := client.GetOpenIDConnectProvider(ctx, &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(wantARN)})
	if err != nil {
		t.Fatalf("GetOpenIDConnectProvider: %v", err)
	}
	if aws.ToString(got.Url) != strings.TrimPrefix(issuer, "https://") {
		t.Errorf("Url = %q, want %q", aws.ToString(got.Url), strings.TrimPrefix(issuer, "https://"))
	}
	if strings.Join(got.ClientIDList, ",") != "sts.amazonaws.com" {
		t.Errorf("ClientIDList = %v, want [sts.amazonaws.com]", got.ClientIDList)
	}
	if len(got.ThumbprintList) != 1 || len(got.ThumbprintList[0]) != 40 {
		t.Errorf("ThumbprintList = %v, want the SHA-1 of the cluster CA", got.ThumbprintList)
	}
	if got.CreateDate == nil || time.Since(*got.CreateDate) > time.Hour {
		t.Errorf("CreateDate = %v, want the cluster's creation", got.CreateDate)
	}

	for _, tc := range []struct {
		name, arn, code string
		status          int
	}{
		{"another issuer", "arn:aws:iam::" + account + ":oidc-provider/oidc.other.saltbush.test/id/X", "NoSuchEntity", http.StatusNotFound},
		{"another account", "arn:aws:iam::111111111111:oidc-provider/" + strings.TrimPrefix(issuer, "https://"), "AccessDenied", http.StatusForbidden},
		{"not a provider ARN", "arn:aws:iam::" + account + ":role/deployer", "InvalidInput", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.GetOpenIDConnectProvider(ctx, &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(tc.arn)})
			queryError(t, err, tc.code, tc.status)
		})
	}

	t.Run("a principal without IAM permissions", func(t *testing.T) {
		_, err := iamAs(w.srv, w.alice).ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
		queryError(t, err, "AccessDenied", http.StatusForbidden)
	})
	t.Run("an IAM operation saltbush does not answer", func(t *testing.T) {
		_, err := client.ListRoles(ctx, &iam.ListRolesInput{})
		queryError(t, err, "InvalidAction", http.StatusBadRequest)
	})
}
