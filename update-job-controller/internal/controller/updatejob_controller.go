package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	defaultBackoffLimit = 3
	maxBackoff          = 5 * time.Minute
	// lookAgain is the requeue of a job whose group could not begin
	// because another of its branch began a moment before: the next
	// reconcile waits for that one.
	lookAgain = time.Millisecond
)

// errClaimLost: the job is no longer this runner's: another runner took
// it over (our heartbeat lapsed), or it was deleted.
var errClaimLost = errors.New("the job is no longer this runner's: another runner claimed it, or it was deleted")

// UpdateJobReconciler runs UpdateJobs. Every replica runs jobs: a runner
// claims a Pending job by a status write guarded by the resourceVersion,
// renews a heartbeat while it works, and any replica reclaims a Running job
// whose heartbeat is older than LeaseDuration.
type UpdateJobReconciler struct {
	client.Client
	// APIReader reads Secrets (never cached: that would need list/watch on
	// every Secret) and the current state of a claimed job.
	APIReader  client.Reader
	Events     *events.Recorder
	Metrics    *metrics.Recorder
	JobMetrics *JobMetrics
	Cache      *mirror.Cache
	// WorkDir holds temporary work trees.
	WorkDir string
	// Runner names this replica in status.runner.
	Runner        string
	LeaseDuration time.Duration
	// Backoff is the pause before the first retry, doubled for each one.
	Backoff     time.Duration
	PushRetries int
	// Containers runs container-mode jobs; nil refuses them (Stalled,
	// ContainerModeUnavailable).
	Containers *Containers
	// Cloud issues registry credentials from cloud identities, for
	// reading a verified tag of an ImageRepository with spec.provider;
	// nil refuses those.
	Cloud *cloudauth.Issuer

	kindOnce sync.Once
	kind     *reconcile.Kind[*updatev1.UpdateJob, jobRun]
	groups   *groups
}

func (r *UpdateJobReconciler) init() {
	r.kindOnce.Do(func() { r.kind, r.groups = r.newKind(), newGroups() })
}

