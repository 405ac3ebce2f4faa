// Package kube builds the agent's clients of its cluster's apiserver. Every
// write any of them makes holds the agent's grant (package grant): it is
// refused when the agent is not the fenced executor, and it carries a
// deadline that ends inside the grant. Reads need no grant: a standby may
// look, it may not touch.
package kube

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/saltbush/saltbush/guest/grant"
)

// Clients are the agent's views of the apiserver.
type Clients struct {
	// Config is the REST configuration (no grant: for read-only use).
	Config *rest.Config
	// Client is controller-runtime's client, grant-guarded for writes.
	Client client.WithWatch
	// Mapper maps kinds to resources; it rediscovers on a miss, so kinds
	// whose CRDs an add-on just applied resolve.
	Mapper meta.RESTMapper
	// Dynamic and Kubernetes are client-go clients for watches and reads
	// only (they bypass the guard: never write with them).
	Dynamic    dynamic.Interface
	Kubernetes kubernetes.Interface
}

// LoadConfig reads a kubeconfig file and tunes it for the agent: a user
// agent naming it, and a request rate that lets an add-on of dozens of
// objects (each a dry run and an apply) go through without client-side
// throttling.
func LoadConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// New builds the clients; writes made through Client hold g.
func New(cfg *rest.Config, g *grant.Grant) (*Clients, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("apiserver discovery: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	base, err := client.NewWithWatch(cfg, client.Options{HTTPClient: httpClient, Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: cfg, Client: Guard(base, g), Mapper: mapper, Dynamic: dyn, Kubernetes: kc}, nil
}

// Guard wraps c so that every write holds g for its duration.
func Guard(c client.WithWatch, g *grant.Grant) client.WithWatch {
	hold := func(ctx context.Context, write func(context.Context) error) error {
		ctx, release, err := g.Hold(ctx)
		if err != nil {
			return err
		}
		defer release()
		return write(ctx)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.Patch(ctx, obj, patch, opts...) })
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.Apply(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.Delete(ctx, obj, opts...) })
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.DeleteAllOf(ctx, obj, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.SubResource(sub).Create(ctx, obj, subObj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			return hold(ctx, func(ctx context.Context) error { return c.SubResource(sub).Apply(ctx, obj, opts...) })
		},
	})
}
