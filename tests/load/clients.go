package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"golang.org/x/time/rate"
)

// The SDK operations, in the order they are printed.
const (
	opDescribeCluster      = "DescribeCluster"
	opCreateAddon          = "CreateAddon"
	opDescribeAddon        = "DescribeAddon"
	opListAddons           = "ListAddons"
	opUpdateAddon          = "UpdateAddon"
	opDeleteAddon          = "DeleteAddon"
	opCreateAccessEntry    = "CreateAccessEntry"
	opDescribeAccessEntry  = "DescribeAccessEntry"
	opListAccessEntries    = "ListAccessEntries"
	opUpdateAccessEntry    = "UpdateAccessEntry"
	opDeleteAccessEntry    = "DeleteAccessEntry"
	opAssociatePolicy      = "AssociateAccessPolicy"
	opDisassociatePolicy   = "DisassociateAccessPolicy"
	opListAssociatedPolicy = "ListAssociatedAccessPolicies"
)

// opDef is one SDK operation of the mix: its default weight and how a
// client makes one (false when none of the client's clusters offers a
// target, e.g. no ACTIVE add-on to update).
type opDef struct {
	name   string
	weight int
	do     func(c *client, ctx context.Context) bool
}

// sdkOps is the default mix: reads dominate, as with operators' tools and
// controllers polling; every write has its inverse at the same weight, so
// the data set stays near its prefilled size. -mix overrides weights.
var sdkOps = []opDef{
	{opDescribeCluster, 6, (*client).describeCluster},
	{opCreateAddon, 5, (*client).createAddon},
	{opDescribeAddon, 18, (*client).describeAddon},
	{opListAddons, 8, (*client).listAddons},
	{opUpdateAddon, 5, (*client).updateAddon},
	{opDeleteAddon, 5, (*client).deleteAddon},
	{opCreateAccessEntry, 5, (*client).createEntry},
	{opDescribeAccessEntry, 12, (*client).describeEntry},
	{opListAccessEntries, 7, (*client).listEntries},
	{opUpdateAccessEntry, 4, (*client).updateEntry},
	{opDeleteAccessEntry, 5, (*client).deleteEntry},
	{opAssociatePolicy, 6, (*client).associatePolicy},
	{opDisassociatePolicy, 6, (*client).disassociatePolicy},
	{opListAssociatedPolicy, 8, (*client).listPolicies},
}

// loadAddons are the add-ons clients create: the usual EKS set and the
// no-op test add-on, each with configuration values an update can change
// (addonConfig).
var loadAddons = []string{"coredns", "kube-proxy", "vpc-cni", "metrics-server", "aws-ebs-csi-driver", "saltbush-noop"}

// loadPolicies are the access policies entries are associated with.
var loadPolicies = []string{
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
	"arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy",
}

// addonConfig is a valid configurationValues document of add-on name (its
// schema in catalog/addons) that varies with n.
func addonConfig(name string, n int) string {
	r := n%5 + 1
	switch name {
	case "kube-proxy":
		return fmt.Sprintf(`{"mode": %q}`, []string{"iptables", "ipvs", "nftables"}[n%3])
	case "vpc-cni":
		return fmt.Sprintf(`{"env": {"WARM_ENI_TARGET": "%d"}}`, r)
	case "aws-ebs-csi-driver":
		return fmt.Sprintf(`{"controller": {"replicaCount": %d}}`, r)
	case "saltbush-noop":
		return fmt.Sprintf(`{"replicaCount": %d, "message": "load"}`, r)
	default:
		return fmt.Sprintf(`{"replicaCount": %d}`, r)
	}
}

// mix picks operations by weight.
type mix struct {
	ops   []opDef
	total int
}

// parseMix applies "Op=weight,..." to the default weights.
func parseMix(s string) (*mix, error) {
	ops := slices.Clone(sdkOps)
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("-mix: %q is not Operation=weight", part)
		}
		i := slices.IndexFunc(ops, func(o opDef) bool { return o.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-mix: unknown operation %q (known: %s)", name, strings.Join(opNames(), ", "))
		}
		ops[i].weight = n
	}
	m := &mix{}
	for _, o := range ops {
		if o.weight > 0 {
			m.ops = append(m.ops, o)
			m.total += o.weight
		}
	}
	if m.total == 0 {
		return nil, errors.New("-mix: every weight is zero")
	}
	return m, nil
}

// readOpNames are the operations that change nothing (Describe, List),
// writeOpNames the others.
func readOpNames() []string { return opNamesWhere(true) }

