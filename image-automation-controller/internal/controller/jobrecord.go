package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
)

// Recording a finished UpdateJob in its automation's status: the job
// referenced, the push recorded in the history (with the images it
// changed and the time from the policy's change to the push), the merged
// pull request found, and the events of a push or of no change.

// jobsOf returns the automation's jobs from the cache: those in flight,
// oldest first, and the finished ones newest first.
func (r *ImageUpdateAutomationReconciler) jobsOf(ctx context.Context, obj *imagev1.ImageUpdateAutomation) (inFlight []*updatev1.UpdateJob, finished []updatev1.UpdateJob, err error) {
	list := &updatev1.UpdateJobList{}
	if err := r.List(ctx, list, client.InNamespace(obj.Namespace), client.MatchingFields{jobOwnerIndex: string(obj.UID)}); err != nil {
		return nil, nil, fmt.Errorf("listing UpdateJobs: %w", err)
	}
	// A batch is read as the automation's own job (its update and its
	// outcome).
	for _, j := range updatev1.ViewsOf(obj.UID, list.Items) {
		if j.Status.Phase.Finished() {
			finished = append(finished, j)
		} else {
			inFlight = append(inFlight, &j)
		}
	}
	slices.SortStableFunc(inFlight, func(a, b *updatev1.UpdateJob) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	slices.SortFunc(finished, func(a, b updatev1.UpdateJob) int {
		if c := runOf(&b) - runOf(&a); c != 0 {
			return c
		}
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return inFlight, finished, nil
}

// runOf is the job's run number, 0 when it has none.
func runOf(j *updatev1.UpdateJob) int {
	return runNumber(j.Annotations)
}

func runNumber(annotations map[string]string) int {
	n, _ := strconv.Atoi(annotations[RunAnnotation])
	return n
}

// record writes a finished job's outcome into the status, once per job:
// the job's reference, what it found and applied, and its outcome as the
// automation's Ready condition and events. A failed job's failure is the
// automation's Ready=False until a run decides otherwise; it is no failure
// of this run, which goes on to decide the next job. It returns what to
// count once the status is written.
func (r *ImageUpdateAutomationReconciler) record(ctx context.Context, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) tally {
	var t tally
	// The automation's events carry what its job did: commit, pull
	// request, replaced values.
	ev := r.Events.WithMetadata(events.UpdateJobMetadata(job))
	obj.Status.LastJob = jobReference(job)
	if decided, ok := r.batches.takeDecided(obj.UID); ok {
		// The batch ended before this automation named it (batch.go):
		// its run started when it decided to make the job.
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: decided}
	}
	if found, ok := discovered(job); ok {
		obj.Status.Discovered = found
	}
	if pr := job.Status.PullRequest; pr != nil {
		obj.Status.LastPullRequest = pr.DeepCopy()
	}
	recordHolds(ctx, ev, obj, job, &t)
	switch job.Status.Phase {
	case updatev1.UpdateJobSucceeded:
		obj.Status.ObservedSourceRevision = revisionAfterPush(job)
		before := obj.Status.ObservedPolicies
		applied(obj, job)
		obj.Status.AppliedRevision = appliedRevision(job)
		t.latencies = recordPush(ctx, ev, obj, job, time.Now())
		remember(obj, pushRecord(before, job, obj.Status.LastPushTime))
		t.outcome(OutcomePushed)
	case updatev1.UpdateJobNoChange:
		merged(obj, job)
		obj.Status.ObservedSourceRevision = job.Status.CheckoutRevision
		applied(obj, job)
		obj.Status.AppliedRevision = appliedRevision(job)
		recordNoChange(ctx, ev, obj, job)
		t.outcome(OutcomeNoChange)
	case updatev1.UpdateJobFailed:
		reason, msg := conditions.FailedReason, "no reason given"
		if c := conditions.Get(job, conditions.ReadyCondition); c != nil {
			if c.Reason != "" {
				reason = c.Reason
			}
			if c.Message != "" {
				msg = c.Message
			}
		}
		// The one way to a failure condition, though the reconcile
		// goes on: the next decision may replace it.
		f := failure(reason, "UpdateJob %s failed: %s", job.Name, msg)
		conditions.Record(obj, f, f.Error())
		ev.Warning(ctx, obj, reason, "Update", fmt.Sprintf("UpdateJob %s failed: %s", job.Name, msg))
		t.outcome(OutcomeFailed)
	}
	return t
}

// applied records the policies and generation a job applied.
func applied(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	obj.Status.ObservedPolicies = policiesOf(job)
	if gen, _ := strconv.ParseInt(job.Annotations[GenerationAnnotation], 10, 64); gen > 0 {
		obj.Status.ObservedGeneration = gen
	}
}

// recordPush records a job that pushed a commit (or proposed it), and
// returns the latencies from its policies' changes to the push.
func recordPush(ctx context.Context, ev *events.Recorder, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob, now time.Time) []float64 {
	pushed := now
	if ct := job.Status.CompletionTime; ct != nil {
		// completionTime has whole seconds: the push happened
		// within the second after it, and before now.
		pushed = minTime(now, ct.Add(time.Second))
	}
	obj.Status.LastPushCommit = job.Status.PushedCommit
	obj.Status.LastPushTime = job.Status.CompletionTime.DeepCopy()
	if obj.Status.LastPushTime == nil {
		obj.Status.LastPushTime = &metav1.Time{Time: now}
	}
	if pr := job.Status.PullRequest; pr != nil {
		conditions.MarkReady(obj, conditions.SucceededReason, "%s pull request #%d (UpdateJob %s): %s",
			pr.Action, pr.Number, job.Name, pr.URL)
		ev.Normal(ctx, obj, "PullRequest", "Push", fmt.Sprintf("UpdateJob %s %s pull request #%d: %s",
			job.Name, pr.Action, pr.Number, pr.URL))
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "pushed commit %s to %s (UpdateJob %s)",
			short(job.Status.PushedCommit), pushBranch(job), job.Name)
		ev.Normal(ctx, obj, "Pushed", "Push", fmt.Sprintf("UpdateJob %s pushed commit %s to %s",
			job.Name, job.Status.PushedCommit, pushBranch(job)))
	}
	var latencies []float64
	for _, s := range job.Spec.Update.Setters {
		if s.LatestRefTime != nil && !pushed.Before(s.LatestRefTime.Time) {
			latencies = append(latencies, pushed.Sub(s.LatestRefTime.Time).Seconds())
		}
	}
	return latencies
}

// pushRecord is the history entry of a job that pushed: the policies
// whose markers its commit changed (from its result's changes; a
// container-mode job reports files, not markers, so then the policies
// whose image differs from what was applied before), each with the image
// written and the tag it replaced.
func pushRecord(before imagev1.ObservedPolicies, job *updatev1.UpdateJob, at *metav1.Time) imagev1.PushRecord {
	rec := imagev1.PushRecord{Commit: job.Status.PushedCommit}
	if at != nil {
		rec.Time = *at
	}
	if pr := job.Status.PullRequest; pr != nil {
		rec.PullRequest = pr.Number
	}
	after := policiesOf(job)
	changed := map[string]bool{}
	// replaced is what the changes replaced, by policy: the image a
	// first push replaced, which no earlier run recorded.
	replaced := map[string]meta.ImageRef{}
	if res := job.Status.Result; res != nil {
		for _, f := range res.Files {
			for _, o := range f.Objects {
				for _, c := range o.Changes {
					if _, name, ok := updatev1.SplitPolicyKey(setterPolicy(c.Setter)); ok {
						changed[name] = true
						if _, seen := replaced[name]; !seen && c.Setter == setterPolicy(c.Setter) {
							if ref, err := setters.ParseImage(c.OldValue); err == nil {
								replaced[name] = ref
							}
						}
					}
				}
			}
		}
	}
	if len(changed) == 0 {
		for name, ref := range after {
			if before[name] != ref {
				changed[name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(changed)) {
		ref, ok := after[name]
		if !ok {
			continue
		}
		if len(rec.Images) == imagev1.MaxPushedImages {
			rec.MoreImages++
			continue
		}
		from, ok := before[name]
		if !ok {
			from = replaced[name]
		}
		rec.Images = append(rec.Images, imagev1.PushedImage{Policy: name, ImageRef: ref, From: from.Tag, FromDigest: from.Digest})
	}
	return rec
}

// setterPolicy is the policy key (NAMESPACE:NAME) of a marker's setter,
// which may name a field (NAMESPACE:NAME:tag).
func setterPolicy(setter string) string {
	if i := strings.Index(setter, ":"); i >= 0 {
		if j := strings.Index(setter[i+1:], ":"); j >= 0 {
			return setter[:i+1+j]
		}
	}
	return setter
}

// remember puts rec first in the automation's history, dropping the
// oldest beyond MaxHistory; a record of the commit already first (the
// same job read twice) replaces it.
func remember(obj *imagev1.ImageUpdateAutomation, rec imagev1.PushRecord) {
	h := obj.Status.History
	if len(h) > 0 && h[0].Commit == rec.Commit {
		h = h[1:]
	}
	obj.Status.History = append([]imagev1.PushRecord{rec}, h[:min(len(h), imagev1.MaxHistory-1)]...)
}

// merged records, on the last pull request the automation proposed, the
// checkout revision of the first job that found the branch carrying
// every image the request proposed (PushRecord.Merged): however a person
// merged it (merge commit, squash, rebase), that commit is where the
// automation's change reached the branch. A job that wants other images
// for those policies says nothing about the request. Nor does any job
// once one closed the request still open (status.lastPullRequest, kept
// until the next request): a person wrote those images on the branch by
// hand, and their commit is not the automation's to revert.
func merged(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	if len(obj.Status.History) == 0 {
		return
	}
	last := &obj.Status.History[0]
	_, hash, ok := git.ParseRevision(job.Status.CheckoutRevision)
	if last.PullRequest == 0 || last.Merged != "" || len(last.Images) == 0 || last.MoreImages > 0 || !ok {
		return
	}
	if pr := obj.Status.LastPullRequest; pr != nil && pr.Number == last.PullRequest && pr.Action == meta.PullRequestClosedNow {
		return
	}
	want := policiesOf(job)
	for _, img := range last.Images {
		if w, ok := want[img.Policy]; !ok || w.String() != img.ImageRef.String() {
			return
		}
	}
	last.Merged = hash
}

// recordNoChange records a job that found the files up to date.
func recordNoChange(ctx context.Context, ev *events.Recorder, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	switch pr := job.Status.PullRequest; {
	case pr == nil:
		conditions.MarkReady(obj, conditions.SucceededReason, "no change needed at %s (UpdateJob %s)", job.Status.CheckoutRevision, job.Name)
	case pr.Action == meta.PullRequestClosedNow:
		conditions.MarkReady(obj, conditions.SucceededReason, "no change needed at %s: closed pull request #%d (UpdateJob %s): %s",
			job.Status.CheckoutRevision, pr.Number, job.Name, pr.URL)
		ev.Normal(ctx, obj, "PullRequest", "Push", fmt.Sprintf("UpdateJob %s closed pull request #%d: the base has its changes: %s",
			job.Name, pr.Number, pr.URL))
	default:
		conditions.MarkReady(obj, conditions.SucceededReason, "pull request #%d is up to date (UpdateJob %s): %s", pr.Number, job.Name, pr.URL)
	}
}

// jobReference names the finished job, with what its markers say about
// the policies: setters no marker names, and markers naming a policy the job
// had no value for. They are the commonest answer to "why was my image not
// updated", and outlive the job, which may be pruned.
func jobReference(job *updatev1.UpdateJob) *imagev1.UpdateJobReference {
	ref := &imagev1.UpdateJobReference{Name: job.Name, UID: job.UID, Phase: job.Status.Phase}
	r := job.Status.Result
	if r == nil {
		return ref
	}
	ref.UnmarkedPolicies = r.UnmarkedPolicies[:min(len(r.UnmarkedPolicies), imagev1.MaxLastJobPolicies)]
	// The job lists its unknown policies first.
	for _, m := range r.Markers {
		if m.Unknown && len(ref.UnknownPolicies) < imagev1.MaxLastJobPolicies {
			ref.UnknownPolicies = append(ref.UnknownPolicies, m.Policy)
		}
	}
	return ref
}

// policiesOf turns a job's setters back into observed policies.
func policiesOf(job *updatev1.UpdateJob) imagev1.ObservedPolicies {
	out := imagev1.ObservedPolicies{}
	for _, s := range job.Spec.Update.Setters {
		_, name, _ := updatev1.SplitPolicyKey(s.Policy)
		out[name] = s.ImageRef
	}
	return out
}

// revisionAfterPush is the checkout branch head once the job is done: the
// pushed commit when it pushed to the branch it checked out, so that the
// next run's ls-remote matches and short-circuits.
func revisionAfterPush(job *updatev1.UpdateJob) string {
	ref := job.Spec.Checkout.Reference
	if job.Status.PushedCommit != "" && gitsource.BranchOnly(ref) && pushBranch(job) == ref.Branch &&
		job.Status.PullRequest == nil {
		return git.FormatRevision(ref.Branch, job.Status.PushedCommit)
	}
	return job.Status.CheckoutRevision
}

// appliedRevision is the commit of the checkout branch whose files hold
// the job's images once it is done (status.appliedRevision, which
// promotions follow): the commit it pushed to that branch, or the head it
// found up to date; "" when the images are only proposed (a pull request
// still open, another push branch).
func appliedRevision(job *updatev1.UpdateJob) string {
	if pr := job.Status.PullRequest; pr != nil && pr.Action != meta.PullRequestClosedNow {
		return ""
	}
	if job.Status.Phase == updatev1.UpdateJobNoChange {
		return job.Status.CheckoutRevision
	}
	if rev := revisionAfterPush(job); job.Status.PushedCommit != "" && strings.HasSuffix(rev, ":"+job.Status.PushedCommit) {
		return rev
	}
	return ""
}

// pushBranch is where the job's commit went, as its plan says
// (jobplan.PushTarget): the push branch, else the refspec's destination;
// a pull request's head branch, which the runner named.
func pushBranch(job *updatev1.UpdateJob) string {
	if pr := job.Status.PullRequest; pr != nil {
		return pr.HeadBranch
	}
	t, err := jobplan.PushTarget(job.Spec.Checkout.Reference, job.Spec.Push)
	switch {
	case err != nil:
		return ""
	case t.Branch == "" && len(t.Extra) > 0:
		return strings.TrimPrefix(t.Extra[0].Dst, "refs/heads/")
	}
	return t.Branch
}

func short(oid string) string {
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
