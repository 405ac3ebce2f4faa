package invariants

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/store"
)

// checker holds one read of the keyspace and what it found.
type checker struct {
	revision      int64
	items         []*item
	byFamily      map[string][]*item
	checked       map[string]int
	violations    []Violation
	ackedVerified int

	// Indexes of the decoded records, built by checkRecords.
	clusters       map[string]*storagev1.ClusterRecord // by uid
	clusterByName  map[string]*storagev1.ClusterRecord // by account/name
	addons         map[string]*storagev1.AddonRecord   // by uid/name
	addonByUID     map[string]*storagev1.AddonRecord
	addonUpdates   map[string]*storagev1.UpdateRecord // by uid/addon/id
	clusterUpdates map[string]*storagev1.UpdateRecord // by uid/id
	entries        map[string]*storagev1.AccessEntryRecord
	entryByUID     map[string]*storagev1.AccessEntryRecord
	assocs         map[string]*storagev1.PodIdentityAssociationRecord // by uid/id
	holders        map[string]string                                  // uid/namespace/sa → association id
	executors      map[string]*storagev1.ExecutorRecord               // by cluster uid
	deadlineHints  map[string]*storagev1.AddonDeadlineHint            // by relative key
	accounts       map[string]bool
	principals     map[string]*storagev1.PrincipalRecord // by account/hash
	names          map[string]string                     // account/kind/name → ARN
	tags           map[string]map[string]string          // resource ARN → tags
	authorities    *storagev1.CertificateAuthorityState
}

func newChecker(revision int64) *checker {
	return &checker{
		revision: revision, byFamily: map[string][]*item{}, checked: map[string]int{},
		clusters: map[string]*storagev1.ClusterRecord{}, clusterByName: map[string]*storagev1.ClusterRecord{},
		addons: map[string]*storagev1.AddonRecord{}, addonByUID: map[string]*storagev1.AddonRecord{},
		addonUpdates: map[string]*storagev1.UpdateRecord{}, clusterUpdates: map[string]*storagev1.UpdateRecord{},
		entries: map[string]*storagev1.AccessEntryRecord{}, entryByUID: map[string]*storagev1.AccessEntryRecord{},
		assocs: map[string]*storagev1.PodIdentityAssociationRecord{}, holders: map[string]string{},
		executors: map[string]*storagev1.ExecutorRecord{}, deadlineHints: map[string]*storagev1.AddonDeadlineHint{},
		accounts: map[string]bool{}, principals: map[string]*storagev1.PrincipalRecord{}, names: map[string]string{},
		tags: map[string]map[string]string{},
	}
}

// decoded calls fn for every item of family name whose record decoded.
func decoded[T any](c *checker, name string, fn func(it *item, r T)) {
	for _, it := range c.byFamily[name] {
		if it.rec == nil {
			continue
		}
		fn(it, it.rec.(T))
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// iamPrincipal is an IAM user or role ARN (server/iam/iam.go).
var iamPrincipal = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):(user|role)/((?:[\x21-\x7e]*/)?)([\w+=,.@-]{1,64})$`)

// rootARN is an account's root principal.
var rootARN = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):root$`)

