package conformance

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/cluster/clustertest"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

// Authorization: IAM users of one account, each with one identity-based
// policy, against every façade operation. A refusal is AWS's
// AccessDeniedException (403) naming the user, the action and the
// resource, comes before any existence check, and writes nothing.

// policyCase is one call by one user and what it must get.
type policyCase struct {
	name string
	who  string // the caller's ARN
	c    *eks.Client
	call func(*eks.Client) error
	deny *denied // nil: allowed (and succeeds unless code is set)
	code string  // the non-authorization error an allowed call gets
}

// policyOps builds the calls a case makes; each returns only the error.
type policyOps struct{ t *testing.T }

// createCluster creates a cluster with role, and with nodeRole as its
// compute node role when one is given.
func (o policyOps) createCluster(name, role string, nodeRole ...string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		in := createInput(name)
		in.RoleArn = aws.String(role)
		for _, r := range nodeRole {
			in.ComputeConfig = &types.ComputeConfigRequest{Enabled: aws.Bool(true), NodePools: []string{"system"}, NodeRoleArn: aws.String(r)}
		}
		_, err := c.CreateCluster(ctxT(o.t), in)
		return err
	}
}

func (o policyOps) describeCluster(name string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DescribeCluster(ctxT(o.t), &eks.DescribeClusterInput{Name: aws.String(name)})
		return err
	}
}

func (o policyOps) listClusters() func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.ListClusters(ctxT(o.t), &eks.ListClustersInput{})
		return err
	}
}

func (o policyOps) deleteCluster(name string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DeleteCluster(ctxT(o.t), &eks.DeleteClusterInput{Name: aws.String(name)})
		return err
	}
}

func (o policyOps) createAddon(cluster, addon, role string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		in := &eks.CreateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)}
		if role != "" {
			in.ServiceAccountRoleArn = aws.String(role)
		}
		_, err := c.CreateAddon(ctxT(o.t), in)
		return err
	}
}

func (o policyOps) describeAddon(cluster, addon string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DescribeAddon(ctxT(o.t), &eks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
		return err
	}
}

func (o policyOps) listAddons(cluster string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.ListAddons(ctxT(o.t), &eks.ListAddonsInput{ClusterName: aws.String(cluster)})
		return err
	}
}

func (o policyOps) updateAddon(cluster, addon, role string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		in := &eks.UpdateAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon), ConfigurationValues: aws.String(`{"replicaCount": 5}`)}
		if role != "" {
			in.ServiceAccountRoleArn = aws.String(role)
		}
		_, err := c.UpdateAddon(ctxT(o.t), in)
		return err
	}
}

func (o policyOps) deleteAddon(cluster, addon string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DeleteAddon(ctxT(o.t), &eks.DeleteAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(addon)})
		return err
	}
}

func (o policyOps) describeAddonVersions() func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DescribeAddonVersions(ctxT(o.t), &eks.DescribeAddonVersionsInput{AddonName: aws.String("coredns")})
		return err
	}
}

func (o policyOps) describeAddonConfiguration(version string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DescribeAddonConfiguration(ctxT(o.t), &eks.DescribeAddonConfigurationInput{AddonName: aws.String("coredns"), AddonVersion: aws.String(version)})
		return err
	}
}

func (o policyOps) describeUpdate(cluster, id string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.DescribeUpdate(ctxT(o.t), &eks.DescribeUpdateInput{Name: aws.String(cluster), UpdateId: aws.String(id), AddonName: aws.String("coredns")})
		return err
	}
}

func (o policyOps) listUpdates(cluster string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.ListUpdates(ctxT(o.t), &eks.ListUpdatesInput{Name: aws.String(cluster)})
		return err
	}
}

func (o policyOps) tag(arn string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.TagResource(ctxT(o.t), &eks.TagResourceInput{ResourceArn: aws.String(arn), Tags: map[string]string{"touched": "yes"}})
		return err
	}
}

