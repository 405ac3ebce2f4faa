package podwebhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applyadmissionv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	applymetav1 "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cluster's MutatingWebhookConfiguration, as EKS configures its pod
// identity webhook: pods on CREATE, failure ignored (a pod is admitted
// unmutated rather than refused when no agent answers), no side effects,
// and pods labelled eks.amazonaws.com/skip-pod-identity-webhook left out.
const (
	ConfigurationName = "saltbush-pod-identity-webhook"
	WebhookName       = "iam-for-pods.amazonaws.com"
	// FieldManager owns the configuration.
	FieldManager   = "eks-pod-identity"
	timeoutSeconds = 10
	skipLabel      = "eks.amazonaws.com/skip-pod-identity-webhook"
)

// Configuration is the cluster's webhook configuration: the webhook at
// url (the agents' loopback address), verified with caPEM.
func Configuration(url string, caPEM []byte) *applyadmissionv1.MutatingWebhookConfigurationApplyConfiguration {
	return applyadmissionv1.MutatingWebhookConfiguration(ConfigurationName).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "saltbush-agent"}).
		WithWebhooks(applyadmissionv1.MutatingWebhook().
			WithName(WebhookName).
			WithClientConfig(applyadmissionv1.WebhookClientConfig().WithURL(url).WithCABundle(caPEM...)).
			WithRules(applyadmissionv1.RuleWithOperations().
				WithOperations(admissionregistrationv1.Create).
				WithAPIGroups("").WithAPIVersions("v1").WithResources("pods").
				WithScope(admissionregistrationv1.AllScopes)).
			WithFailurePolicy(admissionregistrationv1.Ignore).
			WithMatchPolicy(admissionregistrationv1.Equivalent).
			WithSideEffects(admissionregistrationv1.SideEffectClassNone).
			WithAdmissionReviewVersions("v1beta1").
			WithTimeoutSeconds(timeoutSeconds).
			WithReinvocationPolicy(admissionregistrationv1.IfNeededReinvocationPolicy).
			WithObjectSelector(applymetav1.LabelSelector().WithMatchExpressions(
				applymetav1.LabelSelectorRequirement().WithKey(skipLabel).WithOperator(metav1.LabelSelectorOpDoesNotExist))))
}

// Ensure makes the cluster's webhook CA and configuration what they should
// be: c is the executor's grant-guarded client.
func Ensure(ctx context.Context, c client.Client, url string) error {
	caPEM, err := EnsureCA(ctx, c)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, Configuration(url, caPEM), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply MutatingWebhookConfiguration %s: %w", ConfigurationName, err)
	}
	return nil
}
