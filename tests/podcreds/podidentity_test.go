package podcreds_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// nodeAgentPolicy is what the pod identity node agent's principal needs.
const nodeAgentPolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks-auth:AssumeRoleForPodIdentity","Resource":"*"}]}`

// TestPodIdentity: EKS Auth exchanges a pod's token (audience
// pods.eks.amazonaws.com, bound to the pod) for a session of its service
// account's association's role, tagged with the pod; with targetRoleArn
// the session is the target role's, chained from the first; once the
// association is deleted, no new credentials are issued.
func TestPodIdentity(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "pods")
	node := w.Server.NewUser(t, "arn:aws:iam::"+w.Account+":user/node-agent", nodeAgentPolicy)
	appRole := w.role(ctx, t, "pod-app", podsTrust())
	w.pod(ctx, t, "default", "app-0", "app")
	assoc, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("app"), RoleArn: aws.String(appRole),
	})
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	token := w.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", "app-0")

	a := w.assumeForPod(ctx, t, node, w.Cluster, token)
	if a.Status != http.StatusOK {
		t.Fatalf("AssumeRoleForPodIdentity: %d %s %s", a.Status, a.Type, a.Message)
	}
	if a.Subject.Namespace != "default" || a.Subject.ServiceAccount != "app" || a.Audience != "pods.eks.amazonaws.com" ||
		a.PodIdentityAssociation.AssociationID != aws.ToString(assoc.Association.AssociationId) ||
		a.PodIdentityAssociation.AssociationArn != aws.ToString(assoc.Association.AssociationArn) ||
		!strings.HasPrefix(a.AssumedRoleUser.Arn, "arn:aws:sts::"+w.Account+":assumed-role/pod-app/eks-pods-app-0-") ||
		time.Until(time.Unix(int64(a.Credentials.Expiration), 0)) < 50*time.Minute {
		t.Fatalf("answer %+v", a)
	}
	who, err := w.stsAs(a.Credentials.AccessKeyID, a.Credentials.SecretAccessKey, a.Credentials.SessionToken).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil || aws.ToString(who.Arn) != a.AssumedRoleUser.Arn {
		t.Fatalf("GetCallerIdentity with the pod's session: %v %v", who, err)
	}

	// targetRoleArn: the first role's session assumes the target, which
	// trusts the first role; the first role may assume it.
	target := w.role(ctx, t, "pod-target", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+appRole+`"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`)
	keys := w.Server.IAM()
	if _, err := keys.PutPolicy(ctx, w.Account, "chain", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["sts:AssumeRole","sts:TagSession"],"Resource":"`+target+`"}]}`); err != nil {
		t.Fatal(err)
	}
	if err := keys.AttachPolicy(ctx, appRole, "chain"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.EKS.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), AssociationId: assoc.Association.AssociationId, TargetRoleArn: aws.String(target),
	}); err != nil {
		t.Fatalf("UpdatePodIdentityAssociation: %v", err)
	}
	a = w.assumeForPod(ctx, t, node, w.Cluster, token)
	if a.Status != http.StatusOK || !strings.HasPrefix(a.AssumedRoleUser.Arn, "arn:aws:sts::"+w.Account+":assumed-role/pod-target/eks-pods-app-0-") {
		t.Fatalf("with targetRoleArn: %d %s %s %s", a.Status, a.Type, a.Message, a.AssumedRoleUser.Arn)
	}

	// The association's policy limits the pod's session to what both it
	// and the role allow.
	if _, err := w.EKS.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), AssociationId: assoc.Association.AssociationId,
		Policy: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:DescribeCluster","Resource":"*"}]}`),
	}); err != nil {
		t.Fatalf("UpdatePodIdentityAssociation policy: %v", err)
	}
	a = w.assumeForPod(ctx, t, node, w.Cluster, token)
	if a.Status != http.StatusOK {
		t.Fatalf("with a policy: %d %s %s", a.Status, a.Type, a.Message)
	}
	limited := eks.New(eks.Options{Region: w.Region, BaseEndpoint: aws.String(w.Server.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(a.Credentials.AccessKeyID, a.Credentials.SecretAccessKey, a.Credentials.SessionToken)})
	var denied *types.AccessDeniedException
	if _, err := limited.ListClusters(ctx, &eks.ListClustersInput{}); !errors.As(err, &denied) {
		t.Errorf("ListClusters beyond the association's policy: %v, want AccessDeniedException", err)
	}
	if _, err := limited.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(w.Cluster)}); err != nil {
		t.Errorf("DescribeCluster within the association's policy: %v", err)
	}

	if _, err := w.EKS.DeletePodIdentityAssociation(ctx, &eks.DeletePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), AssociationId: assoc.Association.AssociationId,
	}); err != nil {
		t.Fatal(err)
	}
	a = w.assumeForPod(ctx, t, node, w.Cluster, token)
	if a.Status != http.StatusNotFound || a.Type != "ResourceNotFoundException" {
		t.Fatalf("after DeletePodIdentityAssociation: %d %s %s", a.Status, a.Type, a.Message)
	}
}

