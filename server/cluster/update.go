package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/idempotency"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/store"
)

const opUpdateClusterConfig = "UpdateClusterConfig"

// configKind is one kind of UpdateClusterConfig change: AWS allows one per
// call.
type configKind struct {
	// member is the request member, as AWS names it.
	member string
	// updateType is the AWS update type the change is recorded as.
	updateType string
	// supported is whether saltbush acts on it.
	supported bool
}

var (
	kindAccess             = configKind{"accessConfig", update.TypeAccessConfigUpdate, true}
	kindLogging            = configKind{"logging", update.TypeLoggingUpdate, true}
	kindDeletionProtection = configKind{"deletionProtection", update.TypeDeletionProtectionUpdate, true}
	kindUpgradePolicy      = configKind{"upgradePolicy", update.TypeUpgradePolicyUpdate, true}
)

// configKinds returns the kinds of change req asks for, in AWS's member
// order. computeConfig, storageConfig and kubernetesNetworkConfig are one
// kind (AWS's AutoModeUpdate changes them together).
func configKinds(req *eksv1.UpdateClusterConfigRequest) []configKind {
	var kinds []configKind
	add := func(present bool, k configKind) {
		if present {
			kinds = append(kinds, k)
		}
	}
	add(req.GetResourcesVpcConfig() != nil, configKind{member: "resourcesVpcConfig"})
	add(req.GetLogging() != nil, kindLogging)
	add(req.GetAccessConfig() != nil, kindAccess)
	add(req.GetUpgradePolicy() != nil, kindUpgradePolicy)
	add(req.GetZonalShiftConfig() != nil, configKind{member: "zonalShiftConfig"})
	var auto []string
	for member, present := range map[string]bool{
		"computeConfig":           req.GetComputeConfig() != nil,
		"kubernetesNetworkConfig": req.GetKubernetesNetworkConfig() != nil,
		"storageConfig":           req.GetStorageConfig() != nil,
	} {
		if present {
			auto = append(auto, member)
		}
	}
	slices.Sort(auto)
	add(len(auto) > 0, configKind{member: strings.Join(auto, ", ")})
	add(req.GetRemoteNetworkConfig() != nil, configKind{member: "remoteNetworkConfig"})
	add(req.DeletionProtection != nil, kindDeletionProtection)
	add(req.GetControlPlaneScalingConfig() != nil, configKind{member: "controlPlaneScalingConfig"})
	return kinds
}

// validateUpdateConfig checks what can be checked without the cluster and
// returns the one kind of change req asks for.
func validateUpdateConfig(req *eksv1.UpdateClusterConfigRequest) (configKind, error) {
	name := req.GetName()
	if err := validateName(name); err != nil {
		return configKind{}, err
	}
	kinds := configKinds(req)
	switch {
	case len(kinds) == 0:
		// AWS's wording for this case is not known; worded like its others.
		return configKind{}, invalid(name, "No changes were specified: give one of resourcesVpcConfig, logging, "+
			"accessConfig, upgradePolicy, zonalShiftConfig, computeConfig, remoteNetworkConfig, "+
			"deletionProtection or controlPlaneScalingConfig.")
	case len(kinds) > 1:
		// AWS's exact message (InvalidParameterException).
		return configKind{}, invalid(name, "Only one type of update can be allowed.")
	}
	k := kinds[0]
	if !k.supported {
		return configKind{}, invalid(name, "saltbush does not support changing %s with UpdateClusterConfig; "+
			"it is kept as given at CreateCluster.", k.member)
	}
	switch k {
	case kindAccess:
		m := req.GetAccessConfig().GetAuthenticationMode()
		if m == "" {
			return configKind{}, invalid(name, "accessConfig authenticationMode is required.")
		}
		if !slices.Contains(authenticationModes, m) {
			return configKind{}, invalid(name, "1 validation error detected: Value '%s' at 'accessConfig.authenticationMode' "+
				"failed to satisfy constraint: Member must satisfy enum value set: [%s]", m, strings.Join(authenticationModes, ", "))
		}
	case kindLogging:
		if len(req.GetLogging().GetClusterLogging()) == 0 {
			return configKind{}, invalid(name, "logging clusterLogging must name at least one log type.")
		}
		for _, ls := range req.GetLogging().GetClusterLogging() {
			for _, t := range ls.GetTypes() {
				if !slices.Contains(logTypes, t) {
					return configKind{}, invalid(name, "Logging type %q is not one of %s.", t, strings.Join(logTypes, ", "))
				}
			}
		}
	case kindUpgradePolicy:
		t := req.GetUpgradePolicy().GetSupportType()
		if t == "" {
			return configKind{}, invalid(name, "upgradePolicy supportType is required.")
		}
		if !slices.Contains(supportTypes, t) {
			return configKind{}, invalid(name, "1 validation error detected: Value '%s' at 'upgradePolicy.supportType' "+
				"failed to satisfy constraint: Member must satisfy enum value set: [%s]", t, strings.Join(supportTypes, ", "))
		}
	}
	return k, nil
}

