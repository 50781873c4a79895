package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// Pruning: an automation keeps its newest finished jobs (JobHistoryLimit)
// and deletes the rest, only those it controls.

// pruneJobs deletes the finished jobs beyond the newest limit.
func (r *ImageUpdateAutomationReconciler) pruneJobs(ctx context.Context, finished []updatev1.UpdateJob) error {
	for i := r.JobHistoryLimit; i < len(finished); i++ {
		j := &finished[i]
		if !r.controls(ctx, j) {
			continue
		}
		if err := r.Delete(ctx, j, client.Preconditions{UID: &j.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting UpdateJob %s: %w", j.Name, err)
		}
	}
	return nil
}

// controls reports whether the job j is a view of (UpdateJob.View) is
// controlled by the automation j's view is for: only that automation
// prunes a batch, under its own history limit, so that a member's
// history does not delete the batch its other members record.
func (r *ImageUpdateAutomationReconciler) controls(ctx context.Context, j *updatev1.UpdateJob) bool {
	raw := &updatev1.UpdateJob{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(j), raw, client.UnsafeDisableDeepCopy); err != nil {
		return !apierrors.IsNotFound(err)
	}
	return raw.UID == j.UID && ownerUID(raw) == ownerUID(j)
}
