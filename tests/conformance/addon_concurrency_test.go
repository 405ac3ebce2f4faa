package conformance

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
)

// concurrently runs f n times at once and returns the results in order.
func concurrently[T any](n int, f func(i int) (T, error)) ([]T, []error) {
	outs, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outs[i], errs[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	return outs, errs
}

func TestAddonConcurrentCreate(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	const n = 50
	idemPrefix := "idempotency/" + h.account + "/CreateAddon/"

	// Without a token of the caller's (the SDK fills a fresh random one
	// into every call): exactly one wins, the others are told it exists.
	t.Run("no token", func(t *testing.T) {
		tokensBefore := addonKeysUnder(t, h, idemPrefix)
		outs, errs := concurrently(n, func(int) (*eks.CreateAddonOutput, error) {
			return h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")})
		})
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				if outs[i].Addon.Status != types.AddonStatusCreating {
					t.Errorf("winner status = %s", outs[i].Addon.Status)
				}
				continue
			}
			var inUse *types.ResourceInUseException
			if !errors.As(err, &inUse) {
				t.Errorf("call %d: %v, want ResourceInUseException", i, err)
				continue
			}
			if got := aws.ToString(inUse.Message); got != "Addon already exists." {
				t.Errorf("call %d: message %q, want %q", i, got, "Addon already exists.")
			}
			if aws.ToString(inUse.AddonName) != "coredns" || aws.ToString(inUse.ClusterName) != h.cluster {
				t.Errorf("call %d: members addonName=%s clusterName=%s", i, strPtr(inUse.AddonName), strPtr(inUse.ClusterName))
			}
		}
		if won != 1 {
			t.Fatalf("%d of %d concurrent creates succeeded, want exactly 1", won, n)
		}
		if a := h.get(t, "coredns"); a.GetGeneration() != 1 {
			t.Errorf("generation = %d, want 1", a.GetGeneration())
		}
		// Only the winner's (SDK-generated) token was remembered.
		if got := addonKeysUnder(t, h, idemPrefix) - tokensBefore; got != 1 {
			t.Errorf("%d idempotency records written, want 1 (the winner's)", got)
		}
	})

	// The same token 50 times at once: one create, 50 identical answers.
	t.Run("same token", func(t *testing.T) {
		outs, errs := concurrently(n, func(int) (*eks.CreateAddonOutput, error) {
			return h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{
				ClusterName: aws.String(h.cluster), AddonName: aws.String("kube-proxy"),
				// Many tags: a map must not make equal requests look different.
				ClientRequestToken: aws.String("same-token-1"), Tags: manyTags(20),
			})
		})
		arn := ""
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v, want success", i, err)
				continue
			}
			got := aws.ToString(outs[i].Addon.AddonArn)
			if arn == "" {
				arn = got
			}
			if got != arn || got == "" {
				t.Errorf("call %d: addonArn %q, want %q", i, got, arn)
			}
		}
		a := h.get(t, "kube-proxy")
		if a.GetGeneration() != 1 || a.GetUid() == "" || !strings.HasSuffix(arn, "/"+a.GetUid()) {
			t.Errorf("record: generation %d uid %s, arn %s", a.GetGeneration(), a.GetUid(), arn)
		}
	})

	t.Run("same token, different parameters", func(t *testing.T) {
		for _, in := range []*eks.CreateAddonInput{
			// same add-on, another version
			{AddonName: aws.String("kube-proxy"), AddonVersion: aws.String("v1.32.6-eksbuild.2"), Tags: manyTags(20)},
			// same add-on, other tags
			{AddonName: aws.String("kube-proxy"), Tags: manyTags(19)},
			// another add-on altogether
			{AddonName: aws.String("metrics-server"), Tags: manyTags(20)},
		} {
			in.ClusterName = aws.String(h.cluster)
			in.ClientRequestToken = aws.String("same-token-1")
			before := addonKeyspace(t, h)
			_, err := h.eks.CreateAddon(ctxT(t), in)
			checkAWSErr(t, err, awsErr{code: "InvalidParameterException", msg: []string{"clientRequestToken"},
				cluster: h.cluster, addon: aws.ToString(in.AddonName)})
			addonNoWrites(t, h, before)
		}
	})

	// An SDK retry after a success the caller never saw (same token,
	// sequential) answers with the add-on, not with an error.
	t.Run("retry after success", func(t *testing.T) {
		in := &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("vpc-cni"),
			ClientRequestToken: aws.String("retry-token-1")}
		first := addonCreate(t, h, in)
		before := addonKeyspace(t, h)
		again, err := h.eks.CreateAddon(ctxT(t), in)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if aws.ToString(again.Addon.AddonArn) != aws.ToString(first.AddonArn) {
			t.Errorf("retry arn %s, first %s", aws.ToString(again.Addon.AddonArn), aws.ToString(first.AddonArn))
		}
		addonNoWrites(t, h, before)
		// Still the add-on after it moved on.
		h.report(t, "vpc-cni", 1, controlv1.AddonPhase_ADDON_PHASE_READY)
		again, err = h.eks.CreateAddon(ctxT(t), in)
		if err != nil {
			t.Fatalf("retry after READY: %v", err)
		}
		if again.Addon.Status != types.AddonStatusActive || aws.ToString(again.Addon.AddonArn) != aws.ToString(first.AddonArn) {
			t.Errorf("retry after READY: %s %s", again.Addon.Status, aws.ToString(again.Addon.AddonArn))
		}
	})

	// A token of an add-on that was deleted since does not resurrect it,
	// nor create a new one.
	t.Run("retry after the add-on is gone", func(t *testing.T) {
		in := &eks.CreateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("saltbush-noop"),
			ClientRequestToken: aws.String("gone-token-1")}
		addonCreate(t, h, in)
		if _, err := h.eks.DeleteAddon(ctxT(t), &eks.DeleteAddonInput{ClusterName: in.ClusterName, AddonName: in.AddonName}); err != nil {
			t.Fatal(err)
		}
		h.report(t, "saltbush-noop", 2, controlv1.AddonPhase_ADDON_PHASE_REMOVED)
		before := addonKeyspace(t, h)
		_, err := h.eks.CreateAddon(ctxT(t), in)
		if err == nil {
			t.Fatal("a create with the token of a removed add-on succeeded")
		}
		addonNoWrites(t, h, before)
	})
}