// checkRecords checks each record against its key and builds the indexes
// the cross-record checks use.
func (c *checker) checkRecords() {
	decoded(c, famCluster, func(it *item, r *storagev1.ClusterRecord) {
		acct, name := it.caps["account"], it.caps["name"]
		switch {
		case r.GetName() != name || r.GetAccountId() != acct:
			c.violate(InvKey, it.key, "cluster record names %s of account %s", r.GetName(), r.GetAccountId())
		case r.GetUid() == "":
			c.violate(InvKey, it.key, "cluster record without a uid")
		case !strings.HasPrefix(r.GetArn(), "arn:aws:eks:") || !strings.HasSuffix(r.GetArn(), ":"+acct+":cluster/"+name):
			c.violate(InvKey, it.key, "cluster ARN %q is not this cluster's", r.GetArn())
		case r.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_UNSPECIFIED:
			c.violate(InvKey, it.key, "cluster record without a status")
		}
		if other, dup := c.clusters[r.GetUid()]; dup && r.GetUid() != "" {
			c.violate(InvKey, it.key, "uid %s is also cluster %s's: an incarnation has one record", r.GetUid(), other.GetName())
		}
		c.clusters[r.GetUid()] = r
		c.clusterByName[acct+"/"+name] = r
		c.tags[r.GetArn()] = r.GetTags()
	})
	decoded(c, famAddon, func(it *item, r *storagev1.AddonRecord) {
		uid, name := it.caps["uid"], it.caps["addon"]
		switch {
		case r.GetClusterUid() != uid || r.GetName() != name:
			c.violate(InvKey, it.key, "add-on record names %s of cluster %s", r.GetName(), r.GetClusterUid())
		case r.GetUid() == "" || !strings.HasSuffix(r.GetArn(), ":addon/"+r.GetClusterName()+"/"+name+"/"+r.GetUid()):
			c.violate(InvKey, it.key, "add-on ARN %q does not end in its cluster, name and uid %q", r.GetArn(), r.GetUid())
		case r.GetGeneration() < 1:
			c.violate(InvKey, it.key, "add-on %s at generation %d; generations start at 1", name, r.GetGeneration())
		case r.GetObserved().GetGeneration() > r.GetGeneration():
			c.violate(InvKey, it.key, "add-on %s observed generation %d ahead of generation %d", name, r.GetObserved().GetGeneration(), r.GetGeneration())
		case r.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_UNSPECIFIED:
			c.violate(InvKey, it.key, "add-on %s without a status", name)
		}
		if other, dup := c.addonByUID[r.GetUid()]; dup {
			c.violate(InvKey, it.key, "uid %s is also add-on %s's of cluster %s", r.GetUid(), other.GetName(), other.GetClusterUid())
		}
		c.addons[uid+"/"+name] = r
		c.addonByUID[r.GetUid()] = r
		c.tags[r.GetArn()] = r.GetTags()
	})
	decoded(c, famAddonUpdate, func(it *item, r *storagev1.UpdateRecord) {
		uid, addon, id := it.caps["uid"], it.caps["addon"], it.caps["id"]
		switch {
		case r.GetId() != id || r.GetClusterUid() != uid || r.GetAddonName() != addon:
			c.violate(InvKey, it.key, "update record %s names add-on %s of cluster %s", r.GetId(), r.GetAddonName(), r.GetClusterUid())
		case r.GetAddonUid() == "":
			c.violate(InvKey, it.key, "add-on update %s names no add-on incarnation", id)
		case r.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_UNSPECIFIED || r.GetType() == "":
			c.violate(InvKey, it.key, "update %s without a status or type", id)
		}
		c.addonUpdates[uid+"/"+addon+"/"+id] = r
	})
	decoded(c, famClusterUpdate, func(it *item, r *storagev1.UpdateRecord) {
		uid, id := it.caps["uid"], it.caps["id"]
		switch {
		case r.GetId() != id || r.GetClusterUid() != uid:
			c.violate(InvKey, it.key, "update record %s names cluster %s", r.GetId(), r.GetClusterUid())
		case r.GetAddonName() != "" || r.GetAddonUid() != "":
			c.violate(InvKey, it.key, "cluster update %s names add-on %s", id, r.GetAddonName())
		case r.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_UNSPECIFIED || r.GetType() == "":
			c.violate(InvKey, it.key, "update %s without a status or type", id)
		}
		c.clusterUpdates[uid+"/"+id] = r
	})
	decoded(c, famAccessEntry, func(it *item, r *storagev1.AccessEntryRecord) {
		uid := it.caps["uid"]
		p, err := access.ParsePrincipal(r.GetPrincipalArn())
		switch {
		case err != nil:
			c.violate(InvKey, it.key, "access entry principal %q: %v", r.GetPrincipalArn(), err)
		case it.caps["hash"] != sha(p.Canonical()):
			c.violate(InvKey, it.key, "access entry of %s is not at the hash of its canonical principal %s", r.GetPrincipalArn(), p.Canonical())
		case r.GetClusterUid() != uid:
			c.violate(InvKey, it.key, "access entry of %s names cluster %s", r.GetPrincipalArn(), r.GetClusterUid())
		case r.GetUid() == "" || !strings.HasSuffix(r.GetArn(), "/"+r.GetUid()) ||
			!strings.Contains(r.GetArn(), ":access-entry/"+r.GetClusterName()+"/"):
			c.violate(InvKey, it.key, "access entry ARN %q is not its cluster's with uid %q", r.GetArn(), r.GetUid())
		}
		seen := map[string]bool{}
		for _, a := range r.GetPolicies() {
			if seen[a.GetPolicyArn()] {
				c.violate(InvKey, it.key, "access entry of %s holds policy %s twice", r.GetPrincipalArn(), a.GetPolicyArn())
			}
			seen[a.GetPolicyArn()] = true
		}
		if other, dup := c.entryByUID[r.GetUid()]; dup {
			c.violate(InvKey, it.key, "uid %s is also the access entry of %s", r.GetUid(), other.GetPrincipalArn())
		}
		c.entries[uid+"/"+it.caps["hash"]] = r
		c.entryByUID[r.GetUid()] = r
		c.tags[r.GetArn()] = r.GetTags()
	})
	decoded(c, famPodIdentity, func(it *item, r *storagev1.PodIdentityAssociationRecord) {
		uid, id := it.caps["uid"], it.caps["id"]
		switch {
		case r.GetClusterUid() != uid || r.GetAssociationId() != id:
			c.violate(InvKey, it.key, "association record names %s of cluster %s", r.GetAssociationId(), r.GetClusterUid())
		case !strings.HasSuffix(r.GetArn(), ":podidentityassociation/"+r.GetClusterName()+"/"+id):
			c.violate(InvKey, it.key, "association ARN %q is not its cluster's", r.GetArn())
		case r.GetNamespace() == "" || r.GetServiceAccount() == "" || r.GetRoleArn() == "":
			c.violate(InvKey, it.key, "association %s without namespace, service account or role", id)
		}
		c.assocs[uid+"/"+id] = r
		c.tags[r.GetArn()] = r.GetTags()
	})
	decoded(c, famPodIdentitySA, func(it *item, r *storagev1.PodIdentityServiceAccountRecord) {
		if r.GetAssociationId() == "" {
			c.violate(InvKey, it.key, "exclusivity key names no association")
		}
		c.holders[it.caps["uid"]+"/"+it.caps["namespace"]+"/"+it.caps["sa"]] = r.GetAssociationId()
	})
	decoded(c, famExecutor, func(it *item, r *storagev1.ExecutorRecord) {
		switch {
		case r.GetEpoch() < 0:
			c.violate(InvExecutor, it.key, "executor epoch %d", r.GetEpoch())
		case r.GetInstanceId() != "" && r.GetEpoch() < 1:
			c.violate(InvExecutor, it.key, "executor %s at epoch %d; epochs start at 1", r.GetInstanceId(), r.GetEpoch())
		}
		c.executors[it.caps["uid"]] = r
	})
	decoded(c, famAgentSession, func(it *item, r *storagev1.AgentSessionRecord) {
		if r.GetInstanceId() != it.caps["instance"] || r.GetReplica() == "" {
			c.violate(InvKey, it.key, "session record of %s held by replica %q", r.GetInstanceId(), r.GetReplica())
		}
	})
	decoded(c, famIdempotency, func(it *item, r *storagev1.IdempotencyRecord) {
		switch f, _ := match(r.GetResourceKey()); {
		case r.GetOperation() != it.caps["operation"]:
			c.violate(InvKey, it.key, "idempotency record of operation %s", r.GetOperation())
		case len(r.GetRequestFingerprint()) != sha256.Size:
			c.violate(InvKey, it.key, "request fingerprint of %d bytes", len(r.GetRequestFingerprint()))
		case f == nil:
			c.violate(InvKey, it.key, "idempotency record names resource key %q, of no key family", r.GetResourceKey())
		}
	})
	decoded(c, famAddonDeadline, func(it *item, r *storagev1.AddonDeadlineHint) {
		name := strings.TrimPrefix(it.key, store.AddonDeadlinesPrefix)
		if _, err := store.AddonDeadlineOf(name); err != nil {
			c.violate(InvKey, it.key, "%v", err)
		}
		if r.GetClusterUid() != it.caps["uid"] || r.GetAddonName() != it.caps["addon"] || r.GetGeneration() < 1 {
			c.violate(InvKey, it.key, "deadline hint names add-on %s of cluster %s at generation %d",
				r.GetAddonName(), r.GetClusterUid(), r.GetGeneration())
		}
		c.deadlineHints[it.key] = r
	})
	decoded(c, famUpdateDeadline, func(it *item, r *storagev1.UpdateDeadlineHint) {
		name := strings.TrimPrefix(it.key, store.UpdateDeadlinesPrefix)
		if _, err := store.AddonDeadlineOf(name); err != nil {
			c.violate(InvKey, it.key, "%v", err)
		}
		if r.GetClusterUid() != it.caps["uid"] || r.GetUpdateId() != it.caps["id"] {
			c.violate(InvKey, it.key, "deadline hint names update %s of cluster %s", r.GetUpdateId(), r.GetClusterUid())
		}
	})
	decoded(c, famPublishedAddon, func(it *item, r *storagev1.PublishedAddonVersionRecord) {
		p, err := catalog.ParseStored(r.GetFiles())
		switch {
		case r.GetAddonName() != it.caps["addon"] || r.GetVersion() != it.caps["version"]:
			c.violate(InvKey, it.key, "published record of add-on %s version %s", r.GetAddonName(), r.GetVersion())
		case err != nil:
			c.violate(InvKey, it.key, "published files do not load: %v", err)
		case p.Version.Addon.Name != r.GetAddonName() || p.Version.Version != r.GetVersion():
			c.violate(InvKey, it.key, "published files are add-on %s version %s", p.Version.Addon.Name, p.Version.Version)
		case r.GetDigest() != catalog.FilesDigest(r.GetFiles()):
			c.violate(InvKey, it.key, "digest %s is not the files' %s", r.GetDigest(), catalog.FilesDigest(r.GetFiles()))
		case r.GetRetired() != (r.GetRetiredAt() != nil) || r.GetPublishedAt() == nil:
			c.violate(InvKey, it.key, "published %v, retired %t at %v", r.GetPublishedAt(), r.GetRetired(), r.GetRetiredAt())
		}
	})
	for _, it := range c.byFamily[famElection] {
		if len(it.raw) == 0 {
			c.violate(InvKey, it.key, "election key without its candidate's name")
		}
	}
	decoded(c, famAccount, func(it *item, r *storagev1.AccountRecord) {
		if r.GetAccountId() != it.caps["account"] {
			c.violate(InvKey, it.key, "account record of %s", r.GetAccountId())
		}
		c.accounts[it.caps["account"]] = true
	})
	decoded(c, famPrincipal, func(it *item, r *storagev1.PrincipalRecord) {
		m := iamPrincipal.FindStringSubmatch(r.GetArn())
		switch {
		case m == nil:
			c.violate(InvKey, it.key, "principal %q is not an IAM user or role ARN", r.GetArn())
		case m[1] != it.caps["account"] || r.GetAccountId() != it.caps["account"]:
			c.violate(InvKey, it.key, "principal %s of account %s under account %s", r.GetArn(), r.GetAccountId(), it.caps["account"])
		case it.caps["hash"] != sha(r.GetArn()):
			c.violate(InvKey, it.key, "principal %s is not at the hash of its ARN", r.GetArn())
		}
		c.principals[it.caps["account"]+"/"+it.caps["hash"]] = r
	})
	decoded(c, famPrincipalName, func(it *item, r *storagev1.PrincipalNameRecord) {
		m := iamPrincipal.FindStringSubmatch(r.GetArn())
		if m == nil || m[1] != it.caps["account"] || m[2] != it.caps["kind"] || strings.ToLower(m[4]) != it.caps["name"] {
			c.violate(InvKey, it.key, "name index entry names %q", r.GetArn())
		}
		c.names[it.caps["account"]+"/"+it.caps["kind"]+"/"+it.caps["name"]] = r.GetArn()
	})
	decoded(c, famPolicy, func(it *item, r *storagev1.PolicyRecord) {
		if r.GetAccountId() != it.caps["account"] || r.GetName() != it.caps["name"] || r.GetDocument() == "" {
			c.violate(InvKey, it.key, "policy record %s of account %s", r.GetName(), r.GetAccountId())
		}
	})
	decoded(c, famAccessKey, func(it *item, r *storagev1.AccessKeyRecord) {
		switch {
		case r.GetAccessKeyId() != it.caps["akid"] || r.GetAccountId() == "" || r.GetPrincipalArn() == "":
			c.violate(InvKey, it.key, "access key record %s of %s", r.GetAccessKeyId(), r.GetPrincipalArn())
		case r.GetStatus() != "Active" && r.GetStatus() != "Inactive":
			c.violate(InvKey, it.key, "access key status %q", r.GetStatus())
		case len(r.GetSealedSecret()) == 0:
			c.violate(InvKey, it.key, "access key without its sealed secret")
		}
	})
	decoded(c, famService, func(it *item, r *storagev1.ServiceRecord) {
		if r.GetName() != it.caps["name"] || r.GetDocument() == "" {
			c.violate(InvKey, it.key, "service record %s", r.GetName())
		}
	})
	decoded(c, famRoleSession, func(it *item, r *storagev1.SessionRecord) {
		if r.GetAccessKeyId() != it.caps["akid"] || len(r.GetSealedSecret()) == 0 || len(r.GetSessionTokenSha256()) != sha256.Size {
			c.violate(InvKey, it.key, "role session record %s of %s", r.GetAccessKeyId(), r.GetSessionArn())
		}
	})
	decoded(c, famOIDCProvider, func(it *item, r *storagev1.OpenIDConnectProviderRecord) {
		acct := it.caps["account"]
		norm, err := iam.NormalizeOIDCProviderURL(r.GetUrl())
		switch {
		case r.GetAccountId() != acct:
			c.violate(InvKey, it.key, "OIDC provider %s of account %s under account %s", r.GetUrl(), r.GetAccountId(), acct)
		case err != nil || norm != r.GetUrl():
			c.violate(InvKey, it.key, "OIDC provider URL %q is not one CreateOpenIDConnectProvider keeps", r.GetUrl())
		case it.caps["hash"] != sha(r.GetUrl()):
			c.violate(InvKey, it.key, "OIDC provider %s is not at the hash of its URL", r.GetUrl())
		case r.GetCreatedAt() == nil:
			c.violate(InvKey, it.key, "OIDC provider %s without its creation time", r.GetUrl())
		}
		if why := oidcProviderLimits(r); why != "" {
			c.violate(InvKey, it.key, "OIDC provider %s: %s", r.GetUrl(), why)
		}
		tags := map[string]string{}
		for _, t := range r.GetTags() {
			tags[t.GetKey()] = t.GetValue()
		}
		c.tags[iam.OIDCProviderARN(acct, r.GetUrl())] = tags
	})
	decoded(c, famOIDCIssuer, func(it *item, r *storagev1.ServiceAccountIssuerRecord) {
		switch {
		case r.GetIssuer() == "" || it.caps["hash"] != sha(r.GetIssuer()):
			c.violate(InvKey, it.key, "the keys of issuer %q are not at the hash of their issuer", r.GetIssuer())
		case r.GetClusterUid() == "" || r.GetAccountId() == "" || r.GetClusterName() == "":
			c.violate(InvKey, it.key, "the keys of issuer %s name no cluster (uid %q, %q of account %q)",
				r.GetIssuer(), r.GetClusterUid(), r.GetClusterName(), r.GetAccountId())
		}
		switch keys, err := oidc.ParseKeySet(r.GetJwks()); {
		case err != nil:
			c.violate(InvKey, it.key, "the keys of issuer %s: %v", r.GetIssuer(), err)
		case !bytes.Equal(keys.JSON(), r.GetJwks()):
			c.violate(InvKey, it.key, "the keys of issuer %s are not the canonical key set", r.GetIssuer())
		}
	})
	decoded(c, famAuthorities, func(it *item, r *storagev1.CertificateAuthorityState) {
		c.authorities = r
	})
	decoded(c, famIssuedCertificate, func(it *item, r *storagev1.IssuedCertificateRecord) {
		if r.GetSerial() != it.caps["serial"] || r.GetSpiffeId() == "" || r.GetIssuerSerial() == "" {
			c.violate(InvKey, it.key, "issued certificate record %s for %q", r.GetSerial(), r.GetSpiffeId())
		}
	})
	decoded(c, famRevokedCert, func(it *item, r *storagev1.RevokedCertificateRecord) {
		if r.GetSerial() != it.caps["serial"] {
			c.violate(InvKey, it.key, "revocation record of %s", r.GetSerial())
		}
	})
	decoded(c, famStoreMeta, func(it *item, r *storagev1.StoreMeta) {
		if len(r.GetTokenSigningKey()) == 0 {
			c.violate(InvKey, it.key, "store meta without the paging-token signing key")
		}
	})
}

