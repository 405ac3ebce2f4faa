package webhook

import (
	"context"
	"log/slog"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// The aws-auth ConfigMap, where EKS clusters in CONFIG_MAP and
// API_AND_CONFIG_MAP modes map IAM roles and users to Kubernetes users.
const (
	AwsAuthNamespace = "kube-system"
	AwsAuthName      = "aws-auth"
)

// AwsAuth keeps the cluster's aws-auth ConfigMap from a watch of that one
// object (an informer), so a token review sends its current content
// without asking the apiserver.
type AwsAuth struct {
	client kubernetes.Interface
	log    *slog.Logger
	// current is nil while the ConfigMap does not exist (or the first
	// list has not arrived).
	current atomic.Pointer[deliveryv1.AwsAuthConfigMap]
	synced  atomic.Bool
}

// NewAwsAuth returns the watcher; Run starts it.
func NewAwsAuth(client kubernetes.Interface, log *slog.Logger) *AwsAuth {
	return &AwsAuth{client: client, log: log}
}

// Get is the ConfigMap's data, nil when there is none (or not known yet:
// the apiserver is unreachable and nothing was ever listed).
func (a *AwsAuth) Get() *deliveryv1.AwsAuthConfigMap { return a.current.Load() }

// Synced reports whether the first list arrived.
func (a *AwsAuth) Synced() bool { return a.synced.Load() }

// Run watches the ConfigMap until ctx ends.
func (a *AwsAuth) Run(ctx context.Context) {
	// No resync: the informer's cache is the ConfigMap.
	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithNamespace(AwsAuthNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", AwsAuthName).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.set(obj) },
		UpdateFunc: func(_, obj any) { a.set(obj) },
		DeleteFunc: func(any) { a.current.Store(nil) },
	}); err != nil {
		a.log.Error("aws-auth watch", "err", err)
		return
	}
	factory.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			a.synced.Store(true)
			a.log.Info("aws-auth ConfigMap watched", "present", a.Get() != nil)
		}
	}()
	<-ctx.Done()
	factory.Shutdown()
}

func (a *AwsAuth) set(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != AwsAuthName {
		return
	}
	a.current.Store(&deliveryv1.AwsAuthConfigMap{
		MapRoles:        cm.Data["mapRoles"],
		MapUsers:        cm.Data["mapUsers"],
		MapAccounts:     cm.Data["mapAccounts"],
		Uid:             string(cm.UID),
		ResourceVersion: cm.ResourceVersion,
	})
}
