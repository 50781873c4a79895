package controller

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

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/webhook"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagewebhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagewebhooks/status,verbs=get;patch

// WebhookResync is how often a Ready ImageWebhook reads its Secret again:
// Secrets are read, not watched (the controller may not list them), so a
// rotated token moves the status path within this time. The receiver
// itself checks every call against the current token at once.
const WebhookResync = 5 * time.Minute

// ImageWebhookReconciler gives each ImageWebhook its URL path.
type ImageWebhookReconciler struct {
	client.Client
	// APIReader reads Secrets without caching (or listing) them.
	APIReader client.Reader
	Metrics   *metrics.Recorder
}

// SetupWithManager registers the reconciler.
func (r *ImageWebhookReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageWebhook{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile checks the spec, reads the token and writes the path.
func (r *ImageWebhookReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	obj := &imagev1.ImageWebhook{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImageWebhookKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImageWebhookKind, start)
	helper := patch.NewHelper(obj, r.Client)
	defer func() {
		if err := helper.Patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.Metrics.RecordReady(imagev1.ImageWebhookKind, obj)
	}()
	r.Metrics.RecordSuspend(imagev1.ImageWebhookKind, obj, obj.Spec.Suspend)
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	obj.Status.ObservedGeneration = obj.Generation

	if s := obj.Spec.ImageRepositorySelector; s != nil {
		if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
			// No path while the spec is wrong: the receiver then refuses
			// every call instead of guessing which repositories to scan.
			obj.Status.WebhookPath = ""
			conditions.MarkStalled(obj, conditions.InvalidSpecReason, "imageRepositorySelector: %s", err)
			return ctrl.Result{}, nil
		}
	}
	sec, err := receiver.ReadSecret(ctx, r.APIReader, obj.Namespace, obj.Spec.SecretRef.Name, webhook.SecretKeys(obj.Spec.Type))
	if err != nil {
		obj.Status.WebhookPath = ""
		var f *conditions.Failure
		if !errors.As(err, &f) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: conditions.Apply(obj, f.After(30*time.Second), 0)}, nil
	}
	obj.Status.WebhookPath = receiver.Path(sec[receiver.TokenKey], obj.Name, obj.Namespace)
	if obj.Spec.Suspend {
		conditions.MarkReady(obj, conditions.SucceededReason, "suspended: calls to %s are ignored", obj.Status.WebhookPath)
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "receiving %s calls on %s", obj.Spec.Type, obj.Status.WebhookPath)
	}
	return ctrl.Result{RequeueAfter: WebhookResync}, nil
}