// oidcProviderLimits says which of IAM's limits a provider record breaks
// (server/iam/oidc.go, checkOIDCProvider), "" when none.
func oidcProviderLimits(r *storagev1.OpenIDConnectProviderRecord) string {
	switch {
	case len(r.GetClientIds()) > iam.MaxOIDCClientIDs:
		return fmt.Sprintf("%d client ids, more than %d", len(r.GetClientIds()), iam.MaxOIDCClientIDs)
	case len(r.GetThumbprints()) > iam.MaxOIDCThumbprints:
		return fmt.Sprintf("%d thumbprints, more than %d", len(r.GetThumbprints()), iam.MaxOIDCThumbprints)
	case len(r.GetTags()) > iam.MaxOIDCTags:
		return fmt.Sprintf("%d tags, more than %d", len(r.GetTags()), iam.MaxOIDCTags)
	}
	for _, t := range r.GetThumbprints() {
		if !iam.ValidOIDCThumbprint(t) {
			return fmt.Sprintf("thumbprint %q is not 40 hexadecimal digits", t)
		}
	}
	ids := map[string]bool{}
	for _, id := range r.GetClientIds() {
		if ids[id] {
			return fmt.Sprintf("client id %q twice", id)
		}
		ids[id] = true
	}
	keys := map[string]bool{}
	for _, t := range r.GetTags() {
		k := strings.ToLower(t.GetKey())
		if keys[k] {
			return fmt.Sprintf("tag key %q twice, whatever its case", t.GetKey())
		}
		keys[k] = true
	}
	return ""
}

