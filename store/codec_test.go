package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/store"
)

// fullCluster sets every kind of field: scalars, enum, timestamps, repeated
// messages, a map, nested messages, an explicitly-present false.
func fullCluster() *storagev1.ClusterRecord {
	rec := cluster("full")
	rec.Status = storagev1.ClusterStatus_CLUSTER_STATUS_ACTIVE
	rec.CreatedAt = &timestamppb.Timestamp{Seconds: 1_690_000_000, Nanos: 123_456_789}
	rec.ModifiedAt = &timestamppb.Timestamp{Seconds: 1_700_000_000, Nanos: 42}
	rec.Members = []*storagev1.ClusterMember{
		{InstanceId: "i-0123", AddedAt: &timestamppb.Timestamp{Seconds: 1}},
		{InstanceId: "i-4567"},
	}
	rec.AccessConfig = &storagev1.ClusterAccessConfig{AuthenticationMode: "API", BootstrapClusterCreatorAdminPermissions: true}
	for i := range 20 {
		rec.Tags[fmt.Sprintf("tag-%02d", i)] = fmt.Sprintf("value-%d", i)
	}
	noShift := false
	rec.Spec = &storagev1.ClusterSpec{
		RoleArn: "arn:aws:iam::111122223333:role/eks",
		VpcConfig: &storagev1.ClusterVpcConfig{
			SubnetIds: []string{"subnet-a", "subnet-b"}, EndpointPublicAccess: true,
			PublicAccessCidrs: []string{"0.0.0.0/0"},
		},
		NetworkConfig:     &storagev1.ClusterNetworkConfig{ServiceIpv4Cidr: "10.100.0.0/16", IpFamily: "ipv4"},
		Logging:           []*storagev1.ClusterLogSetup{{Types: []string{"api", "audit"}, Enabled: true}},
		EncryptionConfig:  []*storagev1.ClusterEncryptionConfig{{Resources: []string{"secrets"}, KeyArn: "arn:aws:kms:k"}},
		ZonalShiftEnabled: &noShift,
	}
	rec.ClientRequestToken = "token-1"
	rec.StatusReason = "ünïcode reason"
	return rec
}

func TestCodec(t *testing.T) {
	t.Parallel()

	roundTrips := []struct {
		name string
		rec  proto.Message
		into proto.Message
	}{
		{"ClusterRecord/minimal", cluster("min"), &storagev1.ClusterRecord{}},
		{"ClusterRecord/full", fullCluster(), &storagev1.ClusterRecord{}},
		{"ClusterRecord/empty", &storagev1.ClusterRecord{}, &storagev1.ClusterRecord{}},
		{"StoreMeta", &storagev1.StoreMeta{TokenSigningKey: bytes.Repeat([]byte{0xA5}, 32), CreatedAt: timestamppb.Now()}, &storagev1.StoreMeta{}},
		{"StoreMeta/empty", &storagev1.StoreMeta{}, &storagev1.StoreMeta{}},
	}
	for _, tc := range roundTrips {
		t.Run("RoundTrip/"+tc.name, func(t *testing.T) {
			b, err := store.Encode(tc.rec)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if err := store.Decode(b, tc.into); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !proto.Equal(tc.rec, tc.into) {
				t.Fatalf("round trip changed the record:\n got %v\nwant %v", tc.into, tc.rec)
			}
		})
	}

	t.Run("DecodeReplacesContents", func(t *testing.T) {
		b, err := store.Encode(cluster("fresh"))
		if err != nil {
			t.Fatal(err)
		}
		into := fullCluster()
		if err := store.Decode(b, into); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(into, cluster("fresh")) {
			t.Fatalf("Decode merged into the old contents: %v", into)
		}
	})

	t.Run("DeterministicEncoding", func(t *testing.T) {
		// Equal records built in different orders (maps especially) must
		// encode to equal bytes, every time.
		a := fullCluster()
		b := fullCluster()
		b.Tags = map[string]string{}
		for i := 19; i >= 0; i-- {
			b.Tags[fmt.Sprintf("tag-%02d", i)] = fmt.Sprintf("value-%d", i)
		}
		b.Tags["team"] = "storage"
		if !proto.Equal(a, b) {
			t.Fatal("test records differ")
		}
		first, err := store.Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			for _, rec := range []proto.Message{a, b, proto.Clone(a)} {
				got, err := store.Encode(rec)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, first) {
					t.Fatalf("encoding %d of an equal record differs", i)
				}
			}
		}
		// And a different record encodes differently.
		b.Tags["team"] = "compute"
		other, err := store.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(other, first) {
			t.Fatal("different records encode to equal bytes")
		}
	})

	t.Run("EncodeInvalid", func(t *testing.T) {
		// proto3 strings must be valid UTF-8; the codec refuses to store
		// what it could not read back.
		if _, err := store.Encode(&storagev1.ClusterRecord{Name: "\xff\xfe"}); err == nil {
			t.Fatal("Encode of an invalid UTF-8 string succeeded")
		}
	})

	garbage := []struct {
		name string
		b    []byte
	}{
		{"truncated length", []byte{0x0a, 0xff}},
		{"field number zero", []byte{0x00, 0x01}},
		{"truncated varint", []byte{0x30, 0xff, 0xff}},
		{"bad wire type", []byte{0x0f}},
		{"json", []byte(`{"name":"x"}`)},
		{"invalid utf8 string", []byte{0x1a, 0x02, 0xff, 0xfe}},
		{"truncated record", truncated(t)},
	}
	for _, tc := range garbage {
		t.Run("Garbage/"+tc.name, func(t *testing.T) {
			for _, into := range []proto.Message{&storagev1.ClusterRecord{}, &storagev1.StoreMeta{}} {
				err := store.Decode(tc.b, into)
				if err == nil {
					// Some garbage is a valid StoreMeta by accident (a
					// string field is bytes there); a ClusterRecord must fail.
					if _, ok := into.(*storagev1.ClusterRecord); ok {
						t.Fatalf("Decode(%x) into ClusterRecord succeeded", tc.b)
					}
					continue
				}
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("Decode(%x) = %v, want ErrCorrupt", tc.b, err)
				}
			}
		})
	}
}

// truncated is a real encoded record cut inside its last field (the tags
// map entry: fields are encoded in number order).
func truncated(t *testing.T) []byte {
	b, err := store.Encode(cluster("x"))
	if err != nil {
		t.Fatal(err)
	}
	return b[:len(b)-3]
}
