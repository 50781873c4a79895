// Package healthwatch reads the health of the objects that deploy what
// image-toolkit writes (a promotion's and a rollback's healthOf) and
// wakes their readers when it changes: watch, never poll. Each kind gets
// one informer, started the first time a reader names it, so a cluster
// without Flux or Argo CD starts none and a controller without RBAC for a
// kind it is never asked about needs none.
package healthwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Watches starts one informer per kind, the first time a reader needs it.
type Watches struct {
	Ctrl   controller.Controller
	Cache  cache.Cache
	Mapper meta.RESTMapper
	// Readers maps a changed health object's Key to the requests of the
	// objects that read it.
	Readers func(ctx context.Context, key string) []reconcile.Request
	// Secrets reads the kubeconfig Secrets of remote references (past the
	// cache: a controller caches no Secrets); nil refuses them.
	Secrets client.Reader
	// Remote are the flags about kubeconfigs.
	Remote RemoteOptions
	// Cloud reaches the clusters of kubeConfig.configMapRef references
	// with a cloud identity; nil refuses them.
	Cloud *cloudauth.Issuer

	mu      sync.Mutex
	watched map[schema.GroupVersionKind]bool
	qmu     sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	remote  remotes
}

// Ensure watches gvk with the source src makes, unless it is watched
// already; an error says the kind is not served.
func (w *Watches) Ensure(gvk schema.GroupVersionKind, src func() source.Source) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[gvk] {
		return nil
	}
	if _, err := w.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return err
	}
	if err := w.Ctrl.Watch(src()); err != nil {
		return err
	}
	if w.watched == nil {
		w.watched = map[schema.GroupVersionKind]bool{}
	}
	w.watched[gvk] = true
	return nil
}

// ensureHealth watches a health kind, passing status changes to Readers.
func (w *Watches) ensureHealth(gvk schema.GroupVersionKind) error {
	return w.Ensure(gvk, func() source.Source {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return source.Kind[client.Object](w.Cache, u, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return w.Readers(ctx, KeyOf(o))
		}), statusChanged{})
	})
}

// remoteSource is what watched records the source under that hands the
// events of other clusters' watches to the controller's queue: added
// once, with the first remote reference. No cluster serves the kind.
var remoteSource = schema.GroupVersionKind{Group: "healthwatch.image.toolkit.dev", Version: "internal", Kind: "Remote"}

// ensureQueue adds the source that hands remote events to the
// controller's queue.
func (w *Watches) ensureQueue() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[remoteSource] {
		return nil
	}
	// A started controller starts the source inside Watch, with w.mu
	// held here: the queue has a lock of its own.
	err := w.Ctrl.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		w.qmu.Lock()
		defer w.qmu.Unlock()
		w.queue = q
		return nil
	}))
	if err != nil {
		return err
	}
	if w.watched == nil {
		w.watched = map[schema.GroupVersionKind]bool{}
	}
	w.watched[remoteSource] = true
	return nil
}

// wakeKey enqueues the readers of key, once the controller's queue is
// known.
func (w *Watches) wakeKey(key string) {
	w.qmu.Lock()
	q := w.queue
	w.qmu.Unlock()
	if q == nil {
		return
	}
	for _, req := range w.Readers(context.Background(), key) {
		q.Add(req)
	}
}