func writeOpNames() []string { return opNamesWhere(false) }

func opNamesWhere(read bool) []string {
	var out []string
	for _, o := range sdkOps {
		if isRead := strings.HasPrefix(o.name, "Describe") || strings.HasPrefix(o.name, "List"); isRead == read {
			out = append(out, o.name)
		}
	}
	return out
}

func opNames() []string {
	var out []string
	for _, o := range sdkOps {
		out = append(out, o.name)
	}
	return out
}

func (m *mix) pick(rng *rand.Rand) opDef {
	n := rng.IntN(m.total)
	for _, o := range m.ops {
		if n < o.weight {
			return o
		}
		n -= o.weight
	}
	return m.ops[len(m.ops)-1]
}

// client is one SDK user: it owns some of its tenant's clusters (no other
// client touches them), so its model of them says what each call should
// find, and a failure the model did not predict is a real error.
type client struct {
	sdk      *eks.Client
	tenant   *tenant
	clusters []*clusterModel
	rng      *rand.Rand
	rec      *recorder
	mix      *mix
	limiter  *rate.Limiter // shared by all clients; nil runs closed loop
	// throttleExpected says the offered rate per account is above
	// saltbush's per-account throttle.
	throttleExpected bool
	// seq varies the values updates write.
	seq int
}

// clusterModel is what a client believes of one of its clusters.
type clusterModel struct {
	name string
	// addons maps add-on names to the status last seen ("" after a
	// failed call: describe it again).
	addons map[string]ekstypes.AddonStatus
	// entries maps principal ARNs to their associated policies.
	entries map[string]map[string]bool
}

func newClusterModel(name string) *clusterModel {
	return &clusterModel{name: name, addons: map[string]ekstypes.AddonStatus{}, entries: map[string]map[string]bool{}}
}

// run makes calls until ctx ends, each allowed by the shared limiter. A
// call in flight when ctx ends is finished, not canceled: the run ends
// without failures of its own making (the HTTP client's timeout still
// bounds it).
func (c *client) run(ctx context.Context) {
	calls := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		if c.limiter != nil && c.limiter.Wait(ctx) != nil {
			return
		}
		// An operation with no target now gives way to another pick.
		for range 8 {
			if c.mix.pick(c.rng).do(c, calls) {
				break
			}
		}
	}
}

// record notes a call. ThrottlingException is expected when the offered
// rate per account is above saltbush's throttle (closed loop, or -rate
// over -accounts above -throttle-rate). A failure is also marked as the
// SDK's standard retryer sees it (sdkRetryable).
func (c *client) record(_ context.Context, op string, t0 time.Time, err error, expected bool) {
	kind := errKind(err)
	if kind == "ThrottlingException" && c.throttleExpected {
		expected = true
	}
	example := ""
	if err != nil {
		example = err.Error()
	}
	c.rec.recordKind(op, time.Since(t0), kind, expected, sdkRetryable(err), example)
}

func pickOne[T any](rng *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[rng.IntN(len(xs))], true
}

// find picks, among a few random clusters, one where choose finds a
// target.
func (c *client) find(choose func(cm *clusterModel) (string, bool)) (*clusterModel, string, bool) {
	for range 4 {
		cm, _ := pickOne(c.rng, c.clusters)
		if cm == nil {
			return nil, "", false
		}
		if t, ok := choose(cm); ok {
			return cm, t, true
		}
	}
	return nil, "", false
}

// addonsWhere are the add-ons whose status satisfies ok, sorted (map
// order is not random enough to pick from).
func addonsWhere(cm *clusterModel, ok func(ekstypes.AddonStatus) bool) []string {
	var out []string
	for n, st := range cm.addons {
		if ok(st) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (c *client) describeCluster(ctx context.Context) bool {
	cm, _ := pickOne(c.rng, c.clusters)
	if cm == nil {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cm.name)})
	c.record(ctx, opDescribeCluster, t0, err, false)
	return true
}

func (c *client) createAddon(ctx context.Context) bool {
	cm, name, ok := c.find(func(cm *clusterModel) (string, bool) {
		var absent []string
		for _, a := range loadAddons {
			if _, ok := cm.addons[a]; !ok {
				absent = append(absent, a)
			}
		}
		return pickOne(c.rng, absent)
	})
	if !ok {
		return false
	}
	c.createAddonIn(ctx, cm, name)
	return true
}

