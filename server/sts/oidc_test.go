package sts_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/smithy-go"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
)

// These tests drive IAM's OIDC provider operations (oidc.go,
// oidc_write.go) with the unmodified AWS SDK for Go v2 (service/iam) and
// the AWS CLI against a real in-process saltbush: real SigV4, the real
// handler, real embedded etcd.

const (
	acct = "000000000000"
	// derivedIssuer is the OIDC issuer of the world's cluster: a provider
	// of the account without CreateOpenIDConnectProvider.
	derivedIssuer = "https://oidc.cluster.saltbush.test/id/0123456789ABCDEF"
	derivedARN    = "arn:aws:iam::" + acct + ":oidc-provider/oidc.cluster.saltbush.test/id/0123456789ABCDEF"
)

var (
	thumbA = strings.Repeat("a1", 20)
	thumbB = strings.Repeat("b2", 20)
	thumbC = strings.Repeat("c3", 20)
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// oidcWorld is a saltbush whose development account has an ACTIVE
// cluster with derivedIssuer, an audit log, and users with narrower
// policies than the administrator's.
type oidcWorld struct {
	srv      *servertest.Server
	auditLog string
	admin    servertest.Creds
	// nobody has no policy; reader may list and get providers; creator
	// may create them but not tag them.
	nobody, reader, creator servertest.Creds
}

func newOIDCWorld(t *testing.T) *oidcWorld {
	t.Helper()
	w := &oidcWorld{auditLog: filepath.Join(t.TempDir(), "audit.jsonl")}
	w.srv = servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.AuditLog = w.auditLog }))
	ctx := ctxT(t)
	w.admin = w.srv.Dev(t)
	if _, err := w.srv.EKS(t).CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("oidc"), RoleArn: aws.String("arn:aws:iam::" + acct + ":role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	}); err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	control := controlv1.NewClusterControlServiceClient(w.srv.GRPC(t))
	if _, err := control.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: acct, Name: "oidc"}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.1:6443", PlatformVersion: "eks.1",
		CertificateAuthorityData: clustertest.CertificateAuthorityData(t), OidcIssuer: derivedIssuer,
	}); err != nil {
		t.Fatalf("SetStatus ACTIVE: %v", err)
	}
	w.nobody = w.srv.NewUser(t, "arn:aws:iam::"+acct+":user/nobody", "")
	w.reader = w.srv.NewUser(t, "arn:aws:iam::"+acct+":user/reader",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["iam:GetOpenIDConnectProvider","iam:ListOpenIDConnectProviders"],"Resource":"*"}]}`)
	w.creator = w.srv.NewUser(t, "arn:aws:iam::"+acct+":user/creator",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:CreateOpenIDConnectProvider","Resource":"*"}]}`)
	return w
}

// iamAs is an unmodified IAM client of the façade signing as c. IAM is
// global: the SDK signs it for us-east-1.
func (w *oidcWorld) iamAs(c servertest.Creds) *iam.Client {
	return iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(w.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
}

// queryError checks an SDK error's code and HTTP status and returns its
// message.
func queryError(t *testing.T, err error, code string, status int) string {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error, want %s", err, err, code)
	}
	if ae.ErrorCode() != code {
		t.Errorf("ErrorCode() = %q (message %q), want %q", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v carries no HTTP response", err)
	}
	if re.HTTPStatusCode() != status {
		t.Errorf("HTTP status = %d, want %d for %s", re.HTTPStatusCode(), status, code)
	}
	return ae.ErrorMessage()
}

// provider is what GetOpenIDConnectProvider says of a provider.
type provider struct {
	URL         string
	ClientIDs   []string
	Thumbprints []string
	Tags        []string // key=value
	CreateDate  time.Time
}

func tagStrings(tags []iamtypes.Tag) []string {
	out := []string{}
	for _, t := range tags {
		out = append(out, aws.ToString(t.Key)+"="+aws.ToString(t.Value))
	}
	return out
}

func (w *oidcWorld) get(t *testing.T, arn string) provider {
	t.Helper()
	out, err := w.iamAs(w.admin).GetOpenIDConnectProvider(ctxT(t), &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(arn)})
	if err != nil {
		t.Fatalf("GetOpenIDConnectProvider %s: %v", arn, err)
	}
	return provider{URL: aws.ToString(out.Url), ClientIDs: out.ClientIDList, Thumbprints: out.ThumbprintList, Tags: tagStrings(out.Tags), CreateDate: aws.ToTime(out.CreateDate)}
}

func (w *oidcWorld) list(t *testing.T) []string {
	t.Helper()
	out, err := w.iamAs(w.admin).ListOpenIDConnectProviders(ctxT(t), &iam.ListOpenIDConnectProvidersInput{})
	if err != nil {
		t.Fatalf("ListOpenIDConnectProviders: %v", err)
	}
	var arns []string
	for _, p := range out.OpenIDConnectProviderList {
		arns = append(arns, aws.ToString(p.Arn))
	}
	return arns
}

