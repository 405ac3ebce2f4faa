package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/store"
)

// desiredSet is the state of the world for cluster c from its add-on
// records (kvs, read at revision rev): every add-on, rendered with its
// configuration values and role ARNs, and those being deleted as
// tombstones. The digest covers the content only, so the same add-ons
// give the same digest on every replica and after every reconnect.
//
// An add-on's rendering depends only on its spec, which changes only with
// its generation, and on the cluster's facts (clusterFacts): so an add-on
// whose uid and generation are those in previous (the set the watch
// computed last, for the cluster record previousCluster) is taken from
// there, not rendered again, unless the facts changed — most writes under a
// cluster are reports and acknowledgements, which change neither. When no
// add-on changed, the digest is previous's too. It also returns when the
// latest accepted report of any add-on was made.
//
// An add-on whose bundle needs a fact the cluster does not have yet (the
// endpoint of a cluster that is not ACTIVE) is left out until the record
// has it; the record's change brings a new set.
//
// The set also holds every pod identity association of the cluster
// (associations, read in the same transaction), so that a created,
// updated or deleted association is a new set: the executor records them
// on the service accounts they name (docs/agent.md, "Pod identity").
func (s *Service) desiredSet(ctx context.Context, c *storagev1.ClusterRecord, kvs, associations []*mvccpb.KeyValue, rev int64,
	previous *deliveryv1.DesiredSet, previousCluster *storagev1.ClusterRecord) (*deliveryv1.DesiredSet, time.Time, error) {
	var lastReport time.Time
	set := &deliveryv1.DesiredSet{Version: rev, Addons: make([]*deliveryv1.DesiredAddon, 0, len(kvs))}
	facts := factsOf(c)
	known := make(map[string]*deliveryv1.DesiredAddon, len(previous.GetAddons()))
	if previousCluster != nil && factsOf(previousCluster) == facts {
		for _, a := range previous.GetAddons() {
			known[a.GetName()] = a
		}
	}
	owners := make(map[string]string, len(kvs)) // add-on ARN → name
	for _, kv := range kvs {
		rec := &storagev1.AddonRecord{}
		if err := store.Decode(kv.Value, rec); err != nil {
			return nil, time.Time{}, fmt.Errorf("add-on %s: %w", kv.Key, err)
		}
		owners[rec.GetArn()] = rec.GetName()
		if at := rec.GetObserved().GetObservedAt(); at != nil && at.AsTime().After(lastReport) {
			lastReport = at.AsTime()
		}
		if a := known[rec.GetName()]; a != nil && a.GetUid() == rec.GetUid() && a.GetGeneration() == rec.GetGeneration() {
			set.Addons = append(set.Addons, a)
			continue
		}
		a, err := s.desiredAddon(ctx, c.GetAccountId(), facts, rec)
		var unread *catalogueReadError
		if errors.As(err, &unread) {
			// The store did not answer: this snapshot fails and is read
			// again, rather than leaving the add-on out of the set.
			return nil, time.Time{}, err
		}
		var missing *catalog.MissingFactError
		if errors.As(err, &missing) {
			s.log.Info("add-on waits for a cluster fact; left out of the desired set", "cluster_uid", c.GetUid(),
				"addon", rec.GetName(), "generation", rec.GetGeneration(), "fact", missing.Fact)
			continue
		}
		if err != nil {
			// Validated at create and update, so this is a catalogue
			// change the record predates: leave the add-on out (the agent
			// keeps what it has) and say so.
			s.log.Error("add-on cannot be rendered; left out of the desired set", "cluster_uid", c.GetUid(),
				"addon", rec.GetName(), "generation", rec.GetGeneration(), "err", err)
			continue
		}
		set.Addons = append(set.Addons, a)
	}
	var err error
	if set.PodIdentityAssociations, err = desiredAssociations(associations, owners, previous.GetPodIdentityAssociations()); err != nil {
		return nil, time.Time{}, err
	}
	if previous != nil && slices.Equal(set.Addons, previous.GetAddons()) &&
		slices.Equal(set.PodIdentityAssociations, previous.GetPodIdentityAssociations()) {
		set.Digest = previous.GetDigest()
		return set, lastReport, nil
	}
	// A set without associations has the digest it had before they
	// existed: an empty repeated field encodes to nothing.
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&deliveryv1.DesiredSet{
		Addons: set.Addons, PodIdentityAssociations: set.PodIdentityAssociations})
	if err != nil {
		return nil, time.Time{}, err
	}
	sum := sha256.Sum256(b)
	set.Digest = hex.EncodeToString(sum[:])
	return set, lastReport, nil
}

// clusterFacts are what a cluster record contributes to its add-ons'
// rendering (catalog.RenderParams), comparable so that a change to any of
// them renders the add-ons again.
type clusterFacts struct {
	name, serviceIPv4CIDR, endpoint, certificateAuthorityData, region string
}

func factsOf(c *storagev1.ClusterRecord) clusterFacts {
	return clusterFacts{
		name:                     c.GetName(),
		serviceIPv4CIDR:          c.GetSpec().GetNetworkConfig().GetServiceIpv4Cidr(),
		endpoint:                 c.GetEndpoint(),
		certificateAuthorityData: c.GetCertificateAuthorityData(),
		region:                   arnRegion(c.GetArn()),
	}
}