func (c *client) createAddonIn(ctx context.Context, cm *clusterModel, name string) {
	t0 := time.Now()
	_, err := c.sdk.CreateAddon(ctx, &eks.CreateAddonInput{ClusterName: aws.String(cm.name), AddonName: aws.String(name),
		Tags: map[string]string{"team": "load"}})
	c.record(ctx, opCreateAddon, t0, err, false)
	if err == nil {
		cm.addons[name] = ekstypes.AddonStatusCreating
	} else {
		cm.addons[name] = "" // it may exist: describe it
	}
}

func (c *client) describeAddon(ctx context.Context) bool {
	cm, name, ok := c.find(func(cm *clusterModel) (string, bool) {
		return pickOne(c.rng, addonsWhere(cm, func(ekstypes.AddonStatus) bool { return true }))
	})
	if !ok {
		return false
	}
	t0 := time.Now()
	out, err := c.sdk.DescribeAddon(ctx, &eks.DescribeAddonInput{ClusterName: aws.String(cm.name), AddonName: aws.String(name)})
	var nf *ekstypes.ResourceNotFoundException
	switch {
	case err == nil:
		cm.addons[name] = out.Addon.Status
		c.record(ctx, opDescribeAddon, t0, nil, false)
	case errors.As(err, &nf):
		// Gone is what a deleted add-on becomes once its executor reported
		// it REMOVED ("": a call that failed, already counted, left it
		// unknown).
		st := cm.addons[name]
		c.record(ctx, opDescribeAddon, t0, err, st == ekstypes.AddonStatusDeleting || st == "")
		delete(cm.addons, name)
	default:
		c.record(ctx, opDescribeAddon, t0, err, false)
	}
	return true
}

func (c *client) listAddons(ctx context.Context) bool {
	cm, _ := pickOne(c.rng, c.clusters)
	if cm == nil {
		return false
	}
	t0 := time.Now()
	out, err := c.sdk.ListAddons(ctx, &eks.ListAddonsInput{ClusterName: aws.String(cm.name)})
	c.record(ctx, opListAddons, t0, err, false)
	if err == nil {
		for name, st := range cm.addons {
			if st == ekstypes.AddonStatusDeleting && !slices.Contains(out.Addons, name) {
				delete(cm.addons, name)
			}
		}
	}
	return true
}

func (c *client) updateAddon(ctx context.Context) bool {
	cm, name, ok := c.find(func(cm *clusterModel) (string, bool) {
		return pickOne(c.rng, addonsWhere(cm, func(st ekstypes.AddonStatus) bool { return st == ekstypes.AddonStatusActive }))
	})
	if !ok {
		return false
	}
	c.seq++
	t0 := time.Now()
	_, err := c.sdk.UpdateAddon(ctx, &eks.UpdateAddonInput{ClusterName: aws.String(cm.name), AddonName: aws.String(name),
		ConfigurationValues: aws.String(addonConfig(name, c.seq)), ResolveConflicts: ekstypes.ResolveConflictsOverwrite})
	c.record(ctx, opUpdateAddon, t0, err, false)
	if err == nil {
		cm.addons[name] = ekstypes.AddonStatusUpdating
	} else {
		cm.addons[name] = ""
	}
	return true
}

func (c *client) deleteAddon(ctx context.Context) bool {
	cm, name, ok := c.find(func(cm *clusterModel) (string, bool) {
		return pickOne(c.rng, addonsWhere(cm, func(st ekstypes.AddonStatus) bool {
			return st == ekstypes.AddonStatusActive || st == ekstypes.AddonStatusDegraded ||
				st == ekstypes.AddonStatusCreateFailed || st == ekstypes.AddonStatusUpdateFailed
		}))
	})
	if !ok {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(cm.name), AddonName: aws.String(name)})
	c.record(ctx, opDeleteAddon, t0, err, false)
	if err == nil {
		cm.addons[name] = ekstypes.AddonStatusDeleting
	} else {
		cm.addons[name] = ""
	}
	return true
}

// entriesWhere are the principals of cm's entries that satisfy ok, sorted.
func entriesWhere(cm *clusterModel, ok func(policies map[string]bool) bool) []string {
	var out []string
	for p, pol := range cm.entries {
		if ok(pol) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func anyEntry(map[string]bool) bool { return true }

func (c *client) createEntry(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) {
		var absent []string
		for _, r := range c.tenant.roles {
			if _, ok := cm.entries[r]; !ok {
				absent = append(absent, r)
			}
		}
		return pickOne(c.rng, absent)
	})
	if !ok {
		return false
	}
	c.createEntryIn(ctx, cm, principal)
	return true
}

