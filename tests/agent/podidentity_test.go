package agent_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/saltbush/saltbush/guest/podidentity"
	"github.com/saltbush/saltbush/tests/kubetest"
	"github.com/saltbush/saltbush/tests/netproxy"
	"github.com/saltbush/saltbush/tests/poll"
)

// ebsCSI is the catalogue's add-on with a pod identity service account.
const (
	ebsCSI   = "aws-ebs-csi-driver"
	ebsCSISA = "ebs-csi-controller-sa"
)

// serviceAccount reads a service account (nil when there is none).
func (e *env) serviceAccount(namespace, name string) *corev1.ServiceAccount {
	e.t.Helper()
	sa, err := e.k8s.CoreV1().ServiceAccounts(namespace).Get(e.ctx(10*time.Second), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return sa
}

// recorded is the part of a service account's annotations the agent
// records, and its association label.
func recorded(sa *corev1.ServiceAccount) (map[string]string, string) {
	out := map[string]string{}
	if sa == nil {
		return out, ""
	}
	for k, v := range sa.Annotations {
		if strings.HasPrefix(k, podidentity.Prefix) {
			out[k] = v
		}
	}
	return out, sa.Labels[podidentity.LabelAssociationID]
}

// waitRecorded waits until the service account carries exactly the
// association want (nil: nothing of the agent's) and returns it.
func (e *env) waitRecorded(namespace, name string, want *types.PodIdentityAssociation) *corev1.ServiceAccount {
	e.t.Helper()
	var sa *corev1.ServiceAccount
	poll.Until(e.t, waitChange, "ServiceAccount "+namespace+"/"+name+" records "+fmt.Sprint(associationID(want)), func() (bool, string) {
		sa = e.serviceAccount(namespace, name)
		got, label := recorded(sa)
		exp := expected(want)
		return maps.Equal(got, exp) && label == associationID(want), fmt.Sprintf("annotations %v label %q, want %v", got, label, exp)
	})
	return sa
}

func associationID(a *types.PodIdentityAssociation) string {
	if a == nil {
		return ""
	}
	return aws.ToString(a.AssociationId)
}

// expected is what the agent records for a (docs/agent.md, "Pod identity").
func expected(a *types.PodIdentityAssociation) map[string]string {
	out := map[string]string{}
	if a == nil {
		return out
	}
	out[podidentity.AnnotationAssociationARN] = aws.ToString(a.AssociationArn)
	out[podidentity.AnnotationRoleARN] = aws.ToString(a.RoleArn)
	if v := aws.ToString(a.TargetRoleArn); v != "" {
		out[podidentity.AnnotationTargetRoleARN] = v
	}
	if v := aws.ToString(a.ExternalId); v != "" {
		out[podidentity.AnnotationExternalID] = v
	}
	if v := aws.ToString(a.OwnerArn); v != "" {
		out[podidentity.AnnotationOwnerARN] = v
	}
	if aws.ToBool(a.DisableSessionTags) {
		out[podidentity.AnnotationDisableSessionTags] = "true"
	}
	return out
}

// addonAssociation is the add-on's one pod identity association, as
// DescribePodIdentityAssociation returns it.
func (e *env) addonAssociation(addon string) *types.PodIdentityAssociation {
	e.t.Helper()
	out, err := e.eks.DescribeAddon(e.ctx(10*time.Second), &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(addon)})
	if err != nil {
		e.t.Fatal(err)
	}
	arns := out.Addon.PodIdentityAssociations
	if len(arns) != 1 {
		e.t.Fatalf("add-on %s has pod identity associations %v, want one", addon, arns)
	}
	return e.describeAssociation(arns[0][strings.LastIndex(arns[0], "/")+1:])
}

func (e *env) describeAssociation(id string) *types.PodIdentityAssociation {
	e.t.Helper()
	out, err := e.eks.DescribePodIdentityAssociation(e.ctx(10*time.Second), &eks.DescribePodIdentityAssociationInput{
		ClusterName: aws.String(e.cluster), AssociationId: aws.String(id)})
	if err != nil {
		e.t.Fatalf("DescribePodIdentityAssociation %s: %v", id, err)
	}
	return out.Association
}

