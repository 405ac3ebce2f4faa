package podidentity

import (
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher follows the cluster's service accounts (an informer cache
// trimmed to names, labels and annotations) and calls notify when one that
// matters changes: a service account an association names appears, goes,
// or its recorded label or annotations change (someone edited them), or a
// labelled one changes. notify is called from the informer's goroutine and
// must not block.
type Watcher struct {
	kube   kubernetes.Interface
	notify func()

	mu      sync.Mutex
	wanted  map[Key]bool
	stop    chan struct{}
	synced  cache.InformerSynced
	started bool
}

// NewWatcher returns a watcher; nothing is watched before Ensure.
func NewWatcher(kube kubernetes.Interface, notify func()) *Watcher {
	return &Watcher{kube: kube, notify: notify, wanted: map[Key]bool{}, stop: make(chan struct{})}
}

// Want sets the service accounts associations name.
func (w *Watcher) Want(records map[Key]Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wanted = make(map[Key]bool, len(records))
	for k := range records {
		w.wanted[k] = true
	}
}

// Ensure starts the watch (once) and waits, bounded by ctx, until it has
// listed.
func (w *Watcher) Ensure(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.started = true
		f := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithTransform(trim))
		inf := f.Core().V1().ServiceAccounts().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { w.changed(nil, o) },
			UpdateFunc: func(old, o any) {
				w.changed(old, o)
			},
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				w.changed(nil, o)
			},
		})
		w.synced = inf.HasSynced
		go inf.Run(w.stop)
	}
	synced := w.synced
	w.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return fmt.Errorf("pod identity: the service account watch did not list before %w", ctx.Err())
	}
	return nil
}

// Stop ends the watch.
func (w *Watcher) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
}

// changed passes on an event about o (old: its previous state on an
// update) when it concerns an association.
func (w *Watcher) changed(old, o any) {
	sa, ok := o.(*corev1.ServiceAccount)
	if !ok {
		return
	}
	if prev, ok := old.(*corev1.ServiceAccount); ok &&
		maps.Equal(ours(prev.Labels), ours(sa.Labels)) && maps.Equal(ours(prev.Annotations), ours(sa.Annotations)) {
		return // nothing of the agent's changed
	}
	w.mu.Lock()
	wanted := w.wanted[Key{Namespace: sa.Namespace, Name: sa.Name}]
	w.mu.Unlock()
	if _, labelled := sa.Labels[LabelAssociationID]; wanted || labelled {
		w.notify()
	}
}

// trim keeps what changed reads: names, labels, annotations.
func trim(o any) (any, error) {
	sa, ok := o.(*corev1.ServiceAccount)
	if !ok {
		return o, nil
	}
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: sa.Namespace, Name: sa.Name, UID: sa.UID, ResourceVersion: sa.ResourceVersion,
		Labels: sa.Labels, Annotations: sa.Annotations,
	}}, nil
}
