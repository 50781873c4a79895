package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/update-job-controller/jobstatus"
)

// recordOutcome writes what the attempt did to the job while it is still
// this runner's, even if the manager is stopping: a pushed commit must not
// be forgotten. The write is the claim's own; the skeleton's final write
// then has nothing left to send.
func (r *UpdateJobReconciler) recordOutcome(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	st := &s.State
	// The members' outcomes are theirs whatever becomes of the leader's.
	r.recordMembers(ctx, st.group)
	wctx, cancel := outcomeContext(ctx)
	defer cancel()
	var res reconcile.Result
	err := st.claim.update(wctx, func(job *updatev1.UpdateJob) {
		// Run again on a fresh copy after a conflict: start over.
		st.outcome, st.notes = "", nil
		res = r.outcome(job, st)
		// A batch's members' outcomes go in the same write.
		r.batchOutcome(job, st)
	})
	if err != nil {
		for _, run := range st.runs() {
			run.outcome, run.notes = "", nil
		}
		if errors.Is(err, errClaimLost) {
			return reconcile.Stop, nil
		}
		return reconcile.Stop, err
	}
	s.Stored(st.claim.job)
	for _, run := range st.runs() {
		r.noteFindings(run)
	}
	if s.Obj.Status.Phase.Finished() {
		return st.afterFinish(s.Obj, time.Now()), nil
	}
	return res, nil
}

// outcome writes the attempt's outcome to job: succeeded (pushed or
// proposed), no change, failed for good, or a retry after a backoff.
func (r *UpdateJobReconciler) outcome(job *updatev1.UpdateJob, st *jobRun) reconcile.Result {
	recordFindings(job, st)
	if st.err == nil {
		switch {
		case st.out.PullRequest != nil:
			r.proposed(job, st)
		case st.out.Commit != "":
			r.pushed(job, st)
		default:
			unchanged(job, st)
		}
		return reconcile.Stop
	}
	f := conditions.AsFailure(st.err)
	if f.Stalled || job.Status.Attempts > backoffLimit(job) {
		r.failed(job, st, f)
		return reconcile.Stop
	}
	return r.retryLater(job, st, f)
}

// recordFindings keeps what the engine found once it got as far as the
// checkout: the job's, failed or not.
func recordFindings(job *updatev1.UpdateJob, st *jobRun) {
	out, status := st.out, &job.Status
	if out.CheckoutRevision != "" {
		status.CheckoutRevision = out.CheckoutRevision
		if st.plan.Update.Container != nil {
			status.Result = &updatev1.UpdateResult{Files: out.Files}
		}
		if out.Changes != nil {
			status.Result = jobstatus.Result(out.Changes, st.plan.Update.Images)
			if d := out.Discovered; d != nil {
				jobstatus.Discovered(d, status.Result)
			}
			status.Result.Holds = jobstatus.Holds(out.Holds)
		}
	}
	if out.PullRequest != nil {
		status.PullRequest = out.PullRequest
	}
}

// proposed records a job that opened or updated its pull request, or
// found it already proposing these values.
func (r *UpdateJobReconciler) proposed(job *updatev1.UpdateJob, st *jobRun) {
	status, out := &job.Status, st.out
	pr := status.PullRequest
	status.CompletionTime = &metav1.Time{Time: time.Now()}
	status.PushedCommit = out.Commit
	status.PushedRefs = out.PushedRefs
	msg := requestMessage(pr, out.Commit)
	if pr.Action == meta.PullRequestOpened || pr.Action == meta.PullRequestUpdated {
		st.outcome = OutcomeSucceeded
		status.Phase = updatev1.UpdateJobSucceeded
		conditions.MarkReady(job, conditions.SucceededReason, "%s", msg)
	} else {
		st.outcome = OutcomeNoChange
		status.Phase = updatev1.UpdateJobNoChange
		conditions.MarkReady(job, updatev1.NoChangeReason, "%s", msg)
	}
	st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
		r.jobEvents(job).Normal(ctx, job, "PullRequest", "Push", msg, st.secrets...)
	})
}

// pushed records a job that pushed its commit.
func (r *UpdateJobReconciler) pushed(job *updatev1.UpdateJob, st *jobRun) {
	status, out := &job.Status, st.out
	st.outcome = OutcomeSucceeded
	status.Phase = updatev1.UpdateJobSucceeded
	status.PushedCommit = out.Commit
	status.PushedRefs = out.PushedRefs
	status.CompletionTime = &metav1.Time{Time: time.Now()}
	msg := fmt.Sprintf("pushed commit %s to %s", short(out.Commit), st.plan.Target)
	switch {
	case st.shared > 1 && st.automations:
		msg += fmt.Sprintf(", one commit for %d automations", st.shared)
	case st.shared > 1:
		msg += fmt.Sprintf(", one commit for %d UpdateJobs", st.shared)
	}
	conditions.MarkReady(job, conditions.SucceededReason, "%s", msg)
	if st.quiet {
		return
	}
	st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
		r.jobEvents(job).Normal(ctx, job, conditions.SucceededReason, "Push", msg+"\n\n"+out.Message, st.secrets...)
	})
}

