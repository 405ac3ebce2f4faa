package conformance

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// What the Terraform AWS provider v6 (hashicorp/terraform-provider-aws)
// reads from EKS and STS, done here as its code does it, with the same
// SDK, so that a change to saltbush that would break a `terraform plan`
// breaks this test instead. No Terraform binary runs: each tf* function
// below is the provider's own logic, and its comment names the provider
// function it stands for.

// TestTerraformProviderReads: the aws_eks_addon resource's
// pod_identity_association blocks, the aws_eks_cluster_versions data
// source and the aws_eks_cluster_auth token, each as provider v6 reads it.
func TestTerraformProviderReads(t *testing.T) {
	h := newReviewHarness(t)
	t.Run("aws_eks_addon pod_identity_association", func(t *testing.T) { tfAddonPodIdentity(t, h) })
	t.Run("aws_eks_cluster_versions", func(t *testing.T) { tfClusterVersions(t, h) })
	t.Run("aws_eks_cluster_auth", func(t *testing.T) { tfClusterAuth(t, h) })
}

// tfIDCounter numbers the client request tokens tfUniqueID makes.
var tfIDCounter atomic.Uint32

// tfUniqueID is the provider's ClientRequestToken, terraform-plugin-sdk's
// id.UniqueId(): "terraform-", the UTC time to a ten-thousandth of a
// second without the dot, and an eight-hex-digit counter.
func tfUniqueID() string {
	ts := strings.Replace(time.Now().UTC().Format("20060102150405.0000"), ".", "", 1)
	return fmt.Sprintf("terraform-%s%08x", ts, tfIDCounter.Add(1))
}

// tfPodIdentity is one pod_identity_association block of aws_eks_addon:
// the provider keeps role_arn and service_account, nothing else.
type tfPodIdentity struct {
	RoleARN, ServiceAccount string
}

// tfExpandPodIdentity is the provider's expandAddonPodIdentityAssociations.
func tfExpandPodIdentity(blocks []tfPodIdentity) []types.AddonPodIdentityAssociations {
	if len(blocks) == 0 {
		return nil
	}
	var out []types.AddonPodIdentityAssociations
	for _, b := range blocks {
		out = append(out, types.AddonPodIdentityAssociations{RoleArn: aws.String(b.RoleARN), ServiceAccount: aws.String(b.ServiceAccount)})
	}
	return out
}

// tfFlattenPodIdentity is the provider's
// flattenAddonPodIdentityAssociations: DescribeAddon's
// podIdentityAssociations are association ARNs
// ("arn:aws:eks:REGION:ACCOUNT:podidentityassociation/CLUSTER/ID"); each
// is split on "/" and must have exactly three parts, and the third is the
// association id given, with the cluster name of the resource's own id
// (not the ARN's), to DescribePodIdentityAssociation
// (findPodIdentityAssociationByTwoPartKey), whose roleArn and
// serviceAccount become the block. Any error fails the whole read.
func tfFlattenPodIdentity(ctx context.Context, client *eks.Client, arns []string, clusterName string) ([]tfPodIdentity, error) {
	if len(arns) == 0 {
		return nil, nil
	}
	var out []tfPodIdentity
	for _, arn := range arns {
		parts := strings.Split(arn, "/")
		if len(parts) != 3 {
			return nil, fmt.Errorf(`unable to extract association ID from ARN "%s"`, arn)
		}
		got, err := client.DescribePodIdentityAssociation(ctx, &eks.DescribePodIdentityAssociationInput{
			AssociationId: aws.String(parts[2]), ClusterName: aws.String(clusterName)})
		if err != nil {
			return nil, err
		}
		if got == nil || got.Association == nil {
			return nil, errors.New("empty result")
		}
		out = append(out, tfPodIdentity{RoleARN: aws.ToString(got.Association.RoleArn), ServiceAccount: aws.ToString(got.Association.ServiceAccount)})
	}
	return out, nil
}

