package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/apply"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/inventory"
	"github.com/saltbush/saltbush/guest/podidentity"
	"github.com/saltbush/saltbush/guest/state"
)

// ensureTimeout bounds waiting for new watches to list.
const ensureTimeout = 30 * time.Second

// deletionRecheck is how often a deletion in progress is looked at again
// when no watch event says it moved.
const deletionRecheck = 5 * time.Second

// step does what is due, as the executor: applies, deletion steps, health
// evaluations, reports, the Ack. A standby, or an agent without a fresh
// grant, does nothing.
func (a *Agent) step(ctx context.Context) {
	gs := a.grant.Snapshot()
	if !a.streamUp || gs.Role != deliveryv1.Role_ROLE_EXECUTOR || !gs.Writable {
		return
	}
	pass, stop, err := a.grant.Context(ctx)
	if err != nil {
		return
	}
	defer stop()

	if a.healthDue || a.anyApplyDue() {
		ectx, cancel := context.WithTimeout(pass, ensureTimeout)
		if err := a.health.Ensure(ectx, a.watchedRefs()); err != nil {
			a.log.Warn("watching the add-ons' objects", "err", err)
		}
		cancel()
	}
	// Evaluations asked for during this pass (an apply just made, a
	// readiness record that could not be written, a watch behind the
	// apiserver) are kept for the next one.
	due := a.healthDue
	a.healthDue = false
	now := time.Now()
	for _, name := range a.sortedNames() {
		if pass.Err() != nil {
			return // fenced mid-pass: nothing more, not even reports
		}
		s := a.addons[name]
		if s.needApply && !now.Before(s.retryAt) {
			if s.desired.GetDeleting() {
				a.deleteStep(pass, s)
			} else {
				a.applyStep(pass, s, gs.Epoch)
			}
		}
	}
	// The associations after the add-ons (whose bundles make their
	// service accounts) and before health: an add-on whose association
	// the cluster refused is not READY.
	if a.pod.needApply && !now.Before(a.pod.retryAt) {
		if pass.Err() != nil {
			return
		}
		a.podIdentityStep(pass)
	}
	for _, name := range a.sortedNames() {
		if pass.Err() != nil {
			return
		}
		if s := a.addons[name]; (due || a.healthDue) && !s.desired.GetDeleting() {
			a.evaluate(pass, s)
		}
	}
	a.sendReports(ctx, gs.Epoch)
	if pass.Err() == nil {
		a.keysStep(pass, gs.Epoch)
	}
	if pass.Err() == nil {
		a.podWebhookStep(pass)
	}
	if a.pendingAck != nil && a.settled() {
		a.ack(ctx, a.pendingAck)
		a.pendingAck = nil
	}
}

func (a *Agent) anyApplyDue() bool {
	now := time.Now()
	for _, s := range a.addons {
		if s.needApply && !now.Before(s.retryAt) {
			return true
		}
	}
	return false
}

// settled reports whether every add-on of the set has been applied (or
// has its verdict), so the set can be acknowledged.
func (a *Agent) settled() bool {
	for _, s := range a.addons {
		if s.needApply && !s.final && !s.desired.GetDeleting() {
			return false
		}
	}
	return !a.pod.needApply || a.pod.refused
}

// watchedRefs are the objects health and drift follow: every add-on's
// generation, and what a deleting one still has.
func (a *Agent) watchedRefs() []inventory.Ref {
	var refs []inventory.Ref
	for _, s := range a.addons {
		refs = append(refs, s.objects...)
		if s.record != nil {
			refs = append(refs, s.record.Objects...)
		}
	}
	return refs
}

