package receiver

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
)

// Resync is how often a Ready webhook reads its Secret again: Secrets are
// read, not watched (the controllers may not list them), so a rotated
// token moves the status path within this time. The receiver itself checks
// every call against the current token at once.
const Resync = 5 * time.Minute

// Object is a webhook object as its reconciler sees it: every webhook kind
// has the one status type.
type Object interface {
	client.Object
	conditions.Setter
	GetWebhookStatus() *imagev1.WebhookStatus
}

// Spec is what a webhook reconciler reads from its object's spec.
type Spec struct {
	Type string
	// Secret names the Secret holding the token; Keys are the keys it must
	// hold.
	Secret string
	Keys   []string
	// Selector picks what the webhook may trigger; SelectorField names it
	// in messages.
	Selector      *metav1.LabelSelector
	SelectorField string
	Suspend       bool
}

// Reconcile gives a webhook object its path: it checks the selector,
// reads the Secret and sets the Ready condition (Stalled for a selector
// that does not parse; Ready=False, looked at again in 30 s, for a
// missing Secret or key). The path is empty while it is not Ready, so the
// receiver refuses every call instead of guessing. requeue is when to look
// again; an error is a failure to read the Secret worth a retry.
func Reconcile(ctx context.Context, secrets client.Reader, obj Object, s Spec) (path string, requeue time.Duration, err error) {
	if s.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.Selector); err != nil {
			conditions.MarkStalled(obj, conditions.InvalidSpecReason, "%s: %s", s.SelectorField, err)
			return "", 0, nil
		}
	}
	sec, err := ReadSecret(ctx, secrets, obj.GetNamespace(), s.Secret, s.Keys)
	if err != nil {
		var f *conditions.Failure
		if !errors.As(err, &f) {
			return "", 0, err
		}
		return "", conditions.Apply(obj, f.After(30*time.Second), 0), nil
	}
	path = Path(sec[TokenKey], obj.GetName(), obj.GetNamespace())
	if s.Suspend {
		conditions.MarkReady(obj, conditions.SucceededReason, "suspended: calls to %s are ignored", path)
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "receiving %s calls on %s", s.Type, path)
	}
	return path, Resync, nil
}

// Reconciler gives each webhook object of one kind its URL path. Both
// webhook kinds are reconciled by it; what differs is their Spec.
type Reconciler[T Object] struct {
	client.Client
	// APIReader reads Secrets without caching (or listing) them.
	APIReader client.Reader
	Metrics   *metrics.Recorder
	// Kind names the kind in metrics.
	Kind string
	// New makes an empty object of the kind; Spec reads its spec.
	New  func() T
	Spec func(T) Spec
}

// SetupWithManager registers the reconciler.
func (r *Reconciler[T]) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(r.New(), builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile checks the spec, reads the token and writes the path.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	obj := r.New()
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(r.Kind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(r.Kind, start)
	helper := patch.NewHelper(obj, r.Client)
	defer func() {
		if err := helper.Patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.Metrics.RecordReady(r.Kind, obj)
	}()
	spec := r.Spec(obj)
	r.Metrics.RecordSuspend(r.Kind, obj, spec.Suspend)
	status := obj.GetWebhookStatus()
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		status.SetLastHandledReconcileRequest(v)
	}
	status.ObservedGeneration = obj.GetGeneration()
	path, requeue, err := Reconcile(ctx, r.APIReader, obj, spec)
	status.WebhookPath = path
	return ctrl.Result{RequeueAfter: requeue}, err
}
