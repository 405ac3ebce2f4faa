package update_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/store"
	"github.com/saltbush/saltbush/store/storetest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

const account = "000000000000"

func TestStatusName(t *testing.T) {
	cases := []struct {
		name string
		st   storagev1.UpdateStatus
		want string
	}{
		{"in progress", storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS, "InProgress"},
		{"failed", storagev1.UpdateStatus_UPDATE_STATUS_FAILED, "Failed"},
		{"cancelled", storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED, "Cancelled"},
		{"successful", storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL, "Successful"},
		{"unspecified has no name", storagev1.UpdateStatus_UPDATE_STATUS_UNSPECIFIED, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := update.StatusName(tc.st); got != tc.want {
				t.Errorf("StatusName(%s) = %q, want %q", tc.st, got, tc.want)
			}
		})
	}
}

func TestToAPI(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)
	cases := []struct {
		name string
		rec  *storagev1.UpdateRecord
		want *eksv1.Update
	}{
		{
			// AWS sends params and errors as empty lists, never absent.
			name: "bare record",
			rec:  &storagev1.UpdateRecord{Id: "u", Type: update.TypeAddonUpdate, Status: storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS},
			want: &eksv1.Update{Id: "u", Type: update.TypeAddonUpdate, Status: "InProgress", Params: []*eksv1.UpdateParam{}, Errors: []*eksv1.ErrorDetail{}},
		},
		{
			name: "params, errors and creation time in epoch seconds",
			rec: &storagev1.UpdateRecord{
				Id: "u", Type: update.TypeLoggingUpdate, Status: storagev1.UpdateStatus_UPDATE_STATUS_FAILED,
				CreatedAt: timestamppb.New(created),
				Params:    []*storagev1.UpdateParam{{Type: "ClusterLogging", Value: `{"enabled":true}`}},
				Errors:    []*storagev1.UpdateError{{ErrorCode: "Unknown", ErrorMessage: "it broke", ResourceIds: []string{"r-1"}}},
			},
			want: &eksv1.Update{
				Id: "u", Type: update.TypeLoggingUpdate, Status: "Failed", CreatedAt: float64(created.UnixMilli()) / 1000,
				Params: []*eksv1.UpdateParam{{Type: "ClusterLogging", Value: `{"enabled":true}`}},
				Errors: []*eksv1.ErrorDetail{{ErrorCode: "Unknown", ErrorMessage: "it broke", ResourceIds: []string{"r-1"}}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := update.ToAPI(tc.rec)
			if !proto.Equal(got, tc.want) || got.Params == nil || got.Errors == nil {
				t.Errorf("ToAPI = %v, want %v", got, tc.want)
			}
		})
	}
}