// Read reads the health of refs (a reader in namespace), watching their
// kinds from now on. A reference that does not parse is Stalled with
// invalidReason; a kind the cluster does not serve or the controller may
// not read is retried after retry (a CRD installed later, RBAC granted
// later).
//
// A reference with kubeConfig is read from that cluster (remote.go); the
// clusters reader names are kept watched, and those it no longer names
// stop once no other reader names them. A reference with webhookRef is
// read from the HealthWebhook its cluster pushes to (pushed.go).
func (w *Watches) Read(ctx context.Context, reader types.NamespacedName, refs []imagev1.HealthObjectReference, invalidReason string, retry time.Duration) (_ []health.Object, err error) {
	namespace := reader.Namespace
	out := make([]health.Object, 0, len(refs))
	clusters := map[string]bool{}
	// A read that failed half way keeps the clusters named before too:
	// the references it did not reach may still name them.
	defer func() { w.use(reader, clusters, err != nil) }()
	for i := range refs {
		ref := &refs[i]
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil, conditions.Stallf(invalidReason, "healthOf apiVersion %q: %v", ref.APIVersion, err)
		}
		gvk := gv.WithKind(ref.Kind)
		if ref.WebhookRef != nil {
			o, err := w.readPushed(ctx, ref, gvk, namespace, retry)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
			continue
		}
		if ref.KubeConfig != nil {
			if err := w.ensureQueue(); err != nil {
				return nil, err
			}
			o, id, err := w.readRemote(ctx, ref, gvk, namespace, invalidReason, retry)
			if id != "" {
				clusters[id] = true
			}
			if err != nil {
				return nil, err
			}
			out = append(out, o)
			continue
		}
		ns := orDefault(ref.Namespace, namespace)
		name := fmt.Sprintf("%s/%s/%s", ref.Kind, ns, ref.Name)
		if err := w.ensureHealth(gvk); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, conditions.Retryf(conditions.DependencyNotReadyReason, "healthOf %s: the cluster does not serve %s", name, gvk).After(retry)
			}
			return nil, err
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		err = w.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, u)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, health.Object{Name: name})
		case apierrors.IsForbidden(err):
			return nil, conditions.Retryf(conditions.AccessDeniedReason, "healthOf %s: the controller may not read %s (add it to the chart's rbac.healthRules): %v", name, gvk.GroupKind(), err).After(retry)
		case err != nil:
			return nil, err
		default:
			out = append(out, health.Object{Name: name, Found: true, Health: health.Of(u)})
		}
	}
	return out, nil
}

// Key names a health object for an index: group/Kind/namespace/name.
func Key(group, kind, namespace, name string) string {
	return group + "/" + kind + "/" + namespace + "/" + name
}

// KeyOf is the Key of a watched object.
func KeyOf(o client.Object) string {
	gvk := o.GetObjectKind().GroupVersionKind()
	return Key(gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName())
}

// Keys are the Keys of refs, read by a reader in namespace.
func Keys(refs []imagev1.HealthObjectReference, namespace string) []string {
	out := make([]string, 0, len(refs))
	for i := range refs {
		o := &refs[i]
		gv, _ := schema.ParseGroupVersion(o.APIVersion)
		if o.WebhookRef != nil {
			// The HealthWebhook is the watched object.
			out = append(out, Key(imagev1.GroupVersion.Group, imagev1.HealthWebhookKind, namespace, o.WebhookRef.Name))
			continue
		}
		if o.KubeConfig != nil && (o.KubeConfig.SecretRef != nil || o.KubeConfig.ConfigMapRef != nil) {
			out = append(out, remoteKey(remoteVia(namespace, o), gv.Group, o.Kind, orDefault(o.Namespace, namespace), o.Name))
			continue
		}
		out = append(out, Key(gv.Group, o.Kind, orDefault(o.Namespace, namespace), o.Name))
	}
	return out
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// statusChanged passes changes of a health object's status; its spec
// alone changes no verdict until its controller acts on it.
type statusChanged struct{ predicate.Funcs }

func (p statusChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*unstructured.Unstructured)
	n, okN := e.ObjectNew.(*unstructured.Unstructured)
	if !okO || !okN {
		return true
	}
	return p.changed(o, n)
}

func (statusChanged) changed(o, n *unstructured.Unstructured) bool {
	return fmt.Sprint(o.Object["status"]) != fmt.Sprint(n.Object["status"]) || o.GetGeneration() != n.GetGeneration()
}
