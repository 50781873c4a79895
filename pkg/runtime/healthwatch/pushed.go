package healthwatch

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Health pushed from another cluster (healthOf[].webhookRef) is read from
// the HealthWebhook that records it: the HealthWebhook is the watched
// object, and its readers are woken when what it records changes, as by
// any health object's status. The reflector's receiver writes it.

var healthWebhookGVK = imagev1.GroupVersion.WithKind(imagev1.HealthWebhookKind)

// readPushed reads the health of ref as the HealthWebhook it names
// recorded it, for a reader in namespace.
func (w *Watches) readPushed(ctx context.Context, ref *imagev1.HealthObjectReference, gvk schema.GroupVersionKind, namespace string, retry time.Duration) (health.Object, error) {
	ns := orDefault(ref.Namespace, namespace)
	hook := ref.WebhookRef.Name
	name := fmt.Sprintf("%s/%s/%s@%s", ref.Kind, ns, ref.Name, hook)
	err := w.Ensure(healthWebhookGVK, func() source.Source {
		return source.Kind[client.Object](w.Cache, &imagev1.HealthWebhook{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return w.Readers(ctx, Key(imagev1.GroupVersion.Group, imagev1.HealthWebhookKind, o.GetNamespace(), o.GetName()))
		}), pushedChanged{})
	})
	if meta.IsNoMatchError(err) {
		return health.Object{}, conditions.Retryf(conditions.DependencyNotReadyReason, "healthOf %s: the cluster does not serve HealthWebhooks (the image-reflector-controller chart installs them)", name).After(retry)
	}
	if err != nil {
		return health.Object{}, err
	}
	var wh imagev1.HealthWebhook
	err = w.Cache.Get(ctx, types.NamespacedName{Namespace: namespace, Name: hook}, &wh)
	switch {
	case apierrors.IsNotFound(err):
		return health.Object{}, conditions.Retryf(conditions.DependencyNotReadyReason, "healthOf %s: HealthWebhook %q not found in namespace %s", name, hook, namespace).After(retry)
	case apierrors.IsForbidden(err):
		return health.Object{}, conditions.Retryf(conditions.AccessDeniedReason, "healthOf %s: the controller may not read HealthWebhooks: %v", name, err).After(retry)
	case err != nil:
		return health.Object{}, err
	}
	p := wh.Pushed(gvk.Group, ref.Kind, ns, ref.Name)
	if p == nil {
		return health.Object{Name: name, Found: true, Health: health.Health{State: health.Unknown, Reason: "NotPushed",
			Message: fmt.Sprintf("HealthWebhook %s has received nothing about %s/%s/%s yet: its cluster's notifications must send its events (docs/policies.md)", hook, ref.Kind, ns, ref.Name)}}, nil
	}
	return health.Object{Name: name, Found: true, Health: health.FromPushed(p)}, nil
}

// pushedChanged passes a HealthWebhook's changes of what it records; the
// counts of calls it answered change no verdict.
type pushedChanged struct{ predicate.Funcs }

func (pushedChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*imagev1.HealthWebhook)
	n, okN := e.ObjectNew.(*imagev1.HealthWebhook)
	if !okO || !okN {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Status.Objects, n.Status.Objects)
}