// checkClusters: every key under clusters/{uid}/ belongs to a cluster
// record of that uid, whose names its children repeat; cluster updates
// agree with the cluster's status.
func (c *checker) checkClusters() {
	for _, it := range c.items {
		uid, under := it.caps["uid"], strings.HasPrefix(it.key, "clusters/")
		if !under {
			continue
		}
		if _, ok := c.clusters[uid]; !ok {
			c.violate(InvOrphan, it.key, "%s under cluster uid %s, which no cluster record has", it.fam.name, uid)
		}
	}
	child := func(key, what, acct, name, uid string) {
		if cl, ok := c.clusters[uid]; ok && (cl.GetAccountId() != acct || cl.GetName() != name) {
			c.violate(InvKey, key, "%s names cluster %s of account %s; its incarnation %s is %s of %s",
				what, name, acct, uid, cl.GetName(), cl.GetAccountId())
		}
	}
	decoded(c, famAddon, func(it *item, r *storagev1.AddonRecord) {
		child(it.key, "add-on "+r.GetName(), r.GetAccountId(), r.GetClusterName(), it.caps["uid"])
	})
	decoded(c, famAccessEntry, func(it *item, r *storagev1.AccessEntryRecord) {
		child(it.key, "access entry of "+r.GetPrincipalArn(), r.GetAccountId(), r.GetClusterName(), it.caps["uid"])
	})
	decoded(c, famPodIdentity, func(it *item, r *storagev1.PodIdentityAssociationRecord) {
		child(it.key, "association "+r.GetAssociationId(), r.GetAccountId(), r.GetClusterName(), it.caps["uid"])
	})
	// An issuer's keys may outlive their cluster (nothing serves them
	// then: oidc.Serves), but while the incarnation they name exists they
	// name it as it is.
	decoded(c, famOIDCIssuer, func(it *item, r *storagev1.ServiceAccountIssuerRecord) {
		child(it.key, "the keys of issuer "+r.GetIssuer(), r.GetAccountId(), r.GetClusterName(), r.GetClusterUid())
	})

	inProgress := map[string][]string{}
	decoded(c, famClusterUpdate, func(it *item, r *storagev1.UpdateRecord) {
		if r.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS {
			return
		}
		uid := it.caps["uid"]
		inProgress[uid] = append(inProgress[uid], r.GetId())
		cl, ok := c.clusters[uid]
		if !ok {
			return
		}
		if st := cl.GetStatus(); st != storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING && st != storagev1.ClusterStatus_CLUSTER_STATUS_DELETING {
			c.violate(InvLifecycle, it.key, "update %s is InProgress but cluster %s is %s", r.GetId(), cl.GetName(), st)
		}
	})
	for uid, cl := range c.clusters {
		ids := inProgress[uid]
		key := store.ClusterKey(cl.GetAccountId(), cl.GetName())
		switch {
		case len(ids) > 1:
			slices.Sort(ids)
			c.violate(InvLifecycle, key, "cluster %s has %d updates InProgress (%s); one at a time", cl.GetName(), len(ids), strings.Join(ids, ", "))
		case len(ids) == 0 && cl.GetStatus() == storagev1.ClusterStatus_CLUSTER_STATUS_UPDATING:
			c.violate(InvLifecycle, key, "cluster %s is UPDATING without an InProgress update", cl.GetName())
		}
	}
}

