package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/store"
)

// Why a key set changed nothing, beyond the epoch's reasons.
const (
	keysAccepted       = "accepted"
	keysUnchanged      = "unchanged"
	keysIssuerMismatch = "issuer_mismatch"
	keysIssuerInUse    = "issuer_in_use"
)

// serviceAccountKeys keeps the cluster's service-account issuer and keys
// (server/oidc) when this stream's instance is the executor at the
// message's epoch — checked again in the transaction that writes them, as
// a report is — and the issuer is the one the cluster records. A key set
// that does not parse, or an issuer the cluster does not record, changes
// nothing: tokens keep verifying with what was accepted before.
func (a *agentStream) serviceAccountKeys(ctx context.Context, k *deliveryv1.ServiceAccountKeys) ([]*deliveryv1.HostMessage, error) {
	result := &deliveryv1.ServiceAccountKeysResult{}
	answer := func(reason string, fenced bool, format string, args ...any) []*deliveryv1.HostMessage {
		result.Reason = reason
		result.Accepted = reason == keysAccepted || reason == keysUnchanged
		if format != "" {
			result.Message = fmt.Sprintf(format, args...)
		}
		out := []*deliveryv1.HostMessage{{Message: &deliveryv1.HostMessage_ServiceAccountKeysResult{ServiceAccountKeysResult: result}}}
		if !result.Accepted {
			a.s.rejected.WithLabelValues(reason).Inc()
		}
		if fenced {
			out = append(out, fence(k.GetEpoch(), "service-account keys from epoch "+fmt.Sprint(k.GetEpoch())+" are no longer accepted: "+reason))
		}
		return out
	}
	sn := a.snapshotOfSession(ctx)
	if sn == nil {
		return answer("unavailable", false, ""), status.Error(codes.Unavailable, "no current view of the cluster; connect again")
	}
	if reason, violation := a.judgeEpoch(sn, k.GetEpoch()); reason != "" {
		return answer(reason, true, ""), violation
	}
	cl := sn.cluster
	if cl == nil {
		return answer("unavailable", false, "the cluster is gone"), nil
	}
	keys, err := oidc.ParseKeySet(k.GetJwks())
	if err != nil {
		return answer(rejectInvalid, false, "%v", err), nil
	}
	result.Digest = keys.Digest()
	switch {
	case cl.GetOidcIssuer() == "":
		return answer(keysIssuerMismatch, false, "the cluster records no OIDC issuer; its apiserver's is %q", k.GetIssuer()), nil
	case cl.GetOidcIssuer() != k.GetIssuer():
		return answer(keysIssuerMismatch, false, "the apiserver's service-account issuer %q is not the cluster's OIDC issuer %q", k.GetIssuer(), cl.GetOidcIssuer()), nil
	}
	key := oidc.IssuerKey(cl.GetOidcIssuer())
	prev := &storagev1.ServiceAccountIssuerRecord{}
	prevRev, err := a.s.store.Get(ctx, key, prev)
	switch {
	case errors.Is(err, store.ErrNotFound):
		prevRev = 0
	case err != nil:
		a.s.log.WarnContext(ctx, "service-account keys not recorded", "cluster_uid", a.uid, "err", err)
		return answer("unavailable", false, ""), nil
	case prev.GetClusterUid() == a.uid && bytes.Equal(prev.GetJwks(), keys.JSON()):
		return answer(keysUnchanged, false, ""), nil
	case prev.GetClusterUid() != a.uid:
		inUse, err := a.issuerInUse(ctx, prev)
		if err != nil {
			a.s.log.WarnContext(ctx, "service-account keys not recorded", "cluster_uid", a.uid, "err", err)
			return answer("unavailable", false, ""), nil
		}
		if inUse {
			return answer(keysIssuerInUse, false, "the issuer %q is cluster %s's (account %s)", cl.GetOidcIssuer(), prev.GetClusterName(), prev.GetAccountId()), nil
		}
	}
	rec := &storagev1.ServiceAccountIssuerRecord{
		Issuer: cl.GetOidcIssuer(), ClusterUid: a.uid, AccountId: cl.GetAccountId(), ClusterName: cl.GetName(),
		Jwks: keys.JSON(), UpdatedAt: timestamppb.New(time.Now()), Epoch: k.GetEpoch(), InstanceId: a.instance,
	}
	txn := store.NewTxn().
		// The fence, and the cluster still recording this issuer.
		RequireModRevision(store.ExecutorKey(a.uid), sn.executorRev).
		RequireModRevision(store.ClusterKey(cl.GetAccountId(), cl.GetName()), sn.clusterRev)
	if prevRev == 0 {
		txn.Create(key, rec)
	} else {
		txn.Update(key, rec, prevRev)
	}
	if _, err := a.s.store.Commit(ctx, txn); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// The executor, the cluster or the issuer's record moved: the
			// agent sends its keys again after its next assignment.
			return answer("unavailable", false, "the cluster changed meanwhile; send the keys again"), nil
		}
		a.s.log.WarnContext(ctx, "service-account keys not recorded", "cluster_uid", a.uid, "err", err)
		return answer("unavailable", false, ""), nil
	}
	a.s.log.InfoContext(ctx, "service-account keys recorded", "cluster_uid", a.uid, "issuer", rec.GetIssuer(),
		"kids", keys.KeyIDs(), "digest", result.Digest)
	return answer(keysAccepted, false, ""), nil
}

// issuerInUse reports whether another cluster still holds the issuer
// record: it exists as that incarnation, with that issuer.
func (a *agentStream) issuerInUse(ctx context.Context, prev *storagev1.ServiceAccountIssuerRecord) (bool, error) {
	other := &storagev1.ClusterRecord{}
	if _, err := a.s.store.Get(ctx, store.ClusterKey(prev.GetAccountId(), prev.GetClusterName()), other); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return oidc.Serves(other, prev), nil
}
