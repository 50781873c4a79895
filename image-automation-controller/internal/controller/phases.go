package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// run is one reconcile of an automation: what its phases read, the
// decision, and what to do once the status is written.
type run struct {
	now time.Time
	sel labels.Selector
	win windowState
	src *source
	// policies are the namespace's ImagePolicies, by name.
	policies []imagev1.ImagePolicy
	// inFlight is the automation's unfinished job; finished are its
	// finished ones, newest first (pruned after the write).
	inFlight *updatev1.UpdateJob
	finished []updatev1.UpdateJob
	// recorded is true when this run recorded finished[0].
	recorded bool
	// targetInFlight are, for an automation of several targets
	// (source.targets), its unfinished jobs, which runTargets shares out;
	// prune are each target's finished jobs, pruned after the write.
	targetInFlight []*updatev1.UpdateJob
	prune          [][]updatev1.UpdateJob
	selection      *selection.Selection
	// target is true in the run of one of several targets (runTargets),
	// whose job is made alone, not in a batch.
	target   bool
	head     string
	decision decision
	// tally is counted only once the status is written.
	tally tally
}

type scope = reconcile.Scope[*imagev1.ImageUpdateAutomation, run]

type phase = reconcile.Phase[*imagev1.ImageUpdateAutomation, run]

// phases are an automation run: read what the decision needs, decide (a
// pure function: decide), carry the decision out. A failure in any of
// them ends the run through the skeleton's one failure path.
func (r *ImageUpdateAutomationReconciler) phases() []phase {
	return []phase{
		{Name: "spec", Run: r.checkSpec},
		{Name: "source", Run: r.readSource},
		{Name: "policies", Run: r.readPolicies},
		{Name: "jobs", Run: r.readJobs},
		{Name: "select", Run: r.selectPolicies},
		{Name: "rollback", Run: r.judgeRollback},
		{Name: "holds", Run: r.reviewHolds},
		{Name: "targets", Run: r.runTargets},
		{Name: "head", Run: r.readHead},
		{Name: "decide", Run: r.recordDecision},
		{Name: "job", Run: r.makeJob},
	}
}

// checkSpec validates what the spec alone decides and reads the update
// window now; the window's next edge brings the run back.
func (r *ImageUpdateAutomationReconciler) checkSpec(_ context.Context, s *scope) (reconcile.Result, error) {
	s.State.now = r.now()
	sel, err := validateSpec(s.Obj)
	if err != nil {
		return reconcile.Continue, err
	}
	win, err := windowAt(s.Obj.Spec.Schedule, s.State.now)
	s.Obj.Status.NextWindow = win.nextWindow()
	if err != nil {
		return reconcile.Continue, err
	}
	s.State.sel, s.State.win = sel, win
	return reconcile.Result{RequeueAfter: win.wake}, nil
}

// readSource resolves the repository, checkout ref and credentials.
// The source and its Secrets are read again every interval while a
// problem with them stalls the automation; something missing (Secrets are
// not watched) is looked for again soon, backing off the longer it stays
// missing, up to the interval.
func (r *ImageUpdateAutomationReconciler) readSource(ctx context.Context, s *scope) (reconcile.Result, error) {
	interval := s.Obj.Spec.Interval.Duration
	// Runs of automations with the same source and git spec share it.
	obj := s.Obj
	src, err := r.sources.read(ctx, sourceKey(obj), func(ctx context.Context) (*source, error) {
		return r.resolveSource(ctx, obj)
	})
	if err != nil {
		// A failure is this run's own (its phases change it): read alone.
		src, err = r.resolveSource(ctx, obj)
	}
	f, classified := conditions.Classify(err)
	switch {
	case err == nil:
		s.State.src = src
		return reconcile.Continue, nil
	case !classified:
		return reconcile.Continue, err
	case f.Stalled:
		return reconcile.Continue, f.After(interval)
	}
	wait := time.Second
	if c := conditions.Get(s.Obj, conditions.ReadyCondition); c != nil && c.Reason == f.Reason {
		wait = max(wait, min(time.Since(c.LastTransitionTime.Time), interval))
	}
	return reconcile.Continue, f.After(wait)
}