// inFlight reports whether an add-on status waits for a report and so has
// a deadline (server/addon/lifecycle.go).
func inFlight(st storagev1.AddonStatus) bool {
	switch st {
	case storagev1.AddonStatus_ADDON_STATUS_CREATING, storagev1.AddonStatus_ADDON_STATUS_UPDATING,
		storagev1.AddonStatus_ADDON_STATUS_DELETING:
		return true
	}
	return false
}

// checkAddons: deadlines and their hints, UPDATING and its update record,
// updates and their add-on incarnation.
func (c *checker) checkAddons() {
	decoded(c, famAddon, func(it *item, r *storagev1.AddonRecord) {
		uid, name := it.caps["uid"], it.caps["addon"]
		switch {
		case inFlight(r.GetStatus()) && r.GetDeadline() == nil:
			c.violate(InvIndex, it.key, "add-on %s is %s without a deadline", name, r.GetStatus())
		case !inFlight(r.GetStatus()) && r.GetDeadline() != nil:
			c.violate(InvIndex, it.key, "add-on %s is %s, settled, and still has a deadline", name, r.GetStatus())
		case inFlight(r.GetStatus()):
			hk := store.AddonDeadlineKey(r.GetDeadline().AsTime(), uid, name)
			h, ok := c.deadlineHints[hk]
			if !ok {
				c.violate(InvIndex, it.key, "add-on %s is %s without its deadline hint %s", name, r.GetStatus(), hk)
			} else if h.GetGeneration() != r.GetGeneration() {
				c.violate(InvIndex, it.key, "add-on %s at generation %d, its deadline hint at %d", name, r.GetGeneration(), h.GetGeneration())
			}
		}
		if r.GetStatus() == storagev1.AddonStatus_ADDON_STATUS_UPDATING {
			u, ok := c.addonUpdates[uid+"/"+name+"/"+r.GetUpdateId()]
			switch {
			case !ok:
				c.violate(InvLifecycle, it.key, "add-on %s is UPDATING without its update record %q", name, r.GetUpdateId())
			case u.GetGeneration() != r.GetGeneration() || u.GetStatus() != storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS:
				c.violate(InvLifecycle, it.key, "add-on %s is UPDATING at generation %d; its update %s is %s at generation %d",
					name, r.GetGeneration(), u.GetId(), u.GetStatus(), u.GetGeneration())
			}
		}
	})
	decoded(c, famAddonUpdate, func(it *item, u *storagev1.UpdateRecord) {
		uid, name := it.caps["uid"], it.caps["addon"]
		a, ok := c.addons[uid+"/"+name]
		switch {
		case !ok || a.GetUid() != u.GetAddonUid():
			c.violate(InvOrphan, it.key, "update %s of add-on incarnation %s, which is gone", u.GetId(), u.GetAddonUid())
		case u.GetGeneration() > a.GetGeneration():
			c.violate(InvLifecycle, it.key, "update %s at generation %d, ahead of add-on %s at %d", u.GetId(), u.GetGeneration(), name, a.GetGeneration())
		case u.GetStatus() == storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS &&
			(a.GetUpdateId() != u.GetId() || a.GetStatus() != storagev1.AddonStatus_ADDON_STATUS_UPDATING):
			c.violate(InvLifecycle, it.key, "update %s is InProgress but add-on %s is %s with update %q", u.GetId(), name, a.GetStatus(), a.GetUpdateId())
		}
	})
}