// arnRegion is the region of the cluster's ARN
// (arn:aws:eks:us-east-1:…): the ARN is made with the server's region
// (its configuration's Cluster.Region), so this is the region the cluster
// lives in. "" for a record without a valid ARN.
func arnRegion(arn string) string {
	a, err := tagging.ParseARN(arn)
	if err != nil {
		return ""
	}
	return a.Region
}

// catalogueReadError is a catalogue lookup that failed in the store
// (published versions are read from etcd), as opposed to an add-on the
// catalogue cannot render.
type catalogueReadError struct{ err error }

func (e *catalogueReadError) Error() string { return "read the add-on catalogue: " + e.err.Error() }
func (e *catalogueReadError) Unwrap() error { return e.err }

func (s *Service) desiredAddon(ctx context.Context, account string, facts clusterFacts, rec *storagev1.AddonRecord) (*deliveryv1.DesiredAddon, error) {
	spec := rec.GetSpec()
	a := &deliveryv1.DesiredAddon{
		Name: rec.GetName(), Uid: rec.GetUid(), Generation: rec.GetGeneration(), Version: spec.GetVersion(),
		Namespace: spec.GetNamespace(), Deleting: spec.GetDeleted(), Preserve: spec.GetPreserve(),
		ResolveConflicts: spec.GetResolveConflicts(),
	}
	if a.Deleting {
		return a, nil
	}
	cat, ok, err := s.catalog.Lookup(ctx, account, rec.GetName())
	if err != nil {
		return nil, &catalogueReadError{err: err}
	}
	if !ok {
		return nil, fmt.Errorf("add-on %q is not in the catalogue", rec.GetName())
	}
	v, ok := cat.Version(spec.GetVersion())
	if !ok {
		return nil, fmt.Errorf("add-on %q has no version %q in the catalogue", rec.GetName(), spec.GetVersion())
	}
	var values map[string]any
	if cv := spec.GetConfigurationValues(); cv != "" {
		// JSON or YAML, validated against the version's schema on write.
		if err := yaml.Unmarshal([]byte(cv), &values); err != nil {
			return nil, fmt.Errorf("configuration values: %w", err)
		}
	}
	roles := map[string]string{}
	for _, p := range spec.GetPodIdentityAssociations() {
		roles[p.GetServiceAccount()] = p.GetRoleArn()
	}
	manifest, err := v.Render(catalog.RenderParams{
		ClusterName: facts.name, Namespace: spec.GetNamespace(), ServiceAccountRoleARN: spec.GetServiceAccountRoleArn(),
		PodIdentityRoles: roles, Values: values,
		ServiceIPv4CIDR: facts.serviceIPv4CIDR, Endpoint: facts.endpoint,
		CertificateAuthorityData: facts.certificateAuthorityData, Region: facts.region,
	})
	if err != nil {
		return nil, err
	}
	a.Manifest = manifest
	return a, nil
}

// desiredAssociations are the cluster's pod identity associations (kvs, in
// key order: association id order) as the agent gets them; owners maps an
// add-on ARN to the add-on's name. An association equal to one of previous
// is previous's, so that an unchanged set is recognised by identity.
func desiredAssociations(kvs []*mvccpb.KeyValue, owners map[string]string, previous []*deliveryv1.DesiredPodIdentityAssociation) ([]*deliveryv1.DesiredPodIdentityAssociation, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	known := make(map[string]*deliveryv1.DesiredPodIdentityAssociation, len(previous))
	for _, p := range previous {
		known[p.GetAssociationId()] = p
	}
	out := make([]*deliveryv1.DesiredPodIdentityAssociation, 0, len(kvs))
	for _, kv := range kvs {
		rec := &storagev1.PodIdentityAssociationRecord{}
		if err := store.Decode(kv.Value, rec); err != nil {
			return nil, fmt.Errorf("pod identity association %s: %w", kv.Key, err)
		}
		p := desiredAssociation(rec, owners)
		if k := known[p.GetAssociationId()]; k != nil && proto.Equal(k, p) {
			p = k
		}
		out = append(out, p)
	}
	return out, nil
}

// desiredAssociation is one association record as the agent gets it: what
// it records on the service account, and the add-on (by name) whose health
// a failure to record it is part of.
func desiredAssociation(rec *storagev1.PodIdentityAssociationRecord, owners map[string]string) *deliveryv1.DesiredPodIdentityAssociation {
	return &deliveryv1.DesiredPodIdentityAssociation{
		AssociationId: rec.GetAssociationId(), AssociationArn: rec.GetArn(),
		Namespace: rec.GetNamespace(), ServiceAccount: rec.GetServiceAccount(),
		RoleArn: rec.GetRoleArn(), TargetRoleArn: rec.GetTargetRoleArn(), ExternalId: rec.GetExternalId(),
		DisableSessionTags: rec.GetDisableSessionTags(),
		OwnerArn:           rec.GetOwnerArn(), OwnerAddon: owners[rec.GetOwnerArn()],
	}
}
