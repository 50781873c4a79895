package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// What an attempt did becomes the job's status without an API server: its
// outcome, its conditions, and when to look again.
func TestAttemptOutcomeIsTheJobsStatus(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name      string
		attempts  int32
		out       engine.Result
		err       error
		secrets   []string
		phase     updatev1.UpdateJobPhase
		outcome   string
		ready     string // Ready's status/reason
		stalled   bool
		message   string // in Ready's message
		requeue   time.Duration
		reconcile string // Reconciling's message, "" for none
	}{
		{
			name: "a pushed commit succeeds", attempts: 1,
			out:   engine.Result{CheckoutRevision: "main@sha1:1", Commit: commit},
			phase: updatev1.UpdateJobSucceeded, outcome: OutcomeSucceeded, ready: "True/Succeeded", message: "pushed commit 0123456",
		},
		{
			name: "nothing to change is no change", attempts: 1,
			out:   engine.Result{CheckoutRevision: "main@sha1:1"},
			phase: updatev1.UpdateJobNoChange, outcome: OutcomeNoChange, ready: "True/NoChange", message: "no change",
		},
		{
			name: "an opened pull request succeeds", attempts: 1,
			out: engine.Result{CheckoutRevision: "main@sha1:1", Commit: commit,
				PullRequest: &meta.PullRequestStatus{Number: 7, HeadBranch: "auto", URL: "https://forge/pr/7", Action: meta.PullRequestOpened}},
			phase: updatev1.UpdateJobSucceeded, outcome: OutcomeSucceeded, ready: "True/Succeeded", message: "opened pull request #7",
		},
		{
			name: "a pull request already proposing the values is no change", attempts: 1,
			out: engine.Result{CheckoutRevision: "main@sha1:1",
				PullRequest: &meta.PullRequestStatus{Number: 7, URL: "https://forge/pr/7", Action: meta.PullRequestUnchanged}},
			phase: updatev1.UpdateJobNoChange, outcome: OutcomeNoChange, ready: "True/NoChange", message: "already proposes",
		},
		{
			name: "a failure retrying cannot fix fails the job at once", attempts: 1,
			err:   conditions.Stallf(conditions.InvalidSpecReason, "bad template"),
			phase: updatev1.UpdateJobFailed, outcome: OutcomeFailed, ready: "False/InvalidSpec", stalled: true, message: "bad template",
		},
		{
			name: "a retryable failure with attempts left backs off, Pending", attempts: 1,
			err:     conditions.Retryf(conditions.AuthenticationFailedReason, "token s3cr3t refused"),
			secrets: []string{"s3cr3t"},
			phase:   updatev1.UpdateJobPending, outcome: OutcomeRetried, ready: "False/AuthenticationFailed",
			message: "attempt 1: token *** refused", requeue: time.Second, reconcile: "retrying in 1s (attempt 2 of 4)",
		},
		{
			name: "a forge's rate limit waits longer than the backoff", attempts: 2,
			err:   conditions.Retryf(updatev1.RateLimitedReason, "slow down").After(time.Minute),
			phase: updatev1.UpdateJobPending, outcome: OutcomeRetried, ready: "False/RateLimited",
			message: "attempt 2: slow down", requeue: time.Minute, reconcile: "retrying in 1m0s (attempt 3 of 4)",
		},
		{
			name: "the last attempt's failure gives up", attempts: 4,
			err:   errors.New("connection reset"),
			phase: updatev1.UpdateJobFailed, outcome: OutcomeFailed, ready: "False/Failed", stalled: true,
			message: "connection reset (gave up after 4 attempts)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &UpdateJobReconciler{Backoff: time.Second}
			job := &updatev1.UpdateJob{Status: updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "me", Attempts: tt.attempts}}
			conditions.MarkReconciling(job, updatev1.ClaimedReason, "attempt running")
			st := &jobRun{out: tt.out, err: tt.err, secrets: tt.secrets}
			res := r.outcome(job, st)
			if job.Status.Phase != tt.phase || st.outcome != tt.outcome {
				t.Errorf("phase %s, outcome %s; want %s, %s", job.Status.Phase, st.outcome, tt.phase, tt.outcome)
			}
			ready := conditions.Get(job, conditions.ReadyCondition)
			if got := string(ready.Status) + "/" + ready.Reason; got != tt.ready || !strings.Contains(ready.Message, tt.message) {
				t.Errorf("Ready %s %q, want %s containing %q", got, ready.Message, tt.ready, tt.message)
			}
			if stalled := conditions.IsTrue(job, conditions.StalledCondition); stalled != tt.stalled {
				t.Errorf("Stalled %v, want %v", stalled, tt.stalled)
			}
			rec, want := conditions.Get(job, conditions.ReconcilingCondition), tt.reconcile
			if (rec == nil) != (want == "") || rec != nil && rec.Message != want {
				t.Errorf("Reconciling %+v, want %q", rec, want)
			}
			if res.RequeueAfter != tt.requeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.requeue)
			}
			finished := tt.phase.Finished()
			if (job.Status.CompletionTime != nil) != finished || (job.Status.Runner == "") != (tt.phase == updatev1.UpdateJobPending) {
				t.Errorf("completion %v, runner %q for phase %s", job.Status.CompletionTime, job.Status.Runner, tt.phase)
			}
			if len(st.notes) == 0 && tt.outcome != OutcomeNoChange {
				t.Error("no event noted for the outcome")
			}
		})
	}
}

// A finished job lives out its TTL, then is deleted once its status is
// written; without a TTL it stays.
func TestFinishedJobLivesOutItsTTL(t *testing.T) {
	now := time.Now()
	done := metav1.NewTime(now.Add(-10 * time.Second))
	tests := []struct {
		name   string
		ttl    *int32
		want   reconcile.Result
		expire bool
	}{
		{name: "no TTL keeps the job", want: reconcile.Stop},
		{name: "a TTL not yet passed looks again when it has", ttl: ptr.To[int32](30), want: reconcile.StopAfter(20 * time.Second)},
		{name: "a passed TTL deletes the job", ttl: ptr.To[int32](10), want: reconcile.Stop, expire: true},
		{name: "a TTL of zero deletes the job at once", ttl: ptr.To[int32](0), want: reconcile.Stop, expire: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &updatev1.UpdateJob{Spec: updatev1.UpdateJobSpec{TTLSecondsAfterFinished: tt.ttl},
				Status: updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobSucceeded, CompletionTime: &done}}
			st := &jobRun{}
			if got := st.afterFinish(job, now); got != tt.want || st.expire != tt.expire {
				t.Errorf("%+v, expire %v; want %+v, %v", got, st.expire, tt.want, tt.expire)
			}
		})
	}
}