// SetupWithManager registers the reconciler.
func (r *UpdateJobReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.LeaseDuration <= 0 {
		r.LeaseDuration = time.Minute
	}
	if r.Backoff <= 0 {
		r.Backoff = 10 * time.Second
	}
	r.init()
	// Status changes need no event: every transition this controller makes
	// returns the requeue it needs, and other replicas learn of claims by
	// losing the claim race. A group's end wakes its jobs and those that
	// waited for it (groups.finish).
	return ctrl.NewControllerManagedBy(mgr).
		For(&updatev1.UpdateJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.groups.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(r)
}

// jobScope is one reconcile of one UpdateJob.
type jobScope = reconcile.Scope[*updatev1.UpdateJob, jobRun]

type jobPhase = reconcile.Phase[*updatev1.UpdateJob, jobRun]

// jobRun is what the phases of one reconcile hand on.
type jobRun struct {
	plan writeback.Plan
	// group is the jobs that share this job's commit, when it leads
	// one.
	group *jobGroup
	// batch are a batch job's members (spec.members, batch.go), run in
	// this job's attempt and recorded by its outcome write.
	batch []*batchMember
	// automations: shared counts a batch's automations, not UpdateJobs.
	automations bool
	// claim is this runner's hold on the job, from the claim phase on.
	claim *claim
	// started is when the attempt began; out, secrets and err are what
	// it did, the values its messages must not show, and its failure.
	started time.Time
	out     engine.Result
	secrets []string
	err     error
	// outcome is the job's (a value of the outcome label), counted once
	// it is written, with its events (notes); expire deletes the job
	// then, its TTL having passed.
	outcome string
	notes   []func(ctx context.Context, job *updatev1.UpdateJob)
	expire  bool
	// shared counts the jobs (a batch's automations) whose changes the
	// pushed commit carries, when it was a group's or a batch's.
	shared int
	// quiet is a member whose commit another job's (another update's)
	// event reports (the first one the commit carries, the leader unless
	// its update failed): its push has no event of its own (a thousand
	// members, a thousand events of one commit; each automation's Pushed
	// event names it).
	quiet bool
}

// note adds an event to emit once the status is written.
func (st *jobRun) note(n func(ctx context.Context, job *updatev1.UpdateJob)) {
	st.notes = append(st.notes, n)
}

// Reconcile moves an UpdateJob along: new → Pending; Pending (or Running
// with a stale heartbeat, or claimed by this runner and not running) →
// claimed and run; finished → deleted after its TTL.
func (r *UpdateJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.init()
	defer r.groups.finish(req.NamespacedName)
	return r.kind.Reconcile(ctx, req)
}

// newKind is the UpdateJob's reconcile as named phases. Every write is
// guarded by the resourceVersion (OptimisticLock): two replicas racing on
// a job agree, and the loser looks again from fresh state.
func (r *UpdateJobReconciler) newKind() *reconcile.Kind[*updatev1.UpdateJob, jobRun] {
	return &reconcile.Kind[*updatev1.UpdateJob, jobRun]{
		Name: updatev1.UpdateJobKind, Client: r.Client, Metrics: r.Metrics,
		New: func() *updatev1.UpdateJob { return &updatev1.UpdateJob{} },
		Phases: []jobPhase{
			{Name: "pending", Run: r.markPending},
			{Name: "expire", Run: r.expireFinished},
			{Name: "turn", Run: r.takeTurn},
			{Name: "limits", Run: r.checkLimits},
			{Name: "plan", Run: r.planJob},
			{Name: "group", Run: r.gatherGroup},
			{Name: "claim", Run: r.claimJob},
			{Name: "attempt", Run: r.runAttempt},
			{Name: "record", Run: r.recordOutcome},
		},
		OptimisticLock: true,
		OnFailure:      r.endUnrunnable,
		AfterPatch:     r.afterWrite,
	}
}

// markPending takes a new job: Pending, waiting for a runner. It writes
// nothing of its own: a job that can run now is claimed in this reconcile
// (one write, Running, not two), and one that waits is written Pending
// when the reconcile ends. A new job a group of this runner took before
// its own reconcile is the group's to write (a write here would only
// conflict with it); the group's end wakes it.
func (r *UpdateJobReconciler) markPending(_ context.Context, s *jobScope) (reconcile.Result, error) {
	job := s.Obj
	if job.Status.Phase != "" {
		return reconcile.Continue, nil
	}
	if r.groups.isRunning(job.UID) {
		return reconcile.StopAfter(r.LeaseDuration), nil
	}
	job.Status.Phase = updatev1.UpdateJobPending
	job.Status.ObservedGeneration = job.Generation
	conditions.MarkReconciling(job, conditions.ProgressingReason, "waiting for a runner")
	return reconcile.Continue, nil
}

// expireFinished leaves a finished job alone until its TTL has passed,
// then deletes it.
func (r *UpdateJobReconciler) expireFinished(_ context.Context, s *jobScope) (reconcile.Result, error) {
	if !s.Obj.Status.Phase.Finished() {
		return reconcile.Continue, nil
	}
	return s.State.afterFinish(s.Obj, s.Start), nil
}

// afterFinish is what a finished job asks: to be deleted once its TTL has
// passed (after the status is written), or looked at again then.
func (st *jobRun) afterFinish(job *updatev1.UpdateJob, now time.Time) reconcile.Result {
	left, ok := ttlLeft(job, now)
	switch {
	case !ok:
		return reconcile.Stop
	case left > 0:
		return reconcile.StopAfter(left)
	}
	st.expire = true
	return reconcile.Stop
}

// ttlLeft is how long a finished job has to live; false without a TTL.
func ttlLeft(job *updatev1.UpdateJob, now time.Time) (time.Duration, bool) {
	ttl := job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return 0, false
	}
	finished := job.CreationTimestamp.Time
	if job.Status.CompletionTime != nil {
		finished = job.Status.CompletionTime.Time
	}
	return finished.Add(time.Duration(*ttl) * time.Second).Sub(now), true
}

