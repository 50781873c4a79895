package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
)

// An automation whose Argo CD Applications are written on more than one
// repository or branch (gitsource.Source.Targets) runs each target as an
// automation of its own would: its branch head, its decision, its
// UpdateJob, recorded in its status.targets entry. The same phases
// (readHead, recordDecision, makeJob) and the same decision (decide) run
// for each, over a view of the automation whose status is the target's;
// so a target's jobs are ordinary UpdateJobs, which the update-job
// controller groups with other automations' jobs of the same branch
// (writeback.Plan.GroupKey) and never with another target's. A target
// that fails fails alone: the others go on, and the automation's Ready
// condition names the ones that failed.

// checkoutKey is where a job checks out: its repository (any spelling of
// the URL) and branch, which tells an automation's targets' jobs apart.
func checkoutKey(url, branch string) string {
	repo, ok := gitsource.RepositoryKey(url)
	if !ok {
		repo = strings.TrimSpace(url)
	}
	return repo + "@" + branch
}

func jobCheckoutKey(spec *updatev1.UpdateJobSpec) string {
	return checkoutKey(spec.Repository.URL, spec.Checkout.Reference.Branch)
}

// resolveTargets reads each target's credentials and default branch.
func (r *ImageUpdateAutomationReconciler) resolveTargets(ctx context.Context, obj *imagev1.ImageUpdateAutomation, src *gitsource.Source) ([]*source, error) {
	var out []*source
	for _, t := range src.Targets {
		auth, err := gitsource.Credentials(ctx, r.APIReader, obj, t)
		if err != nil {
			return nil, err
		}
		if err := t.ReadDefaultBranch(ctx, auth); err != nil {
			return nil, err
		}
		out = append(out, &source{Source: *t, remote: auth})
	}
	return out, nil
}

// runTargets runs every target of an automation written on several; with
// one target it leaves the run to the phases after it. Each target runs
// the targetPhases as a part of the automation (reconcile.Scope.Part): a
// target's failure takes the skeleton's one failure path on the target's
// view (its condition, OnFailure's event and forgotten run) and the
// others go on; the automation fails with the sum (reconcile.PartsFailed),
// Stalled only when every failed target is.
func (r *ImageUpdateAutomationReconciler) runTargets(ctx context.Context, s *scope) (reconcile.Result, error) {
	targets := s.State.src.targets
	if len(targets) == 0 {
		// Back to one target: the automation's own fields tell it.
		s.Obj.Status.Targets = nil
		return reconcile.Continue, nil
	}
	obj := s.Obj
	if len(targets) > imagev1.MaxTargets {
		return reconcile.Continue, conditions.Stallf(imagev1.InvalidSourceReason,
			"%s are written on %d repositories or branches, more than the %d an automation writes: split them between automations",
			s.State.src.Describe, len(targets), imagev1.MaxTargets)
	}
	jobs, inFlight := targetJobs(s.State)
	// Each target's finished jobs are pruned on their own (run.prune).
	s.State.finished = nil
	prev := map[string]imagev1.TargetStatus{}
	for _, ts := range obj.Status.Targets {
		prev[checkoutKey(ts.URL, ts.Branch)] = ts
	}
	var sum targetSum
	for _, t := range targets {
		key := checkoutKey(t.Repository.URL, t.Ref.Branch)
		ts := prev[key]
		ts.URL, ts.Branch, ts.Applications = t.Repository.URL, t.Ref.Branch, targetApplications(t)
		view := obj.DeepCopy()
		view.Status = targetView(&obj.Status, &ts)
		view.Status.Holds = targetHolds(obj.Status.Holds, key)
		sub := s.Part(view, run{
			now: s.State.now, sel: s.State.sel, win: s.State.win, src: t, policies: s.State.policies,
			selection: s.State.selection, inFlight: inFlight[key], finished: jobs[key], target: true,
		})
		sum.add(fmt.Sprintf("%s (%s)", t.Repository.URL, t.Ref.Branch), view, r.kind().RunPart(ctx, sub, r.targetPhases()))
		s.State.tally.outcomes = append(s.State.tally.outcomes, sub.State.tally.outcomes...)
		s.State.tally.latencies = append(s.State.tally.latencies, sub.State.tally.latencies...)
		s.State.prune = append(s.State.prune, sub.State.finished)
		sum.statuses = append(sum.statuses, fromView(view, ts))
		// What every target shares: the history of pushes, the images
		// found, the last pull request.
		obj.Status.History, obj.Status.Discovered, obj.Status.LastPullRequest = view.Status.History, view.Status.Discovered, view.Status.LastPullRequest
		obj.Status.Holds = withTargetHolds(obj.Status.Holds, key, view.Status.Holds)
	}
	// The finished jobs of a target no longer written are pruned as a
	// target's are.
	for k, js := range jobs {
		if !slices.ContainsFunc(targets, func(t *source) bool { return checkoutKey(t.Repository.URL, t.Ref.Branch) == k }) {
			s.State.prune = append(s.State.prune, js)
		}
	}
	obj.Status.Targets = sum.statuses
	summarize(obj, sum.statuses, s.State.now)
	return sum.result(obj, len(targets))
}

