package eksctl_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/saltbush/saltbush/guest/podidentity"
	"github.com/saltbush/saltbush/tests/kubetest"
)

// The identity steps' names: the service account eksctl associates with
// a role, a second association the SDK makes in another namespace (so
// that get's filters have something to leave out), and the IRSA service
// account and role eksctl would make through CloudFormation.
const (
	podNamespace       = "eksctl-pods"
	podServiceAccount  = "reader"
	podRoleName        = "eksctl-pods-reader"
	otherNamespace     = "eksctl-other"
	irsaServiceAccount = "irsa"
	irsaRoleName       = "eksctl-irsa"
	irsaPolicyARN      = "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"
	podIdentityAgent   = "eks-pod-identity-agent"
	// podRoleTrust lets EKS Pod Identity assume the role.
	podRoleTrust = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}`
	// oidcEnabledTag is the tag eksctl puts on a cluster when it creates
	// the cluster's OIDC provider.
	oidcEnabledTag = "alpha.eksctl.io/cluster-oidc-enabled"
)

// What eksctl prints in the identity steps (docs/clients.md).
const (
	oidcAssociated  = `IAM Open ID Connect provider is already associated with cluster %q in %q`
	oidcCreated     = `created IAM Open ID Connect provider`
	noOIDCProvider  = `no IAM OIDC provider associated with cluster`
	noAgentAddon    = `Error: the "eks-pod-identity-agent" addon must be installed to create pod identity associations`
	associationMade = `created pod identity association for service account %q in namespace %q`
	// Where the CloudFormation call ends the command; the rest of the
	// line is the façade's refusal.
	podIdentityStacks = `Error: error listing stack names for pod identity associations: listing stacks: describing CloudFormation stacks for %q: operation error CloudFormation: ListStacks, https response error StatusCode: 4`
	irsaStacks        = `Error: describing CloudFormation stacks for %q: operation error CloudFormation: ListStacks, https response error StatusCode: 4`
)

// testDescribeAddonConfiguration: eksctl prints the configuration schema
// and the pod identity configuration the SDK's DescribeAddonConfiguration
// answers, for an add-on without pod identity service accounts and for
// one with.
func testDescribeAddonConfiguration(t *testing.T, e *env) {
	for _, tc := range []struct {
		name, addon, version string
		podIdentity          bool
	}{
		{"no pod identity", addonName, addonNew, false},
		{"pod identity", "aws-ebs-csi-driver", "v1.48.0-eksbuild.2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			var got struct {
				Schema      any `json:"configurationSchema"`
				PodIdentity []struct {
					ServiceAccount             string
					RecommendedManagedPolicies []string
				} `json:"podIdentityConfiguration"`
			}
			r := e.ok("utils", "describe-addon-configuration", "--name", tc.addon, "--version", tc.version)
			if err := decodeJSON(r.stdout, &got); err != nil {
				t.Fatalf("decode: %v\n%s", err, r)
			}
			out, err := e.eks.DescribeAddonConfiguration(e.ctx(30*time.Second), &eks.DescribeAddonConfigurationInput{
				AddonName: aws.String(tc.addon), AddonVersion: aws.String(tc.version)})
			if err != nil {
				t.Fatalf("DescribeAddonConfiguration %s %s: %v", tc.addon, tc.version, err)
			}
			var want any
			if err := json.Unmarshal([]byte(aws.ToString(out.ConfigurationSchema)), &want); err != nil || want == nil {
				t.Fatalf("the SDK's schema of %s %s: %v (%q)", tc.addon, tc.version, err, aws.ToString(out.ConfigurationSchema))
			}
			if !reflect.DeepEqual(got.Schema, want) {
				g, _ := json.Marshal(got.Schema)
				t.Fatalf("eksctl prints the schema\n%s\nthe SDK answers\n%s", g, aws.ToString(out.ConfigurationSchema))
			}
			var gotPods, wantPods []string
			for _, p := range got.PodIdentity {
				gotPods = append(gotPods, p.ServiceAccount+"="+strings.Join(p.RecommendedManagedPolicies, ","))
			}
			for _, p := range out.PodIdentityConfiguration {
				wantPods = append(wantPods, aws.ToString(p.ServiceAccount)+"="+strings.Join(p.RecommendedManagedPolicies, ","))
			}
			if !slices.Equal(gotPods, wantPods) || (len(wantPods) > 0) != tc.podIdentity {
				t.Fatalf("eksctl prints pod identity configuration %v, the SDK %v (want some: %v)", gotPods, wantPods, tc.podIdentity)
			}
		})
	}
}

// testAssociateOIDCProvider: the cluster's OIDC issuer is already an IAM
// OIDC provider of its account (GetOpenIDConnectProvider finds it), so
// eksctl says so and creates nothing: IAM lists the same providers after
// as before, and eksctl has not tagged the cluster as it does when it
// creates one.
func testAssociateOIDCProvider(t *testing.T, e *env) {
	client := e.iam()
	hostPath := strings.TrimPrefix(kubetest.ServiceAccountIssuer, "https://")
	provider := "arn:aws:iam::" + e.account + ":oidc-provider/" + hostPath
	before := e.oidcProviders(client)
	if !slices.Contains(before, provider) {
		t.Fatalf("IAM lists providers %v, not the cluster's %s", before, provider)
	}
	r := e.ok("utils", "associate-iam-oidc-provider", "--cluster", e.cluster, "--approve")
	if want := fmt.Sprintf(oidcAssociated, e.cluster, e.srv.Config.Cluster.Region); !strings.Contains(r.output(), want) ||
		strings.Contains(r.output(), oidcCreated) {
		t.Fatalf("want eksctl to find the provider (%q) and create none:\n%s", want, r)
	}
	if after := e.oidcProviders(client); !slices.Equal(after, before) {
		t.Fatalf("IAM lists providers %v after associate-iam-oidc-provider, %v before", after, before)
	}
	got, err := client.GetOpenIDConnectProvider(e.ctx(30*time.Second), &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(provider)})
	if err != nil {
		t.Fatalf("GetOpenIDConnectProvider %s: %v", provider, err)
	}
	if aws.ToString(got.Url) != hostPath {
		t.Fatalf("provider %s has Url %q, want %q", provider, aws.ToString(got.Url), hostPath)
	}
	c, err := e.eks.DescribeCluster(e.ctx(30*time.Second), &eks.DescribeClusterInput{Name: aws.String(e.cluster)})
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if v, ok := c.Cluster.Tags[oidcEnabledTag]; ok {
		t.Fatalf("the cluster is tagged %s=%s: eksctl took the provider for a new one", oidcEnabledTag, v)
	}
}

// testCreateIAMServiceAccount: eksctl finds the cluster's OIDC provider
// (IAM GetOpenIDConnectProvider), then lists CloudFormation stacks to skip
// the service accounts it already made, and stops there: before it looks
// at the cluster, before the role's stack. No ServiceAccount and no role
// exist afterwards. With --role-only it stops at the same call.
func testCreateIAMServiceAccount(t *testing.T, e *env) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"service account and role", nil},
		{"role only", []string{"--role-only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			args := append([]string{"create", "iamserviceaccount", "--cluster", e.cluster, "--namespace", podNamespace,
				"--name", irsaServiceAccount, "--attach-policy-arn", irsaPolicyARN, "--role-name", irsaRoleName, "--approve"}, tc.extra...)
			r := e.run(args...)
			if want := fmt.Sprintf(irsaStacks, e.cluster); r.err == nil || !strings.Contains(r.output(), want) {
				t.Fatalf("want create iamserviceaccount to stop at CloudFormation with %q (docs/clients.md):\n%s", want, r)
			}
			if strings.Contains(r.output(), noOIDCProvider) {
				t.Fatalf("eksctl did not find the cluster's OIDC provider:\n%s", r)
			}
			_, err := e.k8s.CoreV1().ServiceAccounts(podNamespace).Get(e.ctx(30*time.Second), irsaServiceAccount, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("ServiceAccount %s/%s: %v, want NotFound", podNamespace, irsaServiceAccount, err)
			}
			exists, err := e.srv.IAM().PrincipalExists(e.ctx(30*time.Second), e.roleARN(irsaRoleName))
			if err != nil || exists {
				t.Fatalf("role %s exists: %v, %v", e.roleARN(irsaRoleName), exists, err)
			}
		})
	}
}

// testCreatePodIdentityAssociation: eksctl creates an association for an
// existing role once the eks-pod-identity-agent add-on exists (it refuses
// before, on DescribeAddon's ResourceNotFoundException), the SDK reads it
// back, and the agent records it on the ServiceAccount. Without --tags
// eksctl sends "tags": {}, which AWS, and saltbush, take as no tags.
func testCreatePodIdentityAssociation(t *testing.T, e *env) {
	role := e.roleARN(podRoleName)
	e.srv.NewRole(t, role, podRoleTrust, "")
	e.ensureServiceAccount(podNamespace, podServiceAccount)
	args := []string{"create", "podidentityassociation", "--cluster", e.cluster,
		"--namespace", podNamespace, "--service-account-name", podServiceAccount, "--role-arn", role}
	for _, tc := range []struct {
		name       string
		agentAddon bool     // the eks-pod-identity-agent add-on exists
		extra      []string // more flags
		refusal    string   // what eksctl fails with; "" for success
	}{
		{"no eks-pod-identity-agent add-on", false, nil, noAgentAddon},
		{"without --tags", true, nil, ""},
	} {
		ok := t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			if tc.agentAddon {
				e.ensurePodIdentityAgent()
			}
			r := e.run(slices.Concat(args, tc.extra)...)
			got := e.podIdentityAssociations(podNamespace, podServiceAccount)
			if tc.refusal != "" {
				if r.err == nil || !strings.Contains(r.output(), tc.refusal) {
					t.Fatalf("want eksctl to fail with %q (docs/clients.md):\n%s", tc.refusal, r)
				}
				if len(got) != 0 {
					t.Fatalf("a refused create made associations %+v", got)
				}
				return
			}
			if want := fmt.Sprintf(associationMade, podServiceAccount, podNamespace); r.err != nil || !strings.Contains(r.output(), want) {
				t.Fatalf("want %q:\n%s", want, r)
			}
			if len(got) != 1 || got[0].RoleARN != role || got[0].OwnerARN != "" {
				t.Fatalf("the SDK reads %+v, want one association to %s", got, role)
			}
			a := e.describePodIdentityAssociation(got[0].id)
			if len(a.Tags) != 0 {
				t.Fatalf("association %s has tags %v, want none", got[0].id, a.Tags)
			}
			e.waitRecorded(podNamespace, podServiceAccount, got[0].id)
		})
		if !ok {
			return // later cases build on this one
		}
	}
}

// podIdentitySummary is one association of `eksctl get
// podidentityassociation -o json`, and what the SDK reads of it.
type podIdentitySummary struct {
	AssociationARN, Namespace, ServiceAccountName, RoleARN, OwnerARN string
	id                                                               string // the SDK's only
}