func hasManager(sa *corev1.ServiceAccount, manager string) bool {
	return sa != nil && slices.ContainsFunc(sa.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == manager && m.Operation == metav1.ManagedFieldsOperationApply
	})
}

// TestPodIdentityAssociations drives associations through the SDK — one an
// add-on owns (CreateAddon's podIdentityAssociations), others made directly
// — and checks that the executor records each on its service account under
// its own field manager: the add-on's fields of its service account and a
// user's annotations survive, an update changes the record, a service
// account that appears later is recorded when it does, a deleted or dropped
// association's record goes while its service account stays, the standby
// writes nothing, and an executor cut off from saltbush does not put back a
// record someone edited away (its successor does; the audit log shows one
// writer at a time).
func TestPodIdentityAssociations(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a", "i-b")
	proxy := netproxy.Start(t, e.replicas[0].GRPCAddr())
	a := e.startAgent("i-a", agentOptions{endpoints: []string{proxy.Addr()}})
	a.waitRole(t, "EXECUTOR")
	b := e.startAgent("i-b", agentOptions{})
	b.waitRole(t, "STANDBY")
	role := func(name string) string { return "arn:aws:iam::" + e.account + ":role/" + name }

	// A workload's namespace and service account, made by its user.
	ns := "podid-" + e.cluster[len(e.cluster)-4:]
	ctx := e.ctx(time.Minute)
	if _, err := e.k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteNamespace(ns) })
	if _, err := e.k8s.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Annotations: map[string]string{"team": "payments"}}}, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(ebsCSI), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
		{ServiceAccount: aws.String(ebsCSISA), RoleArn: aws.String(role("ebs-one"))}}})
	created, err := e.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(e.cluster),
		Namespace: aws.String(ns), ServiceAccount: aws.String("web"), RoleArn: aws.String(role("web"))})
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}
	web := created.Association
	later, err := e.eks.CreatePodIdentityAssociation(ctx, &eks.CreatePodIdentityAssociationInput{ClusterName: aws.String(e.cluster),
		Namespace: aws.String(ns), ServiceAccount: aws.String("later"), RoleArn: aws.String(role("later")),
		TargetRoleArn: aws.String("arn:aws:iam::444455556666:role/target")})
	if err != nil {
		t.Fatalf("CreatePodIdentityAssociation: %v", err)
	}

	t.Run("recorded on the service accounts", func(t *testing.T) {
		e := e.in(t)
		owned := e.addonAssociation(ebsCSI)
		if aws.ToString(owned.OwnerArn) == "" {
			t.Fatalf("the add-on's association has no ownerArn: %+v", owned)
		}
		e.waitActive(ebsCSI)
		sa := e.waitRecorded("kube-system", ebsCSISA, owned)
		if !hasManager(sa, "eks") || !hasManager(sa, podidentity.FieldManager) {
			t.Errorf("managers of the add-on's service account %v: want eks and %s applying", saManagers(sa), podidentity.FieldManager)
		}
		if sa.Labels["addons.saltbush.io/name"] != ebsCSI {
			t.Errorf("the add-on's own label went: %v", sa.Labels)
		}
		sa = e.waitRecorded(ns, "web", web)
		if sa.Annotations["team"] != "payments" {
			t.Errorf("the user's annotation went: %v", sa.Annotations)
		}
		if e.serviceAccount(ns, "later") != nil {
			t.Fatal("the agent created a service account for an association")
		}
		poll.Until(t, waitChange, "the agent says later waits for its service account", func() (bool, string) {
			st, err := a.status(t)
			if err != nil || st.PodIdentity == nil {
				return false, fmt.Sprint(err)
			}
			return slices.Contains(st.PodIdentity.Pending, ns+"/later"), fmt.Sprintf("%+v", *st.PodIdentity)
		})
	})

	t.Run("a service account that appears later", func(t *testing.T) {
		e := e.in(t)
		if _, err := e.k8s.CoreV1().ServiceAccounts(ns).Create(e.ctx(10*time.Second), &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitRecorded(ns, "later", later.Association)
	})

	t.Run("updates change the record", func(t *testing.T) {
		e := e.in(t)
		out, err := e.eks.UpdatePodIdentityAssociation(e.ctx(10*time.Second), &eks.UpdatePodIdentityAssociationInput{
			ClusterName: aws.String(e.cluster), AssociationId: web.AssociationId, RoleArn: aws.String(role("web-two")),
			DisableSessionTags: aws.Bool(true)})
		if err != nil {
			t.Fatalf("UpdatePodIdentityAssociation: %v", err)
		}
		web = out.Association
		e.waitRecorded(ns, "web", web)

		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(ebsCSI), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
			{ServiceAccount: aws.String(ebsCSISA), RoleArn: aws.String(role("ebs-two"))}}})
		e.waitUpdate(ebsCSI, id, types.UpdateStatusSuccessful)
		owned := e.addonAssociation(ebsCSI)
		if aws.ToString(owned.RoleArn) != role("ebs-two") {
			t.Fatalf("after the update the add-on's association has role %s", aws.ToString(owned.RoleArn))
		}
		e.waitRecorded("kube-system", ebsCSISA, owned)
	})

	t.Run("a deleted association's record goes, its service account stays", func(t *testing.T) {
		e := e.in(t)
		if _, err := e.eks.DeletePodIdentityAssociation(e.ctx(10*time.Second), &eks.DeletePodIdentityAssociationInput{
			ClusterName: aws.String(e.cluster), AssociationId: web.AssociationId}); err != nil {
			t.Fatalf("DeletePodIdentityAssociation: %v", err)
		}
		sa := e.waitRecorded(ns, "web", nil)
		if sa == nil || sa.Annotations["team"] != "payments" {
			t.Fatalf("the user's service account or its annotation went: %v", sa)
		}
		if hasManager(sa, podidentity.FieldManager) {
			t.Errorf("%s still manages fields of %s/web: %v", podidentity.FieldManager, ns, saManagers(sa))
		}
	})

	t.Run("an add-on update without associations drops its record", func(t *testing.T) {
		e := e.in(t)
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(ebsCSI), PodIdentityAssociations: []types.AddonPodIdentityAssociations{}})
		e.waitUpdate(ebsCSI, id, types.UpdateStatusSuccessful)
		sa := e.waitRecorded("kube-system", ebsCSISA, nil)
		if sa == nil || !hasManager(sa, "eks") {
			t.Fatalf("the add-on's own service account went or lost its manager: %v", saManagers(sa))
		}
		e.waitActive(ebsCSI)
	})

	t.Run("a deleted add-on takes its service account", func(t *testing.T) {
		e := e.in(t)
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(ebsCSI), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
			{ServiceAccount: aws.String(ebsCSISA), RoleArn: aws.String(role("ebs-three"))}}})
		e.waitUpdate(ebsCSI, id, types.UpdateStatusSuccessful)
		e.waitRecorded("kube-system", ebsCSISA, e.addonAssociation(ebsCSI))
		if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(ebsCSI)}); err != nil {
			t.Fatal(err)
		}
		e.waitDeleted(ebsCSI)
		if sa := e.serviceAccount("kube-system", ebsCSISA); sa != nil {
			t.Fatalf("the deleted add-on's service account is still there: %v", sa.Annotations)
		}
		list, err := e.eks.ListPodIdentityAssociations(e.ctx(10*time.Second), &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(e.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Associations {
			if aws.ToString(s.ServiceAccount) == ebsCSISA {
				t.Errorf("the deleted add-on's association is still listed: %s", aws.ToString(s.AssociationArn))
			}
		}
	})

	t.Run("the standby wrote nothing", func(t *testing.T) {
		e := e.in(t)
		for _, w := range e.writes(a.user, b.user) {
			if w.User == b.user {
				t.Fatalf("the standby wrote %s %s %s/%s", w.Verb, w.ObjectRef.Resource, w.ObjectRef.Namespace, w.ObjectRef.Name)
			}
		}
		if !slices.ContainsFunc(e.writes(a.user), func(w kubetest.AuditEvent) bool {
			return w.Verb == "patch" && w.ObjectRef.Resource == "serviceaccounts" && w.ObjectRef.Name == "web"
		}) {
			t.Error("the executor's writes of the service accounts are not in the audit log")
		}
	})

	// The executor is cut off from saltbush (it still reaches its
	// apiserver) and someone edits a record away: the old executor sees it
	// and must not put it back; its successor does.
	t.Run("a fenced executor does not write them", func(t *testing.T) {
		e := e.in(t)
		epoch := e.executor().GetEpoch()
		cut := time.Now()
		proxy.Partition()
		poll.Until(t, waitChange, "the cut executor's grant lapses", func() (bool, string) {
			st, err := a.status(t)
			return err == nil && !st.Writable, fmt.Sprintf("%+v %v", st, err)
		})
		edited := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, podidentity.AnnotationRoleARN)
		if _, err := e.k8s.CoreV1().ServiceAccounts(ns).Patch(e.ctx(10*time.Second), "later", k8stypes.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: "kubectl-annotate"}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, waitChange, "i-b executor", func() (bool, string) {
			x := e.executor()
			return x.GetInstanceId() == "i-b" && x.GetEpoch() > epoch, fmt.Sprintf("executor %s epoch %d", x.GetInstanceId(), x.GetEpoch())
		})
		e.waitRecorded(ns, "later", later.Association)

		writes := e.writes(a.user, b.user)
		if writers := checkOneWriter(t, writes); !slices.Equal(writers, []string{a.user, b.user}) {
			t.Fatalf("writers in order %v, want %s then %s", writers, a.user, b.user)
		}
		limit := cut.Add(fenceAfter + 2*time.Second) // fence-after plus the safety margin
		for _, w := range writes {
			if w.User == a.user && (w.StageTimestamp.After(limit) || w.RequestReceivedTimestamp.After(edited)) {
				t.Fatalf("the cut executor wrote %s %s %s/%s at %s: after the cut (%s) plus fence-after and margin, or after the edit",
					w.Verb, w.ObjectRef.Resource, w.ObjectRef.Namespace, w.ObjectRef.Name, w.StageTimestamp.Format(time.StampMicro),
					cut.Format(time.StampMicro))
			}
		}
		if !slices.ContainsFunc(writes, func(w kubetest.AuditEvent) bool {
			return w.User == b.user && w.Verb == "patch" && w.ObjectRef.Resource == "serviceaccounts" && w.ObjectRef.Name == "later"
		}) {
			t.Fatal("the successor did not put the record back")
		}
		proxy.Heal()
		a.waitRole(t, "STANDBY")
	})
}