// targetPhases are what each target runs: its last finished job recorded,
// then the head, decision and job phases an automation of one target runs.
func (r *ImageUpdateAutomationReconciler) targetPhases() []phase {
	return []phase{
		{Name: "record", Run: r.recordFinished},
		{Name: "head", Run: r.readHead},
		{Name: "decide", Run: r.recordDecision},
		{Name: "job", Run: r.makeJob},
	}
}

// recordFinished records a target's last finished job, once.
func (r *ImageUpdateAutomationReconciler) recordFinished(ctx context.Context, s *scope) (reconcile.Result, error) {
	if f := s.State.finished; len(f) > 0 && (s.Obj.Status.LastJob == nil || s.Obj.Status.LastJob.UID != f[0].UID) {
		s.State.tally = r.record(ctx, s.Obj, &f[0])
		s.State.recorded = true
	}
	return reconcile.Continue, nil
}

// targetJobs are the run's jobs by where they check out: the finished
// ones, and the oldest in flight.
func targetJobs(st run) (map[string][]updatev1.UpdateJob, map[string]*updatev1.UpdateJob) {
	jobs := map[string][]updatev1.UpdateJob{}
	inFlight := map[string]*updatev1.UpdateJob{}
	for _, j := range st.finished {
		k := jobCheckoutKey(&j.Spec)
		jobs[k] = append(jobs[k], j)
	}
	for _, j := range st.targetInFlight {
		if k := jobCheckoutKey(&j.Spec); inFlight[k] == nil || j.CreationTimestamp.Before(&inFlight[k].CreationTimestamp) {
			inFlight[k] = j
		}
	}
	return jobs, inFlight
}

// targetSum gathers how each target ended into the automation's outcome.
type targetSum struct {
	statuses        []imagev1.TargetStatus
	failed          []reconcile.PartResult
	messages        []string
	progress, ready []string
	requeue         time.Duration
}

// add counts one target: failed (its run's failure, or a failed job it
// recorded, which the next run retries), in progress, or ready.
func (t *targetSum) add(name string, view *imagev1.ImageUpdateAutomation, res reconcile.PartResult) {
	t.requeue = reconcile.Shortest(t.requeue, res.RequeueAfter)
	c := conditions.Get(view, conditions.ReadyCondition)
	switch {
	case res.Failure != nil:
		t.failed = append(t.failed, res)
		t.messages = append(t.messages, name+": "+res.Message)
	case c == nil:
	case c.Status == metav1.ConditionFalse:
		t.failed = append(t.failed, reconcile.PartResult{Failure: failure(c.Reason, "%s", c.Message), Message: c.Message})
		t.messages = append(t.messages, name+": "+c.Message)
	case c.Status == metav1.ConditionUnknown:
		t.progress = append(t.progress, name+": "+c.Message)
	default:
		t.ready = append(t.ready, name+": "+c.Message)
	}
}

// result is the automation's outcome of its targets: the sum of their
// failures, else in progress or ready.
func (t *targetSum) result(obj *imagev1.ImageUpdateAutomation, targets int) (reconcile.Result, error) {
	if len(t.failed) > 0 {
		return reconcile.Continue, reconcile.PartsFailed(t.failed,
			fmt.Sprintf("%d of %d targets failed: %s", len(t.failed), targets, strings.Join(t.messages, "; ")), t.requeue)
	}
	if len(t.progress) > 0 {
		markProgress("%s", strings.Join(t.progress, "; ")).apply(obj)
	} else {
		markReady(conditions.SucceededReason, "%d targets: %s", targets, strings.Join(t.ready, "; ")).apply(obj)
	}
	return reconcile.StopAfter(t.requeue), nil
}