func (o policyOps) untag(arn string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.UntagResource(ctxT(o.t), &eks.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: []string{"team"}})
		return err
	}
}

func (o policyOps) listTags(arn string) func(*eks.Client) error {
	return func(c *eks.Client) error {
		_, err := c.ListTagsForResource(ctxT(o.t), &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		return err
	}
}

// denied is the AccessDeniedException a call must get.
type denied struct {
	action, resource string
	explicit         bool
}

// checkDenied asserts err is AWS's AccessDeniedException for who, with
// IAM's message.
func checkDenied(t *testing.T, err error, who string, d denied) {
	t.Helper()
	want := fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
		who, d.action, d.resource, d.action)
	if d.explicit {
		want = fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s with an explicit deny in an identity-based policy",
			who, d.action, d.resource)
	}
	if msg := authForbidden(t, err, "AccessDeniedException", ""); msg != want {
		t.Errorf("message = %q\n         want %q", msg, want)
	}
	wanterr.Type[*types.AccessDeniedException](t, err)
}

const (
	policyReadOnly     = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:Describe*","eks:List*"],"Resource":"*"}]}`
	policyAllButDelete = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},
		{"Effect":"Deny","Action":"eks:DeleteCluster","Resource":"*"}]}`
	policyEKSAll = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*","Resource":"*"}]}`
)

