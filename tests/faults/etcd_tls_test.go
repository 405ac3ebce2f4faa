package faults

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/store/embedetcd"
	"github.com/saltbush/saltbush/tests/loopport"
)

// TestExternalEtcdWithTLS runs saltbush against an etcd that serves only
// TLS and requires client certificates.
func TestExternalEtcdWithTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	certs := servertest.NewPKI(t, t.TempDir())
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir: t.TempDir(), UnsafeNoFsync: true,
		ClientURL: loopport.URL(t, "https"),
		ClientTLS: &transport.TLSInfo{
			CertFile: certs.ServerCertFile, KeyFile: certs.ServerKeyFile, TrustedCAFile: certs.CAFile, ClientCertAuth: true,
		},
	})
	if err != nil {
		t.Fatalf("start TLS etcd: %v", err)
	}
	defer etcd.Close()

	// Without a client certificate saltbush cannot start.
	cfg := server.DefaultConfig()
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints, cfg.EtcdCAFile = etcd.Endpoints(), certs.CAFile
	shortCtx, shortCancel := context.WithTimeout(ctx, 10*time.Second)
	defer shortCancel()
	if srv, err := server.New(shortCtx, cfg); err == nil {
		srv.Close()
		t.Fatal("saltbush started against a client-cert etcd without a certificate")
	}

	srv := servertest.Start(t, servertest.WithEtcdEndpoints(etcd.Endpoints()), servertest.WithConfig(func(c *server.Config) {
		c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile = certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile
	}))
	client := srv.EKS(t)
	if _, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("over-tls"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{},
	}); err != nil {
		t.Fatalf("CreateCluster over TLS etcd: %v", err)
	}
	if _, err := client.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("over-tls")}); err != nil {
		t.Fatalf("DescribeCluster over TLS etcd: %v", err)
	}
}
