package sts_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// authOneAttempt keeps the SDK from retrying a refused request.
func authOneAttempt(o *eks.Options) { o.RetryMaxAttempts = 1 }

func TestSessionExpires(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{
		RoleArn: aws.String(roleARN), RoleSessionName: aws.String("short"), DurationSeconds: aws.Int32(900),
	})
	if _, err := w.srv.EKSAs(t, sess).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters within the session: %v", err)
	}
	// The key store's clock passes the expiry; the signatures stay fresh.
	w.clock.Advance(901 * time.Second)
	_, err := w.srv.EKSAs(t, sess, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
	if _, msg := wanterr.AWS(t, err, errdefs.ExpiredTokenException, http.StatusForbidden); msg != "The security token included in the request is expired" {
		t.Errorf("EKS message = %q", msg)
	}
	_, err = stsAs(w.srv, sess).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if msg := queryError(t, err, "ExpiredToken", http.StatusBadRequest); msg != "The security token included in the request is expired" {
		t.Errorf("STS message = %q", msg)
	}
	// A new session is issued on the moved clock and works.
	again, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("short")})
	if _, err := w.srv.EKSAs(t, again).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters with a new session: %v", err)
	}
}

func TestSessionRevoked(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("revoked")})
	if _, err := w.srv.EKSAs(t, sess).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters before revocation: %v", err)
	}
	if _, err := w.srv.IAM().RevokeRoleSessions(ctx, roleARN); err != nil {
		t.Fatalf("RevokeRoleSessions: %v", err)
	}
	// Refused as soon as the key cache has seen the role's change (a watch
	// event; bounded poll).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := w.srv.EKSAs(t, sess, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil {
			wanterr.AWS(t, err, errdefs.UnrecognizedClientException, http.StatusForbidden)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a revoked session was still accepted after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := stsAs(w.srv, sess).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	queryError(t, err, "InvalidClientTokenId", http.StatusForbidden)

	// A session issued after the revocation instant is valid.
	fresh, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("after")})
	if _, err := w.srv.EKSAs(t, fresh).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters with a session issued after the revocation: %v", err)
	}
}

// TestSessionPolicy: a session with an inline session policy may do only
// what both the policy and its role's policies allow.
func TestSessionPolicy(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	sess, out := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("narrow"),
		Policy: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:DescribeCluster","eks:CreateCluster"],"Resource":"*"}]}`)})
	//nolint:staticcheck // SA1019: botocore's sts model, which saltbush answers, still has PackedPolicySize
	if packed := out.PackedPolicySize; packed == nil || *packed <= 0 {
		t.Errorf("PackedPolicySize %v, want the policy's share", packed)
	}
	_, err := w.srv.EKSAs(t, sess, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
	wanterr.AWS(t, err, errdefs.AccessDeniedException, http.StatusForbidden)
	// The role allows DescribeCluster too: the cluster is not there, and
	// saying so is the answer of an allowed request.
	_, err = w.srv.EKSAs(t, sess, authOneAttempt).DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("nowhere")})
	wanterr.AWS(t, err, errdefs.ResourceNotFoundException, http.StatusNotFound)
	// The policy allows CreateCluster, the role does not.
	_, err = w.srv.EKSAs(t, sess, authOneAttempt).CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("c1"),
		RoleArn: aws.String("arn:aws:iam::" + account + ":role/eks"), ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-a"}}})
	wanterr.AWS(t, err, errdefs.AccessDeniedException, http.StatusForbidden)
	// Without the policy the role's permissions hold.
	wide, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("wide")})
	if _, err := w.srv.EKSAs(t, wide).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters without a session policy: %v", err)
	}
}