// testGetPodIdentityAssociation: with no filter, a namespace, or a
// namespace and a service account, eksctl lists the associations the SDK
// lists with the same filter, as DescribePodIdentityAssociation describes
// them.
func testGetPodIdentityAssociation(t *testing.T, e *env) {
	if _, err := e.eks.CreatePodIdentityAssociation(e.ctx(30*time.Second), &eks.CreatePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), Namespace: aws.String(otherNamespace),
		ServiceAccount: aws.String(podServiceAccount), RoleArn: aws.String(e.roleARN(podRoleName)),
	}); err != nil {
		t.Fatalf("CreatePodIdentityAssociation in %s: %v", otherNamespace, err)
	}
	for _, tc := range []struct {
		name                      string
		namespace, serviceAccount string
		want                      int
	}{
		{"all", "", "", 2},
		{"namespace", podNamespace, "", 1},
		{"namespace and service account", podNamespace, podServiceAccount, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			args := []string{"get", "podidentityassociation", "--cluster", e.cluster}
			if tc.namespace != "" {
				args = append(args, "--namespace", tc.namespace)
			}
			if tc.serviceAccount != "" {
				args = append(args, "--service-account-name", tc.serviceAccount)
			}
			var got []podIdentitySummary
			e.okJSON(&got, args...)
			want := e.podIdentityAssociations(tc.namespace, tc.serviceAccount)
			for i := range want {
				want[i].id = ""
			}
			slices.SortFunc(got, func(a, b podIdentitySummary) int { return strings.Compare(a.AssociationARN, b.AssociationARN) })
			if !slices.Equal(got, want) || len(want) != tc.want {
				t.Fatalf("eksctl lists %+v, the SDK %+v (want %d)", got, want, tc.want)
			}
		})
	}
}