// takeTurn lets this runner go on with a Pending job, with a Running one
// it claimed itself, and with one whose runner stopped renewing its
// heartbeat; a job another runner holds waits for its lease.
func (r *UpdateJobReconciler) takeTurn(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	st := &s.Obj.Status
	if st.Phase != updatev1.UpdateJobRunning {
		return reconcile.Continue, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if r.groups.isRunning(s.Obj.UID) {
		// In a group this runner runs: its end wakes the job.
		return reconcile.StopAfter(r.LeaseDuration), nil
	}
	if st.Runner == r.Runner {
		// Our own claim, yet Reconciles of one job never overlap, so
		// this process is not running it: a write of the attempt was
		// lost (the API server went away after storing the claim, or
		// before the outcome), or this runner restarted. Waiting out
		// the heartbeat would idle the job for LeaseDuration; a push
		// the attempt made is found through status.pushingCommit.
		log.Info("taking up again a job this runner claimed but is not running", "attempt", st.Attempts)
		return reconcile.Continue, nil
	}
	if left := r.leaseLeft(s.Obj, s.Start); left > 0 {
		return reconcile.StopAfter(left + time.Second), nil
	}
	log.Info("reclaiming a job whose runner stopped renewing its heartbeat", "runner", st.Runner, "attempt", st.Attempts)
	return reconcile.Continue, nil
}

func (r *UpdateJobReconciler) leaseLeft(job *updatev1.UpdateJob, now time.Time) time.Duration {
	if job.Status.HeartbeatTime == nil {
		return 0
	}
	return job.Status.HeartbeatTime.Add(r.LeaseDuration).Sub(now)
}

// checkLimits ends a job that may run no more, past its
// activeDeadlineSeconds or out of attempts, and holds one back that is
// backing off after a failed attempt.
func (r *UpdateJobReconciler) checkLimits(_ context.Context, s *jobScope) (reconcile.Result, error) {
	job, now := s.Obj, s.Start
	st := &job.Status
	if deadline, ok := r.deadline(job); ok && !now.Before(deadline) {
		return r.giveUp(s, updatev1.DeadlineExceededReason,
			fmt.Sprintf("the job did not finish within activeDeadlineSeconds (%ds)", *job.Spec.ActiveDeadlineSeconds)), nil
	}
	if st.Attempts > backoffLimit(job) {
		reason, msg := conditions.FailedReason, "no attempt left"
		if c := conditions.Get(job, conditions.ReadyCondition); c != nil {
			reason, msg = c.Reason, c.Message
		}
		return r.giveUp(s, reason, fmt.Sprintf("%s (gave up after %d attempts)", msg, st.Attempts)), nil
	}
	if st.Phase == updatev1.UpdateJobPending && st.HeartbeatTime != nil {
		if wait := r.backoff(st.Attempts) - now.Sub(st.HeartbeatTime.Time); wait > 0 {
			return reconcile.StopAfter(wait), nil
		}
	}
	return reconcile.Continue, nil
}

// giveUp fails a job that is not running: its outcome, written (guarded
// by the resourceVersion, so a claim made meanwhile wins) by the final
// write.
func (r *UpdateJobReconciler) giveUp(s *jobScope, reason, msg string) reconcile.Result {
	failJob(s.Obj, reason, msg)
	r.endMembers(s.Obj, &s.State, reason, msg)
	s.State.outcome = OutcomeFailed
	s.State.note(func(ctx context.Context, job *updatev1.UpdateJob) { r.Events.Warning(ctx, job, reason, "Run", msg) })
	return s.State.afterFinish(s.Obj, time.Now())
}

func (r *UpdateJobReconciler) deadline(job *updatev1.UpdateJob) (time.Time, bool) {
	ads := job.Spec.ActiveDeadlineSeconds
	if ads == nil || job.Status.StartTime == nil {
		return time.Time{}, false
	}
	return job.Status.StartTime.Add(time.Duration(*ads) * time.Second), true
}

func backoffLimit(job *updatev1.UpdateJob) int32 {
	if job.Spec.BackoffLimit != nil {
		return *job.Spec.BackoffLimit
	}
	return defaultBackoffLimit
}

// backoff is the pause after the given number of failed attempts.
func (r *UpdateJobReconciler) backoff(attempts int32) time.Duration {
	d := r.Backoff
	for i := int32(1); i < attempts && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// endJob marks a job finished.
func endJob(job *updatev1.UpdateJob) {
	job.Status.Phase = updatev1.UpdateJobFailed
	job.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	job.Status.ObservedGeneration = job.Generation
}

// failJob records a failure as the job's outcome: Failed, and Stalled
// with the reason. It is the job's result, not this reconcile's failure,
// so the phase records it itself, through conditions.Record like every
// failure.
func failJob(job *updatev1.UpdateJob, reason, msg string) {
	endJob(job)
	conditions.Record(job, conditions.Stall(reason, errors.New(msg)), msg)
}

// planJob reads the job's plan: a spec that cannot work, or container
// mode this runner lacks, fails the reconcile (Stalled) without using an
// attempt, and endUnrunnable ends the job.
func (r *UpdateJobReconciler) planJob(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	if s.Obj.IsBatch() {
		// Its own claim covers its members: no runtime group's leader
		// carries a batch's change (status.carries).
		if err := r.planBatch(s); err != nil {
			return reconcile.Continue, unrunnable(s.Obj, err)
		}
		return reconcile.Continue, nil
	}
	plan, err := planOf(s.Obj)
	if err == nil && plan.Resume == "" && s.Obj.Status.Attempts > 0 {
		// Taken up again: a group's leader may have been about to push
		// this job's change (status.carries).
		list := &updatev1.UpdateJobList{}
		if err := r.List(ctx, list, client.InNamespace(s.Obj.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return reconcile.Continue, fmt.Errorf("listing UpdateJobs: %w", err)
		}
		plan.Resume = carriedBy(s.Obj, list.Items)
	}
	if err == nil && plan.Update.Container != nil && r.Containers == nil {
		err = conditions.Stall(updatev1.ContainerModeUnavailableReason, errNoContainers)
	}
	if err != nil {
		return reconcile.Continue, unrunnable(s.Obj, err)
	}
	s.State.plan = plan
	return reconcile.Continue, nil
}

// unrunnable is the failure of a job whose spec cannot work: it ends now,
// to be looked at again when its TTL has passed.
func unrunnable(job *updatev1.UpdateJob, err error) *conditions.Failure {
	f := conditions.AsFailure(err)
	if ttl := job.Spec.TTLSecondsAfterFinished; ttl != nil && *ttl > 0 {
		f.After(time.Duration(*ttl) * time.Second)
	}
	return f
}

// endUnrunnable ends a job whose reconcile stalled: a spec that cannot
// work is the job's end. The skeleton has recorded the failure.
func (r *UpdateJobReconciler) endUnrunnable(_ context.Context, s *jobScope, f *conditions.Failure, msg string) {
	if !f.Stalled {
		return
	}
	endJob(s.Obj)
	r.endMembers(s.Obj, &s.State, f.Reason, msg)
	s.State.outcome = OutcomeFailed
	s.State.note(func(ctx context.Context, job *updatev1.UpdateJob) { r.Events.Warning(ctx, job, f.Reason, "Run", msg) })
	if left, ok := ttlLeft(s.Obj, time.Now()); ok && left <= 0 {
		s.State.expire = true
	}
}

// planOf is the job's plan, checked for the engine; its errors are
// Stalled with InvalidSpec.
func planOf(job *updatev1.UpdateJob) (writeback.Plan, error) {
	plan, err := jobplan.FromJob(job)
	if err == nil {
		err = engine.Check(plan)
	}
	if err != nil {
		return writeback.Plan{}, conditions.Stall(conditions.InvalidSpecReason, err)
	}
	return plan, nil
}

// claimJob makes the job this runner's next attempt, on the server before
// the attempt starts: if another replica claimed it first, the write
// conflicts and the reconcile runs again from fresh state.
func (r *UpdateJobReconciler) claimJob(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	job := s.Obj
	r.markClaimed(job, "")
	if err := s.Patch(ctx); err != nil {
		return reconcile.Stop, err
	}
	ctrl.LoggerFrom(ctx).Info("claimed job", "attempt", job.Status.Attempts)
	s.State.claim = &claim{r: r, job: job.DeepCopy()}
	if g := s.State.group; g != nil {
		r.claimMembers(ctx, job.Name, g)
	}
	return reconcile.Continue, nil
}

// afterWrite runs once the job's status is written: it counts the
// outcome, emits its events and deletes a job whose TTL has passed.
func (r *UpdateJobReconciler) afterWrite(ctx context.Context, s *jobScope) error {
	ctx, cancel := outcomeContext(ctx)
	defer cancel()
	st := &s.State
	r.counted(ctx, st, s.Obj)
	r.countedMembers(ctx, st, s.Obj)
	if !st.expire {
		return nil
	}
	job := s.Obj
	// A conflict (the job changed since it was read) goes to the rate
	// limiter, which looks again soon.
	err := r.Delete(ctx, job, client.Preconditions{UID: &job.UID, ResourceVersion: &job.ResourceVersion})
	return client.IgnoreNotFound(err)
}

// outcomeContext outlives the manager's stopping: what an attempt did (a
// pushed commit) must not be forgotten.
func outcomeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}