// authModeRank orders the authentication modes along the only direction
// AWS allows a change in: CONFIG_MAP, then API_AND_CONFIG_MAP, then API.
var authModeRank = map[string]int{"CONFIG_MAP": 0, "API_AND_CONFIG_MAP": 1, "API": 2}

// authModeChangeAllowed reports whether AWS allows changing a cluster's
// authentication mode from one mode to another: one step forward only.
// AWS refuses CONFIG_MAP to API directly (it answers "Unsupported
// authentication mode update from CONFIG_MAP to API"); a cluster goes
// through API_AND_CONFIG_MAP.
func authModeChangeAllowed(from, to string) bool {
	f, okFrom := authModeRank[from]
	t, okTo := authModeRank[to]
	return okFrom && okTo && t == f+1
}

// jsonValue is an update parameter's value as AWS sends it for cluster
// updates: JSON (a mode is `"API"`, with its quotes).
func jsonValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings, booleans and plain structs are passed.
		panic(fmt.Sprintf("update param value %v: %v", v, err))
	}
	return string(b)
}

// applyConfig checks req against the current cluster record c and changes
// c; it returns the parameters of the update that records the change.
func applyConfig(c *storagev1.ClusterRecord, k configKind, req *eksv1.UpdateClusterConfigRequest) ([]*storagev1.UpdateParam, error) {
	name := c.GetName()
	if c.Spec == nil {
		c.Spec = &storagev1.ClusterSpec{}
	}
	switch k {
	case kindAccess:
		from, to := c.GetAccessConfig().GetAuthenticationMode(), req.GetAccessConfig().GetAuthenticationMode()
		if !authModeChangeAllowed(from, to) {
			// AWS's exact message (InvalidParameterException), also for
			// the same mode.
			return nil, invalid(name, "Unsupported authentication mode update from %s to %s", from, to)
		}
		if c.AccessConfig == nil {
			c.AccessConfig = &storagev1.ClusterAccessConfig{}
		}
		c.AccessConfig.AuthenticationMode = to
		return []*storagev1.UpdateParam{{Type: "AuthenticationMode", Value: jsonValue(to)}}, nil
	case kindLogging:
		type logSetup struct {
			Types   []string `json:"types"`
			Enabled bool     `json:"enabled"`
		}
		before := normalizeLogging(c.Spec.GetLogging())
		var given []logSetup
		for _, ls := range req.GetLogging().GetClusterLogging() {
			types := ls.GetTypes()
			if types == nil {
				types = []string{}
			}
			given = append(given, logSetup{Types: types, Enabled: ls.GetEnabled()})
			c.Spec.Logging = append(c.Spec.Logging, &storagev1.ClusterLogSetup{Types: ls.GetTypes(), Enabled: ls.GetEnabled()})
		}
		// The stored settings stay the normalised ones, so they do not grow
		// with every call.
		var normalized []*storagev1.ClusterLogSetup
		for _, ls := range normalizeLogging(c.Spec.GetLogging()) {
			normalized = append(normalized, &storagev1.ClusterLogSetup{Types: ls.GetTypes(), Enabled: ls.GetEnabled()})
		}
		c.Spec.Logging = normalized
		if sameLogging(before, normalizeLogging(normalized)) {
			// AWS's exact message (InvalidParameterException).
			return nil, invalid(name, "No changes needed for the logging config provided")
		}
		return []*storagev1.UpdateParam{{Type: "ClusterLogging", Value: jsonValue(given)}}, nil
	case kindDeletionProtection:
		to := req.GetDeletionProtection()
		if c.Spec.GetDeletionProtection() == to {
			// Worded like AWS's "Cluster is already at the desired
			// configuration with ..." for endpoint access.
			return nil, invalid(name, "Cluster is already at the desired configuration with deletionProtection: %t", to)
		}
		c.Spec.DeletionProtection = to
		return []*storagev1.UpdateParam{{Type: "DeletionProtection", Value: strconv.FormatBool(to)}}, nil
	case kindUpgradePolicy:
		to := req.GetUpgradePolicy().GetSupportType()
		if c.Spec.GetUpgradeSupportType() == to {
			// Worded like AWS's "Cluster is already at the desired
			// configuration with ..." for endpoint access.
			return nil, invalid(name, "Cluster is already at the desired configuration with upgradePolicy supportType: %s", to)
		}
		c.Spec.UpgradeSupportType = to
		return []*storagev1.UpdateParam{{Type: "UpgradePolicy", Value: jsonValue(struct {
			SupportType string `json:"supportType"`
		}{to})}}, nil
	}
	return nil, fmt.Errorf("update cluster %q: unhandled change of %s", name, k.member)
}