// snapshot is everything the API says of the account's providers, and
// the provider records in etcd: what a refused request must leave as it
// was.
func (w *oidcWorld) snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, arn := range w.list(t) {
		fmt.Fprintf(&b, "%s %+v\n", arn, w.get(t, arn))
	}
	page, err := w.srv.Store(t).List(ctxT(t), store.ListOptions{Prefix: "iam/accounts/" + acct + "/oidc-providers/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range page.Items {
		fmt.Fprintf(&b, "%s %d\n", kv.Key, kv.ModRev)
	}
	return b.String()
}

func (w *oidcWorld) create(t *testing.T, in *iam.CreateOpenIDConnectProviderInput) string {
	t.Helper()
	out, err := w.iamAs(w.admin).CreateOpenIDConnectProvider(ctxT(t), in)
	if err != nil {
		t.Fatalf("CreateOpenIDConnectProvider %s: %v", aws.ToString(in.Url), err)
	}
	return aws.ToString(out.OpenIDConnectProviderArn)
}

// TestOpenIDConnectProviderRoundTrip: a provider made with eksctl's URL
// (default port included) is named without the port, read back with
// everything it was given (each client id and thumbprint once), listed
// beside the cluster's, and gone once deleted.
func TestOpenIDConnectProviderRoundTrip(t *testing.T) {
	w := newOIDCWorld(t)
	ctx := ctxT(t)
	client := w.iamAs(w.admin)
	const wantARN = "arn:aws:iam::" + acct + ":oidc-provider/issuer.example.test/id/ONE"

	before := time.Now().Add(-time.Second)
	out, err := client.CreateOpenIDConnectProvider(ctx, &iam.CreateOpenIDConnectProviderInput{
		Url:            aws.String("https://issuer.example.test:443/id/ONE"),
		ClientIDList:   []string{"sts.amazonaws.com", "aud-2", "aud-2"},
		ThumbprintList: []string{thumbA, strings.ToUpper(thumbA)},
		Tags:           []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("platform")}},
	})
	if err != nil {
		t.Fatalf("CreateOpenIDConnectProvider: %v", err)
	}
	if got := aws.ToString(out.OpenIDConnectProviderArn); got != wantARN {
		t.Errorf("OpenIDConnectProviderArn = %s, want %s", got, wantARN)
	}
	if got := tagStrings(out.Tags); !slices.Equal(got, []string{"team=platform"}) {
		t.Errorf("Tags = %v, want [team=platform]", got)
	}

	got := w.get(t, wantARN)
	want := provider{URL: "issuer.example.test/id/ONE", ClientIDs: []string{"sts.amazonaws.com", "aud-2"}, Thumbprints: []string{thumbA}, Tags: []string{"team=platform"}}
	if got.URL != want.URL || !slices.Equal(got.ClientIDs, want.ClientIDs) || !slices.Equal(got.Thumbprints, want.Thumbprints) || !slices.Equal(got.Tags, want.Tags) {
		t.Errorf("GetOpenIDConnectProvider = %+v, want %+v", got, want)
	}
	if got.CreateDate.Before(before) || got.CreateDate.After(time.Now().Add(time.Second)) {
		t.Errorf("CreateDate = %v, want now", got.CreateDate)
	}
	if arns := w.list(t); !slices.Equal(arns, []string{wantARN, derivedARN}) {
		t.Errorf("ListOpenIDConnectProviders = %v, want %v", arns, []string{wantARN, derivedARN})
	}
	tags, err := client.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: aws.String(wantARN)})
	if err != nil || !slices.Equal(tagStrings(tags.Tags), []string{"team=platform"}) || tags.IsTruncated {
		t.Errorf("ListOpenIDConnectProviderTags = %+v, %v; want [team=platform]", tags, err)
	}

	if _, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(wantARN)}); err != nil {
		t.Fatalf("DeleteOpenIDConnectProvider: %v", err)
	}
	_, err = client.GetOpenIDConnectProvider(ctx, &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(wantARN)})
	if msg := queryError(t, err, "NoSuchEntity", http.StatusNotFound); msg != "OpenIDConnect Provider not found for arn "+wantARN {
		t.Errorf("message %q", msg)
	}
	if arns := w.list(t); !slices.Equal(arns, []string{derivedARN}) {
		t.Errorf("ListOpenIDConnectProviders after the delete = %v, want only the cluster's", arns)
	}
	_, err = client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(wantARN)})
	queryError(t, err, "NoSuchEntity", http.StatusNotFound)

	// Made again: a new provider, not the deleted one.
	w.create(t, &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://issuer.example.test/id/ONE")})
	if got := w.get(t, wantARN); len(got.ClientIDs) != 0 || len(got.Thumbprints) != 0 || len(got.Tags) != 0 {
		t.Errorf("made again without lists: %+v, want none", got)
	}
}

