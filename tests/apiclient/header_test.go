package apiclient

import (
	"testing"

	"github.com/saltbush/saltbush/api/client"
	"github.com/saltbush/saltbush/server"
)

// TestActForAccountHeaderAgrees: the contracts module's client cannot
// import the server, so it carries its own copy of the metadata key the
// server reads the delegated account from. A rename on either side alone
// would make every EKS call of every internal service fail with
// AccessDeniedException.
func TestActForAccountHeaderAgrees(t *testing.T) {
	if client.ActForAccountHeader != server.ActForAccountHeader {
		t.Errorf("api/client.ActForAccountHeader = %q, server.ActForAccountHeader = %q: they must be the same key",
			client.ActForAccountHeader, server.ActForAccountHeader)
	}
}
