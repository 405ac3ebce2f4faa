// Package identity carries the verified caller of a request through its
// context. Only the edges of saltbush set it: the façade after it has
// authenticated the HTTP request, and the gRPC server's interceptor from the
// connection. Nothing reads identity from request metadata, so a caller
// cannot claim to be someone else by sending a header.
package identity

import (
	"context"
	"fmt"
	"regexp"
)

// Caller is who a request acts for.
type Caller struct {
	// AccountID is the 12-digit account every lookup is scoped to.
	AccountID string
	// PrincipalARN is the authenticated principal (an IAM user or role ARN,
	// or the account root).
	PrincipalARN string
}

// ctxKey is unexported so only this package can store a Caller.
type ctxKey struct{}

// NewContext returns ctx carrying c. It is called only at the trust
// boundary (gateway, gRPC interceptor), never with values a client sent.
func NewContext(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the caller of ctx, if one was set.
func FromContext(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

var accountPattern = regexp.MustCompile(`^[0-9]{12}$`)

// ValidateAccountID checks that id is a 12-digit account id.
func ValidateAccountID(id string) error {
	if !accountPattern.MatchString(id) {
		return fmt.Errorf("account id %q: must be 12 digits", id)
	}
	return nil
}

// RootCaller is the account's root principal.
func RootCaller(accountID string) Caller {
	return Caller{AccountID: accountID, PrincipalARN: "arn:aws:iam::" + accountID + ":root"}
}