// TestOpenIDConnectProviderUpdates: each operation that changes a
// provider, in turn, and what the provider is after it.
func TestOpenIDConnectProviderUpdates(t *testing.T) {
	w := newOIDCWorld(t)
	client := w.iamAs(w.admin)
	arn := w.create(t, &iam.CreateOpenIDConnectProviderInput{
		Url: aws.String("https://updates.example.test"), ClientIDList: []string{"sts.amazonaws.com", "aud-2"},
		ThumbprintList: []string{thumbA}, Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("platform")}},
	})
	created := w.get(t, arn).CreateDate
	a := aws.String(arn)
	steps := []struct {
		name string
		call func(ctx context.Context) error
		want provider
	}{
		{"UpdateOpenIDConnectProviderThumbprint replaces the list", func(ctx context.Context) error {
			_, err := client.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: a, ThumbprintList: []string{thumbB, thumbC}})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-2"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"team=platform"}}},
		{"AddClientIDToOpenIDConnectProvider appends", func(ctx context.Context) error {
			_, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("aud-3")})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-2", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"team=platform"}}},
		{"AddClientIDToOpenIDConnectProvider of one it has changes nothing", func(ctx context.Context) error {
			_, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("aud-3")})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-2", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"team=platform"}}},
		{"RemoveClientIDFromOpenIDConnectProvider removes", func(ctx context.Context) error {
			_, err := client.RemoveClientIDFromOpenIDConnectProvider(ctx, &iam.RemoveClientIDFromOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("aud-2")})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"team=platform"}}},
		{"RemoveClientIDFromOpenIDConnectProvider of one it lacks changes nothing", func(ctx context.Context) error {
			_, err := client.RemoveClientIDFromOpenIDConnectProvider(ctx, &iam.RemoveClientIDFromOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("absent")})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"team=platform"}}},
		{"TagOpenIDConnectProvider adds, and replaces a key whatever its case", func(ctx context.Context) error {
			_, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, Tags: []iamtypes.Tag{
				{Key: aws.String("env"), Value: aws.String("dev")}, {Key: aws.String("TEAM"), Value: aws.String("core")}, {Key: aws.String("empty"), Value: aws.String("")},
			}})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"TEAM=core", "env=dev", "empty="}}},
		{"UntagOpenIDConnectProvider removes keys whatever their case", func(ctx context.Context) error {
			_, err := client.UntagOpenIDConnectProvider(ctx, &iam.UntagOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, TagKeys: []string{"team", "absent"}})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-3"}, Thumbprints: []string{thumbB, thumbC}, Tags: []string{"env=dev", "empty="}}},
		{"UpdateOpenIDConnectProviderThumbprint keeps a thumbprint once", func(ctx context.Context) error {
			_, err := client.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: a, ThumbprintList: []string{thumbC, strings.ToUpper(thumbC)}})
			return err
		}, provider{ClientIDs: []string{"sts.amazonaws.com", "aud-3"}, Thumbprints: []string{thumbC}, Tags: []string{"env=dev", "empty="}}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.call(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			got := w.get(t, arn)
			if !slices.Equal(got.ClientIDs, st.want.ClientIDs) || !slices.Equal(got.Thumbprints, st.want.Thumbprints) || !slices.Equal(got.Tags, st.want.Tags) {
				t.Errorf("after it: %+v, want %+v", got, st.want)
			}
			if !got.CreateDate.Equal(created) {
				t.Errorf("CreateDate moved: %v, was %v", got.CreateDate, created)
			}
		})
	}

	t.Run("ListOpenIDConnectProviderTags a page at a time", func(t *testing.T) {
		ctx := ctxT(t)
		var all []string
		var marker *string
		for pages := 0; ; pages++ {
			out, err := client.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: a, MaxItems: aws.Int32(1), Marker: marker})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Tags) != 1 || pages > 2 {
				t.Fatalf("page %d: %+v", pages, out)
			}
			all = append(all, tagStrings(out.Tags)...)
			if !out.IsTruncated {
				break
			}
			marker = out.Marker
		}
		if !slices.Equal(all, []string{"env=dev", "empty="}) {
			t.Errorf("tags by page: %v", all)
		}
	})
}