// targetHolds are the holds of files of the target key: those its job is
// told are released, and those its finished job's report replaces.
func targetHolds(all []imagev1.AutomationHold, key string) []imagev1.AutomationHold {
	var out []imagev1.AutomationHold
	for _, h := range all {
		if h.Target == key {
			out = append(out, h)
		}
	}
	return out
}

// withTargetHolds is all with the target's holds replaced by its run's.
func withTargetHolds(all []imagev1.AutomationHold, key string, run []imagev1.AutomationHold) []imagev1.AutomationHold {
	out := make([]imagev1.AutomationHold, 0, len(all)+len(run))
	for _, h := range all {
		if h.Target != key {
			out = append(out, h)
		}
	}
	for _, h := range run {
		h.Target = key
		out = append(out, h)
	}
	return out
}

// targetView is the automation's status as a run of the target alone
// sees it: the target's own fields in place of the automation's.
func targetView(all *imagev1.ImageUpdateAutomationStatus, ts *imagev1.TargetStatus) imagev1.ImageUpdateAutomationStatus {
	v := imagev1.ImageUpdateAutomationStatus{
		LastAutomationRunTime:  ts.LastAutomationRunTime,
		LastPushCommit:         ts.LastPushCommit,
		LastPushTime:           ts.LastPushTime,
		History:                all.History,
		ObservedPolicies:       ts.ObservedPolicies,
		AppliedRevision:        ts.AppliedRevision,
		ObservedSourceRevision: ts.ObservedSourceRevision,
		LastJob:                ts.LastJob,
		NextWindow:             all.NextWindow,
		Discovered:             all.Discovered,
		LastPullRequest:        all.LastPullRequest,
		ObservedGeneration:     ts.ObservedGeneration,
	}
	if ts.Ready != nil {
		v.Conditions = []metav1.Condition{*ts.Ready}
	}
	return v
}

// fromView is the target's status after its run.
func fromView(view *imagev1.ImageUpdateAutomation, ts imagev1.TargetStatus) imagev1.TargetStatus {
	v := &view.Status
	ts.LastAutomationRunTime, ts.LastPushCommit, ts.LastPushTime = v.LastAutomationRunTime, v.LastPushCommit, v.LastPushTime
	ts.ObservedPolicies, ts.AppliedRevision, ts.ObservedSourceRevision = v.ObservedPolicies, v.AppliedRevision, v.ObservedSourceRevision
	ts.LastJob, ts.ObservedGeneration = v.LastJob, v.ObservedGeneration
	ts.Ready = nil
	if c := conditions.Get(view, conditions.ReadyCondition); c != nil {
		ts.Ready = c.DeepCopy()
	}
	return ts
}

// summarize sets the automation's own fields from its targets': the
// newest push and run; the generation every target applied. The applied
// revision is a single branch's, which several targets do not have:
// promotion policies follow automations of one target.
func summarize(obj *imagev1.ImageUpdateAutomation, targets []imagev1.TargetStatus, now time.Time) {
	st := &obj.Status
	st.LastAutomationRunTime = &metav1.Time{Time: now}
	st.AppliedRevision, st.ObservedSourceRevision, st.ObservedPolicies = "", "", nil
	gen := obj.Generation
	for _, t := range targets {
		if t.LastPushTime != nil && (st.LastPushTime == nil || st.LastPushTime.Before(t.LastPushTime)) {
			st.LastPushCommit, st.LastPushTime = t.LastPushCommit, t.LastPushTime.DeepCopy()
		}
		if t.LastJob != nil {
			st.LastJob = t.LastJob.DeepCopy()
		}
		gen = min(gen, t.ObservedGeneration)
	}
	if gen > 0 {
		st.ObservedGeneration = gen
	}
}

// targetApplications names the Applications a target holds, as
// status.targets lists them.
func targetApplications(t *source) []string {
	var out []string
	for _, a := range t.Applications {
		if len(out) == imagev1.MaxTargetApplications {
			break
		}
		out = append(out, strings.TrimPrefix(a.String(), "Application "))
	}
	return out
}