func saManagers(sa *corev1.ServiceAccount) []string {
	if sa == nil {
		return nil
	}
	return managersOf(sa.ManagedFields)
}

// refuseRecords installs a ValidatingAdmissionPolicy that refuses the
// agent's record on the service account name (in any namespace) and waits
// until the apiserver enforces it (a dry-run write of such a record is
// refused); it is removed when the test ends.
func (e *env) refuseRecords(name string) {
	e.t.Helper()
	ctx := e.ctx(time.Minute)
	policy := "refuse-pod-identity-" + e.cluster[len(e.cluster)-4:]
	deny := admissionregistrationv1.Deny
	adm := e.k8s.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"serviceaccounts"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf(`object.metadata.name != %q || !has(object.metadata.labels) || !(%q in object.metadata.labels)`,
					name, podidentity.LabelAssociationID),
				Message: "pod identity records are not allowed on " + name,
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: []admissionregistrationv1.ValidationAction{deny}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx := e.ctx(time.Minute)
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, policy, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
	})
	probe := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{podidentity.LabelAssociationID: "a-probe"}}}
	poll.Until(e.t, waitChange, "the admission policy is enforced", func() (bool, string) {
		_, err := e.k8s.CoreV1().ServiceAccounts("default").Create(e.ctx(10*time.Second), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprint(err)
	})
}