// TestOpenIDConnectProviderDerived: the cluster's issuer is a provider
// without a record; it cannot be made again or deleted, a change makes it
// a record (kept in its place, its CreateDate the cluster's), and
// deleting that record brings back what is derived.
func TestOpenIDConnectProviderDerived(t *testing.T) {
	w := newOIDCWorld(t)
	ctx := ctxT(t)
	client := w.iamAs(w.admin)
	d := w.get(t, derivedARN)
	if d.URL != strings.TrimPrefix(derivedIssuer, "https://") || !slices.Equal(d.ClientIDs, []string{"sts.amazonaws.com"}) ||
		len(d.Thumbprints) != 1 || len(d.Thumbprints[0]) != 40 || len(d.Tags) != 0 {
		t.Fatalf("derived provider %+v", d)
	}
	before := w.snapshot(t)
	for _, u := range []string{derivedIssuer, strings.Replace(derivedIssuer, ".test/", ".test:443/", 1)} {
		t.Run("CreateOpenIDConnectProvider of "+u, func(t *testing.T) {
			_, err := client.CreateOpenIDConnectProvider(ctx, &iam.CreateOpenIDConnectProviderInput{Url: aws.String(u), ThumbprintList: []string{thumbA}})
			if msg := queryError(t, err, "EntityAlreadyExists", http.StatusConflict); msg != "Provider with url "+derivedIssuer+" already exists." {
				t.Errorf("message %q", msg)
			}
		})
	}
	t.Run("DeleteOpenIDConnectProvider", func(t *testing.T) {
		_, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(derivedARN)})
		if msg := queryError(t, err, "InvalidInput", http.StatusBadRequest); !strings.Contains(msg, "cannot be deleted") {
			t.Errorf("message %q", msg)
		}
	})
	if after := w.snapshot(t); after != before {
		t.Fatalf("refused calls changed the providers:\n%s\nwas\n%s", after, before)
	}

	t.Run("a change makes it a record", func(t *testing.T) {
		if _, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{
			OpenIDConnectProviderArn: aws.String(derivedARN), Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("a")}},
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{
			OpenIDConnectProviderArn: aws.String(derivedARN), ClientID: aws.String("aud-2"),
		}); err != nil {
			t.Fatal(err)
		}
		got := w.get(t, derivedARN)
		if !slices.Equal(got.ClientIDs, []string{"sts.amazonaws.com", "aud-2"}) || !slices.Equal(got.Thumbprints, d.Thumbprints) ||
			!slices.Equal(got.Tags, []string{"team=a"}) || !got.CreateDate.Equal(d.CreateDate) {
			t.Fatalf("after the changes %+v, derived was %+v", got, d)
		}
		if arns := w.list(t); !slices.Equal(arns, []string{derivedARN}) {
			t.Errorf("ListOpenIDConnectProviders = %v, want the provider once", arns)
		}
		_, err := client.CreateOpenIDConnectProvider(ctx, &iam.CreateOpenIDConnectProviderInput{Url: aws.String(derivedIssuer)})
		queryError(t, err, "EntityAlreadyExists", http.StatusConflict)
	})
	t.Run("deleting the record brings back what is derived", func(t *testing.T) {
		if _, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(derivedARN)}); err != nil {
			t.Fatal(err)
		}
		if got := w.get(t, derivedARN); !slices.Equal(got.ClientIDs, d.ClientIDs) || len(got.Tags) != 0 {
			t.Fatalf("after the delete %+v, want %+v", got, d)
		}
	})
}

// rawIAM posts an IAM query-protocol form signed as c, for what the SDK
// refuses to send (a missing required member), and returns the status
// and the ErrorResponse's code and message.
func (w *oidcWorld) rawIAM(t *testing.T, c servertest.Creds, form url.Values) (status int, code, message string) {
	t.Helper()
	form.Set("Version", "2010-05-08")
	body := []byte(form.Encode())
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, w.srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey},
		req, hex.EncodeToString(sum[:]), "iam", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var doc struct {
		Error struct{ Code, Message string }
	}
	_ = xml.Unmarshal(b, &doc)
	return resp.StatusCode, doc.Error.Code, doc.Error.Message
}