// TestPodIdentityRefused: each bad request is refused with EKS Auth's
// error, and issues nothing.
func TestPodIdentityRefused(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "pods-refused")
	node := w.Server.NewUser(t, "arn:aws:iam::"+w.Account+":user/node-agent", nodeAgentPolicy)
	nobody := w.Server.NewUser(t, "arn:aws:iam::"+w.Account+":user/nobody", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:ListClusters","Resource":"*"}]}`)
	appRole := w.role(ctx, t, "pod-app", podsTrust())
	irsaOnly := w.role(ctx, t, "irsa-only", w.irsaTrust("default", "other"))
	w.pod(ctx, t, "default", "app-0", "app")
	w.pod(ctx, t, "default", "other-0", "other")
	w.pod(ctx, t, "team", "app-0", "app")
	for _, sa := range []struct{ ns, sa, role string }{{"default", "app", appRole}, {"default", "other", irsaOnly}} {
		if _, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
			ClusterName: aws.String(w.Cluster), Namespace: aws.String(sa.ns), ServiceAccount: aws.String(sa.sa), RoleArn: aws.String(sa.role),
		}); err != nil {
			t.Fatalf("CreatePodIdentityAssociation %s/%s: %v", sa.ns, sa.sa, err)
		}
	}
	good := w.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", "app-0")
	parts := strings.Split(good, ".")
	tests := []struct {
		name    string
		caller  string
		cluster string
		token   string
		status  int
		typ     string
	}{
		{"the STS audience", "node", w.Cluster, w.token(ctx, t, "default", "app", "sts.amazonaws.com", "app-0"), 400, "InvalidTokenException"},
		{"a token bound to no pod", "node", w.Cluster, w.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", ""), 400, "InvalidTokenException"},
		{"an unsigned token", "node", w.Cluster, parts[0] + "." + parts[1] + ".x", 400, "InvalidTokenException"},
		{"not a token", "node", w.Cluster, "hello", 400, "InvalidTokenException"},
		{"an association of another namespace", "node", w.Cluster, w.token(ctx, t, "team", "app", "pods.eks.amazonaws.com", "app-0"), 404, "ResourceNotFoundException"},
		{"a role that does not trust pods", "node", w.Cluster, w.token(ctx, t, "default", "other", "pods.eks.amazonaws.com", "other-0"), 400, "AccessDeniedException"},
		{"a caller without eks-auth", "nobody", w.Cluster, good, 400, "AccessDeniedException"},
		{"a cluster that does not exist", "node", "nowhere", good, 404, "ResourceNotFoundException"},
		{"a malformed cluster name", "node", "-bad", good, 400, "InvalidParameterException"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := node
			if tc.caller == "nobody" {
				c = nobody
			}
			a := w.assumeForPod(ctx, t, c, tc.cluster, tc.token)
			if a.Status != tc.status || a.Type != tc.typ || a.Credentials.AccessKeyID != "" {
				t.Fatalf("%d %s %q, want %d %s and no credentials", a.Status, a.Type, a.Message, tc.status, tc.typ)
			}
		})
	}
}

// TestPodIdentitySessionTags: the session carries the pod's tags, which a
// trust policy may require; with disableSessionTags it carries none, and
// that trust policy refuses it.
func TestPodIdentitySessionTags(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "pods-tags")
	node := w.Server.NewUser(t, "arn:aws:iam::"+w.Account+":user/node-agent", nodeAgentPolicy)
	tagged := w.role(ctx, t, "tagged", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},`+
		`"Action":["sts:AssumeRole","sts:TagSession"],"Condition":{"StringEquals":{"aws:RequestTag/kubernetes-namespace":"default",`+
		`"aws:RequestTag/kubernetes-pod-name":"tag-0","aws:RequestTag/eks-cluster-name":"`+w.Cluster+`"},`+
		`"ArnEquals":{"aws:SourceArn":"arn:aws:eks:`+w.Region+`:`+w.Account+`:cluster/`+w.Cluster+`"}}}]}`)
	w.pod(ctx, t, "default", "tag-0", "tagged")
	assoc, err := w.EKS.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), Namespace: aws.String("default"), ServiceAccount: aws.String("tagged"), RoleArn: aws.String(tagged),
	})
	if err != nil {
		t.Fatal(err)
	}
	token := w.token(ctx, t, "default", "tagged", "pods.eks.amazonaws.com", "tag-0")
	if a := w.assumeForPod(ctx, t, node, w.Cluster, token); a.Status != http.StatusOK {
		t.Fatalf("with the pod's session tags: %d %s %s", a.Status, a.Type, a.Message)
	}
	if _, err := w.EKS.UpdatePodIdentityAssociation(ctx, &eks.UpdatePodIdentityAssociationInput{
		ClusterName: aws.String(w.Cluster), AssociationId: assoc.Association.AssociationId, DisableSessionTags: aws.Bool(true),
	}); err != nil {
		t.Fatal(err)
	}
	if a := w.assumeForPod(ctx, t, node, w.Cluster, token); a.Status != http.StatusBadRequest || a.Type != "AccessDeniedException" {
		t.Fatalf("without session tags, for a trust policy that requires them: %d %s %s", a.Status, a.Type, a.Message)
	}
}