// readPolicies lists, from the cache, the ImagePolicies the automation may
// apply: those its selector matches, or with spec.discover every policy of
// the namespace (discovery follows the namespace's own policy for an
// image, which the selector need not match). A copy of every policy of
// the namespace for each run was the automation controller's CPU and most
// of its memory at tens of thousands of policies (BenchmarkShardedScale).
func (r *ImageUpdateAutomationReconciler) readPolicies(ctx context.Context, s *scope) (reconcile.Result, error) {
	list := &imagev1.ImagePolicyList{}
	opts := []client.ListOption{client.InNamespace(s.Obj.Namespace)}
	if s.Obj.Spec.Discover == nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: s.State.sel})
	}
	if err := r.List(ctx, list, opts...); err != nil {
		return reconcile.Continue, fmt.Errorf("listing ImagePolicies: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b imagev1.ImagePolicy) int { return strings.Compare(a.Name, b.Name) })
	s.State.policies = list.Items
	return reconcile.Continue, nil
}

// readJobs reads the automation's jobs and records the newest finished
// one in the status, once.
func (r *ImageUpdateAutomationReconciler) readJobs(ctx context.Context, s *scope) (reconcile.Result, error) {
	unfinished, finished, err := r.jobsOf(ctx, s.Obj)
	if err != nil {
		return reconcile.Continue, err
	}
	if len(s.State.src.targets) > 0 {
		// Each target records its own (runTargets).
		s.State.finished, s.State.targetInFlight = finished, unfinished
		return reconcile.Continue, nil
	}
	var inFlight *updatev1.UpdateJob
	if len(unfinished) > 0 {
		inFlight = unfinished[0]
	}
	s.State.inFlight, s.State.finished = inFlight, finished
	if len(finished) > 0 {
		last := &finished[0]
		if s.Obj.Status.LastJob == nil || s.Obj.Status.LastJob.UID != last.UID {
			s.State.tally = r.record(ctx, s.Obj, last)
			s.State.recorded = true
		}
	}
	return reconcile.Continue, nil
}

// selectPolicies keeps the objects of the images the last job
// found, and selects the policies the automation applies: those
// spec.policySelector matches and those following discovered images.
// Without spec.discover it removes what discovery made. While a job is in
// flight there is nothing to decide but to wait for it.
func (r *ImageUpdateAutomationReconciler) selectPolicies(ctx context.Context, s *scope) (reconcile.Result, error) {
	obj := s.Obj
	if s.State.inFlight == nil && (obj.Spec.Discover != nil || len(obj.Status.Discovered) > 0) {
		if err := r.reconcileDiscovered(ctx, obj, s.State.policies); err != nil {
			return reconcile.Continue, fmt.Errorf("discovered images: %w", err)
		}
	}
	s.State.selection = selection.Of(obj, s.State.sel, s.State.policies)
	return reconcile.Continue, nil
}

// readHead lists the checkout branch's head, when the decision depends on
// it: no job in flight, something to apply, and a branch checked out. The
// automations of one branch share the reads (sharedReads).
func (r *ImageUpdateAutomationReconciler) readHead(ctx context.Context, s *scope) (reconcile.Result, error) {
	src := s.State.src
	if s.State.inFlight != nil || (len(s.State.selection.Setters) == 0 && s.Obj.Spec.Discover == nil) || !gitsource.BranchOnly(src.Ref) {
		return reconcile.Continue, nil
	}
	oid, err := r.heads.read(ctx, headKey(src), func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, src.Repository.Timeout.Duration)
		defer cancel()
		return git.Branch(ctx, src.Repository.URL, src.remote, src.Ref.Branch)
	})
	if err != nil && len(src.Applications) > 0 && s.Obj.Spec.GitSpec.Checkout == nil {
		// An Application's targetRevision may name a tag by its short
		// name, which only the server tells from a branch.
		if tagErr := r.notABranch(ctx, src); tagErr != nil {
			return reconcile.Continue, tagErr
		}
	}
	if err != nil {
		s.State.tally.outcome(OutcomeFailed)
		f := conditions.AsFailure(gitsource.GitError(fmt.Errorf("reading the head of branch %s of %s: %w", src.Ref.Branch, src.Describe, err)))
		return reconcile.Continue, f.Redacting(src.remote.Secrets()...).After(min(s.Obj.Spec.Interval.Duration, time.Minute))
	}
	s.State.head = git.FormatRevision(src.Ref.Branch, oid)
	// A head that only jobs of this branch moved since the last run is
	// the head it saw (ownhead.go).
	if obs := s.Obj.Status.ObservedSourceRevision; obs != "" && obs != s.State.head && canShortCircuit(src.Ref, s.Obj.Spec.GitSpec.Push) &&
		movedByJobs(obs, s.State.head, r.jobParents(ctx, s.Obj.Namespace, headTarget(src))) {
		s.Obj.Status.ObservedSourceRevision = s.State.head
	}
	return reconcile.Continue, nil
}

