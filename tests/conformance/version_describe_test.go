package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// describeVersions calls DescribeClusterVersions through the SDK's
// paginator and returns every version it lists, in order.
func describeVersions(t *testing.T, client *eks.Client, in *eks.DescribeClusterVersionsInput) []types.ClusterVersionInformation {
	t.Helper()
	var out []types.ClusterVersionInformation
	p := eks.NewDescribeClusterVersionsPaginator(client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctxT(t))
		if err != nil {
			t.Fatalf("DescribeClusterVersions: %v", err)
		}
		out = append(out, page.ClusterVersions...)
	}
	return out
}

func versionNames(vs []types.ClusterVersionInformation) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, aws.ToString(v.ClusterVersion))
	}
	return names
}

// TestDescribeClusterVersions: every version saltbush offers, newest
// first, each with its support calendar consistent with its status; and
// each of the model's filters, through the unmodified SDK.
func TestDescribeClusterVersions(t *testing.T) {
	srv := servertest.Start(t)
	client := srv.EKS(t)
	all := []string{"1.37", "1.36", "1.35", "1.34", "1.33", "1.32"}

	got := describeVersions(t, client, &eks.DescribeClusterVersionsInput{})
	if names := versionNames(got); !slices.Equal(names, all) {
		t.Fatalf("versions = %v, want %v", names, all)
	}
	now := time.Now()
	standard := []string{}
	for _, v := range got {
		name := aws.ToString(v.ClusterVersion)
		if v.DefaultVersion != (name == "1.36") {
			t.Errorf("%s: defaultVersion = %t", name, v.DefaultVersion)
		}
		if aws.ToString(v.ClusterType) != "eks" || aws.ToString(v.DefaultPlatformVersion) == "" {
			t.Errorf("%s: clusterType %q, defaultPlatformVersion %q", name, aws.ToString(v.ClusterType), aws.ToString(v.DefaultPlatformVersion))
		}
		if !strings.HasPrefix(aws.ToString(v.KubernetesPatchVersion), name+".") {
			t.Errorf("%s: kubernetesPatchVersion %q", name, aws.ToString(v.KubernetesPatchVersion))
		}
		if v.ReleaseDate == nil || v.EndOfStandardSupportDate == nil || v.EndOfExtendedSupportDate == nil ||
			!v.ReleaseDate.Before(*v.EndOfStandardSupportDate) || !v.EndOfStandardSupportDate.Before(*v.EndOfExtendedSupportDate) {
			t.Errorf("%s: calendar %v, %v, %v out of order", name, v.ReleaseDate, v.EndOfStandardSupportDate, v.EndOfExtendedSupportDate)
			continue
		}
		want, legacy := types.VersionStatusExtendedSupport, types.ClusterVersionStatusExtendedSupport
		if now.Before(*v.EndOfStandardSupportDate) {
			want, legacy = types.VersionStatusStandardSupport, types.ClusterVersionStatusStandardSupport
			standard = append(standard, name)
		}
		if v.VersionStatus != want || v.Status != legacy {
			t.Errorf("%s: versionStatus %q, status %q; want %q, %q", name, v.VersionStatus, v.Status, want, legacy)
		}
	}

	tests := []struct {
		name string
		in   *eks.DescribeClusterVersionsInput
		want []string
	}{
		{"defaultOnly", &eks.DescribeClusterVersionsInput{DefaultOnly: aws.Bool(true)}, []string{"1.36"}},
		{"defaultOnly false is no filter", &eks.DescribeClusterVersionsInput{DefaultOnly: aws.Bool(false)}, all},
		{"clusterVersions", &eks.DescribeClusterVersionsInput{ClusterVersions: []string{"1.33", "1.35"}}, []string{"1.35", "1.33"}},
		{"clusterVersions not offered", &eks.DescribeClusterVersionsInput{ClusterVersions: []string{"1.20"}}, []string{}},
		{"clusterType eks", &eks.DescribeClusterVersionsInput{ClusterType: aws.String("eks")}, all},
		{"clusterType other", &eks.DescribeClusterVersionsInput{ClusterType: aws.String("eks-local-outposts")}, []string{}},
		{"versionStatus", &eks.DescribeClusterVersionsInput{VersionStatus: types.VersionStatusStandardSupport}, standard},
		//nolint:staticcheck // SA1019: the deprecated member is still AWS's, and still served
		{"deprecated status", &eks.DescribeClusterVersionsInput{Status: types.ClusterVersionStatusStandardSupport}, standard},
		{"includeAll", &eks.DescribeClusterVersionsInput{IncludeAll: aws.Bool(true)}, all},
		{"versionStatus UNSUPPORTED", &eks.DescribeClusterVersionsInput{VersionStatus: types.VersionStatusUnsupported}, []string{}},
		{"one per page", &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(1)}, all},
		{"four per page, filtered", &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(4),
			ClusterVersions: []string{"1.32", "1.34", "1.36", "1.37", "1.35"}}, []string{"1.37", "1.36", "1.35", "1.34", "1.32"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if names := versionNames(describeVersions(t, client, tt.in)); !slices.Equal(names, tt.want) {
				t.Fatalf("versions = %v, want %v", names, tt.want)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		first, err := client.DescribeClusterVersions(ctxT(t), &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(4)})
		if err != nil {
			t.Fatalf("DescribeClusterVersions: %v", err)
		}
		if len(first.ClusterVersions) != 4 || first.NextToken == nil {
			t.Fatalf("first page: %d versions, nextToken %v", len(first.ClusterVersions), first.NextToken)
		}
		last, err := client.DescribeClusterVersions(ctxT(t), &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(4), NextToken: first.NextToken})
		if err != nil {
			t.Fatalf("DescribeClusterVersions page 2: %v", err)
		}
		if names := versionNames(last.ClusterVersions); !slices.Equal(names, all[4:]) || last.NextToken != nil {
			t.Fatalf("last page = %v, nextToken %v", names, last.NextToken)
		}
	})

	bad := []struct {
		name string
		in   *eks.DescribeClusterVersionsInput
	}{
		{"forged nextToken", &eks.DescribeClusterVersionsInput{NextToken: aws.String("forged")}},
		{"maxResults 0", &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(0)}},
		{"maxResults 101", &eks.DescribeClusterVersionsInput{MaxResults: aws.Int32(101)}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.DescribeClusterVersions(ctxT(t), tt.in)
			wanterr.Type[*types.InvalidParameterException](t, err)
		})
	}
}