func TestAddonUpdateIdempotency(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})
	in := &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
		ConfigurationValues: aws.String(`{"replicaCount": 2}`), ClientRequestToken: aws.String("update-token-1")}

	first, err := h.eks.UpdateAddon(ctx, in)
	if err != nil {
		t.Fatalf("UpdateAddon: %v", err)
	}
	id := aws.ToString(first.Update.Id)
	if got := h.get(t, "coredns"); got.GetGeneration() != 2 || got.GetUpdateId() != id {
		t.Fatalf("after update: generation %d update %s, want 2 %s", got.GetGeneration(), got.GetUpdateId(), id)
	}

	t.Run("same token twice", func(t *testing.T) {
		before := addonKeyspace(t, h)
		again, err := h.eks.UpdateAddon(ctx, in)
		if err != nil {
			t.Fatalf("repeat: %v", err)
		}
		if got := aws.ToString(again.Update.Id); got != id {
			t.Errorf("repeat update id %s, want %s", got, id)
		}
		if got := h.get(t, "coredns").GetGeneration(); got != 2 {
			t.Errorf("generation after repeat = %d, want 2", got)
		}
		addonNoWrites(t, h, before)
	})

	t.Run("same token, different parameters", func(t *testing.T) {
		for _, mod := range []func(*eks.UpdateAddonInput){
			func(u *eks.UpdateAddonInput) { u.ConfigurationValues = aws.String(`{"replicaCount": 3}`) },
			func(u *eks.UpdateAddonInput) { u.ResolveConflicts = types.ResolveConflictsOverwrite },
			func(u *eks.UpdateAddonInput) { u.AddonName = aws.String("kube-proxy") },
		} {
			u := *in
			mod(&u)
			before := addonKeyspace(t, h)
			_, err := h.eks.UpdateAddon(ctx, &u)
			checkAWSErr(t, err, awsErr{code: "InvalidParameterException", msg: []string{"clientRequestToken"}, cluster: h.cluster})
			addonNoWrites(t, h, before)
		}
	})

	t.Run("stale READY leaves the update InProgress", func(t *testing.T) {
		staleBefore := addonReportsTotal(t, h, "stale_generation")
		if r := h.report(t, "coredns", 1, controlv1.AddonPhase_ADDON_PHASE_READY); r.GetAccepted() || r.GetReason() != "stale_generation" {
			t.Errorf("READY for generation 1: accepted=%v reason=%q, want rejected stale_generation", r.GetAccepted(), r.GetReason())
		}
		if got := addonReportsTotal(t, h, "stale_generation"); got != staleBefore+1 {
			t.Errorf("saltbush_addon_reports_total{result=\"stale_generation\"} = %v, want %v", got, staleBefore+1)
		}
		if got := h.describe(t, "coredns").Status; got != types.AddonStatusUpdating {
			t.Errorf("status = %s, want UPDATING", got)
		}
		if got := addonDescribeUpdate(t, h, "coredns", id).Status; got != types.UpdateStatusInProgress {
			t.Errorf("update = %s, want InProgress", got)
		}
		acceptedBefore := addonReportsTotal(t, h, "accepted")
		h.report(t, "coredns", 2, controlv1.AddonPhase_ADDON_PHASE_READY)
		if got := addonReportsTotal(t, h, "accepted"); got != acceptedBefore+1 {
			t.Errorf("accepted reports = %v, want %v", got, acceptedBefore+1)
		}
		if got := addonDescribeUpdate(t, h, "coredns", id).Status; got != types.UpdateStatusSuccessful {
			t.Errorf("update after READY gen 2 = %s, want Successful", got)
		}
		if got := h.describe(t, "coredns").Status; got != types.AddonStatusActive {
			t.Errorf("status = %s, want ACTIVE", got)
		}
	})

	t.Run("retry after the update finished", func(t *testing.T) {
		before := addonKeyspace(t, h)
		again, err := h.eks.UpdateAddon(ctx, in)
		if err != nil {
			t.Fatalf("repeat after READY: %v", err)
		}
		if aws.ToString(again.Update.Id) != id || again.Update.Status != types.UpdateStatusSuccessful {
			t.Errorf("repeat after READY: %s %s, want %s Successful", aws.ToString(again.Update.Id), again.Update.Status, id)
		}
		addonNoWrites(t, h, before)
	})

	// Twenty callers with one token at once: one update, one generation.
	t.Run("same token concurrently", func(t *testing.T) {
		u := *in
		u.ClientRequestToken = aws.String("update-token-2")
		u.ConfigurationValues = aws.String(`{"replicaCount": 4}`)
		outs, errs := concurrently(20, func(int) (*eks.UpdateAddonOutput, error) {
			return h.eks.UpdateAddon(ctxT(t), &u)
		})
		ids := map[string]int{}
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				continue
			}
			ids[aws.ToString(outs[i].Update.Id)]++
		}
		if len(ids) != 1 {
			t.Errorf("update ids = %v, want one", ids)
		}
		if got := h.get(t, "coredns").GetGeneration(); got != 3 {
			t.Errorf("generation = %d, want 3", got)
		}
		list, err := h.eks.ListUpdates(ctx, &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String("coredns")})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.UpdateIds) != 2 {
			t.Errorf("updates = %v, want 2", list.UpdateIds)
		}
	})
}