// checkPodIdentity: the exclusivity keys and the associations agree both
// ways, and add-ons and the associations they own agree both ways
// (server/podidentity/owned.go).
func (c *checker) checkPodIdentity() {
	addonByARN := map[string]*storagev1.AddonRecord{}
	for _, a := range c.addonByUID {
		addonByARN[a.GetArn()] = a
	}
	decoded(c, famPodIdentity, func(it *item, r *storagev1.PodIdentityAssociationRecord) {
		uid := it.caps["uid"]
		hk := store.PodIdentityServiceAccountKey(uid, r.GetNamespace(), r.GetServiceAccount())
		if got, ok := c.holders[uid+"/"+r.GetNamespace()+"/"+r.GetServiceAccount()]; !ok || got != r.GetAssociationId() {
			c.violate(InvIndex, it.key, "association %s of %s/%s: its exclusivity key %s names %q",
				r.GetAssociationId(), r.GetNamespace(), r.GetServiceAccount(), hk, got)
		}
		owner := r.GetOwnerArn()
		if owner == "" {
			return
		}
		a, ok := addonByARN[owner]
		switch {
		case !ok || a.GetClusterUid() != uid:
			c.violate(InvIndex, it.key, "association %s is owned by %s, no add-on of its cluster", r.GetAssociationId(), owner)
		case a.GetSpec().GetDeleted():
			c.violate(InvIndex, it.key, "association %s is still owned by %s, which is being deleted", r.GetAssociationId(), owner)
		case !slices.ContainsFunc(a.GetSpec().GetPodIdentityAssociations(), func(p *storagev1.PodIdentityAssociation) bool {
			return p.GetAssociationId() == r.GetAssociationId() && p.GetServiceAccount() == r.GetServiceAccount() &&
				p.GetRoleArn() == r.GetRoleArn()
		}):
			c.violate(InvIndex, it.key, "association %s is owned by %s, whose spec does not list it as it is", r.GetAssociationId(), owner)
		}
	})
	decoded(c, famPodIdentitySA, func(it *item, r *storagev1.PodIdentityServiceAccountRecord) {
		uid := it.caps["uid"]
		a, ok := c.assocs[uid+"/"+r.GetAssociationId()]
		if !ok || a.GetNamespace() != it.caps["namespace"] || a.GetServiceAccount() != it.caps["sa"] {
			c.violate(InvIndex, it.key, "exclusivity key names association %s, which does not hold %s/%s",
				r.GetAssociationId(), it.caps["namespace"], it.caps["sa"])
		}
	})
	decoded(c, famAddon, func(it *item, a *storagev1.AddonRecord) {
		if a.GetSpec().GetDeleted() {
			return
		}
		for _, p := range a.GetSpec().GetPodIdentityAssociations() {
			r, ok := c.assocs[a.GetClusterUid()+"/"+p.GetAssociationId()]
			if !ok || r.GetOwnerArn() != a.GetArn() {
				c.violate(InvIndex, it.key, "add-on %s lists association %s, which is not there as its own", a.GetName(), p.GetAssociationId())
			}
		}
	})
}

