// Package published_test holds operators' private add-ons to what
// docs/operators.md promises: a version is validated exactly as the
// embedded catalogue is, refused with an error naming the file and the
// rule (and nothing stored) when it is not, stored once and immutable,
// served through the AWS SDK like the embedded add-ons to the accounts it
// is published for, retired and unretired, and seen by every replica.
package published_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/tlsclient"
)

// exampleDir is the private add-on docs/operators.md publishes.
const exampleDir = "../../docs/examples/private-addon/acme-agent"

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// version reads one version of a directory as the CLI sends it.
func version(t *testing.T, dir, v string) map[string][]byte {
	t.Helper()
	files, err := catalog.ReadVersion(os.DirFS(dir), v)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// publishedKeys counts what etcd holds under the published prefix.
func publishedKeys(t *testing.T, srv *servertest.Server) int64 {
	t.Helper()
	resp, err := srv.Etcd(t).Get(ctxT(t), srv.Store(t).Key(store.PublishedAddonsPrefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// exception is the AWS exception name and message a gRPC error carries.
func exception(err error) (string, string) {
	st, _ := status.FromError(err)
	e := errdefs.FromGRPC(st)
	return e.Exception, st.Message()
}

func TestPublishRefusesBadInput(t *testing.T) {
	srv := servertest.Start(t)
	cc := controlv1.NewCatalogControlServiceClient(srv.GRPC(t))
	good := version(t, exampleDir, "v1.1.0")
	with := func(edits map[string]string) map[string][]byte {
		out := maps.Clone(good)
		for name, text := range edits {
			if text == "" {
				delete(out, name)
				continue
			}
			out[name] = []byte(text)
		}
		return out
	}
	replace := func(name, old, new string) map[string][]byte {
		t.Helper()
		if !strings.Contains(string(good[name]), old) {
			t.Fatalf("%s does not contain %q", name, old)
		}
		return with(map[string]string{name: strings.Replace(string(good[name]), old, new, 1)})
	}
	coredns := version(t, "../../catalog/addons/coredns", "v1.12.1-eksbuild.2")
	renamed := func(files map[string][]byte, from, to string, yamlEdit func(string) string) map[string][]byte {
		out := map[string][]byte{}
		for name, b := range files {
			if name == "addon.yaml" {
				out[name] = []byte(yamlEdit(strings.ReplaceAll(string(b), from, to)))
				continue
			}
			out[strings.Replace(name, from+"/", to+"/", 1)] = b
		}
		return out
	}
	same := func(s string) string { return s }

	tests := []struct {
		name      string
		files     map[string][]byte
		version   string
		accounts  []string
		exception string
		// want are fragments the message must hold: the file and the rule.
		want []string
	}{
		{name: "a template that does not parse", files: with(map[string]string{"v1.1.0/bundle/20-deployment.yaml": "{{ if }}"}),
			exception: errdefs.InvalidParameterException, want: []string{"bundle/20-deployment.yaml", "missing value for if"}},
		{name: "a bundle that renders no object", files: with(map[string]string{"v1.1.0/bundle/10-config.yaml": "just words"}),
			exception: errdefs.InvalidParameterException, want: []string{"10-config.yaml", "not a Kubernetes object"}},
		{name: "a schema that refuses its own examples", files: replace("v1.1.0/schema.json", `"logLevel": "debug"`, `"logLevel": "verbose"`),
			exception: errdefs.InvalidParameterException, want: []string{"schema.json", "examples[0] does not satisfy the schema"}},
		{name: "an object outside the add-on's namespace", files: replace("v1.1.0/bundle/10-config.yaml", "namespace: {{ quote .Namespace }}", "namespace: default"),
			exception: errdefs.InvalidParameterException, want: []string{"10-config.yaml", "ConfigMap acme-agent must be in namespace"}},
		{name: "a system Namespace", files: with(map[string]string{"v1.1.0/bundle/05-system.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-system\n"}),
			exception: errdefs.InvalidParameterException, want: []string{"05-system.yaml", "namespace kube-system belongs to the cluster"}},
		{name: "an image with a registry host", files: replace("v1.1.0/bundle/20-deployment.yaml", "image: acme/agent", "image: registry.example.com/acme/agent"),
			exception: errdefs.InvalidParameterException, want: []string{"bundle/20-deployment.yaml", "registry host"}},
		{name: "a version over the size bound", files: with(map[string]string{"v1.1.0/bundle/90-padding.yaml": "# " + strings.Repeat("x", 800<<10) + "\n"}),
			exception: errdefs.InvalidParameterException, want: []string{"at most 786432"}},
		{name: "a version addon.yaml does not list", files: good, version: "v9.9.9",
			exception: errdefs.InvalidParameterException, want: []string{"addon.yaml", `version "v9.9.9" is not listed`}},
		{name: "a file outside every version", files: with(map[string]string{"notes/README": "hello"}),
			exception: errdefs.InvalidParameterException, want: []string{"notes/README", "not in a version listed in addon.yaml"}},
		{name: "no addon.yaml", files: with(map[string]string{"addon.yaml": ""}),
			exception: errdefs.InvalidParameterException, want: []string{"addon.yaml is missing"}},
		{name: "an unknown key in addon.yaml", files: replace("addon.yaml", "hidden: false", "hiden: false"),
			exception: errdefs.InvalidParameterException, want: []string{"addon.yaml", `unknown field "hiden"`}},
		{name: "a version the built-in catalogue has", files: coredns, version: "v1.12.1-eksbuild.2",
			exception: errdefs.ResourceInUseException, want: []string{"coredns version v1.12.1-eksbuild.2 is part of the built-in catalogue"}},
		{name: "a built-in add-on in another namespace",
			files: renamed(coredns, "v1.12.1-eksbuild.2", "v1.12.9-eksbuild.1", func(s string) string {
				return strings.Replace(s, "defaultNamespace: kube-system", "defaultNamespace: dns", 1)
			}),
			version: "v1.12.9-eksbuild.1", exception: errdefs.InvalidParameterException, want: []string{"addon.yaml", `defaultNamespace must be "kube-system"`}},
		{name: "an account id that is not one", files: good, accounts: []string{"12"},
			exception: errdefs.InvalidParameterException, want: []string{"accountIds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.version
			if v == "" {
				v = "v1.1.0"
			}
			_, err := cc.PublishAddonVersion(ctxT(t), &controlv1.PublishAddonVersionRequest{Files: tt.files, Version: v, AccountIds: tt.accounts})
			if err == nil {
				t.Fatal("published")
			}
			exc, msg := exception(err)
			if exc != tt.exception {
				t.Errorf("exception %s (%s), want %s", exc, msg, tt.exception)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not hold %q", msg, w)
				}
			}
			if n := publishedKeys(t, srv); n != 0 {
				t.Fatalf("%d keys stored", n)
			}
		})
	}

	// A 10 MiB directory does not get past the gRPC port's message bound
	// (the CLI refuses it before sending: catalog.ReadVersion).
	t.Run("a 10 MiB bundle", func(t *testing.T) {
		files := with(map[string]string{"v1.1.0/bundle/90-padding.yaml": "# " + strings.Repeat("x", 10<<20) + "\n"})
		_, err := cc.PublishAddonVersion(ctxT(t), &controlv1.PublishAddonVersionRequest{Files: files, Version: "v1.1.0"})
		if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
			t.Fatalf("%v", err)
		}
		if n := publishedKeys(t, srv); n != 0 {
			t.Fatalf("%d keys stored", n)
		}
	})

	// The same coredns version under a new name and with the add-on's own
	// fields is a new version of a built-in add-on: published.
	t.Run("a new version of a built-in add-on", func(t *testing.T) {
		files := renamed(coredns, "v1.12.1-eksbuild.2", "v1.12.9-eksbuild.1", same)
		if _, err := cc.PublishAddonVersion(ctxT(t), &controlv1.PublishAddonVersionRequest{Files: files, Version: "v1.12.9-eksbuild.1"}); err != nil {
			t.Fatal(err)
		}
		out, err := srv.EKS(t).DescribeAddonVersions(ctxT(t), &eks.DescribeAddonVersionsInput{AddonName: aws.String("coredns")})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Addons) != 1 || aws.ToString(out.Addons[0].AddonVersions[0].AddonVersion) != "v1.12.9-eksbuild.1" {
			t.Fatalf("coredns versions do not start with the published one: %+v", out.Addons)
		}
		if p := aws.ToString(out.Addons[0].Publisher); p != "eks" {
			t.Errorf("publisher %q: the built-in add-on's stays", p)
		}
	})
}

func TestPublishedVersionsAreImmutable(t *testing.T) {
	srv := servertest.Start(t)
	cc := controlv1.NewCatalogControlServiceClient(srv.GRPC(t))
	files := version(t, exampleDir, "v1.1.0")
	first, err := cc.PublishAddonVersion(ctxT(t), &controlv1.PublishAddonVersionRequest{Files: files, Version: "v1.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	v := first.GetVersion()
	if v.GetAddonName() != "acme-agent" || v.GetPublisher() != "acme-platform" || v.GetOwner() != "acme" ||
		!strings.HasPrefix(v.GetDigest(), "sha256:") || v.GetPublishedBy() == "" || len(v.GetDefaultFor()) != 5 {
		t.Fatalf("published %+v", v)
	}
	changed := maps.Clone(files)
	changed["v1.1.0/bundle/10-config.yaml"] = append([]byte("# changed\n"), files["v1.1.0/bundle/10-config.yaml"]...)
	for name, req := range map[string]*controlv1.PublishAddonVersionRequest{
		"the same files again": {Files: files, Version: "v1.1.0"},
		"other files":          {Files: changed, Version: "v1.1.0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cc.PublishAddonVersion(ctxT(t), req)
			if exc, msg := exception(err); exc != errdefs.ResourceInUseException || !strings.Contains(msg, "already published") {
				t.Fatalf("%s: %s", exc, msg)
			}
		})
	}
	list, err := cc.ListPublishedAddonVersions(ctxT(t), &controlv1.ListPublishedAddonVersionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetVersions()) != 1 || list.GetVersions()[0].GetDigest() != v.GetDigest() {
		t.Fatalf("listed %+v", list.GetVersions())
	}
}

// TestPublishIsForOperators: a service whose policy does not allow the
// catalogue's methods is refused, and nothing is stored.
func TestPublishIsForOperators(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	if _, err := srv.IAM().PutServicePolicy(ctx, "provisioner",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["saltbush:EnsureAddon","saltbush:GetAddon"],"Resource":"*"}]}`); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _, err := srv.Authority().IssueLocal(ctx, identity.ServiceID("provisioner"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := srv.Authority().Bundle()
	cfg, err := tlsclient.Config(bundle, certPEM, keyPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cc := controlv1.NewCatalogControlServiceClient(srv.GRPCWith(t, cfg, ""))
	_, err = cc.PublishAddonVersion(ctx, &controlv1.PublishAddonVersionRequest{Files: version(t, exampleDir, "v1.1.0"), Version: "v1.1.0"})
	if exc, msg := exception(err); exc != errdefs.AccessDeniedException || !strings.Contains(msg, "PublishAddonVersion") {
		t.Fatalf("%s: %s", exc, msg)
	}
	if n := publishedKeys(t, srv); n != 0 {
		t.Fatalf("%d keys stored", n)
	}
}

// TestPublishedAddonThroughTheSDK: a published add-on is listed, described,
// created, updated and deleted through the AWS SDK like a built-in one, to
// the accounts it is published for; retired, it is no longer offered.
func TestPublishedAddonThroughTheSDK(t *testing.T) {
	srv := servertest.Start(t)
	cc := controlv1.NewCatalogControlServiceClient(srv.GRPC(t))
	ctx := ctxT(t)
	const other = "210000000002"
	otherEKS := srv.EKSAs(t, srv.NewAccount(t, other))
	dev := srv.EKS(t)
	if _, err := cc.PublishAddonVersion(ctx, &controlv1.PublishAddonVersionRequest{Files: version(t, exampleDir, "v1.0.0"), Version: "v1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.PublishAddonVersion(ctx, &controlv1.PublishAddonVersionRequest{Files: version(t, exampleDir, "v1.1.0"), Version: "v1.1.0", AccountIds: []string{other}}); err != nil {
		t.Fatal(err)
	}

	versionsOf := func(c *eks.Client, in *eks.DescribeAddonVersionsInput) []string {
		t.Helper()
		out, err := c.DescribeAddonVersions(ctxT(t), in)
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, a := range out.Addons {
			if aws.ToString(a.AddonName) != "acme-agent" {
				continue
			}
			if aws.ToString(a.Publisher) != "acme-platform" || aws.ToString(a.Owner) != "acme" || aws.ToString(a.Type) != "observability" {
				t.Errorf("acme-agent listed as %s/%s/%s", aws.ToString(a.Publisher), aws.ToString(a.Owner), aws.ToString(a.Type))
			}
			for _, v := range a.AddonVersions {
				vs = append(vs, aws.ToString(v.AddonVersion))
			}
		}
		return vs
	}
	byName := &eks.DescribeAddonVersionsInput{AddonName: aws.String("acme-agent")}
	if got := versionsOf(dev, byName); strings.Join(got, ",") != "v1.0.0" {
		t.Fatalf("the development account sees %v, want the version published for every account", got)
	}
	if got := versionsOf(otherEKS, byName); strings.Join(got, ",") != "v1.1.0,v1.0.0" {
		t.Fatalf("account %s sees %v, want both", other, got)
	}
	if got := versionsOf(dev, &eks.DescribeAddonVersionsInput{Publishers: []string{"acme-platform"}}); len(got) != 1 {
		t.Fatalf("filtered by publisher: %v", got)
	}
	cfg, err := dev.DescribeAddonConfiguration(ctx, &eks.DescribeAddonConfigurationInput{AddonName: aws.String("acme-agent"), AddonVersion: aws.String("v1.0.0")})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(version(t, exampleDir, "v1.0.0")["v1.0.0/schema.json"])); aws.ToString(cfg.ConfigurationSchema) != want {
		t.Fatalf("configuration schema %s", aws.ToString(cfg.ConfigurationSchema))
	}

	cluster := "published"
	if _, err := dev.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String(cluster),
		RoleArn:            aws.String("arn:aws:iam::" + srv.Config.DevAccount + ":role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-1", "subnet-2"}}}); err != nil {
		t.Fatal(err)
	}
	// The version published for another account does not exist for this
	// one; the default is the newest the account sees.
	_, err = dev.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("acme-agent"), AddonVersion: aws.String("v1.1.0")})
	wantAPIError(t, err, "InvalidParameterException", "not supported")
	created, err := dev.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("acme-agent"),
		ConfigurationValues: aws.String(`{"logLevel":"debug"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if a := created.Addon; aws.ToString(a.AddonVersion) != "v1.0.0" || aws.ToString(a.Publisher) != "acme-platform" || aws.ToString(a.Owner) != "acme" {
		t.Fatalf("created %s by %s/%s", aws.ToString(a.AddonVersion), aws.ToString(a.Publisher), aws.ToString(a.Owner))
	}
	_, err = dev.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("acme-agent")})
	wantAPIError(t, err, "ResourceInUseException", "")

	// Retired: not listed, not offered, and the add-on on it may still be
	// changed.
	if _, err := cc.RetireAddonVersion(ctx, &controlv1.RetireAddonVersionRequest{AddonName: "acme-agent", Version: "v1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(dev, byName); len(got) != 0 {
		t.Fatalf("a retired version is listed: %v", got)
	}
	// The guest's report makes it ACTIVE (no agent runs here).
	ac := controlv1.NewAddonControlServiceClient(srv.GRPC(t))
	got, err := ac.GetAddon(ctx, &controlv1.GetAddonRequest{Cluster: &controlv1.ClusterRef{AccountId: srv.Config.DevAccount, Name: cluster}, AddonName: "acme-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ga := got.GetAddon()
	if r, err := ac.ApplyAddonReport(ctx, &controlv1.ApplyAddonReportRequest{ClusterUid: ga.GetClusterUid(), AddonName: "acme-agent",
		AddonUid: ga.GetUid(), Generation: ga.GetGeneration(), Phase: controlv1.AddonPhase_ADDON_PHASE_READY, InstanceId: "test"}); err != nil || !r.GetAccepted() {
		t.Fatalf("report: %v %v", err, r.GetReason())
	}
	if _, err := dev.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("acme-agent"),
		ConfigurationValues: aws.String(`{"logLevel":"warn"}`)}); err != nil {
		t.Fatalf("an add-on on a retired version cannot be configured: %v", err)
	}
	if _, err := dev.CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("second"),
		RoleArn:            aws.String("arn:aws:iam::" + srv.Config.DevAccount + ":role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{"subnet-1", "subnet-2"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = dev.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String("second"), AddonName: aws.String("acme-agent"), AddonVersion: aws.String("v1.0.0")})
	wantAPIError(t, err, "InvalidParameterException", "retired")
	if _, err := cc.UnretireAddonVersion(ctx, &controlv1.UnretireAddonVersionRequest{AddonName: "acme-agent", Version: "v1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(dev, byName); strings.Join(got, ",") != "v1.0.0" {
		t.Fatalf("unretired, listed %v", got)
	}
	if _, err := dev.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String("acme-agent")}); err != nil {
		t.Fatal(err)
	}
	_, err = cc.RetireAddonVersion(ctx, &controlv1.RetireAddonVersionRequest{AddonName: "acme-agent", Version: "v7.0.0"})
	if exc, msg := exception(err); exc != errdefs.ResourceNotFoundException {
		t.Fatalf("retiring an unknown version: %s: %s", exc, msg)
	}
}

