package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories/finalizers,verbs=update

// ImageRepositoryReconciler reconciles ImageRepository objects.
type ImageRepositoryReconciler struct {
	client.Client
	Events  *events.Recorder
	Metrics *metrics.Recorder
}

// SetupWithManager registers the reconciler.
func (r *ImageRepositoryReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageRepository{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile handles one ImageRepository: the shared lifecycle (metrics,
// suspension, reconcile requests). Scanning registries is added on top of it.
func (r *ImageRepositoryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	obj := &imagev1.ImageRepository{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImageRepositoryKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImageRepositoryKind, start)
	r.Metrics.RecordSuspend(imagev1.ImageRepositoryKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	helper := patch.NewHelper(obj, r.Client)
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	err := helper.Patch(ctx, obj)
	r.Metrics.RecordReady(imagev1.ImageRepositoryKind, obj)
	return ctrl.Result{}, err
}