// testDeletePodIdentityAssociation: eksctl lists CloudFormation stacks
// (for a role stack of the association's) before it looks the association
// up, and stops there: the association is still there.
func testDeletePodIdentityAssociation(t *testing.T, e *env) {
	before := e.podIdentityAssociations(podNamespace, podServiceAccount)
	if len(before) != 1 {
		t.Fatalf("associations of %s/%s: %+v, want the one eksctl made", podNamespace, podServiceAccount, before)
	}
	r := e.run("delete", "podidentityassociation", "--cluster", e.cluster, "--namespace", podNamespace, "--service-account-name", podServiceAccount)
	if want := fmt.Sprintf(podIdentityStacks, e.cluster); r.err == nil || !strings.Contains(r.output(), want) {
		t.Fatalf("want delete podidentityassociation to stop at CloudFormation with %q (docs/clients.md):\n%s", want, r)
	}
	if after := e.podIdentityAssociations(podNamespace, podServiceAccount); !slices.Equal(after, before) {
		t.Fatalf("associations of %s/%s: %+v after the failed delete, %+v before", podNamespace, podServiceAccount, after, before)
	}
}

// iam is an unmodified IAM client of the façade signing as the
// development administrator. IAM is global: the SDK signs it for
// us-east-1 whatever the façade's region.
func (e *env) iam() *iam.Client {
	c := e.srv.Dev(e.t)
	return iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(e.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
}

// oidcProviders lists the ARNs of the account's IAM OIDC providers, sorted.
func (e *env) oidcProviders(client *iam.Client) []string {
	e.t.Helper()
	out, err := client.ListOpenIDConnectProviders(e.ctx(30*time.Second), &iam.ListOpenIDConnectProvidersInput{})
	if err != nil {
		e.t.Fatalf("ListOpenIDConnectProviders: %v", err)
	}
	var arns []string
	for _, p := range out.OpenIDConnectProviderList {
		arns = append(arns, aws.ToString(p.Arn))
	}
	slices.Sort(arns)
	return arns
}

// roleARN is the ARN of a role of the cluster's account.
func (e *env) roleARN(name string) string {
	return "arn:aws:iam::" + e.account + ":role/" + name
}

// ensurePodIdentityAgent creates the eks-pod-identity-agent add-on
// through the SDK unless it exists: eksctl asks for it (DescribeAddon)
// before it creates an association, and need not wait for it.
func (e *env) ensurePodIdentityAgent() {
	e.t.Helper()
	in := &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(podIdentityAgent)}
	_, err := e.eks.DescribeAddon(e.ctx(30*time.Second), in)
	var notFound *types.ResourceNotFoundException
	switch {
	case err == nil:
		return
	case !errors.As(err, &notFound):
		e.t.Fatalf("DescribeAddon %s: %v", podIdentityAgent, err)
	}
	if _, err := e.eks.CreateAddon(e.ctx(30*time.Second), &eks.CreateAddonInput{
		ClusterName: aws.String(e.cluster), AddonName: aws.String(podIdentityAgent)}); err != nil {
		e.t.Fatalf("CreateAddon %s: %v", podIdentityAgent, err)
	}
}

