package server

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/audit"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/authz"
	"github.com/saltbush/saltbush/server/throttle"
)

// ActForAccountHeader is the gRPC metadata a service sets to act for an
// account on the EKS services. It is a request, not an identity: it is
// honoured only when the service's own policy grants that delegation, and
// only for the certificate-verified service.
const ActForAccountHeader = "saltbush-act-for-account"

// methodClass says who may call a gRPC method. Each service's class is in
// the service table (server/services.go).
type methodClass int

const (
	// classDenied: nobody (methods not in the service table; fail closed).
	classDenied methodClass = iota
	// classAnyCaller: any verified certificate (health).
	classAnyCaller
	// classServiceEKS: a service acting for an account it is delegated.
	classServiceEKS
	// classServiceControl: a service whose policy allows saltbush:{Method}.
	classServiceControl
	// classAgent: a guest agent (its certificate names its cluster
	// incarnation and instance; the service binds every request to them).
	classAgent
)

// methodName is the last element of a full method name.
func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}

// method is what access knows of one served method.
type method struct {
	class methodClass
	// readOnly: the method changes nothing, as its proto declares
	// (idempotency_level = NO_SIDE_EFFECTS), so its calls are not audited.
	// Every other method is audited: unknown means mutating.
	readOnly bool
}

// access decides what the certificate-verified caller may call: it runs
// after the pki interceptor has set the caller from the certificate.
type grpcAccess struct {
	// methods is every served method, by full name, from the service
	// table; a method not in it is refused (the zero class).
	methods  map[string]method
	authz    *authz.Authorizer
	throttle *throttle.Limiter
	audit    audit.Sink
}

// admit returns the context the handler runs with, or the refusal.
func (a *grpcAccess) admit(ctx context.Context, fullMethod string) (context.Context, error) {
	who, ok := identity.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no verified client certificate")
	}
	switch a.methods[fullMethod].class {
	case classAnyCaller:
		return ctx, nil
	case classServiceEKS:
		if who.Service == "" {
			return nil, errdefs.ToGRPC(errdefs.AccessDenied("%s may not call %s.", who.PrincipalARN, fullMethod))
		}
		account := single(ctx, ActForAccountHeader)
		if account == "" {
			return nil, errdefs.ToGRPC(errdefs.AccessDenied(
				"%s must name the account it acts for in %s metadata.", who.PrincipalARN, ActForAccountHeader))
		}
		if err := identity.ValidateAccountID(account); err != nil {
			return nil, errdefs.ToGRPC(errdefs.InvalidParameter("%s: %v.", ActForAccountHeader, err))
		}
		if err := a.authz.ActFor(ctx, who.Service, account); err != nil {
			return nil, errdefs.ToGRPC(err)
		}
		who.AccountID, who.Delegated = account, true
		if !a.throttle.Allow(account) {
			return nil, errdefs.ToGRPC(errdefs.Throttling("Rate exceeded"))
		}
		return identity.NewContext(ctx, who), nil
	case classServiceControl:
		if who.Service == "" {
			return nil, errdefs.ToGRPC(errdefs.AccessDenied("%s may not call %s: it is for saltbush services only.", who.PrincipalARN, fullMethod))
		}
		if err := a.authz.Authorize(ctx, "saltbush:"+methodName(fullMethod), "*"); err != nil {
			return nil, errdefs.ToGRPC(err)
		}
		if !a.throttle.Allow("service/" + who.Service) {
			return nil, errdefs.ToGRPC(errdefs.Throttling("Rate exceeded"))
		}
		return ctx, nil
	case classAgent:
		if who.Agent == nil {
			return nil, errdefs.ToGRPC(errdefs.AccessDenied("%s may not call %s: it is for guest agents only.", who.PrincipalARN, fullMethod))
		}
		// Not throttled per account: a cluster's apiserver asks on its
		// users' behalf (and caches answers); the service binds each
		// request to the agent's own cluster.
		return ctx, nil
	default:
		return nil, status.Errorf(codes.PermissionDenied, "%s is not callable on this port", fullMethod)
	}
}

// single returns the one value of a metadata key ("" when absent or
// repeated: an ambiguous request names nothing).
func single(ctx context.Context, key string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	}
	return ""
}

func (a *grpcAccess) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, entry := audit.Open(ctx)
	admitted, err := a.admit(ctx, info.FullMethod)
	var resp any
	if err == nil {
		resp, err = handler(admitted, req)
	} else {
		admitted = ctx
	}
	if a.audit != nil && !a.methods[info.FullMethod].readOnly {
		a.record(admitted, info.FullMethod, entry, err)
	}
	return resp, err
}

func (a *grpcAccess) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
}

// record writes the audit record of one gRPC call.
func (a *grpcAccess) record(ctx context.Context, fullMethod string, e *audit.Entry, err error) {
	who, _ := identity.FromContext(ctx)
	action, resource := e.Noted()
	outcome := "Success"
	if err != nil {
		outcome = errdefs.FromGRPC(status.Convert(err)).Exception
	}
	a.audit.Write(ctx, audit.Record{
		Time: time.Now().UTC(), RequestID: uuid.NewString(), Source: "grpc", Operation: fullMethod,
		Principal: who.PrincipalARN, Account: who.AccountID, Delegated: who.Delegated,
		Action: action, Resource: resource, Outcome: outcome,
	})
}

// contextStream is a server stream with the admitted context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// ActForAccount is the client side of delegation: a unary client
// interceptor that asks to act for account on the EKS services (and sends
// nothing on other methods).
func ActForAccount(account string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasPrefix(method, "/saltbush.eks.v1.") {
			ctx = metadata.AppendToOutgoingContext(ctx, ActForAccountHeader, account)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