func sameLogging(a, b []*eksv1.LogSetup) bool {
	return slices.EqualFunc(a, b, func(x, y *eksv1.LogSetup) bool { return proto.Equal(x, y) })
}

// UpdateConfig applies UpdateClusterConfig to the caller's ACTIVE cluster:
// the changed cluster record (guarded by its mod revision) and a new
// cluster update record with a UUID of its own, in one transaction (with
// the idempotency key, when a token is given). The change takes effect
// when the transaction commits, so the update is recorded Successful. A
// retry with the same clientRequestToken and parameters returns the update
// the first request made.
func (s *Service) UpdateConfig(ctx context.Context, req *eksv1.UpdateClusterConfigRequest) (*storagev1.UpdateRecord, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	k, err := validateUpdateConfig(req)
	if err != nil {
		return nil, err
	}
	tok, err := idempotency.New(who.AccountID, opUpdateClusterConfig, req)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", name)
	}
	rec, upd, err := RecordUpdate(ctx, s.store, tok, s.cfg.IdempotencyTTL, who.AccountID, name, "config",
		func(c *storagev1.ClusterRecord, _ *store.Txn) (*storagev1.UpdateRecord, error) {
			if err := updatable(c, k); err != nil {
				return nil, err
			}
			params, err := applyConfig(c, k, req)
			if err != nil {
				return nil, err
			}
			now := s.cfg.Now()
			c.ModifiedAt = timestamppb.New(now)
			return &storagev1.UpdateRecord{
				Id:         uuid.Must(uuid.NewV7()).String(),
				ClusterUid: c.GetUid(),
				Type:       k.updateType,
				Status:     storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL,
				Params:     params,
				CreatedAt:  timestamppb.New(now),
				ModifiedAt: timestamppb.New(now),
			}, nil
		})
	if err != nil || rec == nil {
		return upd, err
	}
	s.log.InfoContext(ctx, "cluster config updated", "account", who.AccountID, "cluster", name,
		"uid", rec.GetUid(), "update", upd.GetId(), "type", upd.GetType())
	return upd, nil
}

