package sts_test

import (
	"encoding/base64"
	"encoding/xml"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// TestSessionAcrossReplicas: two replicas over one etcd. A session issued
// by one is accepted by the other at once (its key cache reads etcd for a
// key it has not seen), and a revocation made through one reaches the
// other's key cache.
func TestSessionAcrossReplicas(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	other := servertest.Start(t, servertest.WithEtcdEndpoints(w.srv.EtcdEndpoints(t)),
		servertest.WithConfig(func(c *server.Config) { c.Cluster.Now = w.clock.Now }))

	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("replicas")})
	if _, err := other.EKSAs(t, sess).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters on the other replica right after AssumeRole: %v", err)
	}
	id, err := stsAs(other, sess).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil || aws.ToString(id.Arn) != sess.PrincipalARN {
		t.Fatalf("GetCallerIdentity on the other replica = %v, %v; want %s", id, err, sess.PrincipalARN)
	}

	if _, err := w.srv.IAM().RevokeRoleSessions(ctx, roleARN); err != nil {
		t.Fatalf("RevokeRoleSessions: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := other.EKSAs(t, sess, authOneAttempt).ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil {
			wanterr.AWS(t, err, errdefs.UnrecognizedClientException, http.StatusForbidden)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other replica still accepted a revoked session after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPresignedGetCallerIdentity: the façade answers the presigned URL
// inside a get-token token as STS does when aws-iam-authenticator sends it
// (a GET with the x-k8s-aws-id header the URL signs), for a role session.
func TestPresignedGetCallerIdentity(t *testing.T) {
	w := newWorld(t)
	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("presigned")})
	tok := servertest.Token(t, sess, "any-cluster", servertest.TokenOptions{Endpoint: w.srv.URL})
	raw, err := decodeToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-k8s-aws-id", "any-cluster")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET of the presigned URL: %d %s", resp.StatusCode, body)
	}
	var doc struct {
		XMLName xml.Name
		Result  struct{ Arn, UserId, Account string } `xml:"GetCallerIdentityResult"`
		Meta    struct{ RequestId string }            `xml:"ResponseMetadata"`
	}
	if err := xml.Unmarshal(body, &doc); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if doc.XMLName.Local != "GetCallerIdentityResponse" || doc.XMLName.Space != "https://sts.amazonaws.com/doc/2011-06-15/" ||
		doc.Result.Arn != sess.PrincipalARN || doc.Result.Account != account || doc.Meta.RequestId == "" {
		t.Errorf("GetCallerIdentity document %s", body)
	}

	// The same URL for another cluster name does not verify.
	req.Header.Set("x-k8s-aws-id", "other-cluster")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp2.Body.Close()
	if resp2.StatusCode != http.StatusForbidden {
		t.Errorf("another cluster name: %d, want 403", resp2.StatusCode)
	}
}

// decodeToken unwraps k8s-aws-v1.<base64url of the presigned URL>.
func decodeToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "k8s-aws-v1."))
	return string(b), err
}