func addonDescribeUpdate(t *testing.T, h *addonHarness, addon, id string) *types.Update {
	t.Helper()
	out, err := h.eks.DescribeUpdate(ctxT(t), &eks.DescribeUpdateInput{
		Name: aws.String(h.cluster), UpdateId: aws.String(id), AddonName: aws.String(addon),
	})
	if err != nil {
		t.Fatalf("DescribeUpdate %s %s: %v", addon, id, err)
	}
	return out.Update
}

// TestAddonStaleIncarnationReport: generations restart at 1 for a
// recreated add-on, so a late report for the old incarnation must be told
// apart by the add-on uid, and must change nothing.
func TestAddonStaleIncarnationReport(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	ctx := ctxT(t)
	const name = "saltbush-noop"
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String(name)})
	old := h.get(t, name)
	if _, err := h.eks.DeleteAddon(ctx, &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	if r := h.report(t, name, 2, controlv1.AddonPhase_ADDON_PHASE_REMOVED); !r.GetAccepted() {
		t.Fatalf("REMOVED not accepted: %v", r)
	}
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String(name)})
	cur := h.get(t, name)
	if cur.GetUid() == old.GetUid() || cur.GetGeneration() != 1 {
		t.Fatalf("recreated: uid %s (old %s) generation %d", cur.GetUid(), old.GetUid(), cur.GetGeneration())
	}

	for _, phase := range []controlv1.AddonPhase{
		controlv1.AddonPhase_ADDON_PHASE_READY, controlv1.AddonPhase_ADDON_PHASE_FAILED, controlv1.AddonPhase_ADDON_PHASE_REMOVED,
	} {
		t.Run(phase.String(), func(t *testing.T) {
			metricBefore := addonReportsTotal(t, h, "stale_incarnation")
			before := addonKeyspace(t, h)
			r, err := h.control.ApplyAddonReport(ctxT(t), &controlv1.ApplyAddonReportRequest{
				ClusterUid: old.GetClusterUid(), AddonName: name, AddonUid: old.GetUid(),
				Generation: 1, Phase: phase, InstanceId: "i-0123456789abcdef0",
			})
			if err != nil {
				t.Fatalf("ApplyAddonReport: %v", err)
			}
			if r.GetAccepted() || r.GetReason() != "stale_incarnation" {
				t.Errorf("report for the old incarnation: accepted=%v reason=%q, want rejected stale_incarnation", r.GetAccepted(), r.GetReason())
			}
			addonNoWrites(t, h, before)
			if got := addonReportsTotal(t, h, "stale_incarnation"); got != metricBefore+1 {
				t.Errorf("stale_incarnation reports = %v, want %v", got, metricBefore+1)
			}
			if got := h.describe(t, name).Status; got != types.AddonStatusCreating {
				t.Errorf("status = %s, want CREATING", got)
			}
		})
	}

	// A report for an add-on that does not exist is counted too.
	t.Run("unknown add-on", func(t *testing.T) {
		metricBefore := addonReportsTotal(t, h, "unknown_addon")
		before := addonKeyspace(t, h)
		r, err := h.control.ApplyAddonReport(ctxT(t), &controlv1.ApplyAddonReportRequest{
			ClusterUid: old.GetClusterUid(), AddonName: "coredns", AddonUid: old.GetUid(),
			Generation: 1, Phase: controlv1.AddonPhase_ADDON_PHASE_READY,
		})
		if err != nil {
			t.Fatalf("ApplyAddonReport: %v", err)
		}
		if r.GetAccepted() || r.GetReason() != "unknown_addon" {
			t.Errorf("accepted=%v reason=%q, want rejected unknown_addon", r.GetAccepted(), r.GetReason())
		}
		addonNoWrites(t, h, before)
		if got := addonReportsTotal(t, h, "unknown_addon"); got != metricBefore+1 {
			t.Errorf("unknown_addon reports = %v, want %v", got, metricBefore+1)
		}
	})

	// The current incarnation's report is accepted.
	if r := h.report(t, name, 1, controlv1.AddonPhase_ADDON_PHASE_READY); !r.GetAccepted() {
		t.Errorf("READY for the current incarnation: %v", r)
	}
	if got := h.describe(t, name).Status; got != types.AddonStatusActive {
		t.Errorf("status = %s, want ACTIVE", got)
	}
}