// checkExecutors: at most one executor epoch is live per cluster
// (docs/delivery-protocol.md; server/delivery/assign.go, fence.go). The
// executor record is the one place an epoch is assigned: a DELETING or
// FAILED cluster's names nobody (it is fenced in the transaction that
// changes the status, server/cluster/control.go), and no add-on holds a
// report accepted through delivery (one that names its reporter) from an
// epoch the record has not reached, or from another instance at the
// record's own epoch. Reports through the operator's ApplyAddonReport are
// not fenced: a caller of it that names an instance and an epoch is
// outside this invariant.
func (c *checker) checkExecutors() {
	decoded(c, famExecutor, func(it *item, e *storagev1.ExecutorRecord) {
		cl, ok := c.clusters[it.caps["uid"]]
		if !ok || e.GetInstanceId() == "" {
			return
		}
		if st := cl.GetStatus(); st == storagev1.ClusterStatus_CLUSTER_STATUS_DELETING || st == storagev1.ClusterStatus_CLUSTER_STATUS_FAILED {
			c.violate(InvExecutor, it.key, "cluster %s is %s and its executor %s at epoch %d is not fenced",
				cl.GetName(), st, e.GetInstanceId(), e.GetEpoch())
		}
	})
	decoded(c, famAddon, func(it *item, a *storagev1.AddonRecord) {
		obs := a.GetObserved()
		if obs.GetInstanceId() == "" {
			return
		}
		e, ok := c.executors[a.GetClusterUid()]
		switch {
		case !ok:
			c.violate(InvExecutor, it.key, "add-on %s holds a report of %s at epoch %d, and its cluster never had an executor",
				a.GetName(), obs.GetInstanceId(), obs.GetExecutorEpoch())
		case obs.GetExecutorEpoch() > e.GetEpoch():
			c.violate(InvExecutor, it.key, "add-on %s holds a report of %s at epoch %d, later than the executor's %d",
				a.GetName(), obs.GetInstanceId(), obs.GetExecutorEpoch(), e.GetEpoch())
		case obs.GetExecutorEpoch() == e.GetEpoch() && e.GetInstanceId() != "" && obs.GetInstanceId() != e.GetInstanceId():
			c.violate(InvExecutor, it.key, "add-on %s holds a report of %s at epoch %d, which is %s's",
				a.GetName(), obs.GetInstanceId(), obs.GetExecutorEpoch(), e.GetInstanceId())
		}
	})
	// Service-account keys are fenced as reports are
	// (server/delivery/keys.go); those of a cluster that is gone are
	// judged no more.
	decoded(c, famOIDCIssuer, func(it *item, r *storagev1.ServiceAccountIssuerRecord) {
		e, ok := c.executors[r.GetClusterUid()]
		switch {
		case !ok:
		case r.GetEpoch() > e.GetEpoch():
			c.violate(InvExecutor, it.key, "the keys of issuer %s were sent by %s at epoch %d, later than the executor's %d",
				r.GetIssuer(), r.GetInstanceId(), r.GetEpoch(), e.GetEpoch())
		case r.GetEpoch() == e.GetEpoch() && e.GetInstanceId() != "" && r.GetInstanceId() != e.GetInstanceId():
			c.violate(InvExecutor, it.key, "the keys of issuer %s were sent by %s at epoch %d, which is %s's",
				r.GetIssuer(), r.GetInstanceId(), r.GetEpoch(), e.GetInstanceId())
		}
	})
}