// applyStep applies one add-on's generation.
func (a *Agent) applyStep(ctx context.Context, s *addonState, epoch int64) {
	name := s.desired.GetName()
	out, err := a.applier.Apply(ctx, s.desired, epoch)
	if err != nil {
		a.retryLater(s, "apply", err)
		return
	}
	a.metrics.applies.WithLabelValues("applied").Inc()
	a.metrics.written.Add(float64(out.Changed))
	if out.Changed > 0 {
		// It may have made (or remade) a service account an association
		// names.
		a.pod.needApply = true
	}
	s.record = out.Record
	s.generations = out.Generations
	s.needApply, s.retries, s.retryAt = false, 0, time.Time{}
	if len(out.Issues) > 0 {
		a.metrics.applies.WithLabelValues("failed").Inc()
		if s.readySeen() {
			// The generation was ready: what failed now is a health issue
			// (a conflict under NONE with a field another manager took).
			s.applyIssues = out.Issues
			a.healthDue = true
			return
		}
		a.log.Warn("add-on generation failed", "addon", name, "generation", s.desired.GetGeneration(), "issues", issueText(out.Issues))
		s.setReport(deliveryv1.Phase_PHASE_FAILED, out.Issues)
		s.final = true
		return
	}
	s.applyIssues = nil
	if !s.applied {
		s.applied = true
		a.st.Addons[name] = state.Addon{UID: s.desired.GetUid(), Generation: s.desired.GetGeneration(), Epoch: epoch, Digest: s.digest}
		a.save()
	}
	if s.appliedAt.IsZero() {
		s.appliedAt = time.Now()
	}
	a.healthDue = true
	if s.report.GetGeneration() != s.desired.GetGeneration() {
		s.setReport(deliveryv1.Phase_PHASE_APPLIED, nil)
	}
}

// deleteStep moves a deleted add-on's removal on: delete (or, with
// preserve, release) and, once nothing is left, REMOVED.
func (a *Agent) deleteStep(ctx context.Context, s *addonState) {
	if s.final {
		s.needApply = false
		return
	}
	if s.appliedAt.IsZero() {
		s.appliedAt = time.Now() // the removal's clock
	}
	var (
		out apply.Outcome
		err error
	)
	if s.desired.GetPreserve() {
		out, err = a.applier.Release(ctx, s.desired)
	} else {
		out, err = a.applier.Delete(ctx, s.desired, a.kube.Kubernetes.Discovery())
	}
	if err != nil {
		a.retryLater(s, "delete", err)
		return
	}
	a.metrics.written.Add(float64(out.Changed))
	s.retries = 0
	if out.Record != nil {
		s.record = out.Record
	}
	switch {
	case len(out.Issues) > 0:
		a.log.Warn("add-on removal failed", "addon", s.desired.GetName(), "issues", issueText(out.Issues))
		s.setReport(deliveryv1.Phase_PHASE_FAILED, out.Issues)
		s.final, s.needApply = true, false
	case len(out.Pending) > 0:
		if time.Since(s.appliedAt) > a.cfg.ReadyTimeout {
			var ids []inventory.Ref
			ids = append(ids, out.Pending...)
			s.setReport(deliveryv1.Phase_PHASE_FAILED, []*deliveryv1.Issue{apply.NewIssue(apply.CodeInternalFailure,
				fmt.Sprintf("%d objects were still being deleted after %s (finalizers that do not finish?): first %s.",
					len(out.Pending), a.cfg.ReadyTimeout, out.Pending[0]), ids...)})
			s.final, s.needApply = true, false
			return
		}
		// Watches say when they go; look again meanwhile all the same.
		a.log.Debug("add-on removal in progress", "addon", s.desired.GetName(), "pending", len(out.Pending), "first", out.Pending[0].String())
		s.needApply, s.retryAt = true, time.Now().Add(deletionRecheck)
	default:
		s.setReport(deliveryv1.Phase_PHASE_REMOVED, nil)
		s.final, s.needApply, s.record = true, false, nil
		a.st.Addons[s.desired.GetName()] = state.Addon{UID: s.desired.GetUid(), Generation: s.desired.GetGeneration(),
			Epoch: a.grant.Snapshot().Epoch, Digest: s.digest, Removed: true}
		a.save()
	}
}