// TestOpenIDConnectProviderRefusals: every refusal in IAM's code, status
// and words, and none changes anything.
func TestOpenIDConnectProviderRefusals(t *testing.T) {
	w := newOIDCWorld(t)
	client := w.iamAs(w.admin)
	arn := w.create(t, &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://refusals.example.test"), ClientIDList: []string{"sts.amazonaws.com"}, ThumbprintList: []string{thumbA}})
	// full holds as many client ids and tags as a provider may.
	var ids []string
	var tags []iamtypes.Tag
	for i := range 100 {
		ids = append(ids, "client-"+strconv.Itoa(i))
	}
	for i := range 50 {
		tags = append(tags, iamtypes.Tag{Key: aws.String("k" + strconv.Itoa(i)), Value: aws.String("v")})
	}
	full := w.create(t, &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://full.example.test"), ClientIDList: ids, ThumbprintList: []string{thumbA}, Tags: tags})
	missing := "arn:aws:iam::" + acct + ":oidc-provider/missing.example.test"
	six := []string{thumbA, thumbB, thumbC, strings.Repeat("d4", 20), strings.Repeat("e5", 20), strings.Repeat("f6", 20)}
	create := func(in iam.CreateOpenIDConnectProviderInput) func(ctx context.Context) error {
		return func(ctx context.Context) error { _, err := client.CreateOpenIDConnectProvider(ctx, &in); return err }
	}
	raw := func(pairs ...string) url.Values {
		v := url.Values{}
		for ; len(pairs) >= 2; pairs = pairs[2:] {
			v.Set(pairs[0], pairs[1])
		}
		return v
	}

	tests := []struct {
		name   string
		call   func(ctx context.Context) error // the SDK's call, or
		form   url.Values                      // a raw request
		code   string
		status int
		msg    string // a part of the message
	}{
		{name: "a URL too long", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://" + strings.Repeat("a", 248))}),
			code: "ValidationError", status: 400, msg: "at 'url' failed to satisfy constraint: Member must have length less than or equal to 255"},
		{name: "an empty URL", form: raw("Action", "CreateOpenIDConnectProvider", "Url", ""),
			code: "ValidationError", status: 400, msg: "1 validation error detected: Value '' at 'url' failed to satisfy constraint: Member must have length greater than or equal to 1"},
		{name: "no URL", form: raw("Action", "CreateOpenIDConnectProvider"),
			code: "ValidationError", status: 400, msg: "Value null at 'url' failed to satisfy constraint: Member must not be null"},
		{name: "an http URL", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("http://plain.example.test")}),
			code: "InvalidInput", status: 400, msg: "Invalid Open ID Connect Provider URL"},
		{name: "a URL with a query", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://q.example.test/id?x=1")}),
			code: "InvalidInput", status: 400, msg: "Invalid Open ID Connect Provider URL"},
		{name: "a URL with a fragment", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://q.example.test/id#x")}),
			code: "InvalidInput", status: 400, msg: "Invalid Open ID Connect Provider URL"},
		{name: "a thumbprint of 39 characters", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ThumbprintList: []string{thumbA[:39]}}),
			code: "ValidationError", status: 400, msg: "at 'thumbprintList' failed to satisfy constraint: Member must satisfy constraint: [Member must have length greater than or equal to 40]"},
		{name: "a thumbprint that is not hex", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ThumbprintList: []string{strings.Repeat("g", 40)}}),
			code: "InvalidInput", status: 400, msg: "is not valid: a thumbprint is 40 hexadecimal digits"},
		{name: "six thumbprints", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ThumbprintList: six}),
			code: "InvalidInput", status: 400, msg: "Thumbprint list must contain fewer than 5 entries."},
		{name: "101 client ids", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ClientIDList: append(slices.Clone(ids), "one-more")}),
			code: "LimitExceeded", status: 409, msg: "Cannot exceed quota for ClientIdsPerOpenIdConnectProvider: 100"},
		{name: "a client id too long", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ClientIDList: []string{strings.Repeat("c", 256)}}),
			code: "ValidationError", status: 400, msg: "at 'clientIDList' failed to satisfy constraint: Member must satisfy constraint: [Member must have length less than or equal to 255]"},
		{name: "an empty client id", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), ClientIDList: []string{""}}),
			code: "ValidationError", status: 400, msg: "Value '[]' at 'clientIDList' failed to satisfy constraint: Member must satisfy constraint: [Member must have length greater than or equal to 1]"},
		{name: "a tag key outside the pattern", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), Tags: []iamtypes.Tag{{Key: aws.String("a*b"), Value: aws.String("v")}}}),
			code: "ValidationError", status: 400, msg: "Value 'a*b' at 'tags.1.member.key' failed to satisfy constraint: Member must satisfy regular expression pattern"},
		{name: "tag keys differing in case", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), Tags: []iamtypes.Tag{
			{Key: aws.String("team"), Value: aws.String("a")}, {Key: aws.String("Team"), Value: aws.String("b")}}}),
			code: "InvalidInput", status: 400, msg: "Duplicate tag keys found. Please note that Tag keys are case insensitive."},
		{name: "51 tags", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://t.example.test"), Tags: append(slices.Clone(tags), iamtypes.Tag{Key: aws.String("k50"), Value: aws.String("v")})}),
			code: "ValidationError", status: 400, msg: "at 'tags' failed to satisfy constraint: Member must have length less than or equal to 50"},
		{name: "two violations at once", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String(""), ThumbprintList: []string{"x"}}),
			code: "ValidationError", status: 400, msg: "2 validation errors detected: Value '' at 'url'"},
		{name: "a URL made already", call: create(iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://refusals.example.test:443")}),
			code: "EntityAlreadyExists", status: 409, msg: "Provider with url https://refusals.example.test already exists."},
		{name: "delete: a role's ARN", call: func(ctx context.Context) error {
			_, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String("arn:aws:iam::" + acct + ":role/deployer")})
			return err
		}, code: "InvalidInput", status: 400, msg: "is not valid."},
		{name: "delete: an ARN too short", call: func(ctx context.Context) error {
			_, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String("arn:aws:iam::0")})
			return err
		}, code: "ValidationError", status: 400, msg: "at 'openIDConnectProviderArn' failed to satisfy constraint: Member must have length greater than or equal to 20"},
		{name: "delete: no ARN", form: raw("Action", "DeleteOpenIDConnectProvider"),
			code: "ValidationError", status: 400, msg: "Value null at 'openIDConnectProviderArn' failed to satisfy constraint: Member must not be null"},
		{name: "delete: a missing provider", call: func(ctx context.Context) error {
			_, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(missing)})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "OpenIDConnect Provider not found for arn " + missing},
		{name: "delete: another account's provider", call: func(ctx context.Context) error {
			_, err := client.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(strings.Replace(arn, acct, "111111111111", 1))})
			return err
		}, code: "AccessDenied", status: 403, msg: "is not authorized to perform: iam:DeleteOpenIDConnectProvider"},
		{name: "thumbprint: six", call: func(ctx context.Context) error {
			_, err := client.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: aws.String(arn), ThumbprintList: six})
			return err
		}, code: "InvalidInput", status: 400, msg: "Thumbprint list must contain fewer than 5 entries."},
		{name: "thumbprint: not hex", call: func(ctx context.Context) error {
			_, err := client.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: aws.String(arn), ThumbprintList: []string{strings.Repeat("-", 40)}})
			return err
		}, code: "InvalidInput", status: 400, msg: "is not valid"},
		{name: "thumbprint: no list", form: raw("Action", "UpdateOpenIDConnectProviderThumbprint", "OpenIDConnectProviderArn", arn),
			code: "ValidationError", status: 400, msg: "Value null at 'thumbprintList' failed to satisfy constraint: Member must not be null"},
		{name: "thumbprint: a missing provider", call: func(ctx context.Context) error {
			_, err := client.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: aws.String(missing), ThumbprintList: []string{thumbB}})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "OpenIDConnect Provider not found for arn " + missing},
		{name: "add client id: the 101st", call: func(ctx context.Context) error {
			_, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(full), ClientID: aws.String("one-more")})
			return err
		}, code: "LimitExceeded", status: 409, msg: "Cannot exceed quota for ClientIdsPerOpenIdConnectProvider: 100"},
		{name: "add client id: too long", call: func(ctx context.Context) error {
			_, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(arn), ClientID: aws.String(strings.Repeat("c", 256))})
			return err
		}, code: "ValidationError", status: 400, msg: "at 'clientID' failed to satisfy constraint: Member must have length less than or equal to 255"},
		{name: "add client id: none", form: raw("Action", "AddClientIDToOpenIDConnectProvider", "OpenIDConnectProviderArn", arn),
			code: "ValidationError", status: 400, msg: "Value null at 'clientID' failed to satisfy constraint: Member must not be null"},
		{name: "add client id: a missing provider", call: func(ctx context.Context) error {
			_, err := client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(missing), ClientID: aws.String("x")})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "not found"},
		{name: "remove client id: empty", call: func(ctx context.Context) error {
			_, err := client.RemoveClientIDFromOpenIDConnectProvider(ctx, &iam.RemoveClientIDFromOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(arn), ClientID: aws.String("")})
			return err
		}, code: "ValidationError", status: 400, msg: "at 'clientID' failed to satisfy constraint: Member must have length greater than or equal to 1"},
		{name: "remove client id: a missing provider", call: func(ctx context.Context) error {
			_, err := client.RemoveClientIDFromOpenIDConnectProvider(ctx, &iam.RemoveClientIDFromOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(missing), ClientID: aws.String("x")})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "not found"},
		{name: "tag: the 51st", call: func(ctx context.Context) error {
			_, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(full), Tags: []iamtypes.Tag{{Key: aws.String("one-more"), Value: aws.String("v")}}})
			return err
		}, code: "LimitExceeded", status: 409, msg: "Cannot exceed quota for TagsPerOpenIdConnectProvider: 50"},
		{name: "tag: a value too long", call: func(ctx context.Context) error {
			_, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(arn), Tags: []iamtypes.Tag{{Key: aws.String("k"), Value: aws.String(strings.Repeat("v", 257))}}})
			return err
		}, code: "ValidationError", status: 400, msg: "at 'tags.1.member.value' failed to satisfy constraint: Member must have length less than or equal to 256"},
		{name: "tag: keys differing in case", call: func(ctx context.Context) error {
			_, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(arn), Tags: []iamtypes.Tag{
				{Key: aws.String("env"), Value: aws.String("a")}, {Key: aws.String("ENV"), Value: aws.String("b")}}})
			return err
		}, code: "InvalidInput", status: 400, msg: "Duplicate tag keys found."},
		{name: "tag: no tags", form: raw("Action", "TagOpenIDConnectProvider", "OpenIDConnectProviderArn", arn),
			code: "ValidationError", status: 400, msg: "Value null at 'tags' failed to satisfy constraint: Member must not be null"},
		{name: "tag: a missing provider", call: func(ctx context.Context) error {
			_, err := client.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(missing), Tags: []iamtypes.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "not found"},
		{name: "untag: a key too long", call: func(ctx context.Context) error {
			_, err := client.UntagOpenIDConnectProvider(ctx, &iam.UntagOpenIDConnectProviderInput{OpenIDConnectProviderArn: aws.String(full), TagKeys: []string{"k1", strings.Repeat("k", 129)}})
			return err
		}, code: "ValidationError", status: 400, msg: "at 'tagKeys' failed to satisfy constraint: Member must satisfy constraint: [Member must have length less than or equal to 128]"},
		{name: "untag: no keys", form: raw("Action", "UntagOpenIDConnectProvider", "OpenIDConnectProviderArn", arn),
			code: "ValidationError", status: 400, msg: "Value null at 'tagKeys' failed to satisfy constraint: Member must not be null"},
		{name: "list tags: MaxItems 0", call: func(ctx context.Context) error {
			_, err := client.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: aws.String(full), MaxItems: aws.Int32(0)})
			return err
		}, code: "ValidationError", status: 400, msg: "Value '0' at 'maxItems' failed to satisfy constraint: Member must have value greater than or equal to 1"},
		{name: "list tags: a marker not given", call: func(ctx context.Context) error {
			_, err := client.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: aws.String(full), Marker: aws.String("nope")})
			return err
		}, code: "InvalidInput", status: 400, msg: "Marker nope is not valid"},
		{name: "list tags: a missing provider", call: func(ctx context.Context) error {
			_, err := client.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: aws.String(missing)})
			return err
		}, code: "NoSuchEntity", status: 404, msg: "not found"},
	}
	before := w.snapshot(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var msg string
			if tc.form != nil {
				status, code, m := w.rawIAM(t, w.admin, tc.form)
				if status != tc.status || code != tc.code {
					t.Errorf("%d %s (%q), want %d %s", status, code, m, tc.status, tc.code)
				}
				msg = m
			} else {
				msg = queryError(t, tc.call(ctxT(t)), tc.code, tc.status)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q, want it to contain %q", msg, tc.msg)
			}
			if after := w.snapshot(t); after != before {
				t.Fatalf("the refusal changed the providers:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

// TestOpenIDConnectProviderAuthorization: each operation needs its own
// iam: action on the provider's ARN (and a create with tags
// iam:TagOpenIDConnectProvider too); a denied call changes nothing.
// Changes are audited, granted or not; reads are not.
func TestOpenIDConnectProviderAuthorization(t *testing.T) {
	w := newOIDCWorld(t)
	arn := w.create(t, &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://authz.example.test"), ClientIDList: []string{"sts.amazonaws.com"}, ThumbprintList: []string{thumbA}})
	a := aws.String(arn)
	ops := []struct {
		action string
		call   func(ctx context.Context, c *iam.Client) error
	}{
		{"iam:CreateOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.CreateOpenIDConnectProvider(ctx, &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://other.example.test")})
			return err
		}},
		{"iam:GetOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.GetOpenIDConnectProvider(ctx, &iam.GetOpenIDConnectProviderInput{OpenIDConnectProviderArn: a})
			return err
		}},
		{"iam:ListOpenIDConnectProviders", func(ctx context.Context, c *iam.Client) error {
			_, err := c.ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
			return err
		}},
		{"iam:ListOpenIDConnectProviderTags", func(ctx context.Context, c *iam.Client) error {
			_, err := c.ListOpenIDConnectProviderTags(ctx, &iam.ListOpenIDConnectProviderTagsInput{OpenIDConnectProviderArn: a})
			return err
		}},
		{"iam:DeleteOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.DeleteOpenIDConnectProvider(ctx, &iam.DeleteOpenIDConnectProviderInput{OpenIDConnectProviderArn: a})
			return err
		}},
		{"iam:UpdateOpenIDConnectProviderThumbprint", func(ctx context.Context, c *iam.Client) error {
			_, err := c.UpdateOpenIDConnectProviderThumbprint(ctx, &iam.UpdateOpenIDConnectProviderThumbprintInput{OpenIDConnectProviderArn: a, ThumbprintList: []string{thumbB}})
			return err
		}},
		{"iam:AddClientIDToOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("x")})
			return err
		}},
		{"iam:RemoveClientIDFromOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.RemoveClientIDFromOpenIDConnectProvider(ctx, &iam.RemoveClientIDFromOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, ClientID: aws.String("sts.amazonaws.com")})
			return err
		}},
		{"iam:TagOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.TagOpenIDConnectProvider(ctx, &iam.TagOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, Tags: []iamtypes.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
			return err
		}},
		{"iam:UntagOpenIDConnectProvider", func(ctx context.Context, c *iam.Client) error {
			_, err := c.UntagOpenIDConnectProvider(ctx, &iam.UntagOpenIDConnectProviderInput{OpenIDConnectProviderArn: a, TagKeys: []string{"k"}})
			return err
		}},
	}
	before := w.snapshot(t)
	for _, op := range ops {
		t.Run(op.action+" without a policy", func(t *testing.T) {
			msg := queryError(t, op.call(ctxT(t), w.iamAs(w.nobody)), "AccessDenied", http.StatusForbidden)
			if !strings.Contains(msg, "is not authorized to perform: "+op.action) {
				t.Errorf("message %q does not name %s", msg, op.action)
			}
			if after := w.snapshot(t); after != before {
				t.Fatalf("a denied call changed the providers:\n%s\nwas\n%s", after, before)
			}
		})
	}
	t.Run("a reader reads, and changes nothing", func(t *testing.T) {
		c := w.iamAs(w.reader)
		for _, op := range ops {
			err := op.call(ctxT(t), c)
			switch op.action {
			case "iam:GetOpenIDConnectProvider", "iam:ListOpenIDConnectProviders":
				if err != nil {
					t.Errorf("%s: %v", op.action, err)
				}
			default:
				queryError(t, err, "AccessDenied", http.StatusForbidden)
			}
		}
		if after := w.snapshot(t); after != before {
			t.Fatalf("the reader changed the providers:\n%s\nwas\n%s", after, before)
		}
	})
	t.Run("a create with tags needs iam:TagOpenIDConnectProvider", func(t *testing.T) {
		c := w.iamAs(w.creator)
		_, err := c.CreateOpenIDConnectProvider(ctxT(t), &iam.CreateOpenIDConnectProviderInput{
			Url: aws.String("https://tagged.example.test"), Tags: []iamtypes.Tag{{Key: aws.String("k"), Value: aws.String("v")}},
		})
		if msg := queryError(t, err, "AccessDenied", http.StatusForbidden); !strings.Contains(msg, "iam:TagOpenIDConnectProvider") {
			t.Errorf("message %q", msg)
		}
		if after := w.snapshot(t); after != before {
			t.Fatalf("the denied create changed the providers:\n%s\nwas\n%s", after, before)
		}
		if _, err := c.CreateOpenIDConnectProvider(ctxT(t), &iam.CreateOpenIDConnectProviderInput{Url: aws.String("https://tagged.example.test")}); err != nil {
			t.Fatalf("create without tags: %v", err)
		}
	})

	t.Run("audited", func(t *testing.T) {
		type record struct{ Operation, Principal, Action, Resource, Outcome string }
		var got []record
		f, err := os.Open(w.auditLog)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		for sc := bufio.NewScanner(f); sc.Scan(); {
			var r record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("audit line %q: %v", sc.Text(), err)
			}
			if strings.HasPrefix(r.Operation, "iam ") {
				got = append(got, r)
			}
		}
		want := []record{
			{"iam CreateOpenIDConnectProvider", w.admin.PrincipalARN, "iam:CreateOpenIDConnectProvider", arn, "Success"},
		}
		for _, op := range ops {
			if strings.Contains(op.action, "Get") || strings.Contains(op.action, "List") {
				continue
			}
			resource := arn
			if op.action == "iam:CreateOpenIDConnectProvider" {
				resource = "arn:aws:iam::" + acct + ":oidc-provider/other.example.test"
			}
			want = append(want, record{"iam " + strings.TrimPrefix(op.action, "iam:"), w.nobody.PrincipalARN, op.action, resource, "AccessDenied"})
		}
		// The reader's denied changes, in the order of ops.
		for _, op := range ops {
			if strings.Contains(op.action, "Get") || strings.Contains(op.action, "List") {
				continue
			}
			resource := arn
			if op.action == "iam:CreateOpenIDConnectProvider" {
				resource = "arn:aws:iam::" + acct + ":oidc-provider/other.example.test"
			}
			want = append(want, record{"iam " + strings.TrimPrefix(op.action, "iam:"), w.reader.PrincipalARN, op.action, resource, "AccessDenied"})
		}
		tagged := "arn:aws:iam::" + acct + ":oidc-provider/tagged.example.test"
		want = append(want,
			record{"iam CreateOpenIDConnectProvider", w.creator.PrincipalARN, "iam:CreateOpenIDConnectProvider", tagged, "AccessDenied"},
			record{"iam CreateOpenIDConnectProvider", w.creator.PrincipalARN, "iam:CreateOpenIDConnectProvider", tagged, "Success"})
		if !slices.Equal(got, want) {
			t.Errorf("IAM audit records:\n%+v\nwant\n%+v", got, want)
		}
	})
}

