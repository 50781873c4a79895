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

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/finalizers,verbs=update
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories,verbs=get;list;watch

// ImageUpdateAutomationReconciler reconciles ImageUpdateAutomation objects.
type ImageUpdateAutomationReconciler struct {
	client.Client
	Events  *events.Recorder
	Metrics *metrics.Recorder
	// NoCrossNamespaceRefs refuses sourceRefs to other namespaces.
	NoCrossNamespaceRefs bool
}

// SetupWithManager registers the reconciler.
func (r *ImageUpdateAutomationReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageUpdateAutomation{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile handles one ImageUpdateAutomation: the shared lifecycle (metrics,
// suspension, reconcile requests). Creating UpdateJobs is added on top of it.
func (r *ImageUpdateAutomationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	obj := &imagev1.ImageUpdateAutomation{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImageUpdateAutomationKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImageUpdateAutomationKind, start)
	r.Metrics.RecordSuspend(imagev1.ImageUpdateAutomationKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	helper := patch.NewHelper(obj, r.Client)
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	err := helper.Patch(ctx, obj)
	r.Metrics.RecordReady(imagev1.ImageUpdateAutomationKind, obj)
	return ctrl.Result{}, err
}
