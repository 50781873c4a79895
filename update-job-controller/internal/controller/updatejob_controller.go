package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
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
)

// errClaimLost: another runner took the job over (our heartbeat lapsed).
var errClaimLost = errors.New("the job was claimed by another runner")

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
}

// SetupWithManager registers the reconciler.
func (r *UpdateJobReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.LeaseDuration <= 0 {
		r.LeaseDuration = time.Minute
	}
	if r.Backoff <= 0 {
		r.Backoff = 10 * time.Second
	}
	// Status changes need no event: every transition this controller makes
	// returns the requeue it needs, and other replicas learn of claims by
	// losing the claim race.
	return ctrl.NewControllerManagedBy(mgr).
		For(&updatev1.UpdateJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(opts).
		Complete(r)
}

// Reconcile moves an UpdateJob along: new → Pending; Pending (or Running
// with a stale heartbeat) → claimed and run; finished → deleted after its
// TTL.
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
	if !job.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	now := time.Now()
	st := &job.Status
	switch {
	case st.Phase == "":
		return r.markPending(ctx, job)
	case st.Phase.Finished():
		return r.expire(ctx, job, now)
	case st.Phase == updatev1.UpdateJobRunning:
		if st.Runner == r.Runner {
			// Our own claim, yet Reconciles of one job never overlap, so
			// this process is not running it: a write of the attempt was
			// lost (the API server went away after storing the claim, or
			// before the outcome), or this runner restarted. Waiting out
			// the heartbeat would idle the job for LeaseDuration; a push
			// the attempt made is found through status.pushingCommit.
			ctrl.LoggerFrom(ctx).Info("taking up again a job this runner claimed but is not running", "attempt", st.Attempts)
			break
		}
		if left := r.leaseLeft(job, now); left > 0 {
			return ctrl.Result{RequeueAfter: left + time.Second}, nil
		}
		ctrl.LoggerFrom(ctx).Info("reclaiming a job whose runner stopped renewing its heartbeat",
			"runner", st.Runner, "attempt", st.Attempts)
	}

	if deadline, ok := r.deadline(job); ok && !now.Before(deadline) {
		return r.finishUnclaimed(ctx, job, updatev1.DeadlineExceededReason,
			fmt.Sprintf("the job did not finish within activeDeadlineSeconds (%ds)", *job.Spec.ActiveDeadlineSeconds))
	}
	if st.Attempts > backoffLimit(job) {
		reason, msg := conditions.FailedReason, "no attempt left"
		if c := conditions.Get(job, conditions.ReadyCondition); c != nil {
			reason, msg = c.Reason, c.Message
		}
		return r.finishUnclaimed(ctx, job, reason, fmt.Sprintf("%s (gave up after %d attempts)", msg, st.Attempts))
	}
	if st.Phase == updatev1.UpdateJobPending && st.HeartbeatTime != nil {
		if wait := r.backoff(st.Attempts) - now.Sub(st.HeartbeatTime.Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}

	// A spec that cannot work fails now, without using an attempt.
	plan, err := planOf(job)
	if err != nil {
		return r.finishUnclaimed(ctx, job, reasonOf(err), err.Error())
	}
	if plan.Update.Container != nil && r.Containers == nil {
		return r.finishUnclaimed(ctx, job, updatev1.ContainerModeUnavailableReason, errNoContainers.Error())
	}
	return r.claimAndRun(ctx, job, plan)
}

func (r *UpdateJobReconciler) markPending(ctx context.Context, job *updatev1.UpdateJob) (ctrl.Result, error) {
	helper := patch.NewHelper(job, r.Client)
	job.Status.Phase = updatev1.UpdateJobPending
	job.Status.ObservedGeneration = job.Generation
	conditions.MarkReconciling(job, conditions.ProgressingReason, "waiting for a runner")
	// The optimistic lock makes two replicas racing on a new job agree.
	if err := helper.Patch(ctx, job, patch.WithOptimisticLock()); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	r.Metrics.RecordReady(updatev1.UpdateJobKind, job)
	return ctrl.Result{Requeue: true}, nil
}

// expire deletes a finished job once its TTL has passed.
func (r *UpdateJobReconciler) expire(ctx context.Context, job *updatev1.UpdateJob, now time.Time) (ctrl.Result, error) {
	ttl := job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return ctrl.Result{}, nil
	}
	finished := job.CreationTimestamp.Time
	if job.Status.CompletionTime != nil {
		finished = job.Status.CompletionTime.Time
	}
	if left := finished.Add(time.Duration(*ttl) * time.Second).Sub(now); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	err := r.Delete(ctx, job, client.Preconditions{UID: &job.UID, ResourceVersion: &job.ResourceVersion})
	if apierrors.IsConflict(err) {
		return ctrl.Result{Requeue: true}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

func (r *UpdateJobReconciler) leaseLeft(job *updatev1.UpdateJob, now time.Time) time.Duration {
	if job.Status.HeartbeatTime == nil {
		return 0
	}
	return job.Status.HeartbeatTime.Add(r.LeaseDuration).Sub(now)
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

// finishUnclaimed fails a job that is not running, guarded by the
// resourceVersion so it cannot overwrite a claim made meanwhile.
func (r *UpdateJobReconciler) finishUnclaimed(ctx context.Context, job *updatev1.UpdateJob, reason, msg string) (ctrl.Result, error) {
	helper := patch.NewHelper(job, r.Client)
	failJob(job, reason, msg)
	if err := helper.Patch(ctx, job, patch.WithOptimisticLock()); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	r.JobMetrics.Jobs.WithLabelValues(OutcomeFailed).Inc()
	r.Events.Warning(ctx, job, reason, "Run", msg)
	r.Metrics.RecordReady(updatev1.UpdateJobKind, job)
	return r.expire(ctx, job, time.Now())
}

func failJob(job *updatev1.UpdateJob, reason, msg string) {
	job.Status.Phase = updatev1.UpdateJobFailed
	job.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	job.Status.ObservedGeneration = job.Generation
	conditions.MarkStalled(job, reason, "%s", msg)
}

func reasonOf(err error) string { return conditions.AsFailure(err).Reason }

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

// engineReasons are the conditions' reasons of the engine's failures.
var engineReasons = map[engine.Kind]string{
	engine.KindInvalid:        conditions.InvalidSpecReason,
	engine.KindGit:            conditions.GitOperationFailedReason,
	engine.KindAuthentication: conditions.AuthenticationFailedReason,
	engine.KindUpdate:         updatev1.UpdateFailedReason,
	engine.KindPullRequest:    updatev1.PullRequestFailedReason,
	engine.KindRateLimited:    updatev1.RateLimitedReason,
}

// failure is the one place an engine's error becomes a condition's
// failure; errors of this controller's own hooks pass as they are.
func failure(err error) error {
	var e *engine.Error
	if err == nil || !errors.As(err, &e) {
		return err
	}
	reason, ok := engineReasons[e.Kind]
	if !ok {
		reason = conditions.FailedReason
	}
	if e.Terminal {
		return conditions.Stall(reason, err)
	}
	return conditions.Retry(reason, err).After(e.RetryAfter)
}

// claimAndRun claims the job, runs one attempt and records its outcome.
func (r *UpdateJobReconciler) claimAndRun(ctx context.Context, job *updatev1.UpdateJob, plan writeback.Plan) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	helper := patch.NewHelper(job, r.Client)
	now := metav1.Now()
	st := &job.Status
	st.Phase = updatev1.UpdateJobRunning
	st.Runner = r.Runner
	st.HeartbeatTime = &now
	st.Attempts++
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.ObservedGeneration = job.Generation
	conditions.MarkReconciling(job, updatev1.ClaimedReason, "attempt %d running on %s", st.Attempts, r.Runner)
	if err := helper.Patch(ctx, job, patch.WithOptimisticLock()); err != nil {
		if apierrors.IsConflict(err) {
			// Another replica claimed it, or it changed: look again.
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	log.Info("claimed job", "attempt", st.Attempts)

	r.JobMetrics.Running.Inc()
	defer r.JobMetrics.Running.Dec()
	started := time.Now()

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if deadline, ok := r.deadline(job); ok {
		var stop context.CancelFunc
		runCtx, stop = context.WithDeadline(runCtx, deadline)
		defer stop()
	}
	l := &claim{r: r, job: job}
	stopHeartbeat := l.heartbeat(runCtx, r.LeaseDuration/3, cancel)
	out, secrets, err := r.attempt(runCtx, job, plan, l)
	stopHeartbeat()

	// Whatever happened, the outcome is recorded even if the manager is
	// stopping: a pushed commit must not be forgotten.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer wcancel()
	switch {
	case errors.Is(context.Cause(runCtx), errClaimLost) || errors.Is(err, errClaimLost):
		log.Info("stopped: another runner claimed the job")
		return ctrl.Result{}, nil
	case err != nil && ctx.Err() != nil:
		// Shutting down: hand the job back unharmed for another replica.
		return ctrl.Result{}, l.update(wctx, func(job *updatev1.UpdateJob) {
			job.Status.Phase = updatev1.UpdateJobPending
			job.Status.Runner = ""
			job.Status.HeartbeatTime = nil
			job.Status.Attempts--
			conditions.MarkReconciling(job, conditions.ProgressingReason, "released by %s, which is stopping", r.Runner)
		})
	case err != nil && errors.Is(runCtx.Err(), context.DeadlineExceeded):
		err = conditions.Stall(updatev1.DeadlineExceededReason,
			fmt.Errorf("the job did not finish within activeDeadlineSeconds (%ds): %w", *job.Spec.ActiveDeadlineSeconds, err))
	}
	return r.record(wctx, l, plan, out, secrets, err, started)
}

// attempt reads the job's Secrets and runs it.
func (r *UpdateJobReconciler) attempt(ctx context.Context, job *updatev1.UpdateJob, plan writeback.Plan, l *claim) (engine.Result, []string, error) {
	repo := job.Spec.Repository
	var secret, proxy string
	if repo.SecretRef != nil {
		secret = repo.SecretRef.Name
	}
	if repo.ProxySecretRef != nil {
		proxy = repo.ProxySecretRef.Name
	}
	auth, secrets, err := git.ReadRemoteAuth(ctx, r.APIReader, job.Namespace, git.Remote{URL: repo.URL, SecretName: secret,
		ProxySecretName: proxy, Provider: repo.Provider, ServiceAccountName: repo.ServiceAccountName})
	switch {
	case errors.Is(err, git.ErrInvalidCredentials):
		return engine.Result{}, secrets, conditions.Stall(conditions.InvalidSpecReason, err)
	case errors.Is(err, git.ErrSecretNotFound):
		return engine.Result{}, secrets, conditions.Retry(conditions.SecretNotFoundReason, err)
	case errors.Is(err, git.ErrAuthentication):
		// A provider (GitHub, Entra ID) refused the identity.
		return engine.Result{}, secrets, conditions.Retry(conditions.AuthenticationFailedReason, err)
	case err != nil:
		// The API server could not be read: retried.
		return engine.Result{}, secrets, conditions.Retry(conditions.FailedReason, err)
	}
	var signer mirror.Signer
	if sk := job.Spec.Commit.SigningKey; sk != nil {
		data, s3, err := r.secretData(ctx, job.Namespace, &sk.SecretRef)
		secrets = append(secrets, s3...)
		if err != nil {
			return engine.Result{}, secrets, err
		}
		if signer, err = mirror.NewSigner(string(sk.Type), data); err != nil {
			return engine.Result{}, secrets, conditions.Stall(conditions.InvalidSpecReason, err)
		}
	}
	creds := engine.Credentials{Git: auth, Signer: signer, ForgeToken: func(ctx context.Context, fresh *git.Auth) (string, error) {
		secrets = append(secrets, fresh.Secrets()...)
		token, s, err := r.forgeToken(ctx, job, fresh)
		secrets = append(secrets, s...)
		return token, err
	}}
	eng := engine.New(engine.Settings{WorkDir: r.WorkDir, PushRetries: r.PushRetries, Hooks: r.hooks(job, plan, l)}, creds, r.Cache)
	out, err := eng.Run(ctx, plan)
	return out, secrets, failure(err)
}

// hooks keep the job in step with the engine's run: a push only while the
// job is still ours, the commit recorded before it is pushed, the
// container's Pod in the status, and metrics.
func (r *UpdateJobReconciler) hooks(job *updatev1.UpdateJob, plan writeback.Plan, l *claim) engine.Hooks {
	hooks := engine.Hooks{
		BeforePush: func(ctx context.Context, p engine.Push) error {
			if err := l.verify(ctx); err != nil || p.PullRequest {
				return err
			}
			// Written ahead of the push: if we die before recording the
			// outcome, the next attempt finds this commit on the branch.
			return l.update(ctx, func(job *updatev1.UpdateJob) { job.Status.PushingCommit = p.Commit })
		},
		OnEvent: r.observe,
	}
	if plan.Update.Container != nil {
		hooks.Container = r.Containers.hook(job, func(ctx context.Context, st *updatev1.ContainerStatus) {
			// Where the logs are, for tk-image job logs; a lost claim
			// shows at the next heartbeat.
			err := l.update(ctx, func(job *updatev1.UpdateJob) { job.Status.Container = st })
			if err != nil && !errors.Is(err, errClaimLost) {
				ctrl.LoggerFrom(ctx).Error(err, "recording the container pod")
			}
		})
	}
	return hooks
}

// observe turns the engine's events into metrics.
func (r *UpdateJobReconciler) observe(e engine.Event) {
	switch e.Kind {
	case engine.EventGit:
		r.JobMetrics.GitOps.WithLabelValues(e.Op).Observe(e.Duration.Seconds())
	case engine.EventPushRetry:
		r.JobMetrics.PushRetries.Inc()
	case engine.EventForgeResponse:
		r.JobMetrics.ForgeRequests.WithLabelValues(e.Provider, strconv.Itoa(e.StatusCode)).Inc()
	}
}

// forgeToken is the API token of the job's pull request: the key token of
// pullRequest.secretRef, else the repository Secret's bearerToken or
// password (fresh: a provider's token, a GitHub App's, serves the forge's
// API too).
func (r *UpdateJobReconciler) forgeToken(ctx context.Context, job *updatev1.UpdateJob, fresh *git.Auth) (string, []string, error) {
	var token string
	var secrets []string
	if ref := job.Spec.Push.PullRequest.SecretRef; ref != nil && ref.Name != "" {
		data, s, err := r.secretData(ctx, job.Namespace, ref)
		if err != nil {
			return "", s, err
		}
		secrets, token = s, string(data["token"])
		if token == "" {
			return "", secrets, conditions.Stallf(conditions.InvalidSpecReason,
				"secret %s/%s (push.pullRequest.secretRef) has no key token", job.Namespace, ref.Name)
		}
	} else if fresh != nil {
		token = fresh.BearerToken
		if token == "" {
			token = fresh.Password
		}
	}
	if token == "" {
		return "", secrets, conditions.Stallf(conditions.InvalidSpecReason,
			"push.pullRequest needs an API token: set push.pullRequest.secretRef to a Secret with key token, or give the repository Secret a bearerToken or password")
	}
	return token, secrets, nil
}

// secretData reads a Secret of the job's namespace; the values it returns
// are for redaction.
func (r *UpdateJobReconciler) secretData(ctx context.Context, ns string, ref *meta.LocalObjectReference) (map[string][]byte, []string, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil, nil
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, conditions.Retryf(conditions.SecretNotFoundReason, "secret %s/%s not found", ns, ref.Name)
		}
		return nil, nil, conditions.Retryf(conditions.SecretNotFoundReason, "reading secret %s/%s: %w", ns, ref.Name, err)
	}
	var values []string
	for _, v := range s.Data {
		if len(v) >= 4 { // shorter values would redact ordinary words
			values = append(values, string(v))
		}
	}
	return s.Data, values, nil
}

// record writes the attempt's outcome to the job.
func (r *UpdateJobReconciler) record(ctx context.Context, l *claim, plan writeback.Plan, out engine.Result,
	secrets []string, runErr error, started time.Time) (ctrl.Result, error) {
	var (
		outcome string
		result  ctrl.Result
		event   func(*updatev1.UpdateJob)
	)
	var rerr *conditions.Failure
	if runErr != nil {
		rerr = conditions.AsFailure(runErr)
	}
	err := l.update(ctx, func(job *updatev1.UpdateJob) {
		st := &job.Status
		// The engine got as far as the checkout: what it found is the
		// job's, failed or not.
		if ran := out.CheckoutRevision != ""; ran {
			st.CheckoutRevision = out.CheckoutRevision
			if plan.Update.Container != nil {
				st.Result = &updatev1.UpdateResult{Files: fileResults(out.Files)}
			}
			if out.Changes != nil {
				st.Result = apiResult(out.Changes, plan.Update.Images)
				if d := out.Discovered; d != nil {
					discovered(d, st.Result)
				}
			}
		}
		if out.PullRequest != nil {
			st.PullRequest = pullRequestStatus(out.PullRequest)
		}
		switch {
		case rerr == nil && out.PullRequest != nil:
			pr := st.PullRequest
			st.CompletionTime = &metav1.Time{Time: time.Now()}
			st.PushedCommit = out.Commit
			st.PushedRefs = out.PushedRefs
			msg := requestMessage(pr, out.Commit)
			if pr.Action == updatev1.PullRequestOpened || pr.Action == updatev1.PullRequestUpdated {
				outcome = OutcomeSucceeded
				st.Phase = updatev1.UpdateJobSucceeded
				conditions.MarkReady(job, conditions.SucceededReason, "%s", msg)
			} else {
				outcome = OutcomeNoChange
				st.Phase = updatev1.UpdateJobNoChange
				conditions.MarkReady(job, updatev1.NoChangeReason, "%s", msg)
			}
			event = func(job *updatev1.UpdateJob) {
				r.jobEvents(job).Normal(ctx, job, "PullRequest", "Push", msg, secrets...)
			}
		case rerr == nil && out.Commit != "":
			outcome = OutcomeSucceeded
			st.Phase = updatev1.UpdateJobSucceeded
			st.PushedCommit = out.Commit
			st.PushedRefs = out.PushedRefs
			st.CompletionTime = &metav1.Time{Time: time.Now()}
			msg := fmt.Sprintf("pushed commit %s to %s", short(out.Commit), plan.Target)
			conditions.MarkReady(job, conditions.SucceededReason, "%s", msg)
			event = func(job *updatev1.UpdateJob) {
				r.jobEvents(job).Normal(ctx, job, conditions.SucceededReason, "Push", msg+"\n\n"+out.Message, secrets...)
			}
		case rerr == nil:
			outcome = OutcomeNoChange
			st.Phase = updatev1.UpdateJobNoChange
			st.CompletionTime = &metav1.Time{Time: time.Now()}
			msg := "no change: the files already hold the policies' values"
			if plan.Update.Container != nil {
				msg = "no change: the container left the files as they were"
			}
			conditions.MarkReady(job, updatev1.NoChangeReason, "%s", msg)
		case rerr.Stalled || st.Attempts > backoffLimit(job):
			outcome = OutcomeFailed
			msg := events.Redact(rerr.Error(), secrets...)
			if !rerr.Stalled {
				msg = fmt.Sprintf("%s (gave up after %d attempts)", msg, st.Attempts)
			}
			failJob(job, rerr.Reason, msg)
			event = func(job *updatev1.UpdateJob) { r.jobEvents(job).Warning(ctx, job, rerr.Reason, "Run", msg, secrets...) }
		default:
			outcome = OutcomeRetried
			// A forge's rate limit says when it resets.
			wait := max(r.backoff(st.Attempts), rerr.RetryAfter)
			msg := events.Redact(rerr.Error(), secrets...)
			st.Phase = updatev1.UpdateJobPending
			st.Runner = ""
			st.HeartbeatTime = &metav1.Time{Time: time.Now()} // the backoff counts from here
			conditions.MarkFailed(job, rerr.Reason, "attempt %d: %s", st.Attempts, msg)
			conditions.Set(job, conditions.ReconcilingCondition, metav1.ConditionTrue, rerr.Reason,
				"retrying in %s (attempt %d of %d)", wait.Round(time.Second), st.Attempts+1, backoffLimit(job)+1)
			result = ctrl.Result{RequeueAfter: wait}
			event = func(job *updatev1.UpdateJob) { r.jobEvents(job).Warning(ctx, job, rerr.Reason, "Run", msg, secrets...) }
		}
	})
	if errors.Is(err, errClaimLost) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	r.JobMetrics.Jobs.WithLabelValues(outcome).Inc()
	r.JobMetrics.Duration.WithLabelValues(outcome).Observe(time.Since(started).Seconds())
	r.Metrics.RecordReady(updatev1.UpdateJobKind, l.job)
	if event != nil {
		event(l.job)
	}
	if len(out.Problems) > 0 {
		r.jobEvents(l.job).Warning(ctx, l.job, updatev1.UpdateFailedReason, "Update",
			"files not updated: "+strings.Join(out.Problems, "; "), secrets...)
	}
	if len(out.Warnings) > 0 {
		r.jobEvents(l.job).Warning(ctx, l.job, updatev1.PullRequestFailedReason, "PullRequest", strings.Join(out.Warnings, "; "), secrets...)
	}
	if l.job.Status.Phase.Finished() {
		return r.expire(ctx, l.job, time.Now())
	}
	return result, nil
}

// jobEvents records events that carry what the job did: the commit it
// pushed or the revision it started from, its pull request, the values it
// replaced.
func (r *UpdateJobReconciler) jobEvents(job *updatev1.UpdateJob) *events.Recorder {
	return r.Events.WithMetadata(events.UpdateJobMetadata(job))
}

// requestMessage says what a job did to its request, with its address.
func requestMessage(pr *updatev1.PullRequestStatus, pushed string) string {
	switch pr.Action {
	case updatev1.PullRequestOpened:
		return fmt.Sprintf("opened pull request #%d from %s: %s", pr.Number, pr.HeadBranch, pr.URL)
	case updatev1.PullRequestUpdated:
		if pushed != "" {
			return fmt.Sprintf("updated pull request #%d: pushed commit %s to %s: %s", pr.Number, short(pushed), pr.HeadBranch, pr.URL)
		}
		return fmt.Sprintf("updated the title and description of pull request #%d: %s", pr.Number, pr.URL)
	case updatev1.PullRequestClosedNow:
		return fmt.Sprintf("no change: the base already has the policies' values; closed pull request #%d: %s", pr.Number, pr.URL)
	}
	return fmt.Sprintf("no change: pull request #%d already proposes these values: %s", pr.Number, pr.URL)
}

func short(oid string) string { return oid[:min(len(oid), 7)] }

// claim is this runner's hold on a Running job. Writes are serialized and
// guarded by the resourceVersion, so a runner that lost the job (another
// replica reclaimed it after our heartbeat lapsed) never overwrites it.
type claim struct {
	r   *UpdateJobReconciler
	mu  sync.Mutex
	job *updatev1.UpdateJob
}

// update applies change to the job's status while we still hold it.
func (c *claim) update(ctx context.Context, change func(*updatev1.UpdateJob)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for try := 0; ; try++ {
		job := c.job.DeepCopy()
		helper := patch.NewHelper(job, c.r.Client)
		change(job)
		err := helper.Patch(ctx, job, patch.WithOptimisticLock())
		if err == nil {
			c.job = job
			return nil
		}
		if !apierrors.IsConflict(err) || try >= 5 {
			return err
		}
		// Someone else wrote the job (labels, or another runner):
		// continue only if it is still ours.
		if err := c.refresh(ctx); err != nil {
			return err
		}
	}
}

// refresh reloads the job from the API server; errClaimLost if it is no
// longer this runner's attempt.
func (c *claim) refresh(ctx context.Context) error {
	fresh := &updatev1.UpdateJob{}
	if err := c.r.APIReader.Get(ctx, client.ObjectKeyFromObject(c.job), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return errClaimLost
		}
		return err
	}
	if fresh.UID != c.job.UID || fresh.Status.Phase != updatev1.UpdateJobRunning ||
		fresh.Status.Runner != c.r.Runner || fresh.Status.Attempts != c.job.Status.Attempts {
		return errClaimLost
	}
	c.job = fresh
	return nil
}

// verify checks, before a push, that the job is still ours.
func (c *claim) verify(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refresh(ctx)
}

// heartbeat renews the claim every interval until the returned stop is
// called; losing the claim cancels the attempt.
func (c *claim) heartbeat(ctx context.Context, interval time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := c.update(ctx, func(job *updatev1.UpdateJob) {
				job.Status.HeartbeatTime = &metav1.Time{Time: time.Now()}
			})
			if errors.Is(err, errClaimLost) {
				cancel(errClaimLost)
				return
			}
			if err != nil && ctx.Err() == nil {
				ctrl.LoggerFrom(ctx).Error(err, "renewing the job's heartbeat")
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