// TestOpenIDConnectProviderAWSCLI: the AWS CLI v1 makes, reads, lists and
// deletes a provider (botocore's serializers and parsers on both sides).
func TestOpenIDConnectProviderAWSCLI(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skipf("the AWS CLI is not installed: %v", err)
	}
	w := newOIDCWorld(t)
	env := []string{"AWS_ACCESS_KEY_ID=" + w.admin.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + w.admin.SecretAccessKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_DEFAULT_REGION=us-east-1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	run := func(t *testing.T, args ...string) ([]byte, error) {
		t.Helper()
		cmd := exec.CommandContext(ctxT(t), "aws", append([]string{"iam"}, append(args, "--endpoint-url", w.srv.URL, "--output", "json")...)...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.Bytes(), err
		}
		return out, nil
	}
	const wantARN = "arn:aws:iam::" + acct + ":oidc-provider/cli.example.test/id/CLI"
	out, err := run(t, "create-open-id-connect-provider", "--url", "https://cli.example.test/id/CLI",
		"--client-id-list", "sts.amazonaws.com", "--thumbprint-list", thumbA, "--tags", "Key=team,Value=cli")
	if err != nil {
		t.Fatalf("create-open-id-connect-provider: %v\n%s", err, out)
	}
	var created struct {
		OpenIDConnectProviderArn string
		Tags                     []struct{ Key, Value string }
	}
	if err := json.Unmarshal(out, &created); err != nil || created.OpenIDConnectProviderArn != wantARN || len(created.Tags) != 1 {
		t.Fatalf("create-open-id-connect-provider printed %s (%v)", out, err)
	}
	out, err = run(t, "get-open-id-connect-provider", "--open-id-connect-provider-arn", wantARN)
	if err != nil {
		t.Fatalf("get-open-id-connect-provider: %v\n%s", err, out)
	}
	var got struct {
		Url                          string
		ClientIDList, ThumbprintList []string
		CreateDate                   string
		Tags                         []struct{ Key, Value string }
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Url != "cli.example.test/id/CLI" || !slices.Equal(got.ClientIDList, []string{"sts.amazonaws.com"}) ||
		!slices.Equal(got.ThumbprintList, []string{thumbA}) || got.CreateDate == "" || len(got.Tags) != 1 || got.Tags[0].Key != "team" {
		t.Fatalf("get-open-id-connect-provider printed %s (%v)", out, err)
	}
	out, err = run(t, "list-open-id-connect-providers")
	if err != nil || !bytes.Contains(out, []byte(wantARN)) || !bytes.Contains(out, []byte(derivedARN)) {
		t.Fatalf("list-open-id-connect-providers: %v\n%s", err, out)
	}
	if out, err := run(t, "delete-open-id-connect-provider", "--open-id-connect-provider-arn", wantARN); err != nil {
		t.Fatalf("delete-open-id-connect-provider: %v\n%s", err, out)
	}
	out, err = run(t, "get-open-id-connect-provider", "--open-id-connect-provider-arn", wantARN)
	if err == nil || !bytes.Contains(out, []byte("NoSuchEntity")) {
		t.Fatalf("get-open-id-connect-provider after the delete: %v\n%s", err, out)
	}
}
