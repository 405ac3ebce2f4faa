package apply

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/guest/grant"
	"github.com/saltbush/saltbush/guest/inventory"
)

// AWS's add-on issue codes (AddonIssueCode) the agent reports.
const (
	CodeConfigurationConflict        = "ConfigurationConflict"
	CodeAdmissionRequestDenied       = "AdmissionRequestDenied"
	CodeAccessDenied                 = "AccessDenied"
	CodeK8sResourceNotFound          = "K8sResourceNotFound"
	CodeInsufficientNumberOfReplicas = "InsufficientNumberOfReplicas"
	CodeInternalFailure              = "InternalFailure"
)

// maxMessage bounds an issue message (the host refuses longer ones).
const maxMessage = 2048

// ResourceID names an object in an issue's resourceIds: Kind/namespace/name,
// or Kind/name for a cluster-scoped object.
func ResourceID(r inventory.Ref) string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// NewIssue builds an issue about some objects.
func NewIssue(code, message string, refs ...inventory.Ref) *deliveryv1.Issue {
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	is := &deliveryv1.Issue{Code: code, Message: message}
	for _, r := range refs {
		is.ResourceIds = append(is.ResourceIds, ResourceID(r))
	}
	return is
}

// errTransient marks a failure worth retrying: the apiserver was
// unreachable, overloaded or timed out, or an object changed under the
// write. It is no verdict on the generation.
type errTransient struct{ err error }

func (e errTransient) Error() string { return e.err.Error() }
func (e errTransient) Unwrap() error { return e.err }

// AsTransient marks err as worth retrying later (Transient), for the
// agent's other writers.
func AsTransient(err error) error { return errTransient{err} }

// Transient reports whether err is worth retrying later.
func Transient(err error) bool {
	var t errTransient
	return errors.As(err, &t)
}

// Verdict is verdict for the agent's other writers (package podidentity):
// the issue a failed write about ref means, or the grant's error or a
// transient one (Transient).
func Verdict(err error, ref inventory.Ref) (*deliveryv1.Issue, error) { return verdict(err, ref) }

// verdict turns an error of a write about ref into the issue it means for
// the generation, or into an error: the grant's (the caller stops) or a
// transient one (the caller retries).
func verdict(err error, ref inventory.Ref) (*deliveryv1.Issue, error) {
	msg := err.Error()
	switch {
	case grant.Refused(err):
		return nil, err
	case meta.IsNoMatchError(err):
		return NewIssue(CodeK8sResourceNotFound, fmt.Sprintf("%s: the cluster serves no kind %s in %s.", ref, ref.Kind, ref.GVK().GroupVersion()), ref), nil
	case apierrors.IsConflict(err) && len(conflictFields(err)) > 0:
		return NewIssue(CodeConfigurationConflict, fmt.Sprintf(
			"Conflicts found when trying to apply. Will not continue due to resolve conflicts mode. Conflicts: %s - %s",
			ref, strings.Join(conflictFields(err), ", ")), ref), nil
	case admissionDenied(err):
		return NewIssue(CodeAdmissionRequestDenied, fmt.Sprintf("%s: %s", ref, apiMessage(err)), ref), nil
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return NewIssue(CodeAccessDenied, fmt.Sprintf("%s: %s", ref, apiMessage(err)), ref), nil
	case apierrors.IsNotFound(err):
		// A namespace or a kind that is missing.
		return NewIssue(CodeK8sResourceNotFound, fmt.Sprintf("%s: %s", ref, apiMessage(err)), ref), nil
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return NewIssue(CodeInternalFailure, fmt.Sprintf("%s was refused by the apiserver: %s", ref, apiMessage(err)), ref), nil
	}
	return nil, errTransient{fmt.Errorf("%s: %s", ref, msg)}
}

// admissionDenied reports whether an admission webhook or a validating
// admission policy refused the request (the apiserver's messages say so;
// the status code is the policy's choice).
func admissionDenied(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	m := status.Status().Message
	return strings.Contains(m, "admission webhook") || strings.Contains(m, "ValidatingAdmissionPolicy") ||
		strings.Contains(m, "denied request") || strings.Contains(m, "denied the request")
}

// apiMessage is the apiserver's own message for err, else err's text.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}