// TestPublishedSeenByEveryReplica: a version published through one replica
// is served by another over the same etcd, through its watch.
func TestPublishedSeenByEveryReplica(t *testing.T) {
	a := servertest.Start(t)
	b := servertest.Start(t, servertest.WithEtcdEndpoints(a.EtcdEndpoints(t)))
	bEKS := b.EKS(t)
	list := func() []ekstypes.AddonInfo {
		out, err := bEKS.DescribeAddonVersions(ctxT(t), &eks.DescribeAddonVersionsInput{AddonName: aws.String("acme-agent")})
		if err != nil {
			t.Fatal(err)
		}
		return out.Addons
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("listed before publishing: %+v", got)
	}
	cc := controlv1.NewCatalogControlServiceClient(a.GRPC(t))
	if _, err := cc.PublishAddonVersion(ctxT(t), &controlv1.PublishAddonVersionRequest{Files: version(t, exampleDir, "v1.1.0"), Version: "v1.1.0"}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for len(list()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the other replica never served the published version")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func wantAPIError(t *testing.T, err error, code, fragment string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want %s, got %v", code, err)
	}
	if ae.ErrorCode() != code || !strings.Contains(ae.ErrorMessage(), fragment) {
		t.Fatalf("want %s (%q), got %s: %s", code, fragment, ae.ErrorCode(), ae.ErrorMessage())
	}
}