// notABranch is the TargetRevisionNotBranch failure when the server has
// the Application's targetRevision as a tag, nil otherwise.
func (r *ImageUpdateAutomationReconciler) notABranch(ctx context.Context, src *source) error {
	ctx, cancel := context.WithTimeout(ctx, src.Repository.Timeout.Duration)
	defer cancel()
	tag := "refs/tags/" + src.Ref.Branch
	refs, err := git.ListRefs(ctx, src.Repository.URL, src.remote, tag)
	if _, ok := refs[tag]; err != nil || !ok {
		return nil
	}
	return conditions.Stallf(imagev1.TargetRevisionNotBranchReason,
		"the targetRevision %q of %s is a tag: a write-back pushes to a branch", src.Ref.Branch, src.Describe)
}

// recordDecision runs the decision (decide) on what the phases read and
// records it in the status; only a decision to make a job goes on.
func (r *ImageUpdateAutomationReconciler) recordDecision(_ context.Context, s *scope) (reconcile.Result, error) {
	st := &s.State
	in := inputs{
		Namespace: s.Obj.Namespace, Generation: s.Obj.Generation, Requested: s.Requested,
		Window: st.win, Source: st.src.Source, Selection: st.selection,
		InFlight: st.inFlight, Recorded: st.recorded, Head: st.head,
	}
	if len(st.finished) > 0 {
		in.Last = &st.finished[0]
	}
	d := decide(&s.Obj.Spec, &s.Obj.Status, in, st.now)
	st.decision = d
	switch d.act {
	case adoptJob:
		if left, later := r.batches.adoptLater(s.Obj.UID, st.inFlight, s.Requested, st.now); later {
			return reconcile.StopAfter(left), nil
		}
		r.adopt(s.Obj, st.inFlight)
	case skipRun:
		s.Obj.Status.LastAutomationRunTime = &metav1.Time{Time: st.now}
	case makeJob:
		return reconcile.Continue, nil
	}
	if d.outcome != "" {
		st.tally.outcome(d.outcome)
	}
	d.mark.apply(s.Obj)
	if d.fail != nil {
		return reconcile.Continue, d.fail.After(d.requeue)
	}
	return reconcile.StopAfter(d.requeue), nil
}

// makeJob makes the run's UpdateJob, or adopts one made before, or waits
// for another automation's job that sets the same policies on the same
// branch (createJob).
func (r *ImageUpdateAutomationReconciler) makeJob(ctx context.Context, s *scope) (reconcile.Result, error) {
	obj, st, d := s.Obj, &s.State, s.State.decision
	job, existed, err := r.createJob(ctx, obj, d.job, d.hash, changeTimes(st.selection, obj.Status.ObservedPolicies), !st.target, st.now)
	if errors.Is(err, errQueued) {
		// Nothing to write yet: the batch's automations run again once
		// it is made, and adopt it (batch.go). The requeue is in case
		// that wake is lost.
		if s.Requested {
			// Not even the request as handled: whoever asked (tk-image
			// job run --from-automation) would read the last run's
			// outcome as this one's. The run that adopts the batch
			// handles it, with the job named in the same write.
			return reconcile.Wait(batchWindow + lookAgainForBatch), nil
		}
		return reconcile.StopAfter(batchWindow + lookAgainForBatch), nil
	}
	if errors.Is(err, errStale) {
		// The status write would fail too: the next read is fresh.
		return reconcile.StopAfter(50 * time.Millisecond), nil
	}
	var busy *policyBusyError
	if errors.As(err, &busy) {
		// Not a failure: the other job sets the same value or an older
		// one; this run makes its job once that one has ended.
		markProgress("%s", busy).apply(obj)
		if busy.moved {
			return reconcile.StopAfter(100 * time.Millisecond), nil
		}
		return reconcile.StopAfter(min(obj.Spec.Interval.Duration, 2*time.Second)), nil
	}
	if err != nil {
		if apierrors.IsInvalid(err) {
			return reconcile.Continue, conditions.Stallf(conditions.InvalidSpecReason, "the UpdateJob for this automation is invalid: %s", err)
		}
		return reconcile.Continue, fmt.Errorf("creating the UpdateJob: %w", err)
	}
	// No event for a job made: the status says which job runs, and the
	// job's outcome is the event (a thousand automations following one
	// tag would otherwise write a thousand events more per tag).
	if existed {
		r.adopt(obj, job)
	} else {
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: st.now}
	}
	markProgress("waiting for UpdateJob %s to finish", job.Name).apply(obj)
	return reconcile.StopAfter(d.requeue), nil
}