// tfSameSet compares pod_identity_association blocks as Terraform compares
// a TypeSet: in any order. A difference is a perpetual diff in `plan`.
func tfSameSet(a, b []tfPodIdentity) bool {
	key := func(p tfPodIdentity) string { return p.ServiceAccount + " " + p.RoleARN }
	ka, kb := make([]string, 0, len(a)), make([]string, 0, len(b))
	for _, p := range a {
		ka = append(ka, key(p))
	}
	for _, p := range b {
		kb = append(kb, key(p))
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// tfAddonVersionPattern is the provider's validation of addon_version (a
// semantic version with a leading v): a version Terraform reads back must
// be one a configuration can name.
var tfAddonVersionPattern = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$`)

// tfAddonRead is the provider's resourceAddonRead: DescribeAddon, then the
// pod_identity_association blocks through tfFlattenPodIdentity. It fails
// the test where the provider's read would end in an error.
func tfAddonRead(t *testing.T, client *eks.Client, cluster, name string) (*types.Addon, []tfPodIdentity) {
	t.Helper()
	ctx := ctxT(t)
	out, err := client.DescribeAddon(ctx, &eks.DescribeAddonInput{AddonName: aws.String(name), ClusterName: aws.String(cluster)})
	if err != nil {
		t.Fatalf("reading EKS Add-On (%s:%s): %v", cluster, name, err)
	}
	if out.Addon == nil {
		t.Fatalf("reading EKS Add-On (%s:%s): empty result", cluster, name)
	}
	blocks, err := tfFlattenPodIdentity(ctx, client, out.Addon.PodIdentityAssociations, cluster)
	if err != nil {
		t.Fatalf("flattening pod_identity_association: %v", err)
	}
	return out.Addon, blocks
}

// tfAddonStatus is one refresh of the provider's statusAddon: the add-on's
// status, "" once it is not found.
func tfAddonStatus(t *testing.T, client *eks.Client, cluster, name string) types.AddonStatus {
	t.Helper()
	out, err := client.DescribeAddon(ctxT(t), &eks.DescribeAddonInput{AddonName: aws.String(name), ClusterName: aws.String(cluster)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return ""
	}
	if err != nil {
		t.Fatalf("DescribeAddon %s: %v", name, err)
	}
	return out.Addon.Status
}

// tfUpdateStatus is one refresh of the provider's statusAddonUpdate:
// DescribeUpdate with the add-on's name.
func tfUpdateStatus(t *testing.T, client *eks.Client, cluster, name, id string) types.UpdateStatus {
	t.Helper()
	out, err := client.DescribeUpdate(ctxT(t), &eks.DescribeUpdateInput{AddonName: aws.String(name), Name: aws.String(cluster), UpdateId: aws.String(id)})
	if err != nil {
		t.Fatalf("DescribeUpdate %s %s: %v", name, id, err)
	}
	return out.Update.Status
}

// tfAddonPodIdentity: aws_eks_addon with pod_identity_association blocks
// through create, read, an update of the roles and the removal of every
// block (UpdateAddon with an empty list), each followed by the provider's
// read, which must give back exactly the blocks configured.
func tfAddonPodIdentity(t *testing.T, rh *reviewHarness) {
	h := &addonHarness{srv: rh.srv, eks: rh.eks, control: controlv1.NewAddonControlServiceClient(rh.srv.GRPC(t)),
		cluster: rh.cluster, account: rh.account}
	const updatedRole = "arn:aws:iam::000000000000:role/terraform-updated"
	arnPattern := regexp.MustCompile(`^arn:aws:eks:us-east-1:000000000000:podidentityassociation/` + regexp.QuoteMeta(h.cluster) + `/(a-[a-z0-9]{17})$`)
	cases := []struct {
		name, addon string
		blocks      []tfPodIdentity
	}{
		{"vpc-cni, one block", "vpc-cni", []tfPodIdentity{{podRoleARN, "aws-node"}}},
		{"saltbush-pod-identity, two blocks", "saltbush-pod-identity", []tfPodIdentity{
			{podRoleARN, "saltbush-pod-identity-controller"}, {podRole2ARN, "saltbush-pod-identity-node"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			tags := map[string]string{"managed-by": "terraform"}

			// resourceAddonCreate: CreateAddon with a ClientRequestToken of
			// the SDK's, then waitAddonCreated (pending CREATING or
			// DEGRADED, target ACTIVE), then the read.
			if _, err := h.eks.CreateAddon(ctx, &eks.CreateAddonInput{
				AddonName: aws.String(tc.addon), ClientRequestToken: aws.String(tfUniqueID()), ClusterName: aws.String(h.cluster),
				Tags: tags, PodIdentityAssociations: tfExpandPodIdentity(tc.blocks),
			}); err != nil {
				t.Fatalf("creating EKS Add-On (%s:%s): %v", h.cluster, tc.addon, err)
			}
			if got := tfAddonStatus(t, h.eks, h.cluster, tc.addon); got != types.AddonStatusCreating {
				t.Fatalf("status before the agent's report = %q, want CREATING (a pending state of waitAddonCreated)", got)
			}
			if r := h.report(t, tc.addon, 1, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
				t.Fatalf("READY for generation 1 not accepted: %v", r)
			}
			if got := tfAddonStatus(t, h.eks, h.cluster, tc.addon); got != types.AddonStatusActive {
				t.Fatalf("status after READY = %q, want ACTIVE (waitAddonCreated's target)", got)
			}

			a, blocks := tfAddonRead(t, h.eks, h.cluster, tc.addon)
			if !tfSameSet(blocks, tc.blocks) {
				t.Errorf("pod_identity_association read back as %+v, configured %+v", blocks, tc.blocks)
			}
			if len(a.PodIdentityAssociations) != len(tc.blocks) {
				t.Errorf("podIdentityAssociations = %v, want %d ARNs", a.PodIdentityAssociations, len(tc.blocks))
			}
			var ids []string
			for _, arn := range a.PodIdentityAssociations {
				m := arnPattern.FindStringSubmatch(arn)
				if m == nil {
					t.Errorf("association ARN %q, want podidentityassociation/%s/a-…", arn, h.cluster)
					continue
				}
				ids = append(ids, m[1])
			}
			// The attributes resourceAddonRead sets besides the blocks.
			if aws.ToString(a.AddonName) != tc.addon || aws.ToString(a.ClusterName) != h.cluster ||
				!strings.HasPrefix(aws.ToString(a.AddonArn), "arn:aws:eks:us-east-1:000000000000:addon/"+h.cluster+"/"+tc.addon+"/") ||
				!tfAddonVersionPattern.MatchString(aws.ToString(a.AddonVersion)) || a.ServiceAccountRoleArn != nil ||
				a.CreatedAt == nil || a.ModifiedAt == nil || a.Tags["managed-by"] != "terraform" || len(a.Tags) != 1 {
				t.Errorf("read add-on = name %q cluster %q arn %q version %q role %v created %v modified %v tags %v",
					aws.ToString(a.AddonName), aws.ToString(a.ClusterName), aws.ToString(a.AddonArn), aws.ToString(a.AddonVersion),
					a.ServiceAccountRoleArn, a.CreatedAt, a.ModifiedAt, a.Tags)
			}

			// resourceAddonUpdate: a changed set is sent whole (an empty
			// set as an empty list), then waitAddonUpdateSuccessful
			// (pending InProgress, target Successful), then the read.
			update := func(t *testing.T, want []tfPodIdentity) []tfPodIdentity {
				t.Helper()
				pia := tfExpandPodIdentity(want)
				if pia == nil {
					pia = []types.AddonPodIdentityAssociations{}
				}
				out, err := h.eks.UpdateAddon(ctx, &eks.UpdateAddonInput{
					AddonName: aws.String(tc.addon), ClientRequestToken: aws.String(tfUniqueID()), ClusterName: aws.String(h.cluster),
					PodIdentityAssociations: pia,
				})
				if err != nil {
					t.Fatalf("updating EKS Add-On (%s:%s): %v", h.cluster, tc.addon, err)
				}
				id := aws.ToString(out.Update.Id)
				if got := tfUpdateStatus(t, h.eks, h.cluster, tc.addon, id); got != types.UpdateStatusInProgress {
					t.Fatalf("update %s before the agent's report = %q, want InProgress", id, got)
				}
				gen := h.get(t, tc.addon).GetGeneration()
				if r := h.report(t, tc.addon, gen, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
					t.Fatalf("READY for generation %d not accepted: %v", gen, r)
				}
				if got := tfUpdateStatus(t, h.eks, h.cluster, tc.addon, id); got != types.UpdateStatusSuccessful {
					t.Fatalf("update %s after READY = %q, want Successful", id, got)
				}
				a, blocks := tfAddonRead(t, h.eks, h.cluster, tc.addon)
				if !tfSameSet(blocks, want) {
					t.Errorf("pod_identity_association read back as %+v, configured %+v", blocks, want)
				}
				if len(a.PodIdentityAssociations) != len(want) {
					t.Errorf("podIdentityAssociations = %v, want %d ARNs", a.PodIdentityAssociations, len(want))
				}
				return blocks
			}

			t.Run("roles changed", func(t *testing.T) {
				changed := make([]tfPodIdentity, 0, len(tc.blocks))
				for _, b := range tc.blocks {
					changed = append(changed, tfPodIdentity{RoleARN: updatedRole, ServiceAccount: b.ServiceAccount})
				}
				update(t, changed)
			})
			t.Run("every block removed", func(t *testing.T) {
				if blocks := update(t, nil); blocks != nil {
					t.Errorf("flattened %+v, want nil (no pod_identity_association)", blocks)
				}
				for _, id := range ids {
					_, err := h.eks.DescribePodIdentityAssociation(ctx, &eks.DescribePodIdentityAssociationInput{
						AssociationId: aws.String(id), ClusterName: aws.String(h.cluster)})
					wanterr.Type[*types.ResourceNotFoundException](t, err)
				}
			})
		})
	}
}

// tfClusterVersion is the provider's customDataSourceClusterVersion, as
// its autoflex Flatten fills it from a ClusterVersionInformation: strings
// and the boolean as they are, the three dates as RFC 3339 text, and
// versionStatus as a VersionStatus enum. A nil member becomes null.
type tfClusterVersion struct {
	ClusterType, ClusterVersion, DefaultPlatformVersion string
	DefaultVersion                                      bool
	EndOfExtendedSupportDate, EndOfStandardSupportDate  string
	KubernetesPatchVersion, ReleaseDate, VersionStatus  string
	// Null names the attributes left null.
	Null []string
}

func tfFlattenClusterVersion(v types.ClusterVersionInformation) tfClusterVersion {
	var out tfClusterVersion
	str := func(name string, p *string) string {
		if p == nil {
			out.Null = append(out.Null, name)
		}
		return aws.ToString(p)
	}
	date := func(name string, p *time.Time) string {
		if p == nil {
			out.Null = append(out.Null, name)
			return ""
		}
		return p.Format(time.RFC3339)
	}
	out.ClusterType = str("cluster_type", v.ClusterType)
	out.ClusterVersion = str("cluster_version", v.ClusterVersion)
	out.DefaultPlatformVersion = str("default_platform_version", v.DefaultPlatformVersion)
	out.DefaultVersion = v.DefaultVersion
	out.EndOfExtendedSupportDate = date("end_of_extended_support_date", v.EndOfExtendedSupportDate)
	out.EndOfStandardSupportDate = date("end_of_standard_support_date", v.EndOfStandardSupportDate)
	out.KubernetesPatchVersion = str("kubernetes_patch_version", v.KubernetesPatchVersion)
	out.ReleaseDate = date("release_date", v.ReleaseDate)
	if v.VersionStatus == "" {
		out.Null = append(out.Null, "version_status")
	}
	out.VersionStatus = string(v.VersionStatus)
	return out
}

// tfClusterVersions: the aws_eks_cluster_versions data source. Its Read
// expands the configuration into DescribeClusterVersionsInput with autoflex
// (cluster_type → clusterType, default_only → defaultOnly, include_all →
// includeAll, version_status → versionStatus; an argument left out is not
// sent), pages with the SDK's paginator (findClusterVersions) and flattens
// every ClusterVersionInformation into cluster_versions.
func tfClusterVersions(t *testing.T, h *reviewHarness) {
	all := []string{"1.37", "1.36", "1.35", "1.34", "1.33", "1.32"}
	const defaultVersion = "1.36"
	// findClusterVersions.
	find := func(t *testing.T, in *eks.DescribeClusterVersionsInput) []types.ClusterVersionInformation {
		t.Helper()
		out := make([]types.ClusterVersionInformation, 0)
		pages := eks.NewDescribeClusterVersionsPaginator(h.eks, in)
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctxT(t))
			if err != nil {
				t.Fatalf("reading Cluster Versions Data Source: %v", err)
			}
			out = append(out, page.ClusterVersions...)
		}
		return out
	}
	// Which versions are in standard and which in extended support is a
	// matter of today's date against the calendar.
	now := time.Now()
	standard, extended := []string{}, []string{}
	for _, v := range find(t, &eks.DescribeClusterVersionsInput{}) {
		if v.EndOfStandardSupportDate != nil && now.Before(*v.EndOfStandardSupportDate) {
			standard = append(standard, aws.ToString(v.ClusterVersion))
		} else {
			extended = append(extended, aws.ToString(v.ClusterVersion))
		}
	}
	validStatus := types.VersionStatus("").Values()

	cases := []struct {
		name string // the data source's configuration
		in   *eks.DescribeClusterVersionsInput
		want []string
	}{
		{`{}`, &eks.DescribeClusterVersionsInput{}, all},
		{`cluster_type = "eks"`, &eks.DescribeClusterVersionsInput{ClusterType: aws.String("eks")}, all},
		{`default_only = true`, &eks.DescribeClusterVersionsInput{DefaultOnly: aws.Bool(true)}, []string{defaultVersion}},
		{`default_only = false`, &eks.DescribeClusterVersionsInput{DefaultOnly: aws.Bool(false)}, all},
		{`include_all = true`, &eks.DescribeClusterVersionsInput{IncludeAll: aws.Bool(true)}, all},
		{`version_status = "STANDARD_SUPPORT"`, &eks.DescribeClusterVersionsInput{VersionStatus: types.VersionStatusStandardSupport}, standard},
		{`version_status = "EXTENDED_SUPPORT"`, &eks.DescribeClusterVersionsInput{VersionStatus: types.VersionStatusExtendedSupport}, extended},
		{`version_status = "UNSUPPORTED"`, &eks.DescribeClusterVersionsInput{VersionStatus: types.VersionStatusUnsupported}, []string{}},
		{`cluster_type = "eks", default_only = true, version_status = "STANDARD_SUPPORT"`, &eks.DescribeClusterVersionsInput{
			ClusterType: aws.String("eks"), DefaultOnly: aws.Bool(true), VersionStatus: types.VersionStatusStandardSupport}, []string{defaultVersion}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := find(t, tc.in)
			names := make([]string, 0, len(got))
			for _, info := range got {
				v := tfFlattenClusterVersion(info)
				names = append(names, v.ClusterVersion)
				if len(v.Null) > 0 {
					t.Errorf("%s: %v null", v.ClusterVersion, v.Null)
					continue
				}
				if v.ClusterType != "eks" || v.DefaultPlatformVersion == "" || !strings.HasPrefix(v.KubernetesPatchVersion, v.ClusterVersion+".") {
					t.Errorf("%s: cluster_type %q default_platform_version %q kubernetes_patch_version %q",
						v.ClusterVersion, v.ClusterType, v.DefaultPlatformVersion, v.KubernetesPatchVersion)
				}
				if v.DefaultVersion != (v.ClusterVersion == defaultVersion) {
					t.Errorf("%s: default_version = %t", v.ClusterVersion, v.DefaultVersion)
				}
				if !slices.Contains(validStatus, types.VersionStatus(v.VersionStatus)) {
					t.Errorf("%s: version_status %q is none of %v", v.ClusterVersion, v.VersionStatus, validStatus)
				}
				if want := tc.in.VersionStatus; want != "" && v.VersionStatus != string(want) {
					t.Errorf("%s: version_status %q under the filter %q", v.ClusterVersion, v.VersionStatus, want)
				}
				release, _ := time.Parse(time.RFC3339, v.ReleaseDate)
				endStandard, _ := time.Parse(time.RFC3339, v.EndOfStandardSupportDate)
				endExtended, _ := time.Parse(time.RFC3339, v.EndOfExtendedSupportDate)
				if release.IsZero() || !release.Before(endStandard) || !endStandard.Before(endExtended) {
					t.Errorf("%s: release_date %s, end_of_standard_support_date %s, end_of_extended_support_date %s",
						v.ClusterVersion, v.ReleaseDate, v.EndOfStandardSupportDate, v.EndOfExtendedSupportDate)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("cluster_versions = %v, want %v", names, tc.want)
			}
		})
	}
}

// The provider's token generator, its generator.GetWithSTS (a copy of
// aws-iam-authenticator's, moved to the AWS SDK for Go v2): its
// own STS client presigns GetCallerIdentity with two build middlewares of
// its own, which replace the client's other API options: one adds the
// header x-k8s-aws-id with the cluster name, the other sets X-Amz-Expires
// from requestPresignParam, the untyped constant 60 given as a
// time.Duration (60 ns), so that int64(expire/time.Second) sends
// X-Amz-Expires=0, where `aws eks get-token` sends 60. The URL becomes
// "k8s-aws-v1." + unpadded base64url. Both aws_eks_cluster_auth, the data
// source, and its ephemeral twin make the token this way.
const (
	tfTokenPrefix         = "k8s-aws-v1."
	tfClusterIDHeader     = "x-k8s-aws-id"
	tfRequestPresignParam = 60
)

func tfClusterAuthToken(ctx context.Context, clusterID string, stsAPI *sts.Client) (string, error) {
	presigner := sts.NewPresignClient(stsAPI, func(po *sts.PresignOptions) {
		po.ClientOptions = []func(*sts.Options){
			func(o *sts.Options) {
				o.APIOptions = []func(*middleware.Stack) error{
					tfAddClusterIDHeader(clusterID),
					tfAddExpiryParam(tfRequestPresignParam),
				}
			},
		}
	})
	request, err := presigner.PresignGetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", err
	}
	return tfTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(request.URL)), nil
}

func tfAddClusterIDHeader(clusterID string) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("Test: Set ClusterId",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("unknown transport type %T", in.Request)
				}
				req.Header.Add(tfClusterIDHeader, clusterID)
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	}
}

func tfAddExpiryParam(expire time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("Test: Set ExpiryParam",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("unknown transport type %T", in.Request)
				}
				query := req.URL.Query()
				query.Set("X-Amz-Expires", strconv.FormatInt(int64(expire/time.Second), 10))
				req.URL.RawQuery = query.Encode()
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	}
}

// tfSTS is the provider's STS client: its region, its credentials, and
// the endpoints block's sts URL when set ("" for AWS's own).
func tfSTS(region, endpoint string, c servertest.Creds) *sts.Client {
	o := sts.Options{Region: region, Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)}
	if endpoint != "" {
		o.BaseEndpoint = aws.String(endpoint)
	}
	return sts.New(o)
}

// tfClusterAuth: aws_eks_cluster_auth tokens, made by the provider's
// generator for an IAM user and for an assume_role session, with AWS's
// STS endpoints and with the endpoints block naming saltbush, are
// authenticated by the cluster's webhook (ReviewToken, asked by the
// cluster's agent) as their signer; one made for another cluster is not.
func tfClusterAuth(t *testing.T, h *reviewHarness) {
	ctx := ctxT(t)
	const (
		tfRoleARN   = "arn:aws:iam::000000000000:role/terraform"
		sessionName = "tf-apply"
		sessionARN  = "arn:aws:sts::000000000000:assumed-role/terraform/" + sessionName
	)
	facade, err := url.Parse(h.srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	// assume_role { role_arn = tfRoleARN, session_name = sessionName }
	// through saltbush's STS, with an access entry for the role.
	h.srv.NewRole(t, tfRoleARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+devUserARN+`"},"Action":"sts:AssumeRole"}]}`, "")
	if _, err := h.eks.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(h.cluster), PrincipalArn: aws.String(tfRoleARN),
		Username: aws.String("terraform:{{SessionName}}"), KubernetesGroups: []string{"terraform-apply"}}); err != nil {
		t.Fatalf("CreateAccessEntry for %s: %v", tfRoleARN, err)
	}
	assumed, err := tfSTS("us-east-1", h.srv.URL, h.dev).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(tfRoleARN), RoleSessionName: aws.String(sessionName)})
	if err != nil {
		t.Fatalf("AssumeRole %s: %v", tfRoleARN, err)
	}
	session := servertest.Creds{AccessKeyID: aws.ToString(assumed.Credentials.AccessKeyId), SecretAccessKey: aws.ToString(assumed.Credentials.SecretAccessKey),
		SessionToken: aws.ToString(assumed.Credentials.SessionToken), AccountID: "000000000000", PrincipalARN: aws.ToString(assumed.AssumedRoleUser.Arn)}
	if session.PrincipalARN != sessionARN {
		t.Fatalf("assumed %s, want %s", session.PrincipalARN, sessionARN)
	}

	cases := []struct {
		name             string
		creds            servertest.Creds
		region, endpoint string
		wantURL          string // scheme://host of the presigned URL
		wantUser         string
		wantGroups       []string
		wantCanonical    string
	}{
		{"IAM user, AWS's STS endpoint", h.dev, "us-east-1", "", "https://sts.us-east-1.amazonaws.com", devUserARN, nil, devUserARN},
		{"IAM user, endpoints.sts naming saltbush", h.dev, "us-east-1", h.srv.URL, "http://" + facade.Host, devUserARN, nil, devUserARN},
		{"assume_role session, endpoints.sts naming saltbush", session, "us-east-1", h.srv.URL, "http://" + facade.Host,
			"terraform:" + sessionName, []string{"terraform-apply"}, tfRoleARN},
		{"assume_role session, another region's STS endpoint", session, "eu-west-1", "", "https://sts.eu-west-1.amazonaws.com",
			"terraform:" + sessionName, []string{"terraform-apply"}, tfRoleARN},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tfClusterAuthToken(ctxT(t), h.cluster, tfSTS(tc.region, tc.endpoint, tc.creds))
			if err != nil {
				t.Fatalf("reading EKS Cluster (%s) Authentication Token: %v", h.cluster, err)
			}
			// The token is the provider's, not `aws eks get-token`'s: the
			// same URL but for X-Amz-Expires=0.
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, tfTokenPrefix))
			if !strings.HasPrefix(tok, tfTokenPrefix) || err != nil {
				t.Fatalf("token %.40q…: not %s + base64url (%v)", tok, tfTokenPrefix, err)
			}
			u, err := url.Parse(string(raw))
			if err != nil {
				t.Fatalf("token URL: %v", err)
			}
			q := u.Query()
			if u.Scheme+"://"+u.Host != tc.wantURL || u.Path != "/" || q.Get("Action") != "GetCallerIdentity" || q.Get("X-Amz-Expires") != "0" ||
				!slices.Contains(strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), tfClusterIDHeader) ||
				(q.Get("X-Amz-Security-Token") != "") != (tc.creds.SessionToken != "") {
				t.Errorf("token URL %s://%s%s action %q expires %q signed headers %q session token %t; want %s, GetCallerIdentity, 0, %s",
					u.Scheme, u.Host, u.Path, q.Get("Action"), q.Get("X-Amz-Expires"), q.Get("X-Amz-SignedHeaders"),
					q.Get("X-Amz-Security-Token") != "", tc.wantURL, tfClusterIDHeader)
			}

			got := h.reviewRaw(t, tok)
			if !got.GetAuthenticated() {
				t.Fatalf("token not authenticated: %s", got.GetError())
			}
			u2 := got.GetUser()
			if u2.GetUsername() != tc.wantUser || !slices.Equal(u2.GetGroups(), tc.wantGroups) {
				t.Errorf("user %q groups %v, want %q %v", u2.GetUsername(), u2.GetGroups(), tc.wantUser, tc.wantGroups)
			}
			if extra(u2, "arn") != tc.creds.PrincipalARN || extra(u2, "canonicalArn") != tc.wantCanonical || extra(u2, "accessKeyId") != tc.creds.AccessKeyID {
				t.Errorf("extra = %v, want arn %s canonicalArn %s accessKeyId %s", u2.GetExtra(), tc.creds.PrincipalARN, tc.wantCanonical, tc.creds.AccessKeyID)
			}
		})
	}

	t.Run("a token for another cluster is refused", func(t *testing.T) {
		tok, err := tfClusterAuthToken(ctxT(t), "other-cluster", tfSTS("us-east-1", "", h.dev))
		if err != nil {
			t.Fatalf("token: %v", err)
		}
		if got := h.reviewRaw(t, tok); got.GetAuthenticated() || got.GetUser().GetUsername() != "" {
			t.Errorf("a token for other-cluster authenticated on %s: %v", h.cluster, got)
		}
	})
}
