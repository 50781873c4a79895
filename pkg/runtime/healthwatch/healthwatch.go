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
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Watches starts one informer per kind, the first time a reader needs it.
type Watches struct {
	Ctrl   controller.Controller
	Cache  cache.Cache
	Mapper meta.RESTMapper
	// Readers maps a changed health object (Key) to the requests of the
	// objects that read it.
	Readers handler.MapFunc

	mu      sync.Mutex
	watched map[schema.GroupVersionKind]bool
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
		return source.Kind[client.Object](w.Cache, u, handler.EnqueueRequestsFromMapFunc(w.Readers), statusChanged{})
	})
}

// Read reads the health of refs (a reader in namespace), watching their
// kinds from now on. A reference that does not parse is Stalled with
// invalidReason; a kind the cluster does not serve or the controller may
// not read is retried after retry (a CRD installed later, RBAC granted
// later).
func (w *Watches) Read(ctx context.Context, refs []imagev1.HealthObjectReference, namespace, invalidReason string, retry time.Duration) ([]health.Object, error) {
	out := make([]health.Object, 0, len(refs))
	for _, ref := range refs {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil, conditions.Stallf(invalidReason, "healthOf apiVersion %q: %v", ref.APIVersion, err)
		}
		gvk := gv.WithKind(ref.Kind)
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
	for _, o := range refs {
		gv, _ := schema.ParseGroupVersion(o.APIVersion)
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

func (statusChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*unstructured.Unstructured)
	n, okN := e.ObjectNew.(*unstructured.Unstructured)
	if !okO || !okN {
		return true
	}
	return fmt.Sprint(o.Object["status"]) != fmt.Sprint(n.Object["status"]) || o.GetGeneration() != n.GetGeneration()
}