// TestPodIdentityRecordRefused: when the cluster refuses the record of an
// add-on's association (an admission policy), the add-on's generation
// fails with AdmissionRequestDenied naming the service account; a new
// generation once the policy is gone records it and is ACTIVE.
func TestPodIdentityRecordRefused(t *testing.T) {
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	e.refuseRecords(ebsCSISA)
	role := "arn:aws:iam::" + e.account + ":role/ebs"
	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(ebsCSI), PodIdentityAssociations: []types.AddonPodIdentityAssociations{
		{ServiceAccount: aws.String(ebsCSISA), RoleArn: aws.String(role)}}})
	failed := e.waitStatus(ebsCSI, types.AddonStatusCreateFailed)
	want := "ServiceAccount/kube-system/" + ebsCSISA
	if failed.Health == nil || !slices.ContainsFunc(failed.Health.Issues, func(i types.AddonIssue) bool {
		return i.Code == types.AddonIssueCodeAdmissionRequestDenied && slices.Contains(i.ResourceIds, want)
	}) {
		t.Fatalf("CREATE_FAILED with issues %s, want AdmissionRequestDenied on %s", issuesOf(failed), want)
	}
	if got, _ := recorded(e.serviceAccount("kube-system", ebsCSISA)); len(got) != 0 {
		t.Fatalf("refused, yet recorded: %v", got)
	}

	adm := e.k8s.AdmissionregistrationV1()
	policy := "refuse-pod-identity-" + e.cluster[len(e.cluster)-4:]
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(e.ctx(10*time.Second), policy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ebsCSISA, Labels: map[string]string{podidentity.LabelAssociationID: "a-probe"}}}
	poll.Until(t, waitChange, "the admission policy is no longer enforced", func() (bool, string) {
		_, err := e.k8s.CoreV1().ServiceAccounts("default").Create(e.ctx(10*time.Second), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprint(err)
	})
	id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(ebsCSI), ServiceAccountRoleArn: aws.String(role)})
	e.waitUpdate(ebsCSI, id, types.UpdateStatusSuccessful)
	e.waitRecorded("kube-system", ebsCSISA, e.addonAssociation(ebsCSI))
	e.waitActive(ebsCSI)
	if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(ebsCSI)}); err != nil {
		t.Fatal(err)
	}
	e.waitDeleted(ebsCSI)
}

