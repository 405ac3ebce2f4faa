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
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/insight"
	"github.com/saltbush/saltbush/server/pki"
	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/server/published"
	"github.com/saltbush/saltbush/server/review"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/version"
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
	// readOnly marks a service whose every method only reads although its
	// proto, not saltbush's, declares no idempotency levels (health,
	// reflection). saltbush's own protos declare NO_SIDE_EFFECTS per method.
	readOnly bool
}

// domain is the resource services the shells of the table call into.
type domain struct {
	clusters   *cluster.Service
	addons     *addon.Service
	updates    *update.Service
	tags       *tagging.Service
	entries    *access.Service
	pods       *podidentity.Service
	reviews    *review.Service
	deliveries *delivery.Service
	keys       *iam.Service
	ca         *pki.Authority
	versions   *version.Service
	insights   *insight.Service
	published  *published.Service
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
	eksPods := podidentity.NewEKSServer(d.pods, authorizer)
	eksVersions := version.NewEKSServer(d.versions, authorizer)
	eksInsights := insight.NewEKSServer(d.insights, authorizer)
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
			desc:     &eksv1.PodIdentityAssociationService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterPodIdentityAssociationServiceServer(r, eksPods) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterPodIdentityAssociationServiceHandlerServer(ctx, mux, eksPods)
			},
			class: classServiceEKS,
		},
		{
			desc:     &eksv1.ClusterVersionService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterClusterVersionServiceServer(r, eksVersions) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterClusterVersionServiceHandlerServer(ctx, mux, eksVersions)
			},
			class: classServiceEKS,
		},
		{
			desc:     &eksv1.InsightService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) { eksv1.RegisterInsightServiceServer(r, eksInsights) },
			facade: func(ctx context.Context, mux *runtime.ServeMux) error {
				return eksv1.RegisterInsightServiceHandlerServer(ctx, mux, eksInsights)
			},
			class: classServiceEKS,
		},
		{
			desc: &controlv1.ClusterUpdateControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterClusterUpdateControlServiceServer(r, version.NewControlServer(d.versions))
			},
			class: classServiceControl,
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
			desc: &controlv1.CatalogControlService_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				controlv1.RegisterCatalogControlServiceServer(r, published.NewControlServer(d.published))
			},
			// Publishing changes what every account may install: only a
			// service whose policy allows saltbush:PublishAddonVersion (and
			// so on) may, which the operators' admin service does.
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
			readOnly: true,
		},
		// Both reflection versions, as reflection.Register serves them:
		// grpcurl and older tools still ask v1alpha.
		{
			desc: &reflectionv1alpha.ServerReflection_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				reflectionv1alpha.RegisterServerReflectionServer(r, reflection.NewServer(reflectionOpts))
			},
			class:    classServiceControl,
			readOnly: true,
		},
		{
			desc: &reflectionv1.ServerReflection_ServiceDesc,
			register: func(r grpc.ServiceRegistrar) {
				reflectionv1.RegisterServerReflectionServer(r, reflection.NewServerV1(reflectionOpts))
			},
			class:    classServiceControl,
			readOnly: true,
		},
	}
}

// methodTable maps every method of the table, by full name
// ("/package.Service/Method"), to its service's class and whether it only
// reads. That comes from the method's descriptor in the protobuf registry
// (the generated code registers it): a method whose proto declares
// idempotency_level = NO_SIDE_EFFECTS only reads; any other changes state.
// A service whose proto is not saltbush's and declares no levels says so
// in its row (readOnly).
func methodTable(table []service) (map[string]method, error) {
	methods := make(map[string]method)
	for _, svc := range table {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc.desc.ServiceName))
		if err != nil {
			return nil, fmt.Errorf("service %s: its descriptor: %w", svc.desc.ServiceName, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("service %s: the registry holds a %T under its name", svc.desc.ServiceName, d)
		}
		names := make([]string, 0, len(svc.desc.Methods)+len(svc.desc.Streams))
		for _, m := range svc.desc.Methods {
			names = append(names, m.MethodName)
		}
		for _, st := range svc.desc.Streams {
			names = append(names, st.StreamName)
		}
		for _, name := range names {
			md := sd.Methods().ByName(protoreflect.Name(name))
			if md == nil {
				return nil, fmt.Errorf("method %s of service %s: not in its descriptor", name, svc.desc.ServiceName)
			}
			methods["/"+svc.desc.ServiceName+"/"+name] = method{
				class:    svc.class,
				readOnly: svc.readOnly || declaresNoSideEffects(md),
			}
		}
	}
	return methods, nil
}

// declaresNoSideEffects reports whether a method's proto declares
// idempotency_level = NO_SIDE_EFFECTS.
func declaresNoSideEffects(md protoreflect.MethodDescriptor) bool {
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	return opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
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
