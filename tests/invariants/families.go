package invariants

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// A family is one kind of key in the keyspace (docs/architecture.md,
// "Store", the key table; store/keys.go and the packages that own the
// records build them) and the record stored under it.
type family struct {
	// name is the family's name in a Report's counts.
	name string
	// pattern is the key relative to the prefix, split at "/": literal
	// segments, and "{x}" segments that capture a non-empty segment.
	pattern []string
	// record returns an empty record of the family's type; nil for a
	// family whose value is not a record (an etcd election's value).
	record func() proto.Message
	// leased: the key must be attached to an etcd lease (it exists only
	// while something keeps it alive, or until it expires).
	leased bool
}

// Family names, as a Report counts them.
const (
	famCluster           = "cluster"
	famAddon             = "addon"
	famAddonUpdate       = "addon-update"
	famClusterUpdate     = "cluster-update"
	famAccessEntry       = "access-entry"
	famPodIdentity       = "pod-identity-association"
	famPodIdentitySA     = "pod-identity-service-account"
	famExecutor          = "executor"
	famInsightsRefresh   = "insights-refresh"
	famAgentSession      = "agent-session"
	famIdempotency       = "idempotency"
	famAddonDeadline     = "addon-deadline"
	famUpdateDeadline    = "update-deadline"
	famElection          = "election"
	famBootstrap         = "iam-bootstrap"
	famAccount           = "iam-account"
	famPrincipal         = "iam-principal"
	famPrincipalName     = "iam-principal-name"
	famPolicy            = "iam-policy"
	famAccessKey         = "iam-access-key"
	famService           = "iam-service"
	famRoleSession       = "iam-role-session"
	famOIDCProvider      = "iam-oidc-provider"
	famOIDCIssuer        = "oidc-issuer"
	famAuthorities       = "pki-authorities"
	famIssuedCertificate = "pki-issued"
	famRevokedCert       = "pki-revoked"
	famStoreMeta         = "store-meta"
	famPublishedAddon    = "published-addon-version"
)

// families is every key family saltbush writes. A key that matches none
// is a violation: a new family must be added here (with its record type),
// so that the checker reads everything the server writes.
var families = []family{
	{name: famCluster, pattern: split("accounts/{account}/clusters/{name}"), record: rec[*storagev1.ClusterRecord]},
	{name: famAddon, pattern: split("clusters/{uid}/addons/{addon}"), record: rec[*storagev1.AddonRecord]},
	{name: famAddonUpdate, pattern: split("clusters/{uid}/updates/addons/{addon}/{id}"), record: rec[*storagev1.UpdateRecord]},
	{name: famClusterUpdate, pattern: split("clusters/{uid}/updates/cluster/{id}"), record: rec[*storagev1.UpdateRecord]},
	{name: famAccessEntry, pattern: split("clusters/{uid}/access/{hash}"), record: rec[*storagev1.AccessEntryRecord]},
	{name: famPodIdentity, pattern: split("clusters/{uid}/podidentity/associations/{id}"), record: rec[*storagev1.PodIdentityAssociationRecord]},
	{name: famPodIdentitySA, pattern: split("clusters/{uid}/podidentity/serviceaccounts/{namespace}/{sa}"), record: rec[*storagev1.PodIdentityServiceAccountRecord]},
	{name: famExecutor, pattern: split("clusters/{uid}/executor"), record: rec[*storagev1.ExecutorRecord]},
	{name: famInsightsRefresh, pattern: split("clusters/{uid}/insights/refresh"), record: rec[*storagev1.InsightsRefreshRecord]},
	{name: famAgentSession, pattern: split("clusters/{uid}/sessions/{instance}"), record: rec[*storagev1.AgentSessionRecord], leased: true},
	{name: famIdempotency, pattern: split("idempotency/{account}/{operation}/{hash}"), record: rec[*storagev1.IdempotencyRecord], leased: true},
	{name: famAddonDeadline, pattern: split("addon-deadlines/{nanos}/{uid}/{addon}"), record: rec[*storagev1.AddonDeadlineHint]},
	// A rollback's timeout (server/version/rollback.go); it may outlive its
	// cluster until the deadline passes and the sweeper drops it.
	{name: famUpdateDeadline, pattern: split("update-deadlines/{nanos}/{uid}/{id}"), record: rec[*storagev1.UpdateDeadlineHint]},
	// concurrency.Election's keys: {prefix}/{lease id in hex}, the value
	// the candidate's name (server/addon/sweeper.go).
	{name: famElection, pattern: split("elections/addon-deadlines/{lease}"), leased: true},
	{name: famBootstrap, pattern: split("iam/bootstrap"), record: rec[*storagev1.AccountRecord]},
	{name: famAccount, pattern: split("iam/accounts/{account}"), record: rec[*storagev1.AccountRecord]},
	{name: famPrincipal, pattern: split("iam/accounts/{account}/principals/{hash}"), record: rec[*storagev1.PrincipalRecord]},
	{name: famPrincipalName, pattern: split("iam/accounts/{account}/names/{kind}/{name}"), record: rec[*storagev1.PrincipalNameRecord]},
	{name: famPolicy, pattern: split("iam/accounts/{account}/policies/{name}"), record: rec[*storagev1.PolicyRecord]},
	{name: famAccessKey, pattern: split("iam/keys/{akid}"), record: rec[*storagev1.AccessKeyRecord]},
	{name: famService, pattern: split("iam/services/{name}"), record: rec[*storagev1.ServiceRecord]},
	{name: famRoleSession, pattern: split("iam/sessions/{akid}"), record: rec[*storagev1.SessionRecord], leased: true},
	{name: famOIDCProvider, pattern: split("iam/accounts/{account}/oidc-providers/{hash}"), record: rec[*storagev1.OpenIDConnectProviderRecord]},
	// A hosted issuer's keys (server/oidc/issuers.go), kept after its
	// cluster is gone: such a record serves nothing (oidc.Serves) and is
	// replaced when another cluster takes the issuer.
	{name: famOIDCIssuer, pattern: split("oidc/issuers/{hash}"), record: rec[*storagev1.ServiceAccountIssuerRecord]},
	{name: famAuthorities, pattern: split("pki/authorities"), record: rec[*storagev1.CertificateAuthorityState]},
	{name: famIssuedCertificate, pattern: split("pki/issued/{serial}"), record: rec[*storagev1.IssuedCertificateRecord]},
	{name: famRevokedCert, pattern: split("pki/revoked/{serial}"), record: rec[*storagev1.RevokedCertificateRecord]},
	{name: famStoreMeta, pattern: split("meta/store"), record: rec[*storagev1.StoreMeta]},
	// An add-on version an operator published (server/published).
	{name: famPublishedAddon, pattern: split("catalog/addons/{addon}/{version}"), record: rec[*storagev1.PublishedAddonVersionRecord]},
}