// ensureServiceAccount creates a namespace and a ServiceAccount in it
// unless they exist, as a workload's installer would.
func (e *env) ensureServiceAccount(namespace, name string) {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := e.k8s.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("create namespace %s: %v", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.k8s.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("create ServiceAccount %s/%s: %v", namespace, name, err)
	}
}

// podIdentityAssociations lists the cluster's associations through the
// SDK, filtered as ListPodIdentityAssociations filters ("" for no
// filter), each as DescribePodIdentityAssociation describes it, sorted by
// ARN.
func (e *env) podIdentityAssociations(namespace, serviceAccount string) []podIdentitySummary {
	e.t.Helper()
	in := &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(e.cluster)}
	if namespace != "" {
		in.Namespace = aws.String(namespace)
	}
	if serviceAccount != "" {
		in.ServiceAccount = aws.String(serviceAccount)
	}
	var out []podIdentitySummary
	p := eks.NewListPodIdentityAssociationsPaginator(e.eks, in)
	for p.HasMorePages() {
		page, err := p.NextPage(e.ctx(30 * time.Second))
		if err != nil {
			e.t.Fatalf("ListPodIdentityAssociations: %v", err)
		}
		for _, s := range page.Associations {
			a := e.describePodIdentityAssociation(aws.ToString(s.AssociationId))
			out = append(out, podIdentitySummary{
				AssociationARN: aws.ToString(a.AssociationArn), Namespace: aws.ToString(a.Namespace),
				ServiceAccountName: aws.ToString(a.ServiceAccount), RoleARN: aws.ToString(a.RoleArn),
				OwnerARN: aws.ToString(a.OwnerArn), id: aws.ToString(a.AssociationId),
			})
		}
	}
	slices.SortFunc(out, func(a, b podIdentitySummary) int { return strings.Compare(a.AssociationARN, b.AssociationARN) })
	return out
}

// describePodIdentityAssociation reads one association through the SDK.
func (e *env) describePodIdentityAssociation(id string) *types.PodIdentityAssociation {
	e.t.Helper()
	out, err := e.eks.DescribePodIdentityAssociation(e.ctx(30*time.Second), &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), AssociationId: aws.String(id)})
	if err != nil {
		e.t.Fatalf("DescribePodIdentityAssociation %s: %v", id, err)
	}
	return out.Association
}

// waitRecorded waits, on a watch with a deadline, until the agent has
// recorded association id on the ServiceAccount (docs/agent.md, "Pod
// identity").
func (e *env) waitRecorded(namespace, name, id string) {
	e.t.Helper()
	ctx := e.ctx(time.Minute)
	lw := cache.NewFilteredListWatchFromClient(e.k8s.CoreV1().RESTClient(), "serviceaccounts", namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	var last map[string]string
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.ServiceAccount{}, nil, func(ev watch.Event) (bool, error) {
		sa, ok := ev.Object.(*corev1.ServiceAccount)
		if !ok {
			return false, nil
		}
		last = sa.Labels
		return sa.Labels[podidentity.LabelAssociationID] == id, nil
	})
	if err != nil {
		e.t.Fatalf("ServiceAccount %s/%s does not record association %s (labels %v): %v", namespace, name, id, last, err)
	}
}