// TestAddonConcurrentUpdateAndDelete: of concurrent updates (each with the
// SDK's own random token) exactly one wins and the rest are told the
// add-on is UPDATING; concurrent deletes all answer DELETING with one
// generation bump.
func TestAddonConcurrentUpdateAndDelete(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	const n = 20
	addonActive(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})

	outs, errs := concurrently(n, func(i int) (*eks.UpdateAddonOutput, error) {
		return h.eks.UpdateAddon(ctxT(t), &eks.UpdateAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"),
			ConfigurationValues: aws.String(`{"replicaCount": ` + strconv.Itoa(i%9+1) + `}`)})
	})
	var winner string
	for i, err := range errs {
		if err == nil {
			if winner != "" {
				t.Errorf("second winner %s (first %s)", aws.ToString(outs[i].Update.Id), winner)
			}
			winner = aws.ToString(outs[i].Update.Id)
			continue
		}
		checkAWSErr(t, err, awsErr{code: "ResourceInUseException",
			exact: "Addon coredns cannot be updated as it is currently in UPDATING state", cluster: h.cluster, addon: "coredns"})
	}
	a := h.get(t, "coredns")
	if winner == "" || a.GetGeneration() != 2 || a.GetUpdateId() != winner {
		t.Fatalf("after concurrent updates: winner %q, generation %d, update %s", winner, a.GetGeneration(), a.GetUpdateId())
	}
	list, err := h.eks.ListUpdates(ctxT(t), &eks.ListUpdatesInput{Name: aws.String(h.cluster), AddonName: aws.String("coredns")})
	if err != nil || len(list.UpdateIds) != 1 {
		t.Errorf("updates after concurrent updates: %v %v, want exactly the winner's", list, err)
	}

	dels, errs := concurrently(n, func(int) (*eks.DeleteAddonOutput, error) {
		return h.eks.DeleteAddon(ctxT(t), &eks.DeleteAddonInput{ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns")})
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("delete %d: %v", i, err)
		} else if dels[i].Addon.Status != types.AddonStatusDeleting {
			t.Errorf("delete %d: status %s", i, dels[i].Addon.Status)
		}
	}
	if got := h.get(t, "coredns").GetGeneration(); got != 3 {
		t.Errorf("generation after concurrent deletes = %d, want 3", got)
	}
	// The update in flight when the delete came is Cancelled, not left InProgress.
	if got := addonDescribeUpdate(t, h, "coredns", winner).Status; got != types.UpdateStatusCancelled {
		t.Errorf("update overtaken by the delete = %s, want Cancelled", got)
	}
}

// TestAddonCreateRacingClusterDelete: every add-on write is guarded by the
// cluster record's revision, so no add-on is created after its cluster
// turned DELETING, and every create that answered success left its add-on.
func TestAddonCreateRacingClusterDelete(t *testing.T) {
	t.Parallel()
	h := newAddonHarness(t)
	names := append(slices.Clone(listedAddons), hiddenAddons...)
	prefix := h.srv.Store(t).Prefix()
	for round := range 3 {
		cl := "racing-" + strconv.Itoa(round)
		addonCluster(t, h, cl, "1.35")
		uid := clusterUID(t, h.srv, h.account, cl)
		_, errs := concurrently(len(names)+1, func(i int) (any, error) {
			if i == len(names)/2 {
				_, err := h.eks.DeleteCluster(ctxT(t), &eks.DeleteClusterInput{Name: aws.String(cl)})
				return nil, err
			}
			j := i
			if i > len(names)/2 {
				j = i - 1
			}
			_, err := h.eks.CreateAddon(ctxT(t), &eks.CreateAddonInput{ClusterName: aws.String(cl), AddonName: aws.String(names[j])})
			return nil, err
		})
		ok := map[string]bool{}
		for i, err := range errs {
			if i == len(names)/2 {
				if err != nil {
					t.Fatalf("DeleteCluster: %v", err)
				}
				continue
			}
			j := i
			if i > len(names)/2 {
				j = i - 1
			}
			if err == nil {
				ok[names[j]] = true
				continue
			}
			checkAWSErr(t, err, awsErr{code: "InvalidRequestException", cluster: cl})
		}
		ctx := ctxT(t)
		ck, err := h.srv.Etcd(t).Get(ctx, prefix+"accounts/"+h.account+"/clusters/"+cl)
		if err != nil || len(ck.Kvs) != 1 {
			t.Fatalf("cluster key: %v %v", ck, err)
		}
		deletedAt := ck.Kvs[0].ModRevision
		kvs, err := h.srv.Etcd(t).Get(ctx, prefix+"clusters/"+uid+"/addons/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, kv := range kvs.Kvs {
			name := strings.TrimPrefix(string(kv.Key), prefix+"clusters/"+uid+"/addons/")
			found[name] = true
			if kv.CreateRevision > deletedAt {
				t.Errorf("round %d: add-on %s created at revision %d, after the cluster turned DELETING at %d", round, name, kv.CreateRevision, deletedAt)
			}
		}
		if !maps.Equal(found, ok) {
			t.Errorf("round %d: stored add-ons %v, successful creates %v", round, found, ok)
		}
	}
}