// checkIAM: the key store's records and its name index agree, and every
// key, role session and principal belongs to something that exists.
func (c *checker) checkIAM() {
	decoded(c, famBootstrap, func(it *item, r *storagev1.AccountRecord) {
		if !c.accounts[r.GetAccountId()] {
			c.violate(InvOrphan, it.key, "bootstrap marker of account %s, which does not exist", r.GetAccountId())
		}
	})
	principalExists := func(arn string) bool {
		m := iamPrincipal.FindStringSubmatch(arn)
		if m == nil {
			return false
		}
		_, ok := c.principals[m[1]+"/"+sha(arn)]
		return ok
	}
	for k, p := range c.principals {
		acct, _, _ := strings.Cut(k, "/")
		if !c.accounts[acct] {
			c.violate(InvOrphan, "iam/accounts/"+k, "principal %s of account %s, which does not exist", p.GetArn(), acct)
		}
		if m := iamPrincipal.FindStringSubmatch(p.GetArn()); m != nil {
			nk := acct + "/" + m[2] + "/" + strings.ToLower(m[4])
			if got := c.names[nk]; got != p.GetArn() {
				c.violate(InvIndex, "iam/accounts/"+k, "principal %s: its name index entry names %q", p.GetArn(), got)
			}
		}
	}
	decoded(c, famPrincipalName, func(it *item, r *storagev1.PrincipalNameRecord) {
		if !principalExists(r.GetArn()) {
			c.violate(InvIndex, it.key, "name index entry names %s, which is no principal", r.GetArn())
		}
	})
	decoded(c, famPolicy, func(it *item, r *storagev1.PolicyRecord) {
		if !c.accounts[r.GetAccountId()] {
			c.violate(InvOrphan, it.key, "policy %s of account %s, which does not exist", r.GetName(), r.GetAccountId())
		}
	})
	decoded(c, famAccessKey, func(it *item, r *storagev1.AccessKeyRecord) {
		arn := r.GetPrincipalArn()
		switch m := rootARN.FindStringSubmatch(arn); {
		case m != nil:
			if !c.accounts[m[1]] {
				c.violate(InvOrphan, it.key, "key %s of root %s, whose account does not exist", r.GetAccessKeyId(), arn)
			}
		case iamPrincipal.MatchString(arn):
			if !principalExists(arn) {
				c.violate(InvOrphan, it.key, "key %s of %s, which is no principal", r.GetAccessKeyId(), arn)
			}
		}
	})
	decoded(c, famOIDCProvider, func(it *item, r *storagev1.OpenIDConnectProviderRecord) {
		if !c.accounts[it.caps["account"]] {
			c.violate(InvOrphan, it.key, "OIDC provider %s of account %s, which does not exist", r.GetUrl(), it.caps["account"])
		}
	})
	decoded(c, famRoleSession, func(it *item, r *storagev1.SessionRecord) {
		if !principalExists(r.GetRoleArn()) {
			c.violate(InvOrphan, it.key, "role session %s of role %s, which is no principal", r.GetAccessKeyId(), r.GetRoleArn())
		}
	})
}

// checkPKI: the CA state names its issuer among its authorities, each with
// its certificate and sealed key.
func (c *checker) checkPKI() {
	decoded(c, famAuthorities, func(it *item, r *storagev1.CertificateAuthorityState) {
		issuer := false
		for _, a := range r.GetAuthorities() {
			if a.GetSerial() == "" || len(a.GetCertificateDer()) == 0 || len(a.GetSealedPrivateKey()) == 0 {
				c.violate(InvKey, it.key, "authority %q without its certificate or sealed key", a.GetSerial())
			}
			issuer = issuer || a.GetSerial() == r.GetIssuingSerial()
		}
		if !issuer {
			c.violate(InvIndex, it.key, "issuing serial %q is none of the %d authorities", r.GetIssuingSerial(), len(r.GetAuthorities()))
		}
	})
}

// checkAcked: every acknowledged write the workload did not forget is in
// the keyspace.
func (c *checker) checkAcked(acked *Acked) {
	for _, w := range acked.Writes() {
		if why := c.missing(w); why != "" {
			c.violate(InvAcked, "", "%s was acknowledged and nothing asked for its deletion, but %s", w, why)
			continue
		}
		c.ackedVerified++
	}
}

// missing says why w is not in the keyspace, "" when it is.
func (c *checker) missing(w Write) string {
	cl, ok := c.clusterByName[w.Account+"/"+w.Cluster]
	if w.Kind == KindCluster {
		if !ok {
			return "no cluster record is at " + store.ClusterKey(w.Account, w.Cluster)
		}
		return ""
	}
	if !ok && w.Kind != KindTag {
		return "its cluster is gone"
	}
	switch w.Kind {
	case KindAddon:
		a, ok := c.addonByUID[w.ID]
		if !ok || a.GetClusterUid() != cl.GetUid() || a.GetName() != w.Name {
			return "no add-on of that uid is in the cluster"
		}
	case KindAccessEntry:
		e, ok := c.entryByUID[w.ID]
		if !ok || e.GetClusterUid() != cl.GetUid() {
			return "no access entry of that uid is in the cluster"
		}
	case KindPolicyAssociation:
		p, err := access.ParsePrincipal(w.Name)
		if err != nil {
			return fmt.Sprintf("its principal does not parse: %v", err)
		}
		e, ok := c.entries[cl.GetUid()+"/"+sha(p.Canonical())]
		if !ok {
			return "the principal has no access entry"
		}
		if !slices.ContainsFunc(e.GetPolicies(), func(a *storagev1.AssociatedPolicyRecord) bool { return a.GetPolicyArn() == w.Policy }) {
			return "the principal's entry does not hold the policy"
		}
	case KindPodIdentityAssociation:
		if _, ok := c.assocs[cl.GetUid()+"/"+w.ID]; !ok {
			return "no association of that id is in the cluster"
		}
	case KindAddonUpdate:
		if _, ok := c.addonUpdates[cl.GetUid()+"/"+w.Name+"/"+w.ID]; !ok {
			return "the add-on has no update of that id"
		}
	case KindClusterUpdate:
		if _, ok := c.clusterUpdates[cl.GetUid()+"/"+w.ID]; !ok {
			return "the cluster has no update of that id"
		}
	case KindTag:
		tags, ok := c.tags[w.ARN]
		switch {
		case !ok:
			return "no record has that ARN"
		case tags[w.Key] != w.Value:
			return fmt.Sprintf("the resource's tag %s is %q", w.Key, tags[w.Key])
		}
	default:
		return "it is of no kind this checker knows"
	}
	return ""
}
