package iam

import (
	"testing"

	"github.com/saltbush/saltbush/errdefs"
)

// TestNamesUniqueIgnoringCase: IAM user and role names are unique
// in an account without regard to case ("you cannot create roles named
// both PRODROLE and prodrole", IAM User Guide, IAM identifiers), so an
// assumed-role session, an access entry and a policy attachment can never
// name different roles AWS considers the same.
func TestNamesUniqueIgnoringCase(t *testing.T) {
	svc, _ := newTestService(t)
	ctx := ctxT(t)
	if _, err := svc.CreateAccount(ctx, "111122223333", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreatePrincipal(ctx, "arn:aws:iam::111122223333:role/ops/Deployer"); err != nil {
		t.Fatal(err)
	}
	for _, dup := range []string{"arn:aws:iam::111122223333:role/deployer", "arn:aws:iam::111122223333:role/DEPLOYER"} {
		if _, err := svc.CreatePrincipal(ctx, dup); !isException(err, errdefs.ResourceInUseException) {
			t.Errorf("CreatePrincipal(%s) after role/ops/Deployer: %v, want ResourceInUseException", dup, err)
		}
	}
}
