package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/rollback"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// spec.rollback reads the health of its healthOf objects as promotion
// policies do (pkg/runtime/healthwatch): watched, never polled, each kind
// once an automation names it.
// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=healthwebhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch

// rollbackHealthIndex indexes automations by each spec.rollback.healthOf
// object (healthwatch.Key).
const rollbackHealthIndex = ".spec.rollback.healthOf"

// rollbackRetry is how soon an automation whose healthOf kind cannot be
// read looks again.
const rollbackRetry = time.Minute

// automationsByHealth maps a health object to the automations whose
// spec.rollback reads it.
func (r *ImageUpdateAutomationReconciler) automationsByHealth() func(context.Context, string) []ctrlreconcile.Request {
	return func(ctx context.Context, key string) []ctrlreconcile.Request {
		list := &imagev1.ImageUpdateAutomationList{}
		if err := r.List(ctx, list, client.MatchingFields{rollbackHealthIndex: key}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for a health change")
			return nil
		}
		reqs := make([]ctrlreconcile.Request, 0, len(list.Items))
		for _, a := range list.Items {
			reqs = append(reqs, ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
		}
		return reqs
	}
}

// judgeRollback judges the automation's last own commit on its branch by
// the health of spec.rollback.healthOf (pkg/rollback). When the commit
// broke them, the images it wrote are held at the ones it replaced (a
// rollback hold, status.holds): the holds phase then hands the job those
// images, so the revert is an ordinary UpdateJob (a new commit, or a pull
// request in PR mode), and the next runs do not write the bad images
// again until the policy chooses newer ones.
func (r *ImageUpdateAutomationReconciler) judgeRollback(ctx context.Context, s *scope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	rb := obj.Spec.Rollback
	if rb == nil {
		obj.Status.Rollback = nil
		r.health.Forget(client.ObjectKeyFromObject(obj))
		return reconcile.Continue, nil
	}
	last, commit := lastOwnCommit(obj)
	if last == nil || isRevert(obj, last) {
		return reconcile.Continue, nil
	}
	objects, err := r.health.Read(ctx, client.ObjectKeyFromObject(obj), rb.HealthOf, conditions.InvalidSpecReason, rollbackRetry)
	if err != nil {
		if f, ok := conditions.Classify(err); ok && !f.Stalled {
			// The automation still writes; only the judgement waits.
			st0 := obj.Status.Rollback
			if st0 == nil || st0.Commit != obj.Status.AppliedRevision {
				st0 = &imagev1.RollbackStatus{Commit: obj.Status.AppliedRevision}
			}
			st0.Reason, st0.Message = imagev1.RollbackWatchingReason, f.Error()
			obj.Status.Rollback = st0
			return reconcile.Result{RequeueAfter: rollbackRetry}, nil
		}
		return reconcile.Continue, err
	}
	d := rollback.Decide(rollback.Input{Commit: obj.Status.AppliedRevision, PushedAt: last.Time.Time, Window: rb.Window.Duration,
		Objects: objects, Prior: obj.Status.Rollback, Now: st.now})
	obj.Status.Rollback = &d.Status
	if d.Revert {
		n := holdRolledBack(obj, last, commit, d.Status.Message, st.now)
		st.tally.hold(imagev1.RolledBackReason)
		r.Events.Warning(ctx, obj, imagev1.RolledBackReason, "Rollback", fmt.Sprintf("%s; %d images held at the ones it replaced", d.Status.Message, n))
	}
	return reconcile.Result{RequeueAfter: d.Requeue}, nil
}

// lastOwnCommit is the automation's newest change and the commit that
// brought it to its checkout branch, when the branch is at that commit
// (status.appliedRevision): the commit a rollback judges. A push is its
// own commit; a pull request's is the commit a person's merge made
// (PushRecord.Merged): the request's head commit is on a branch nothing
// deploys, and an open request has reached nothing.
func lastOwnCommit(obj *imagev1.ImageUpdateAutomation) (*imagev1.PushRecord, string) {
	if len(obj.Status.History) == 0 {
		return nil, ""
	}
	last := &obj.Status.History[0]
	commit := last.Commit
	if last.PullRequest != 0 {
		commit = last.Merged
	}
	if _, hash, ok := git.ParseRevision(obj.Status.AppliedRevision); !ok || commit == "" || hash != commit {
		return nil, ""
	}
	return last, commit
}

// isRevert reports whether the commit wrote only images rollback holds
// hold: the revert itself, which is never judged (its failure would
// revert to the broken images).
func isRevert(obj *imagev1.ImageUpdateAutomation, last *imagev1.PushRecord) bool {
	if len(last.Images) == 0 {
		return false
	}
	for _, img := range last.Images {
		held := false
		for _, h := range obj.Status.Holds {
			if h.Path != "" || h.Policy != img.Policy {
				continue
			}
			// The file may write the name another way (busybox for
			// docker.io/library/busybox).
			if ref, err := setters.ParseImage(h.Value); err == nil && setters.SameImage(ref, img.ImageRef) {
				held = true
			}
		}
		if !held {
			return false
		}
	}
	return true
}

// holdRolledBack holds each image the change wrote at the one it
// replaced, as set by the commit that brought it, and returns how many.
func holdRolledBack(obj *imagev1.ImageUpdateAutomation, last *imagev1.PushRecord, commit, why string, now time.Time) int {
	n := 0
	since := metav1.NewTime(now)
	for _, img := range last.Images {
		if img.From == "" {
			// Nothing applied before: nothing to go back to.
			continue
		}
		old := meta.ImageRef{Name: img.Name, Tag: img.From, Digest: img.FromDigest}
		h := imagev1.AutomationHold{Hold: updatev1.Hold{HoldKey: updatev1.HoldKey{Setter: obj.Namespace + ":" + img.Policy, Commit: commit},
			Value: old.String(), From: img.ImageRef.String(), Want: img.ImageRef.String(), Author: "spec.rollback", Since: &since},
			Policy: img.Policy, Reason: imagev1.RolledBackReason, Message: why}
		kept := obj.Status.Holds[:0]
		for _, o := range obj.Status.Holds {
			if o.Path != "" || o.Policy != img.Policy {
				kept = append(kept, o)
			}
		}
		obj.Status.Holds = append(kept, h)
		n++
	}
	return n
}
