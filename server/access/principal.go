package access

import (
	"crypto/sha256"
	"encoding/base32"
	"regexp"
	"strings"
)

// Principal is the IAM principal of an access entry.
type Principal struct {
	// ARN is the principal ARN as given (a role or user may carry a path).
	ARN string
	// Account is the principal's account.
	Account string
	// Kind is user, role or root.
	Kind string
	// Name is the user or role name without its path ("root" for root).
	Name string
}

// Canonical is the ARN entries are keyed by: the path removed. IAM names
// are unique in an account whatever their path, and an assumed-role
// session names its role without the path, so the canonical ARN is what a
// token's signer and an entry have in common.
func (p Principal) Canonical() string {
	if p.Kind == "root" {
		return "arn:aws:iam::" + p.Account + ":root"
	}
	return "arn:aws:iam::" + p.Account + ":" + p.Kind + "/" + p.Name
}

var (
	iamPrincipal = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):(user|role)/((?:[\x21-\x7e]*/)?)([\w+=,.@-]{1,64})$`)
	rootARN      = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):root$`)
	sessionARN   = regexp.MustCompile(`^arn:aws:sts::([0-9]{12}):assumed-role/([\w+=,.@-]{1,64})/([\w+=,.@-]{2,64})$`)
)

// principalError says why an ARN cannot be an entry's principal.
type principalError string

func (e principalError) Error() string { return string(e) }

// ParsePrincipal parses an access entry's principal ARN: an IAM user or
// role, or an account root. An assumed-role session cannot be one, as in
// AWS (the entry names the role; every session of it matches).
func ParsePrincipal(arn string) (Principal, error) {
	if len(arn) > 2048 {
		return Principal{}, principalError("The specified principalArn is invalid: invalid principal.")
	}
	if m := iamPrincipal.FindStringSubmatch(arn); m != nil {
		return Principal{ARN: arn, Account: m[1], Kind: m[2], Name: m[4]}, nil
	}
	if m := rootARN.FindStringSubmatch(arn); m != nil {
		return Principal{ARN: arn, Account: m[1], Kind: "root", Name: "root"}, nil
	}
	if strings.HasPrefix(arn, "arn:aws:sts::") {
		return Principal{}, principalError("The specified principalArn is invalid: the STS session principal type can't be used with access entries; use the IAM role's ARN.")
	}
	return Principal{}, principalError("The specified principalArn is invalid: invalid principal.")
}

// Signer is the principal a verified signature belongs to, canonicalized
// the way aws-iam-authenticator canonicalizes STS's answer: an
// assumed-role session becomes its role plus the session name.
type Signer struct {
	// ARN is what STS GetCallerIdentity would return (the session ARN for
	// an assumed role).
	ARN string
	// Principal is the IAM principal entries are matched against.
	Principal Principal
	// SessionName is the role session's name ("" for users and root).
	SessionName string
}

// ParseSigner canonicalizes the principal ARN an access key belongs to.
func ParseSigner(arn string) (Signer, bool) {
	if m := sessionARN.FindStringSubmatch(arn); m != nil {
		role := "arn:aws:iam::" + m[1] + ":role/" + m[2]
		return Signer{ARN: arn, Principal: Principal{ARN: role, Account: m[1], Kind: "role", Name: m[2]}, SessionName: m[3]}, true
	}
	p, err := ParsePrincipal(arn)
	if err != nil {
		return Signer{}, false
	}
	return Signer{ARN: arn, Principal: p}, true
}

// ID is the principal's unique id as STS reports it in UserId: the
// account id for root; otherwise AIDA (users) or AROA (roles) and 17
// characters. saltbush's key store keeps no unique ids, so the id is
// derived from the canonical ARN: stable for a principal, different for
// different principals (unlike AWS, a principal deleted and recreated under
// the same name keeps its id; saltbush's key store deletes no principals).
func (p Principal) ID() string {
	switch p.Kind {
	case "root":
		return p.Account
	case "role":
		return "AROA" + derivedID(p.Canonical())
	default:
		return "AIDA" + derivedID(p.Canonical())
	}
}

func derivedID(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return base32.StdEncoding.EncodeToString(sum[:])[:17]
}