// retryLater paces a transient failure; a write refused for want of a
// grant is no failure: the pass just stops.
func (a *Agent) retryLater(s *addonState, what string, err error) {
	if grant.Refused(err) && !apply.Transient(err) {
		a.metrics.applies.WithLabelValues("fenced").Inc()
		return
	}
	a.metrics.applies.WithLabelValues("transient").Inc()
	s.retries++
	delay := min(time.Second<<min(s.retries-1, 6), time.Minute)
	s.retryAt = time.Now().Add(delay)
	a.log.Warn("add-on "+what+" will be retried", "addon", s.desired.GetName(), "generation", s.desired.GetGeneration(),
		"retry_in", delay, "err", err)
}

// evaluate turns an applied generation's health into its report: READY
// when every object is Current; when it was ready before, READY with the
// health issues (the host shows DEGRADED); before it ever was, APPLIED
// while it progresses and FAILED once a definite failure outlasts the
// failure grace or the ready timeout passes.
func (a *Agent) evaluate(ctx context.Context, s *addonState) {
	if s.final || !s.applied {
		return
	}
	if s.record == nil {
		rec, err := a.applier.Inventory().Get(ctx, s.desired.GetName())
		if err != nil || rec == nil {
			s.needApply = true // nothing recorded: apply makes the record
			return
		}
		s.record = rec
	}
	res := a.health.Evaluate(s.objects, s.generations)
	now := time.Now()
	var missing []*deliveryv1.Issue
	for _, r := range res.Missing {
		// The watch may lag the apply (an object that only now carries
		// the add-on label): ask the apiserver before calling it gone.
		if there, err := a.applier.Exists(ctx, r); err != nil || there {
			a.healthDue = true
			continue
		}
		s.needApply = true // someone deleted an object: put it back
		missing = append(missing, apply.NewIssue(apply.CodeK8sResourceNotFound, fmt.Sprintf("%s is missing from the cluster.", r), r))
	}
	switch {
	case res.Ready && len(s.applyIssues) == 0 && len(s.podIdentityIssues) == 0:
		s.failingSince = time.Time{}
		if !s.readySeen() {
			if err := a.applier.MarkReady(ctx, s.record); err != nil {
				a.log.Warn("record readiness in the inventory", "addon", s.desired.GetName(), "err", err)
				a.healthDue = true
				return
			}
		}
		s.setReport(deliveryv1.Phase_PHASE_READY, nil)
	case s.readySeen():
		issues := append(append(append(append(cloneIssues(s.applyIssues), cloneIssues(s.podIdentityIssues)...), missing...),
			res.Failing...), res.Waiting...)
		s.setReport(deliveryv1.Phase_PHASE_READY, issues)
	case len(s.podIdentityIssues) > 0:
		// The cluster refused to record an association of a generation
		// never ready: the generation failed, as when its apply is refused.
		s.setReport(deliveryv1.Phase_PHASE_FAILED, cloneIssues(s.podIdentityIssues))
		s.final = true
	default:
		if len(res.Failing) > 0 {
			if s.failingSince.IsZero() {
				s.failingSince = now
			}
			if now.Sub(s.failingSince) >= a.cfg.FailureGrace {
				s.setReport(deliveryv1.Phase_PHASE_FAILED, res.Failing)
				s.final = true
				return
			}
		} else {
			s.failingSince = time.Time{}
		}
		if now.Sub(s.appliedAt) >= a.cfg.ReadyTimeout {
			issues := append(append(res.Failing, missing...), res.Waiting...)
			if len(issues) == 0 {
				issues = []*deliveryv1.Issue{apply.NewIssue(apply.CodeInsufficientNumberOfReplicas, "The add-on did not become ready in time.")}
			}
			s.setReport(deliveryv1.Phase_PHASE_FAILED, issues)
			s.final = true
			return
		}
		s.setReport(deliveryv1.Phase_PHASE_APPLIED, nil)
	}
}