// unchanged records a job whose files already held the values.
func unchanged(job *updatev1.UpdateJob, st *jobRun) {
	st.outcome = OutcomeNoChange
	job.Status.Phase = updatev1.UpdateJobNoChange
	job.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	msg := "no change: the files already hold the policies' values"
	if st.plan.Update.Container != nil {
		msg = "no change: the container left the files as they were"
	}
	conditions.MarkReady(job, updatev1.NoChangeReason, "%s", msg)
}

// failed records an attempt's failure as the job's end: one retrying
// cannot fix, or the last attempt allowed.
func (r *UpdateJobReconciler) failed(job *updatev1.UpdateJob, st *jobRun, f *conditions.Failure) {
	st.outcome = OutcomeFailed
	msg := events.Redact(f.Error(), st.secrets...)
	if !f.Stalled {
		msg = fmt.Sprintf("%s (gave up after %d attempts)", msg, job.Status.Attempts)
	}
	failJob(job, f.Reason, msg)
	st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
		r.jobEvents(job).Warning(ctx, job, f.Reason, "Run", msg, st.secrets...)
	})
}

// retryLater hands a failed attempt's job back, Pending, to be claimed
// again after the backoff. The failure is the attempt's result, recorded
// in the job's status through conditions.Record; the reconcile itself
// succeeded.
func (r *UpdateJobReconciler) retryLater(job *updatev1.UpdateJob, st *jobRun, f *conditions.Failure) reconcile.Result {
	status := &job.Status
	st.outcome = OutcomeRetried
	// A forge's rate limit says when it resets.
	wait := max(r.backoff(status.Attempts), f.RetryAfter)
	msg := events.Redact(f.Error(), st.secrets...)
	status.Phase = updatev1.UpdateJobPending
	status.Runner = ""
	status.HeartbeatTime = &metav1.Time{Time: time.Now()} // the backoff counts from here
	conditions.Record(job, f, fmt.Sprintf("attempt %d: %s", status.Attempts, msg))
	conditions.Set(job, conditions.ReconcilingCondition, metav1.ConditionTrue, f.Reason,
		"retrying in %s (attempt %d of %d)", wait.Round(time.Second), status.Attempts+1, backoffLimit(job)+1)
	st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
		r.jobEvents(job).Warning(ctx, job, f.Reason, "Run", msg, st.secrets...)
	})
	return reconcile.StopAfter(wait)
}

// noteFindings adds the events of what the attempt could not do: files
// not updated, a pull request's side effects that failed.
func (r *UpdateJobReconciler) noteFindings(st *jobRun) {
	if problems := st.out.Problems; len(problems) > 0 {
		st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
			r.jobEvents(job).Warning(ctx, job, updatev1.UpdateFailedReason, "Update",
				"files not updated: "+strings.Join(problems, "; "), st.secrets...)
		})
	}
	if warnings := st.out.Warnings; len(warnings) > 0 {
		st.note(func(ctx context.Context, job *updatev1.UpdateJob) {
			r.jobEvents(job).Warning(ctx, job, updatev1.PullRequestFailedReason, "PullRequest", strings.Join(warnings, "; "), st.secrets...)
		})
	}
}

// jobEvents records events that carry what the job did (the commit it
// pushed or the revision it started from, its pull request, the values it
// replaced), related to the automation whose update it is: for a batch
// member's view, the member's.
func (r *UpdateJobReconciler) jobEvents(job *updatev1.UpdateJob) *events.Recorder {
	rec := r.Events.WithMetadata(events.UpdateJobMetadata(job))
	if ctl := metav1.GetControllerOf(job); ctl != nil {
		rec = rec.WithRelated(&corev1.ObjectReference{APIVersion: ctl.APIVersion, Kind: ctl.Kind,
			Namespace: job.Namespace, Name: ctl.Name, UID: ctl.UID})
	}
	return rec
}

// requestMessage says what a job did to its request, with its address.
func requestMessage(pr *meta.PullRequestStatus, pushed string) string {
	switch pr.Action {
	case meta.PullRequestOpened:
		return fmt.Sprintf("opened pull request #%d from %s: %s", pr.Number, pr.HeadBranch, pr.URL)
	case meta.PullRequestUpdated:
		if pushed != "" {
			return fmt.Sprintf("updated pull request #%d: pushed commit %s to %s: %s", pr.Number, short(pushed), pr.HeadBranch, pr.URL)
		}
		return fmt.Sprintf("updated the title and description of pull request #%d: %s", pr.Number, pr.URL)
	case meta.PullRequestClosedNow:
		return fmt.Sprintf("no change: the base already has the policies' values; closed pull request #%d: %s", pr.Number, pr.URL)
	}
	return fmt.Sprintf("no change: pull request #%d already proposes these values: %s", pr.Number, pr.URL)
}

func short(oid string) string { return oid[:min(len(oid), 7)] }