// RecordUpdate makes one cluster-level update (UpdateClusterConfig's,
// UpdateClusterVersion's): change mutates the cluster record (and may add
// to the transaction), and returns the update record to create with it, in
// one transaction with the request's token. A retry of a request that
// happened (the same token and parameters) gets the update it made, even
// though the same change would be refused now; the cluster record returned
// is then nil. what names the call in errors ("config", "version").
func RecordUpdate(ctx context.Context, st *store.Store, tok idempotency.Token, ttl time.Duration, account, name, what string,
	change func(c *storagev1.ClusterRecord, txn *store.Txn) (*storagev1.UpdateRecord, error),
) (*storagev1.ClusterRecord, *storagev1.UpdateRecord, error) {
	if prior, err := ReplayUpdate(ctx, st, tok, account, name, what); prior != nil || err != nil {
		return nil, prior, err
	}
	var upd *storagev1.UpdateRecord
	rec := &storagev1.ClusterRecord{}
	_, err := store.Update(ctx, st, store.ClusterKey(account, name), rec, func(c *storagev1.ClusterRecord, txn *store.Txn) error {
		u, err := change(c, txn)
		if err != nil {
			return err
		}
		key := store.ClusterUpdateKey(c.GetUid(), u.GetId())
		txn.Create(key, u)
		tok.Remember(txn, key, u.GetId(), ttl, u.GetCreatedAt().AsTime())
		upd = u
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, notFound(name).WithCause(err)
		}
		if tok.Present() {
			// A concurrent request with the same token may have won.
			if prior, rerr := ReplayUpdate(ctx, st, tok, account, name, what); prior != nil || rerr != nil {
				return nil, prior, rerr
			}
		}
		return nil, nil, errdefs.Wrap(err, "update cluster %q %s", name, what)
	}
	return rec, upd, nil
}

// updatable refuses a change to a cluster that is not ACTIVE, with AWS's
// ResourceInUseException. (A cluster is never UPDATING because of an update
// here: saltbush's cluster updates take effect when they are recorded.)
func updatable(c *storagev1.ClusterRecord, k configKind) error {
	if st := c.GetStatus(); st != storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE {
		// Worded like AWS's "Cannot AccessConfigUpdate because cluster NAME
		// currently has update ID in progress".
		return errdefs.ResourceInUse("Cannot %s because cluster %s is currently in %s state; it must be ACTIVE",
			k.updateType, c.GetName(), StatusName(st)).WithField("clusterName", c.GetName())
	}
	return nil
}

// ReplayUpdate returns the cluster-level update (UpdateClusterConfig's,
// UpdateClusterVersion's) an earlier request with the same token made, nil
// when the token is new. An update of an earlier incarnation of the cluster
// is not returned: the token is refused. what names the call in errors
// ("config", "version").
func ReplayUpdate(ctx context.Context, st *store.Store, tok idempotency.Token, account, name, what string) (*storagev1.UpdateRecord, error) {
	prior, err := tok.Lookup(ctx, st)
	if err != nil {
		return nil, errdefs.WithField(err, "clusterName", name)
	}
	if prior == nil {
		return nil, nil
	}
	gone := errdefs.ResourceInUse(
		"The clientRequestToken was already used for an update of cluster %s, which no longer exists.", name).
		WithField("clusterName", name)
	c := &storagev1.ClusterRecord{}
	if _, err := st.Get(ctx, store.ClusterKey(account, name), c); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(name).WithCause(err)
		}
		return nil, fmt.Errorf("update cluster %q %s: %w", name, what, err)
	}
	if !strings.HasPrefix(prior.GetResourceKey(), store.ClusterUpdatesPrefix(c.GetUid())) {
		return nil, gone
	}
	u := &storagev1.UpdateRecord{}
	if _, err := st.Get(ctx, prior.GetResourceKey(), u); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, gone.WithCause(err)
		}
		return nil, fmt.Errorf("update cluster %q %s: read the update of an earlier request: %w", name, what, err)
	}
	return u, nil
}