func (c *client) createEntryIn(ctx context.Context, cm *clusterModel, principal string) {
	t0 := time.Now()
	_, err := c.sdk.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal),
		KubernetesGroups: []string{"load-team"}, Tags: map[string]string{"team": "load"}})
	c.record(ctx, opCreateAccessEntry, t0, err, false)
	var inUse *ekstypes.ResourceInUseException
	if err == nil || errors.As(err, &inUse) { // in use: a retried create that was applied (prefill)
		cm.entries[principal] = map[string]bool{}
	}
}

func (c *client) describeEntry(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) { return pickOne(c.rng, entriesWhere(cm, anyEntry)) })
	if !ok {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal)})
	c.record(ctx, opDescribeAccessEntry, t0, err, false)
	return true
}

func (c *client) listEntries(ctx context.Context) bool {
	cm, _ := pickOne(c.rng, c.clusters)
	if cm == nil {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(cm.name)})
	c.record(ctx, opListAccessEntries, t0, err, false)
	return true
}

func (c *client) updateEntry(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) { return pickOne(c.rng, entriesWhere(cm, anyEntry)) })
	if !ok {
		return false
	}
	c.seq++
	t0 := time.Now()
	_, err := c.sdk.UpdateAccessEntry(ctx, &eks.UpdateAccessEntryInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal),
		KubernetesGroups: []string{"load-team", fmt.Sprintf("load-group-%d", c.seq%7)}})
	c.record(ctx, opUpdateAccessEntry, t0, err, false)
	return true
}

func (c *client) deleteEntry(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) { return pickOne(c.rng, entriesWhere(cm, anyEntry)) })
	if !ok {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal)})
	c.record(ctx, opDeleteAccessEntry, t0, err, false)
	if err == nil {
		delete(cm.entries, principal)
	}
	return true
}

func (c *client) associatePolicy(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) {
		return pickOne(c.rng, entriesWhere(cm, func(p map[string]bool) bool { return len(p) < len(loadPolicies) }))
	})
	if !ok {
		return false
	}
	var free []string
	for _, p := range loadPolicies {
		if !cm.entries[principal][p] {
			free = append(free, p)
		}
	}
	policy, _ := pickOne(c.rng, free)
	scope := &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeCluster}
	if c.rng.IntN(2) == 0 {
		scope = &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeNamespace, Namespaces: []string{"team-a", fmt.Sprintf("team-%d", c.rng.IntN(10))}}
	}
	t0 := time.Now()
	_, err := c.sdk.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal),
		PolicyArn: aws.String(policy), AccessScope: scope})
	c.record(ctx, opAssociatePolicy, t0, err, false)
	if err == nil {
		cm.entries[principal][policy] = true
	}
	return true
}

func (c *client) disassociatePolicy(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) {
		return pickOne(c.rng, entriesWhere(cm, func(p map[string]bool) bool { return len(p) > 0 }))
	})
	if !ok {
		return false
	}
	var held []string
	for p := range cm.entries[principal] {
		held = append(held, p)
	}
	slices.Sort(held)
	policy, _ := pickOne(c.rng, held)
	t0 := time.Now()
	_, err := c.sdk.DisassociateAccessPolicy(ctx, &eks.DisassociateAccessPolicyInput{ClusterName: aws.String(cm.name), PrincipalArn: aws.String(principal),
		PolicyArn: aws.String(policy)})
	c.record(ctx, opDisassociatePolicy, t0, err, false)
	if err == nil {
		delete(cm.entries[principal], policy)
	}
	return true
}

func (c *client) listPolicies(ctx context.Context) bool {
	cm, principal, ok := c.find(func(cm *clusterModel) (string, bool) { return pickOne(c.rng, entriesWhere(cm, anyEntry)) })
	if !ok {
		return false
	}
	t0 := time.Now()
	_, err := c.sdk.ListAssociatedAccessPolicies(ctx, &eks.ListAssociatedAccessPoliciesInput{ClusterName: aws.String(cm.name),
		PrincipalArn: aws.String(principal)})
	c.record(ctx, opListAssociatedPolicy, t0, err, false)
	return true
}

// prefill gives each of the client's clusters its first add-ons and access
// entries (recorded in rec, not the run's), so the run starts on a data
// set of the size it keeps.
func (c *client) prefill(ctx context.Context, addons, entries int) {
	for _, cm := range c.clusters {
		for _, name := range loadAddons[:min(addons, len(loadAddons))] {
			c.createAddonIn(ctx, cm, name)
		}
		for _, p := range c.tenant.roles[:min(entries, len(c.tenant.roles))] {
			c.createEntryIn(ctx, cm, p)
		}
	}
}