// TestDescribeClusterVersionsWire: the query string as the AWS CLI sends
// it (repeated clusterVersions, booleans as words) and the body's member
// names, on the raw wire.
func TestDescribeClusterVersionsWire(t *testing.T) {
	srv := servertest.Start(t)
	code, _, body := rawCall(t, srv, http.MethodGet, srv.URL+"/cluster-versions?clusterVersions=1.35&clusterVersions=1.36&defaultOnly=false", "")
	if code != http.StatusOK {
		t.Fatalf("status %d: %v", code, body)
	}
	versions, _ := body["clusterVersions"].([]any)
	if len(versions) != 2 {
		t.Fatalf("clusterVersions = %v", body["clusterVersions"])
	}
	v, _ := versions[0].(map[string]any)
	for _, member := range []string{"clusterVersion", "clusterType", "defaultPlatformVersion", "defaultVersion", "releaseDate",
		"endOfStandardSupportDate", "endOfExtendedSupportDate", "status", "versionStatus", "kubernetesPatchVersion"} {
		if _, ok := v[member]; !ok {
			t.Errorf("member %s missing from %v", member, v)
		}
	}
	if got := fmt.Sprint(v["clusterVersion"], " ", v["defaultVersion"]); got != "1.36 true" {
		t.Errorf("first version = %s, want 1.36 true", got)
	}
	if _, ok := body["nextToken"]; ok {
		t.Errorf("nextToken present on the only page: %v", body)
	}
}