func TestAuthPolicyEnforcement(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	srv, admin := h.srv, h.eks
	ctx := ctxT(t)
	region, acct := srv.Config.Cluster.Region, h.account
	clusterARN := func(name string) string { return "arn:aws:eks:" + region + ":" + acct + ":cluster/" + name }
	addonPrefix := func(cluster, addon string) string {
		return "arn:aws:eks:" + region + ":" + acct + ":addon/" + cluster + "/" + addon + "/"
	}
	role := "arn:aws:iam::" + acct + ":role/cni"
	otherRole := "arn:aws:iam::" + acct + ":role/other"
	foreignRole := "arn:aws:iam::111111111111:role/cni"

	// team-a-1 (ACTIVE, coredns with an update in progress, vpc-cni) and
	// team-b-1 (ACTIVE, coredns), made by the administrator.
	addonCluster(t, h, "team-a-1", "1.35")
	addonCluster(t, h, "team-b-1", "1.35")
	h.cluster = "team-a-1"
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("vpc-cni")})
	addonCreate(t, h, &eks.CreateAddonInput{ClusterName: aws.String("team-b-1"), AddonName: aws.String("coredns")})
	up, err := admin.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String("team-a-1"), AddonName: aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`)})
	if err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	updateID := aws.ToString(up.Update.Id)
	coredns := h.describe(t, "coredns")
	corednsARN, corednsVersion := aws.ToString(coredns.AddonArn), aws.ToString(coredns.AddonVersion)
	vpcCNIARN := aws.ToString(h.describe(t, "vpc-cni").AddonArn)
	bCoredns := addonDescribeOn(t, h, "team-b-1", "coredns")
	bCorednsARN := aws.ToString(bCoredns.AddonArn)

	user := func(name, doc string) (string, *eks.Client) {
		arn := "arn:aws:iam::" + acct + ":user/" + name
		return arn, srv.EKSAs(t, srv.NewUser(t, arn, doc), authOneAttempt)
	}
	readerARN, reader := user("reader", policyReadOnly)
	teamARN, team := user("team-a", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*",
		"Resource":"arn:aws:eks:`+region+`:`+acct+`:cluster/team-a-*"}]}`)
	denierARN, denier := user("no-delete", policyAllButDelete)
	nobodyARN, nobody := user("nobody", "")
	corednsOnlyARN, corednsOnly := user("coredns-only", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow",
		"Action":"eks:DescribeAddon","Resource":"`+addonPrefix("team-a-1", "coredns")+`*"}]}`)
	noPassARN, noPass := user("no-pass", policyEKSAll)
	withPassARN, withPass := user("with-pass", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*","Resource":"*"},
		{"Effect":"Allow","Action":"iam:PassRole","Resource":"`+role+`"}]}`)

	// The resource ListClusters is authorized (and refused) on: all of the
	// account's clusters, as AWS's message names it.
	listClustersResource := "arn:aws:eks:" + srv.Config.Cluster.Region + ":" + srv.Config.DevAccount + ":cluster/*"

	o := policyOps{t}
	cases := []policyCase{
		// Read-only: Describe*/List* on *.
		{name: "reader DescribeCluster", who: readerARN, c: reader, call: o.describeCluster("team-a-1")},
		{name: "reader ListClusters", who: readerARN, c: reader, call: o.listClusters()},
		{name: "reader DescribeAddon", who: readerARN, c: reader, call: o.describeAddon("team-a-1", "coredns")},
		{name: "reader ListAddons", who: readerARN, c: reader, call: o.listAddons("team-a-1")},
		{name: "reader DescribeAddonVersions", who: readerARN, c: reader, call: o.describeAddonVersions()},
		{name: "reader DescribeAddonConfiguration", who: readerARN, c: reader, call: o.describeAddonConfiguration(corednsVersion)},
		{name: "reader DescribeUpdate", who: readerARN, c: reader, call: o.describeUpdate("team-a-1", updateID)},
		{name: "reader ListUpdates", who: readerARN, c: reader, call: o.listUpdates("team-a-1")},
		{name: "reader ListTagsForResource", who: readerARN, c: reader, call: o.listTags(clusterARN("team-a-1"))},
		{name: "reader DescribeCluster of a missing cluster", who: readerARN, c: reader, call: o.describeCluster("team-a-9"), code: "ResourceNotFoundException"},
		{name: "reader CreateCluster", who: readerARN, c: reader, call: o.createCluster("new-1", roleARN),
			deny: &denied{action: "eks:CreateCluster", resource: clusterARN("new-1")}},
		{name: "reader DeleteCluster", who: readerARN, c: reader, call: o.deleteCluster("team-a-1"),
			deny: &denied{action: "eks:DeleteCluster", resource: clusterARN("team-a-1")}},
		{name: "reader CreateAddon", who: readerARN, c: reader, call: o.createAddon("team-a-1", "kube-proxy", ""),
			deny: &denied{action: "eks:CreateAddon", resource: clusterARN("team-a-1")}},
		{name: "reader UpdateAddon", who: readerARN, c: reader, call: o.updateAddon("team-a-1", "vpc-cni", ""),
			deny: &denied{action: "eks:UpdateAddon", resource: vpcCNIARN}},
		{name: "reader DeleteAddon", who: readerARN, c: reader, call: o.deleteAddon("team-a-1", "coredns"),
			deny: &denied{action: "eks:DeleteAddon", resource: corednsARN}},
		{name: "reader TagResource", who: readerARN, c: reader, call: o.tag(clusterARN("team-a-1")),
			deny: &denied{action: "eks:TagResource", resource: clusterARN("team-a-1")}},
		{name: "reader UntagResource", who: readerARN, c: reader, call: o.untag(corednsARN),
			deny: &denied{action: "eks:UntagResource", resource: corednsARN}},

		// Resource-scoped: eks:* on cluster/team-a-*.
		{name: "team-a DescribeCluster team-a-1", who: teamARN, c: team, call: o.describeCluster("team-a-1")},
		{name: "team-a ListAddons team-a-1", who: teamARN, c: team, call: o.listAddons("team-a-1")},
		{name: "team-a ListUpdates team-a-1", who: teamARN, c: team, call: o.listUpdates("team-a-1")},
		{name: "team-a TagResource team-a-1", who: teamARN, c: team, call: o.tag(clusterARN("team-a-1"))},
		{name: "team-a DescribeCluster of a missing team-a cluster", who: teamARN, c: team, call: o.describeCluster("team-a-9"),
			code: "ResourceNotFoundException"},
		{name: "team-a DescribeCluster team-b-1", who: teamARN, c: team, call: o.describeCluster("team-b-1"),
			deny: &denied{action: "eks:DescribeCluster", resource: clusterARN("team-b-1")}},
		{name: "team-a DescribeCluster of a missing team-b cluster", who: teamARN, c: team, call: o.describeCluster("team-b-9"),
			deny: &denied{action: "eks:DescribeCluster", resource: clusterARN("team-b-9")}},
		{name: "team-a DeleteCluster team-b-1", who: teamARN, c: team, call: o.deleteCluster("team-b-1"),
			deny: &denied{action: "eks:DeleteCluster", resource: clusterARN("team-b-1")}},
		{name: "team-a ListAddons team-b-1", who: teamARN, c: team, call: o.listAddons("team-b-1"),
			deny: &denied{action: "eks:ListAddons", resource: clusterARN("team-b-1")}},
		{name: "team-a TagResource team-b-1", who: teamARN, c: team, call: o.tag(clusterARN("team-b-1")),
			deny: &denied{action: "eks:TagResource", resource: clusterARN("team-b-1")}},
		// ListClusters acts on no one cluster: a cluster-scoped statement
		// does not cover it.
		{name: "team-a ListClusters", who: teamARN, c: team, call: o.listClusters(),
			deny: &denied{action: "eks:ListClusters", resource: listClustersResource}},
		// DescribeAddon's resource is the add-on ARN, not the cluster's.
		{name: "team-a DescribeAddon on team-a-1", who: teamARN, c: team, call: o.describeAddon("team-a-1", "coredns"),
			deny: &denied{action: "eks:DescribeAddon", resource: corednsARN}},
		{name: "team-a CreateCluster team-b-2", who: teamARN, c: team, call: o.createCluster("team-b-2", roleARN),
			deny: &denied{action: "eks:CreateCluster", resource: clusterARN("team-b-2")}},
		// Allowed to create team-a-2, not to pass its role.
		{name: "team-a CreateCluster team-a-2 without iam:PassRole", who: teamARN, c: team, call: o.createCluster("team-a-2", roleARN),
			deny: &denied{action: "iam:PassRole", resource: roleARN}},

		// Explicit deny beats Allow *.
		{name: "no-delete DescribeCluster", who: denierARN, c: denier, call: o.describeCluster("team-b-1")},
		{name: "no-delete DeleteCluster", who: denierARN, c: denier, call: o.deleteCluster("team-b-1"),
			deny: &denied{action: "eks:DeleteCluster", resource: clusterARN("team-b-1"), explicit: true}},
		{name: "no-delete DeleteCluster of a missing cluster", who: denierARN, c: denier, call: o.deleteCluster("team-b-9"),
			deny: &denied{action: "eks:DeleteCluster", resource: clusterARN("team-b-9"), explicit: true}},

		// Add-on ARN scoping: DescribeAddon on addon/team-a-1/coredns/*.
		{name: "coredns-only DescribeAddon coredns", who: corednsOnlyARN, c: corednsOnly, call: o.describeAddon("team-a-1", "coredns")},
		{name: "coredns-only DescribeAddon vpc-cni", who: corednsOnlyARN, c: corednsOnly, call: o.describeAddon("team-a-1", "vpc-cni"),
			deny: &denied{action: "eks:DescribeAddon", resource: vpcCNIARN}},
		{name: "coredns-only DescribeAddon coredns of team-b-1", who: corednsOnlyARN, c: corednsOnly, call: o.describeAddon("team-b-1", "coredns"),
			deny: &denied{action: "eks:DescribeAddon", resource: bCorednsARN}},
		// An absent add-on has no uuid: "*" stands in, so the answer does
		// not tell whether it exists.
		{name: "coredns-only DescribeAddon of a missing add-on", who: corednsOnlyARN, c: corednsOnly, call: o.describeAddon("team-a-1", "kube-proxy"),
			deny: &denied{action: "eks:DescribeAddon", resource: addonPrefix("team-a-1", "kube-proxy") + "*"}},
		{name: "coredns-only DescribeCluster", who: corednsOnlyARN, c: corednsOnly, call: o.describeCluster("team-a-1"),
			deny: &denied{action: "eks:DescribeCluster", resource: clusterARN("team-a-1")}},
		{name: "coredns-only UpdateAddon coredns", who: corednsOnlyARN, c: corednsOnly, call: o.updateAddon("team-a-1", "coredns", ""),
			deny: &denied{action: "eks:UpdateAddon", resource: corednsARN}},

		// iam:PassRole for service-account roles of the caller's account.
		{name: "no-pass CreateAddon with its account's role", who: noPassARN, c: noPass, call: o.createAddon("team-a-1", "kube-proxy", role),
			deny: &denied{action: "iam:PassRole", resource: role}},
		{name: "no-pass UpdateAddon with its account's role", who: noPassARN, c: noPass, call: o.updateAddon("team-a-1", "vpc-cni", role),
			deny: &denied{action: "iam:PassRole", resource: role}},
		{name: "no-pass CreateAddon with another account's role", who: noPassARN, c: noPass, call: o.createAddon("team-b-1", "kube-proxy", foreignRole),
			code: "InvalidParameterException"},
		{name: "no-pass CreateAddon without a role", who: noPassARN, c: noPass, call: o.createAddon("team-a-1", "kube-proxy", "")},
		{name: "with-pass CreateAddon with another of its account's roles", who: withPassARN, c: withPass, call: o.createAddon("team-b-1", "kube-proxy", otherRole),
			deny: &denied{action: "iam:PassRole", resource: otherRole}},
		{name: "with-pass CreateAddon with another account's role", who: withPassARN, c: withPass, call: o.createAddon("team-b-1", "kube-proxy", foreignRole),
			code: "InvalidParameterException"},
		{name: "with-pass CreateAddon with the role", who: withPassARN, c: withPass, call: o.createAddon("team-b-1", "kube-proxy", role)},
		// CreateCluster passes its cluster role and its compute node role.
		{name: "no-pass CreateCluster with another account's role", who: noPassARN, c: noPass, call: o.createCluster("pass-1", foreignRole),
			code: "InvalidParameterException"},
		{name: "with-pass CreateCluster with a node role it may not pass", who: withPassARN, c: withPass, call: o.createCluster("pass-1", role, otherRole),
			deny: &denied{action: "iam:PassRole", resource: otherRole}},
		{name: "with-pass CreateCluster with the role", who: withPassARN, c: withPass, call: o.createCluster("pass-1", role, role)},
	}

	// No policy: every operation is denied, existing target or not.
	for _, op := range []struct {
		name string
		call func(*eks.Client) error
		d    denied
	}{
		{"CreateCluster", o.createCluster("new-2", roleARN), denied{"eks:CreateCluster", clusterARN("new-2"), false}},
		{"DescribeCluster", o.describeCluster("team-a-1"), denied{"eks:DescribeCluster", clusterARN("team-a-1"), false}},
		{"DescribeCluster of a missing cluster", o.describeCluster("does-not-exist"), denied{"eks:DescribeCluster", clusterARN("does-not-exist"), false}},
		{"ListClusters", o.listClusters(), denied{"eks:ListClusters", listClustersResource, false}},
		{"DeleteCluster", o.deleteCluster("team-a-1"), denied{"eks:DeleteCluster", clusterARN("team-a-1"), false}},
		{"CreateAddon", o.createAddon("team-a-1", "kube-proxy", ""), denied{"eks:CreateAddon", clusterARN("team-a-1"), false}},
		{"CreateAddon on a missing cluster", o.createAddon("does-not-exist", "kube-proxy", ""), denied{"eks:CreateAddon", clusterARN("does-not-exist"), false}},
		{"DescribeAddon", o.describeAddon("team-a-1", "coredns"), denied{"eks:DescribeAddon", corednsARN, false}},
		{"DescribeAddon on a missing cluster", o.describeAddon("does-not-exist", "coredns"), denied{"eks:DescribeAddon", addonPrefix("does-not-exist", "coredns") + "*", false}},
		{"ListAddons", o.listAddons("team-a-1"), denied{"eks:ListAddons", clusterARN("team-a-1"), false}},
		{"UpdateAddon", o.updateAddon("team-a-1", "vpc-cni", ""), denied{"eks:UpdateAddon", vpcCNIARN, false}},
		{"DeleteAddon", o.deleteAddon("team-a-1", "vpc-cni"), denied{"eks:DeleteAddon", vpcCNIARN, false}},
		{"DescribeAddonVersions", o.describeAddonVersions(), denied{"eks:DescribeAddonVersions", "*", false}},
		{"DescribeAddonConfiguration", o.describeAddonConfiguration(corednsVersion), denied{"eks:DescribeAddonConfiguration", "*", false}},
		{"DescribeUpdate", o.describeUpdate("team-a-1", updateID), denied{"eks:DescribeUpdate", clusterARN("team-a-1"), false}},
		{"ListUpdates", o.listUpdates("team-a-1"), denied{"eks:ListUpdates", clusterARN("team-a-1"), false}},
		{"TagResource", o.tag(clusterARN("team-a-1")), denied{"eks:TagResource", clusterARN("team-a-1"), false}},
		{"TagResource on an add-on", o.tag(corednsARN), denied{"eks:TagResource", corednsARN, false}},
		{"UntagResource", o.untag(clusterARN("team-a-1")), denied{"eks:UntagResource", clusterARN("team-a-1"), false}},
		{"ListTagsForResource", o.listTags(clusterARN("team-a-1")), denied{"eks:ListTagsForResource", clusterARN("team-a-1"), false}},
		{"ListTagsForResource of a missing cluster", o.listTags(clusterARN("does-not-exist")), denied{"eks:ListTagsForResource", clusterARN("does-not-exist"), false}},
	} {
		d := op.d
		cases = append(cases, policyCase{name: "nobody " + op.name, who: nobodyARN, c: nobody, call: op.call, deny: &d})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := addonKeyspace(t, h)
			err := tc.call(tc.c)
			switch {
			case tc.deny != nil:
				checkDenied(t, err, tc.who, *tc.deny)
				addonNoWrites(t, h, before)
			case tc.code != "":
				checkAWSErr(t, err, awsErr{code: tc.code})
				addonNoWrites(t, h, before)
			case err != nil:
				t.Fatalf("allowed call failed: %v", err)
			}
		})
	}

	// What the allowed calls did, and only that.
	t.Run("state after", func(t *testing.T) {
		ctx := ctxT(t)
		list, err := admin.ListClusters(ctx, &eks.ListClustersInput{})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"addons-1", "pass-1", "team-a-1", "team-b-1"}; fmt.Sprint(list.Clusters) != fmt.Sprint(want) {
			t.Errorf("clusters = %v, want %v (no refused CreateCluster wrote one)", list.Clusters, want)
		}
		for _, name := range []string{"team-a-1", "team-b-1"} {
			out, err := admin.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
			if err != nil || out.Cluster.Status != types.ClusterStatusActive {
				t.Errorf("%s: %v, %v; want ACTIVE (no refused DeleteCluster started a deletion)", name, out, err)
			}
		}
		tags, err := admin.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(clusterARN("team-a-1"))})
		if err != nil || fmt.Sprint(tags.Tags) != "map[touched:yes]" {
			t.Errorf("team-a-1 tags = %v, %v; want only team-a's touched=yes", tags, err)
		}
		tags, err = admin.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(clusterARN("team-b-1"))})
		if err != nil || len(tags.Tags) != 0 {
			t.Errorf("team-b-1 tags = %v, %v; want none", tags, err)
		}
		addons, err := admin.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String("team-a-1")})
		if err != nil || fmt.Sprint(addons.Addons) != "[coredns kube-proxy vpc-cni]" {
			t.Errorf("team-a-1 add-ons = %v, %v", addons, err)
		}
		if a := h.describe(t, "kube-proxy"); a.ServiceAccountRoleArn != nil {
			t.Errorf("team-a-1 kube-proxy role = %s, want none (the PassRole refusal wrote nothing)", aws.ToString(a.ServiceAccountRoleArn))
		}
		if a := addonDescribeOn(t, h, "team-b-1", "kube-proxy"); aws.ToString(a.ServiceAccountRoleArn) != role {
			t.Errorf("team-b-1 kube-proxy role = %s, want %s", aws.ToString(a.ServiceAccountRoleArn), role)
		}
		if a := h.describe(t, "vpc-cni"); a.Status != types.AddonStatusCreating || a.ServiceAccountRoleArn != nil {
			t.Errorf("vpc-cni = %s role %v; want CREATING, no role (refused updates and deletes wrote nothing)", a.Status, a.ServiceAccountRoleArn)
		}
	})
}