// TestPodIdentityTwoAssociationsOfOneAddon: the two associations of one
// add-on (catalog/addons/saltbush-pod-identity) are recorded on its two
// service accounts; an update that changes one role changes that record
// only, one that drops an association drops its record only, and deleting
// the add-on takes both service accounts and associations.
func TestPodIdentityTwoAssociationsOfOneAddon(t *testing.T) {
	const (
		addon      = "saltbush-pod-identity"
		ns         = "saltbush-pod-identity"
		controller = "saltbush-pod-identity-controller"
		node       = "saltbush-pod-identity-node"
	)
	e := newEnv(t, envOptions{}, "i-a")
	e.startAgent("i-a", agentOptions{})
	role := func(name string) string { return "arn:aws:iam::" + e.account + ":role/" + name }
	assoc := func(sa, r string) types.AddonPodIdentityAssociations {
		return types.AddonPodIdentityAssociations{ServiceAccount: aws.String(sa), RoleArn: aws.String(role(r))}
	}
	// associations is the add-on's associations by service account.
	associations := func(e *env) map[string]*types.PodIdentityAssociation {
		e.t.Helper()
		out, err := e.eks.DescribeAddon(e.ctx(10*time.Second), &eks.DescribeAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(addon)})
		if err != nil {
			e.t.Fatal(err)
		}
		bySA := map[string]*types.PodIdentityAssociation{}
		for _, arn := range out.Addon.PodIdentityAssociations {
			p := e.describeAssociation(arn[strings.LastIndex(arn, "/")+1:])
			bySA[aws.ToString(p.ServiceAccount)] = p
		}
		return bySA
	}

	e.createAddon(eks.CreateAddonInput{AddonName: aws.String(addon),
		PodIdentityAssociations: []types.AddonPodIdentityAssociations{assoc(controller, "controller"), assoc(node, "node")}})
	e.waitActive(addon)
	first := associations(e)
	if len(first) != 2 || first[controller] == nil || first[node] == nil {
		t.Fatalf("associations %v, want one for each of %s and %s", slices.Collect(maps.Keys(first)), controller, node)
	}
	for _, sa := range []string{controller, node} {
		if aws.ToString(first[sa].OwnerArn) == "" {
			t.Fatalf("association of %s has no ownerArn: %+v", sa, first[sa])
		}
		if got := e.waitRecorded(ns, sa, first[sa]); !hasManager(got, "eks") || !hasManager(got, podidentity.FieldManager) {
			t.Errorf("managers of %s %v: want eks and %s applying", sa, saManagers(got), podidentity.FieldManager)
		}
	}

	t.Run("one role changed", func(t *testing.T) {
		e := e.in(t)
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(addon),
			PodIdentityAssociations: []types.AddonPodIdentityAssociations{assoc(controller, "controller"), assoc(node, "node-two")}})
		e.waitUpdate(addon, id, types.UpdateStatusSuccessful)
		now := associations(e)
		if aws.ToString(now[node].RoleArn) != role("node-two") || aws.ToString(now[node].AssociationId) != aws.ToString(first[node].AssociationId) {
			t.Fatalf("node association after the update %+v, want %s with role node-two", now[node], aws.ToString(first[node].AssociationId))
		}
		e.waitRecorded(ns, node, now[node])
		e.waitRecorded(ns, controller, first[controller])
	})

	t.Run("one dropped", func(t *testing.T) {
		e := e.in(t)
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(addon),
			PodIdentityAssociations: []types.AddonPodIdentityAssociations{assoc(controller, "controller")}})
		e.waitUpdate(addon, id, types.UpdateStatusSuccessful)
		now := associations(e)
		if len(now) != 1 || aws.ToString(now[controller].AssociationId) != aws.ToString(first[controller].AssociationId) {
			t.Fatalf("associations after dropping the node's %v, want only %s", now, aws.ToString(first[controller].AssociationId))
		}
		if sa := e.waitRecorded(ns, node, nil); sa == nil || !hasManager(sa, "eks") {
			t.Fatalf("the dropped association's service account went or lost its manager: %v", saManagers(sa))
		}
		e.waitRecorded(ns, controller, first[controller])
		e.waitActive(addon)
	})

	t.Run("deleted with the add-on", func(t *testing.T) {
		e := e.in(t)
		id := e.updateAddon(eks.UpdateAddonInput{AddonName: aws.String(addon),
			PodIdentityAssociations: []types.AddonPodIdentityAssociations{assoc(controller, "controller"), assoc(node, "node")}})
		e.waitUpdate(addon, id, types.UpdateStatusSuccessful)
		both := associations(e)
		for _, sa := range []string{controller, node} {
			e.waitRecorded(ns, sa, both[sa])
		}
		if _, err := e.eks.DeleteAddon(e.ctx(waitDeleted), &eks.DeleteAddonInput{ClusterName: aws.String(e.cluster), AddonName: aws.String(addon)}); err != nil {
			t.Fatal(err)
		}
		e.waitDeleted(addon)
		for _, sa := range []string{controller, node} {
			if got := e.serviceAccount(ns, sa); got != nil {
				t.Errorf("the deleted add-on's service account %s is still there: %v", sa, got.Annotations)
			}
		}
		list, err := e.eks.ListPodIdentityAssociations(e.ctx(10*time.Second), &eks.ListPodIdentityAssociationsInput{ClusterName: aws.String(e.cluster)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Associations) != 0 {
			t.Errorf("associations listed after DeleteAddon: %+v", list.Associations)
		}
	})
}
