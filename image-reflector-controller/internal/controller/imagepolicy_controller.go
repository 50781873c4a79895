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

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch

// ImagePolicyReconciler reconciles ImagePolicy objects.
type ImagePolicyReconciler struct {
	client.Client
	Events  *events.Recorder
	Metrics *metrics.Recorder
}

// SetupWithManager registers the reconciler.
func (r *ImagePolicyReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImagePolicy{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile handles one ImagePolicy: the shared lifecycle (metrics,
// suspension, reconcile requests). Selecting images is added on top of it.
func (r *ImagePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	obj := &imagev1.ImagePolicy{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImagePolicyKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImagePolicyKind, start)
	r.Metrics.RecordSuspend(imagev1.ImagePolicyKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	helper := patch.NewHelper(obj, r.Client)
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	err := helper.Patch(ctx, obj)
	r.Metrics.RecordReady(imagev1.ImagePolicyKind, obj)
	return ctrl.Result{}, err
}