func split(pattern string) []string { return strings.Split(pattern, "/") }

// rec returns a new empty record of type T.
func rec[T interface {
	proto.Message
	*E
}, E any]() proto.Message {
	return T(new(E))
}

// match returns the family of key (relative to the prefix) and what its
// "{x}" segments captured; nil when no family matches.
func match(key string) (*family, map[string]string) {
	parts := strings.Split(key, "/")
	for i := range families {
		f := &families[i]
		if len(f.pattern) != len(parts) {
			continue
		}
		caps := map[string]string{}
		ok := true
		for j, p := range f.pattern {
			if strings.HasPrefix(p, "{") {
				if parts[j] == "" {
					ok = false
					break
				}
				caps[strings.Trim(p, "{}")] = parts[j]
			} else if p != parts[j] {
				ok = false
				break
			}
		}
		if ok {
			return f, caps
		}
	}
	return nil, nil
}

// decodeStrict decodes b as m and refuses what store.Decode would let
// through: fields m's type does not have (another record type's bytes
// decode, their fields unknown), and bytes the store's deterministic codec
// would not have written (store.Encode of the result must give b back).
func decodeStrict(b []byte, m proto.Message) error {
	if err := store.Decode(b, m); err != nil {
		return err
	}
	if path := unknownFields(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().Name())); path != "" {
		return fmt.Errorf("fields unknown to %s at %s: another record type's bytes?",
			m.ProtoReflect().Descriptor().FullName(), path)
	}
	again, err := store.Encode(m)
	if err != nil {
		return err
	}
	if string(again) != string(b) {
		return fmt.Errorf("not the store's canonical encoding of a %s (%d bytes stored, %d re-encoded)",
			m.ProtoReflect().Descriptor().FullName(), len(b), len(again))
	}
	return nil
}

// unknownFields returns the path of the first message under m holding
// unknown fields, "" when none does.
func unknownFields(m protoreflect.Message, path string) string {
	if len(m.GetUnknown()) > 0 {
		return path
	}
	found := ""
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		sub := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && found == ""; i++ {
				found = unknownFields(l.Get(i).Message(), fmt.Sprintf("%s[%d]", sub, i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownFields(mv.Message(), fmt.Sprintf("%s[%v]", sub, k.Interface()))
				return found == ""
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = unknownFields(v.Message(), sub)
		}
		return found == ""
	})
	return found
}
