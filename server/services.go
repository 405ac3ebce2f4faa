package server

import (
	"context"
	"fmt"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	controlv1 "github.com/saltbush/saltbush/gen/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/gen/saltbush/delivery/v1"
	eksv1 "github.com/saltbush/saltbush/gen/saltbush/eks/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/review"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/server/update"
)

// service is one row of the service table: a gRPC service saltbush serves,
// how it is registered on the gRPC port and on the façade, and who may call
// its methods. The table is the one list of what is served; registration
// and access both read it, so they cannot disagree.
type service struct {
	// desc names the service and its methods (the generated ServiceDesc).
	desc *grpc.ServiceDesc
	// register adds the service to the gRPC server.
	register func(grpc.ServiceRegistrar)
	// facade adds its REST handlers to the façade mux, calling the same
	// service object in process; nil when the façade does not serve it.
	facade func(context.Context, *runtime.ServeMux) error
	// class says who may call the service's methods
	// (docs/architecture.md, "Identity and authorization").
	class methodClass
}

// domain is the resource services the shells of the table call into.
type domain struct {
	clusters   *cluster.Service
	addons     *addon.Service
	updates    *update.Service
	tags       *tagging.Service
	entries    *access.Service
	reviews    *review.Service
	deliveries *delivery.Service
	keys       *iam.Service
	ca         *pki.Authority
}

// serviceTable is every service the gRPC port serves, in registration
// order, with the façade's among them. A service added to saltbush is
// added here, with its class; one missing here is not served at all.
// reflectOn is the server reflection describes; health answers probes.
func serviceTable(d domain, authorizer *authz.Authorizer, health *health.Server, reflectOn reflection.GRPCServer) []service {
	eksClusters := cluster.NewEKSServer(d.clusters, authorizer)
	eksAddons := addon.NewEKSServer(d.addons, authorizer)
	eksUpdates := update.NewEKSServer(d.updates, authorizer)
	eksTags := tagging.NewEKSServer(d.tags, authorizer)
	eksAccess := access.NewEKSServer(d.entries, authorizer)
	reflectionOpts := reflection.ServerOptions{Services: reflectOn}
	return []service{
		{
			desc:     &eksv1.ClusterService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterClusterServiceServer(r, eksClusters) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterClusterServiceHandlerServer(ctx, mux, eksClusters)
			},
			class: classServiceEKS,
		},
		{
			desc: &controlv1.ClusterControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterClusterControlServiceServer(r, cluster.NewControlServer(d.clusters))
			},
			class: classServiceControl,
		},
		{
			desc:     &eksv1.AddonService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterAddonServiceServer(r, eksAddons) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterAddonServiceHandlerServer(ctx, mux, eksAddons)
			},
			class: classServiceEKS,
		},
		{
			desc:     &eksv1.UpdateService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterUpdateServiceServer(r, eksUpdates) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterUpdateServiceHandlerServer(ctx, mux, eksUpdates)
			},
			class: classServiceEKS,
		},
		{
			desc:     &eksv1.TagService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterTagServiceServer(r, eksTags) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterTagServiceHandlerServer(ctx, mux, eksTags)
			},
			class: classServiceEKS,
		},
		{
			desc:     &eksv1.AccessEntryService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterAccessEntryServiceServer(r, eksAccess) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterAccessEntryServiceHandlerServer(ctx, mux, eksAccess)
			},
			class: classServiceEKS,
		},
		{
			desc: &deliveryv1.AccessReviewService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				deliveryv1.RegisterAccessReviewServiceServer(r, review.NewServer(d.reviews))
			},
			class: classAgent,
		},
		{
			desc: &deliveryv1.DeliveryService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				deliveryv1.RegisterDeliveryServiceServer(r, delivery.NewServer(d.deliveries))
			},
			class: classAgent,
		},
		{
			desc: &controlv1.DeliveryControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterDeliveryControlServiceServer(r, delivery.NewControlServer(d.deliveries))
			},
			class: classServiceControl,
		},
		{
			desc: &controlv1.AddonControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterAddonControlServiceServer(r, addon.NewControlServer(d.addons))
			},
			class: classServiceControl,
		},
		{
			desc: &controlv1.IdentityControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterIdentityControlServiceServer(r, iam.NewControlServer(d.keys, d.ca))
			},
			class: classServiceControl,
		},
		{
			desc:     &healthpb.Health_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { healthpb.RegisterHealthServer(r, health) },
			class:    classAnyCaller,
		},
		// Both reflection versions, as reflection.Register serves them:
		// grpcurl and older tools still ask v1alpha.
		{
			desc: &reflectionv1alpha.ServerReflection_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				reflectionv1alpha.RegisterServerReflectionServer(r, reflection.NewServer(reflectionOpts))
			},
			class: classServiceControl,
		},
		{
			desc: &reflectionv1.ServerReflection_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				reflectionv1.RegisterServerReflectionServer(r, reflection.NewServerV1(reflectionOpts))
			},
			class: classServiceControl,
		},
	}
}

// methodClasses maps every method of the table, by full name
// ("/package.Service/Method"), to its service's class. A method not in it
// is refused (classDenied, the zero value): access fails closed.
func methodClasses(table []service) map[string]methodClass {
	classes := make(map[string]methodClass)
	for _, svc := range table {
		prefix := "/" + svc.desc.ServiceName + "/"
		for _, m := range svc.desc.Methods {
			classes[prefix+m.MethodName] = svc.class
		}
		for _, st := range svc.desc.Streams {
			classes[prefix+st.StreamName] = svc.class
		}
	}
	return classes
}

// registerFacade adds the façade's services of the table to a mux.
func registerFacade(table []service) func(context.Context, *runtime.ServeMux) error {
	return func(ctx context.Context, mux *runtime.ServeMux) error {
		for _, svc := range table {
			if svc.facade == nil {
				continue
			}
			if err := svc.facade(ctx, mux); err != nil {
				return fmt.Errorf("register %s on the façade: %w", svc.desc.ServiceName, err)
			}
		}
		return nil
	}
}