// fixture is a cluster (through the real cluster service) with two
// cluster updates and an add-on with one update, on a real etcd.
type fixture struct {
	svc                    *update.Service
	ctx                    context.Context
	clusterIDs             []string // in creation order
	addonID                string
	clusterName, addonName string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := storetest.New(t)
	log := slog.New(slog.DiscardHandler)
	cs, err := cluster.NewService(st, cluster.DefaultConfig(), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ctx = identity.NewContext(ctx, identity.RootCaller(account))
	c, err := cs.Create(ctx, &eksv1.CreateClusterRequest{
		Name: "updates", RoleArn: "arn:aws:iam::" + account + ":role/eks",
		ResourcesVpcConfig: &eksv1.VpcConfigRequest{SubnetIds: []string{"subnet-a", "subnet-b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: update.NewService(st, cs, log), ctx: ctx, clusterName: "updates", addonName: "coredns"}
	write := func(key string, rec proto.Message) {
		t.Helper()
		if _, err := st.Create(ctx, key, rec); err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
	}
	for range 2 {
		id := uuid.Must(uuid.NewV7()).String()
		f.clusterIDs = append(f.clusterIDs, id)
		write(store.ClusterUpdatesPrefix(c.GetUid())+id, &storagev1.UpdateRecord{Id: id, Type: update.TypeLoggingUpdate})
	}
	write(store.AddonKey(c.GetUid(), f.addonName), &storagev1.AddonRecord{Name: f.addonName, Uid: uuid.NewString()})
	f.addonID = uuid.Must(uuid.NewV7()).String()
	write(store.AddonUpdatesPrefix(c.GetUid(), f.addonName)+f.addonID, &storagev1.UpdateRecord{Id: f.addonID, Type: update.TypeAddonUpdate})
	return f
}

func exception(name string) error { return &errdefs.Error{Exception: name} }

func TestDescribe(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name    string
		cluster string
		id      string
		filter  update.Filter
		wantErr string // exception; "" for success
	}{
		{name: "cluster update", cluster: f.clusterName, id: f.clusterIDs[0]},
		{name: "add-on update", cluster: f.clusterName, id: f.addonID, filter: update.Filter{AddonName: f.addonName}},
		{name: "an add-on update is not the cluster's", cluster: f.clusterName, id: f.addonID, wantErr: errdefs.ResourceNotFoundException},
		{name: "a cluster update is not the add-on's", cluster: f.clusterName, id: f.clusterIDs[0], filter: update.Filter{AddonName: f.addonName},
			wantErr: errdefs.ResourceNotFoundException},
		{name: "unknown id", cluster: f.clusterName, id: uuid.NewString(), wantErr: errdefs.ResourceNotFoundException},
		{name: "an id that is not a uuid is no key", cluster: f.clusterName, id: "../" + f.clusterIDs[0], wantErr: errdefs.ResourceNotFoundException},
		{name: "unknown cluster", cluster: "nope", id: f.clusterIDs[0], wantErr: errdefs.ResourceNotFoundException},
		{name: "unknown add-on", cluster: f.clusterName, id: f.addonID, filter: update.Filter{AddonName: "vpc-cni"}, wantErr: errdefs.ResourceNotFoundException},
		{name: "invalid add-on name", cluster: f.clusterName, id: f.addonID, filter: update.Filter{AddonName: "-bad"}, wantErr: errdefs.InvalidParameterException},
		{name: "there are no node groups", cluster: f.clusterName, id: f.clusterIDs[0], filter: update.Filter{NodegroupName: "ng"}, wantErr: errdefs.ResourceNotFoundException},
		{name: "there are no capabilities", cluster: f.clusterName, id: f.clusterIDs[0], filter: update.Filter{CapabilityName: "cap"}, wantErr: errdefs.ResourceNotFoundException},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := f.svc.Describe(f.ctx, tc.cluster, tc.id, tc.filter)
			if tc.wantErr != "" {
				wanterr.Is(t, err, exception(tc.wantErr))
				return
			}
			if err != nil || rec.GetId() != tc.id {
				t.Fatalf("Describe = %v, %v; want update %s", rec, err, tc.id)
			}
		})
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	one := int32(1)
	cases := []struct {
		name    string
		filter  update.Filter
		max     *int32
		want    []string
		wantErr string
	}{
		{name: "cluster updates in creation order", want: f.clusterIDs},
		{name: "add-on updates", filter: update.Filter{AddonName: f.addonName}, want: []string{f.addonID}},
		{name: "one page at a time", max: &one, want: f.clusterIDs},
		{name: "unknown add-on", filter: update.Filter{AddonName: "vpc-cni"}, wantErr: errdefs.ResourceNotFoundException},
		{name: "maxResults out of range", max: new(int32(0)), wantErr: errdefs.InvalidParameterException},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			token := ""
			for {
				ids, next, err := f.svc.List(f.ctx, f.clusterName, tc.filter, tc.max, token)
				if tc.wantErr != "" {
					wanterr.Is(t, err, exception(tc.wantErr))
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if tc.max != nil && len(ids) > int(*tc.max) {
					t.Fatalf("page of %d, maxResults %d", len(ids), *tc.max)
				}
				got = append(got, ids...)
				if next == "" {
					break
				}
				token = next
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ids = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a token of another listing is refused", func(t *testing.T) {
		_, next, err := f.svc.List(f.ctx, f.clusterName, update.Filter{}, &one, "")
		if err != nil || next == "" {
			t.Fatalf("first page: next %q, %v", next, err)
		}
		_, _, err = f.svc.List(f.ctx, f.clusterName, update.Filter{AddonName: f.addonName}, &one, next)
		wanterr.Is(t, err, exception(errdefs.InvalidParameterException))
	})
}
