// Package client connects a service inside the private cloud (a cluster
// provisioner, a node-group controller) to saltbush's gRPC API: one
// connection over mutual TLS with a certificate from saltbush's CA, to
// one of several replicas with failover, retries where a retry is safe, a
// deadline on every call, and the account the EKS services act for.
//
// It is part of the contracts module (github.com/saltbush/saltbush/api)
// and imports only the standard library, protobuf, gRPC and the module's
// generated packages, so a service that uses it links none of saltbush's
// server, etcd, Kubernetes or the AWS SDK (api/lean_test.go keeps it so).
//
// A service certificate is made with
//
//	saltbush admin cert issue --service NAME --out-dir DIR
//
// and its policy (saltbush admin service put-policy) says which control
// methods it may call (saltbush:METHOD) and which accounts it may act for
// (saltbush:ActForAccount on arn:aws:iam::ACCOUNT:root), besides the eks:
// actions it takes for them.
package client

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
)

// ActForAccountHeader is the gRPC metadata key that asks to act for an
// account on the EKS services. The server reads the same key,
// server.ActForAccountHeader in server/grpc_access.go of saltbush's own
// module, which this module may not import; tests/apiclient checks that
// the two agree.
const ActForAccountHeader = "saltbush-act-for-account"

// eksServicePrefix starts the full method name of every EKS service
// method: the ones that act for an account.
const eksServicePrefix = "/saltbush.eks.v1."

// Client is a connection to saltbush with a typed client of each service a
// service inside the private cloud calls. The typed clients share the one
// connection; all are safe for concurrent use. Close releases it.
type Client struct {
	conn *grpc.ClientConn

	// The internal control services (saltbush.control.v1).
	ClusterControl  controlv1.ClusterControlServiceClient
	AddonControl    controlv1.AddonControlServiceClient
	DeliveryControl controlv1.DeliveryControlServiceClient
	UpdateControl   controlv1.ClusterUpdateControlServiceClient
	IdentityControl controlv1.IdentityControlServiceClient

	// The EKS services (saltbush.eks.v1), acting for Config.Account.
	Clusters                eksv1.ClusterServiceClient
	Addons                  eksv1.AddonServiceClient
	Updates                 eksv1.UpdateServiceClient
	Tags                    eksv1.TagServiceClient
	AccessEntries           eksv1.AccessEntryServiceClient
	PodIdentityAssociations eksv1.PodIdentityAssociationServiceClient
	ClusterVersions         eksv1.ClusterVersionServiceClient
	Insights                eksv1.InsightServiceClient
}

// services are the services a Client has a typed client of; their methods'
// idempotency levels decide which are retried.
func services() []*grpc.ServiceDesc {
	return []*grpc.ServiceDesc{
		&controlv1.ClusterControlService_ServiceDesc,
		&controlv1.AddonControlService_ServiceDesc,
		&controlv1.DeliveryControlService_ServiceDesc,
		&controlv1.ClusterUpdateControlService_ServiceDesc,
		&controlv1.IdentityControlService_ServiceDesc,
		&eksv1.ClusterService_ServiceDesc,
		&eksv1.AddonService_ServiceDesc,
		&eksv1.UpdateService_ServiceDesc,
		&eksv1.TagService_ServiceDesc,
		&eksv1.AccessEntryService_ServiceDesc,
		&eksv1.PodIdentityAssociationService_ServiceDesc,
		&eksv1.ClusterVersionService_ServiceDesc,
		&eksv1.InsightService_ServiceDesc,
	}
}

// New checks cfg, reads its certificate files and returns a client. It
// does not wait for a connection: gRPC connects in the background (New
// starts it) and reconnects on its own. A call waits while a connection is
// being made, and fails with UNAVAILABLE once every endpoint has failed
// (retried where that is safe; see buildServiceConfig). ctx bounds New's
// own work; a ctx already done is refused.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	f, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := loadTLS(f, cfg.ServerName)
	if err != nil {
		return nil, err
	}
	sc, err := buildServiceConfig(services())
	if err != nil {
		return nil, err
	}
	// The endpoints are a static list: a resolver of this connection
	// alone (no global registration) that hands gRPC every address at
	// once. Without a ServerName each address is verified against its own
	// host, as a dial of that host:port would be (the names come from the
	// caller's configuration, never from the network, as gRPC requires of
	// an address's ServerName).
	r := manual.NewBuilderWithScheme("saltbush")
	state := resolver.State{}
	for _, ep := range cfg.Endpoints {
		addr := resolver.Address{Addr: ep}
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(ep) // validated
			addr.ServerName = host
		}
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{addr}})
	}
	r.InitialState(state)
	conn, err := grpc.NewClient(r.Scheme()+":///saltbush",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithDefaultServiceConfig(sc),
		grpc.WithChainUnaryInterceptor(defaultDeadline(cfg.callTimeout()), actForAccount(cfg.Account)),
	)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	conn.Connect()
	return &Client{
		conn:                    conn,
		ClusterControl:          controlv1.NewClusterControlServiceClient(conn),
		AddonControl:            controlv1.NewAddonControlServiceClient(conn),
		DeliveryControl:         controlv1.NewDeliveryControlServiceClient(conn),
		UpdateControl:           controlv1.NewClusterUpdateControlServiceClient(conn),
		IdentityControl:         controlv1.NewIdentityControlServiceClient(conn),
		Clusters:                eksv1.NewClusterServiceClient(conn),
		Addons:                  eksv1.NewAddonServiceClient(conn),
		Updates:                 eksv1.NewUpdateServiceClient(conn),
		Tags:                    eksv1.NewTagServiceClient(conn),
		AccessEntries:           eksv1.NewAccessEntryServiceClient(conn),
		PodIdentityAssociations: eksv1.NewPodIdentityAssociationServiceClient(conn),
		ClusterVersions:         eksv1.NewClusterVersionServiceClient(conn),
		Insights:                eksv1.NewInsightServiceClient(conn),
	}, nil
}

// Conn is the client's connection, for a service the typed clients do not
// cover (grpc.health.v1, say). Its calls get the same default deadline,
// and the account on EKS methods; only the typed clients' idempotent
// methods are retried.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection; calls in flight fail with Canceled.
func (c *Client) Close() error { return c.conn.Close() }

// defaultDeadline gives a call whose context has no deadline one of d, so
// no call waits forever on a replica that stopped answering. A deadline
// the caller set is kept as it is.
func defaultDeadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// actForAccount asks to act for account on the EKS services' methods, and
// sends nothing on the others, as the admin CLI does. A call whose
// context already carries ActForAccountHeader (metadata.AppendToOutgoingContext)
// keeps it: the server takes a header sent twice as naming no account.
func actForAccount(account string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if account != "" && strings.HasPrefix(method, eksServicePrefix) {
			if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(ActForAccountHeader)) == 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, ActForAccountHeader, account)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
