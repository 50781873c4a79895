package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
)

// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs/status,verbs=get;update;patch

// UpdateJobReconciler reconciles UpdateJob objects.
type UpdateJobReconciler struct {
	client.Client
	Events  *events.Recorder
	Metrics *metrics.Recorder
}

// SetupWithManager registers the reconciler.
func (r *UpdateJobReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&updatev1.UpdateJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(opts).
		Complete(r)
}

// Reconcile handles one UpdateJob: a new job is marked Pending, to be
// claimed by a runner.
func (r *UpdateJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	job := &updatev1.UpdateJob{}
	if err := r.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(updatev1.UpdateJobKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(updatev1.UpdateJobKind, start)
	if job.Status.Phase != "" {
		return ctrl.Result{}, nil
	}

	helper := patch.NewHelper(job, r.Client)
	job.Status.Phase = updatev1.UpdateJobPending
	job.Status.ObservedGeneration = job.Generation
	conditions.MarkReconciling(job, conditions.ProgressingReason, "waiting for a runner")
	// The optimistic lock makes two replicas racing on a new job agree.
	err := helper.Patch(ctx, job, patch.WithOptimisticLock())
	if apierrors.IsConflict(err) {
		return ctrl.Result{Requeue: true}, nil
	}
	r.Metrics.RecordReady(updatev1.UpdateJobKind, job)
	return ctrl.Result{}, err
}