// setReport makes r the add-on's latest observation (sent when it differs
// from the one before).
func (s *addonState) setReport(phase deliveryv1.Phase, issues []*deliveryv1.Issue) {
	r := &deliveryv1.Report{Addon: s.desired.GetName(), AddonUid: s.desired.GetUid(), Generation: s.desired.GetGeneration(),
		Phase: phase, Issues: issues}
	if len(r.Issues) > 50 {
		r.Issues = r.Issues[:50]
	}
	if proto.Equal(r, s.report) {
		return
	}
	s.report, s.sent = r, false
}

// sendReports sends every add-on's latest report not yet sent on this
// stream, at the grant's epoch.
func (a *Agent) sendReports(ctx context.Context, epoch int64) {
	now := time.Now()
	for _, name := range a.sortedNames() {
		s := a.addons[name]
		if s.report == nil || s.sent || now.Before(s.retryAt) {
			continue
		}
		r := proto.Clone(s.report).(*deliveryv1.Report)
		r.Epoch = epoch
		if a.link.Send(ctx, &deliveryv1.AgentMessage{Message: &deliveryv1.AgentMessage_Report{Report: r}}) {
			s.sent = true
			a.log.Debug("report", "addon", name, "generation", r.GetGeneration(), "phase", r.GetPhase(), "issues", len(r.GetIssues()))
		}
	}
}

func cloneIssues(in []*deliveryv1.Issue) []*deliveryv1.Issue {
	out := make([]*deliveryv1.Issue, 0, len(in))
	for _, i := range in {
		out = append(out, proto.Clone(i).(*deliveryv1.Issue))
	}
	return out
}

func issueText(issues []*deliveryv1.Issue) []string {
	out := make([]string, 0, len(issues))
	for _, i := range issues {
		out = append(out, i.GetCode()+": "+i.GetMessage())
	}
	return out
}

// podIdentityStep records the desired set's pod identity associations on
// their service accounts and takes them off those no association names any
// more (package podidentity). What the cluster refused for an add-on's
// association is that add-on's issue; for an association made directly it
// is logged and shown in the status (EKS has no health for associations).
func (a *Agent) podIdentityStep(ctx context.Context) {
	associations := a.st.Desired.GetPodIdentityAssociations()
	records, _ := podidentity.Render(associations)
	a.saWatch.Want(records)
	if len(associations) > 0 {
		ectx, cancel := context.WithTimeout(ctx, ensureTimeout)
		if err := a.saWatch.Ensure(ectx); err != nil {
			a.log.Warn("watching the associations' service accounts", "err", err)
		}
		cancel()
	}
	retries := a.pod.retries
	out, err := a.pods.Reconcile(ctx, associations)
	a.metrics.written.Add(float64(out.Changed))
	if err != nil {
		if grant.Refused(err) && !apply.Transient(err) {
			a.metrics.applies.WithLabelValues("fenced").Inc()
			return
		}
		a.pod.retries++
		delay := min(time.Second<<min(a.pod.retries-1, 6), time.Minute)
		a.pod.retryAt = time.Now().Add(delay)
		a.log.Warn("pod identity associations will be recorded again", "retry_in", delay, "err", err)
		return
	}
	a.pod = podIdentityState{last: out}
	if len(out.Issues) > 0 {
		// Nothing signals that the cluster would now take a refused record
		// (an admission policy or RBAC changed): try again, paced.
		a.pod.refused, a.pod.needApply, a.pod.retries = true, true, retries+1
		a.pod.retryAt = time.Now().Add(min(time.Second<<min(retries, 6), time.Minute))
	}
	for name, s := range a.addons {
		if issues := out.Issues[name]; !slices.EqualFunc(issues, s.podIdentityIssues, func(x, y *deliveryv1.Issue) bool { return proto.Equal(x, y) }) {
			s.podIdentityIssues = issues
			a.healthDue = true
		}
	}
	for owner, issues := range out.Issues {
		if _, ok := a.addons[owner]; !ok || owner == "" {
			a.log.Warn("pod identity associations not recorded", "addon", owner, "issues", issueText(issues))
		}
	}
	if len(out.Pending) > 0 {
		a.log.Debug("pod identity associations wait for their service accounts", "pending", len(out.Pending),
			"first", out.Pending[0].String())
	}
}
