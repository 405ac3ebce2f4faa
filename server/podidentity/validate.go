package podidentity

import (
	"crypto/rand"
	"encoding/json"
	"regexp"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/policy"
	"github.com/saltbush/saltbush/server/tagging"
)

// The semantic checks of the EKS model's pod identity operations; lengths,
// enums and list sizes of the model are checked for every operation by the
// façade's model validator.

// roleARNPattern is an IAM role ARN: arn:aws:iam::{account}:role/{path}{name}.
var roleARNPattern = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):role/((?:[\x21-\x7e]*/)?)([\w+=,.@-]{1,64})$`)

// namespacePattern is a Kubernetes namespace name (DNS-1123 label).
var namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// serviceAccountPattern is a Kubernetes service account name (DNS-1123
// subdomain, at most 253 characters; checked with the length below).
var serviceAccountPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// idPattern is an association id as AWS makes them.
var idPattern = regexp.MustCompile(`^a-[a-z0-9]{17}$`)

// idLength is len("a-") plus 17.
const idLength = 19

// maxPolicyLength is IAM's limit on an inline session policy.
const maxPolicyLength = 2048

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewID returns a new association id: a- and 17 random lowercase
// alphanumerics, each uniform (bytes of 252 and above are drawn again, so
// the modulo is unbiased).
func NewID() string {
	out := make([]byte, 0, idLength)
	out = append(out, "a-"...)
	buf := make([]byte, 32)
	for len(out) < idLength {
		_, _ = rand.Read(buf) // crypto/rand.Read never fails
		for _, c := range buf {
			if c < 252 && len(out) < idLength {
				out = append(out, idAlphabet[int(c)%len(idAlphabet)])
			}
		}
	}
	return string(out)
}

// validateID checks an association id named in a path.
func validateID(cluster, id string) error {
	if len(id) != idLength {
		return invalid(cluster, "The parameter associationId should be %d characters long.", idLength)
	}
	if !idPattern.MatchString(id) {
		return invalid(cluster, "The parameter associationId %s is not a valid association id.", id)
	}
	return nil
}

// ValidateRoleARN checks the roleArn of an association: an IAM role of the
// caller's account (the account of the cluster). member names it in the
// message.
func ValidateRoleARN(member, arn, account string) error {
	m := roleARNPattern.FindStringSubmatch(arn)
	if m == nil {
		return errdefs.InvalidParameter("The %s %s is not a valid IAM role ARN.", member, clip(arn))
	}
	if m[1] != account {
		return errdefs.InvalidParameter("The %s %s must be an IAM role in the cluster's account %s.", member, arn, account)
	}
	return nil
}

// validateTargetRoleARN checks a targetRoleArn: an IAM role of any account
// (role chaining may cross accounts).
func validateTargetRoleARN(arn string) error {
	if !roleARNPattern.MatchString(arn) {
		return errdefs.InvalidParameter("The targetRoleArn %s is not a valid IAM role ARN.", clip(arn))
	}
	return nil
}

// ValidateNamespace checks a Kubernetes namespace name.
func ValidateNamespace(ns string) error {
	if !namespacePattern.MatchString(ns) {
		return errdefs.InvalidParameter("The namespace %s is not a valid Kubernetes namespace name.", clip(ns))
	}
	return nil
}

// ValidateServiceAccount checks a Kubernetes service account name.
func ValidateServiceAccount(sa string) error {
	if len(sa) > 253 || !serviceAccountPattern.MatchString(sa) {
		return errdefs.InvalidParameter("The serviceAccount %s is not a valid Kubernetes service account name.", clip(sa))
	}
	return nil
}

// validatePolicy checks a session policy: within IAM's size, and a policy
// document saltbush evaluates (the credentials EKS Auth issues carry it as
// their session policy; one it could not evaluate would refuse them all).
func validatePolicy(doc string) error {
	if len(doc) > maxPolicyLength {
		return errdefs.InvalidParameter("The policy is longer than %d characters.", maxPolicyLength)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		return errdefs.InvalidParameter("The policy is not a valid JSON policy document.")
	}
	if _, err := policy.Parse([]byte(doc)); err != nil {
		return errdefs.InvalidParameter("The policy is not a policy document saltbush evaluates: %v.", err)
	}
	return nil
}

// validateCreate checks a CreatePodIdentityAssociation request for the
// caller's account: the required members first, in the model's order.
func validateCreate(account string, req *eksv1.CreatePodIdentityAssociationRequest) error {
	for _, m := range []struct{ name, value string }{
		{"namespace", req.GetNamespace()},
		{"serviceAccount", req.GetServiceAccount()},
		{"roleArn", req.GetRoleArn()},
	} {
		if m.value == "" {
			return errdefs.InvalidParameter("The parameter %s must not be empty.", m.name)
		}
	}
	if err := ValidateNamespace(req.GetNamespace()); err != nil {
		return err
	}
	if err := ValidateServiceAccount(req.GetServiceAccount()); err != nil {
		return err
	}
	if err := ValidateRoleARN("roleArn", req.GetRoleArn(), account); err != nil {
		return err
	}
	if t := req.GetTargetRoleArn(); t != "" {
		if err := validateTargetRoleARN(t); err != nil {
			return err
		}
	}
	if p := req.GetPolicy(); p != "" {
		if err := validatePolicy(p); err != nil {
			return err
		}
	}
	if err := tagging.Validate(req.GetTags()); err != nil {
		return errdefs.InvalidParameter("%v.", err)
	}
	return nil
}

// validateUpdate checks the members an UpdatePodIdentityAssociation
// request sets.
func validateUpdate(account string, req *eksv1.UpdatePodIdentityAssociationRequest) error {
	if req.RoleArn != nil {
		if req.GetRoleArn() == "" {
			return errdefs.InvalidParameter("The parameter roleArn must not be empty.")
		}
		if err := ValidateRoleARN("roleArn", req.GetRoleArn(), account); err != nil {
			return err
		}
	}
	if t := req.GetTargetRoleArn(); t != "" {
		if err := validateTargetRoleARN(t); err != nil {
			return err
		}
	}
	if p := req.GetPolicy(); p != "" {
		if err := validatePolicy(p); err != nil {
			return err
		}
	}
	return nil
}

// clip keeps a caller's value short in messages.
func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "…"
	}
	return s
}
