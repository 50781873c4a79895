package receiver

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
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

// Reconciler gives each webhook object of one kind its URL path: it
// checks the selector, reads the Secret and sets the Ready condition
// (Stalled for a selector that does not parse; Ready=False, looked at again
// in 30 s, for a missing Secret or key). The path is empty while it is not
// Ready, so the receiver refuses every call instead of guessing. Both
// webhook kinds are reconciled by it; what differs is their Spec.
type Reconciler[T Object] struct {
	reconcile.Kind[T, struct{}]
	// APIReader reads Secrets without caching (or listing) them.
	APIReader client.Reader
	// Spec reads the object's spec.
	Spec func(T) Spec
}

// NewReconciler makes the reconciler of the webhook kind named kind; c
// reads the objects, api the Secrets, and newObj makes an empty object.
func NewReconciler[T Object](kind string, c client.Client, api client.Reader, m *metrics.Recorder,
	newObj func() T, spec func(T) Spec) *Reconciler[T] {
	r := &Reconciler[T]{APIReader: api, Spec: spec}
	r.Kind = reconcile.Kind[T, struct{}]{
		Name: kind, Client: c, Metrics: m, New: newObj,
		Request: func(o T) *meta.ReconcileRequestStatus { return &o.GetWebhookStatus().ReconcileRequestStatus },
		// Suspend is not the skeleton's stop: a suspended webhook keeps
		// its path, and its receiver ignores the calls.
		Phases: []reconcile.Phase[T, struct{}]{
			{Name: "observe", Run: r.observe},
			{Name: "selector", Run: r.selector},
			{Name: "secret", Run: r.secret},
		},
	}
	return r
}

// SetupWithManager registers the reconciler.
func (r *Reconciler[T]) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(r.New(), builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// observe records the generation and suspend, and takes the path away
// until the Secret gives it again.
func (r *Reconciler[T]) observe(_ context.Context, s *reconcile.Scope[T, struct{}]) (reconcile.Result, error) {
	r.Metrics.RecordSuspend(r.Name, s.Obj, r.Spec(s.Obj).Suspend)
	status := s.Obj.GetWebhookStatus()
	status.ObservedGeneration = s.Obj.GetGeneration()
	status.WebhookPath = ""
	return reconcile.Continue, nil
}

// selector checks that the selector of what the webhook may trigger
// parses.
func (r *Reconciler[T]) selector(_ context.Context, s *reconcile.Scope[T, struct{}]) (reconcile.Result, error) {
	spec := r.Spec(s.Obj)
	if spec.Selector == nil {
		return reconcile.Continue, nil
	}
	if _, err := metav1.LabelSelectorAsSelector(spec.Selector); err != nil {
		return reconcile.Continue, conditions.Stallf(conditions.InvalidSpecReason, "%s: %s", spec.SelectorField, err)
	}
	return reconcile.Continue, nil
}

// secret reads the token and gives the webhook its path. A missing
// Secret or key is looked at again in 30 s; a Ready webhook every Resync.
func (r *Reconciler[T]) secret(ctx context.Context, s *reconcile.Scope[T, struct{}]) (reconcile.Result, error) {
	obj, spec := s.Obj, r.Spec(s.Obj)
	sec, err := ReadSecret(ctx, r.APIReader, obj.GetNamespace(), spec.Secret, spec.Keys)
	if err != nil {
		if f, ok := conditions.Classify(err); ok {
			return reconcile.Continue, f.After(30 * time.Second)
		}
		return reconcile.Continue, err
	}
	path := Path(sec[TokenKey], obj.GetName(), obj.GetNamespace())
	if spec.Suspend {
		conditions.MarkReady(obj, conditions.SucceededReason, "suspended: calls to %s are ignored", path)
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "receiving %s calls on %s", spec.Type, path)
	}
	obj.GetWebhookStatus().WebhookPath = path
	return reconcile.Result{RequeueAfter: Resync}, nil
}