// An account's root needs no policy: everything in its own account is
// allowed, passing any of its roles included; other accounts' roles are
// still refused by validation.
func TestAuthPolicyAccountRoot(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t)
	root := srv.NewAccount(t, "222222222222")
	c := srv.EKSAs(t, root, authOneAttempt)
	ctx := ctxT(t)
	acct, region := root.AccountID, srv.Config.Cluster.Region
	role := "arn:aws:iam::" + acct + ":role/eks-cluster"
	arn := "arn:aws:eks:" + region + ":" + acct + ":cluster/root-1"

	for _, name := range []string{"root-1", "root-2"} {
		in := createInput(name)
		in.RoleArn = aws.String(role)
		out, err := c.CreateCluster(ctx, in)
		if err != nil {
			t.Fatalf("root CreateCluster %s: %v", name, err)
		}
		if got := aws.ToString(out.Cluster.Arn); got != "arn:aws:eks:"+region+":"+acct+":cluster/"+name {
			t.Errorf("ARN = %s", got)
		}
	}
	cc := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	if _, err := cc.SetStatus(ctx, &controlv1.SetStatusRequest{
		Cluster: &controlv1.ClusterRef{AccountId: acct, Name: "root-1"}, Status: controlv1.ClusterStatus_CLUSTER_STATUS_ACTIVE,
		Endpoint: "https://10.0.0.3:6443", PlatformVersion: "eks.1", CertificateAuthorityData: clustertest.CertificateAuthorityData(t),
	}); err != nil {
		t.Fatalf("SetStatus: %v", err)
	}
	o := policyOps{t}
	steps := []struct {
		name string
		call func(*eks.Client) error
	}{
		{"DescribeCluster", o.describeCluster("root-1")},
		{"ListClusters", o.listClusters()},
		{"TagResource", o.tag(arn)},
		{"ListTagsForResource", o.listTags(arn)},
		{"UntagResource", o.untag(arn)},
		{"DescribeAddonVersions", o.describeAddonVersions()},
		{"CreateAddon passing its own role", o.createAddon("root-1", "vpc-cni", "arn:aws:iam::"+acct+":role/cni")},
		{"DescribeAddon", o.describeAddon("root-1", "vpc-cni")},
		{"ListAddons", o.listAddons("root-1")},
		{"ListUpdates", o.listUpdates("root-1")},
		{"DeleteAddon", o.deleteAddon("root-1", "vpc-cni")},
		{"DeleteCluster", o.deleteCluster("root-2")},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.call(c); err != nil {
				t.Fatalf("root %s: %v", s.name, err)
			}
		})
	}
	t.Run("CreateAddon passing another account's role", func(t *testing.T) {
		h := &addonHarness{srv: srv}
		before := addonKeyspace(t, h)
		err := o.createAddon("root-1", "coredns", "arn:aws:iam::000000000000:role/cni")(c)
		checkAWSErr(t, err, awsErr{code: "InvalidParameterException", cluster: "root-1", addon: "coredns"})
		addonNoWrites(t, h, before)
	})
}
