package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/gitsecret"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// runAttempt runs one attempt under the claim, renewed by a heartbeat and
// cut short at activeDeadlineSeconds or when the claim is lost. A runner
// that is stopping hands the job back.
func (r *UpdateJobReconciler) runAttempt(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	st := &s.State
	r.JobMetrics.Running.Inc()
	defer r.JobMetrics.Running.Dec()
	st.started = time.Now()

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if deadline, ok := r.deadline(s.Obj); ok {
		var stop context.CancelFunc
		runCtx, stop = context.WithDeadline(runCtx, deadline)
		defer stop()
	}
	stopHeartbeat := st.claim.heartbeat(runCtx, r.LeaseDuration/3, cancel)
	if s.Obj.IsBatch() {
		r.attemptBatch(runCtx, s.Obj, st)
	} else if g := st.group; g != nil && len(g.members) > 0 {
		stopMembers := g.heartbeatMembers(runCtx, r.LeaseDuration/3, r.LeaseDuration/2)
		r.attemptGroup(runCtx, s.Obj, st)
		stopMembers()
	} else {
		st.out, st.secrets, st.err = r.attempt(runCtx, s.Obj, st.plan, st.claim)
	}
	stopHeartbeat()

	switch {
	case errors.Is(context.Cause(runCtx), errClaimLost) || errors.Is(st.err, errClaimLost):
		ctrl.LoggerFrom(ctx).Info("stopped: the job is no longer this runner's (another runner claimed it, or it was deleted)")
		r.releaseMembers(ctx, st.group)
		return reconcile.Stop, nil
	case st.err != nil && ctx.Err() != nil && !landed(st):
		r.release(ctx, s)
		r.releaseMembers(ctx, st.group)
		return reconcile.Stop, nil
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		for _, run := range st.runs() {
			// A batch's update whose plan could not work failed
			// for that, not for the deadline.
			if run.err != nil && (!s.Obj.IsBatch() || !conditions.AsFailure(run.err).Stalled) {
				run.err = conditions.Stall(updatev1.DeadlineExceededReason,
					fmt.Errorf("the job did not finish within activeDeadlineSeconds (%ds): %w", *s.Obj.Spec.ActiveDeadlineSeconds, run.err))
			}
		}
	}
	return reconcile.Continue, nil
}

// landed reports whether a batch's attempt left a commit carrying one of
// its members' updates: its outcome is recorded even when this runner is
// stopping, as the job's would be had it pushed its own.
func landed(st *jobRun) bool {
	return slices.ContainsFunc(st.batch, func(m *batchMember) bool { return m.run.err == nil && m.run.out.Commit != "" })
}

// release hands the job back unharmed for another replica: this runner is
// stopping.
func (r *UpdateJobReconciler) release(ctx context.Context, s *jobScope) {
	wctx, cancel := outcomeContext(ctx)
	defer cancel()
	if err := r.handBack(wctx, s.State.claim); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "handing the job back")
	}
	s.Stored(s.State.claim.job)
}

// handBack makes a claimed job Pending again, its attempt not counted.
func (r *UpdateJobReconciler) handBack(ctx context.Context, c *claim) error {
	return c.update(ctx, func(job *updatev1.UpdateJob) {
		job.Status.Phase = updatev1.UpdateJobPending
		job.Status.Runner = ""
		job.Status.HeartbeatTime = nil
		job.Status.Attempts--
		conditions.MarkReconciling(job, conditions.ProgressingReason, "released by %s, which is stopping", r.Runner)
	})
}

// attempt reads the job's Secrets and runs it.
func (r *UpdateJobReconciler) attempt(ctx context.Context, job *updatev1.UpdateJob, plan writeback.Plan, l *claim) (engine.Result, []string, error) {
	auth, signer, secrets, err := r.gitAndSigner(ctx, job)
	if err != nil {
		return engine.Result{}, secrets, err
	}
	creds := engine.Credentials{Git: auth, Signer: signer, Forge: func(ctx context.Context, fresh *git.Auth) (engine.ForgeAuth, error) {
		secrets = append(secrets, fresh.Secrets()...)
		fa, s, err := r.forgeAuth(ctx, job, fresh)
		secrets = append(secrets, s...)
		return fa, err
	}}
	eng := engine.New(engine.Settings{WorkDir: r.WorkDir, PushRetries: r.PushRetries, Hooks: r.hooks(job, plan, l)}, creds, r.Cache)
	out, err := eng.Run(ctx, plan)
	return out, secrets, failure(err)
}

// gitAndSigner reads the repository's credentials and the commit signing
// key; the values returned are for redaction.
func (r *UpdateJobReconciler) gitAndSigner(ctx context.Context, job *updatev1.UpdateJob) (*git.Auth, mirror.Signer, []string, error) {
	auth, secrets, err := r.gitAuth(ctx, job)
	if err != nil {
		return nil, nil, secrets, err
	}
	signer, s, err := r.signer(ctx, job)
	return auth, signer, append(secrets, s...), err
}

// gitAuth reads the repository's credentials, and says why it could not
// as a failure.
func (r *UpdateJobReconciler) gitAuth(ctx context.Context, job *updatev1.UpdateJob) (*git.Auth, []string, error) {
	repo := job.Spec.Repository
	var secret, proxy string
	if repo.SecretRef != nil {
		secret = repo.SecretRef.Name
	}
	if repo.ProxySecretRef != nil {
		proxy = repo.ProxySecretRef.Name
	}
	auth, secrets, err := gitsecret.Read(ctx, r.APIReader, job.Namespace, git.Remote{URL: repo.URL, SecretName: secret,
		ProxySecretName: proxy, Provider: repo.Provider, ServiceAccountName: repo.ServiceAccountName})
	switch {
	case errors.Is(err, git.ErrInvalidCredentials):
		return nil, secrets, conditions.Stall(conditions.InvalidSpecReason, err)
	case errors.Is(err, gitsecret.ErrNotFound):
		return nil, secrets, conditions.Retry(conditions.SecretNotFoundReason, err)
	case errors.Is(err, git.ErrAuthentication):
		// A provider (GitHub, Entra ID) refused the identity.
		return nil, secrets, conditions.Retry(conditions.AuthenticationFailedReason, err)
	case err != nil:
		// The API server could not be read: retried.
		return nil, secrets, conditions.Retry(conditions.FailedReason, err)
	}
	return auth, secrets, nil
}

// signer reads the commit signing key, if the job has one.
func (r *UpdateJobReconciler) signer(ctx context.Context, job *updatev1.UpdateJob) (mirror.Signer, []string, error) {
	sk := job.Spec.Commit.SigningKey
	if sk == nil {
		return nil, nil, nil
	}
	data, secrets, err := r.secretData(ctx, job.Namespace, &sk.SecretRef)
	if err != nil {
		return nil, secrets, err
	}
	signer, err := mirror.NewSigner(string(sk.Type), data)
	if err != nil {
		return nil, secrets, conditions.Stall(conditions.InvalidSpecReason, err)
	}
	return signer, secrets, nil
}

// engineReasons are the conditions' reasons of the engine's failures.
var engineReasons = map[engine.Kind]string{
	engine.KindInvalid:        conditions.InvalidSpecReason,
	engine.KindGit:            conditions.GitOperationFailedReason,
	engine.KindAuthentication: conditions.AuthenticationFailedReason,
	engine.KindUpdate:         updatev1.UpdateFailedReason,
	engine.KindPullRequest:    updatev1.PullRequestFailedReason,
	engine.KindRateLimited:    updatev1.RateLimitedReason,
	engine.KindImageMoved:     updatev1.VerifiedImageMovedReason,
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

// hooks keep the job in step with the engine's run: a push only while the
// job is still ours, the commit recorded before it is pushed, the
// container's Pod in the status, and metrics.
func (r *UpdateJobReconciler) hooks(job *updatev1.UpdateJob, plan writeback.Plan, l *claim) engine.Hooks {
	hooks := engine.Hooks{
		// What was verified is what is written: the verified images'
		// tags are read again right before the commit.
		BeforeCommit: func(ctx context.Context, _ *engine.Change) error {
			return r.checkVerified(ctx, job.Spec.Update.Setters)
		},
		BeforePush: func(ctx context.Context, p engine.Push) error {
			if p.PullRequest {
				return l.verify(ctx)
			}
			// Written ahead of the push: if we die before recording the
			// outcome, the next attempt finds this commit on the branch.
			// The write is guarded by the resourceVersion (claim.update),
			// so it lands only while the job is still ours: the check a
			// push needs, in the same round trip.
			return l.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, p) })
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

// forgeAuth is what reaches the forge of the job's pull request: the keys
// token (and username, for a forge that takes a password by basic
// authentication) of pullRequest.secretRef, else the repository Secret's
// bearerToken, or password with its username (fresh: a provider's token,
// a GitHub App's, serves the forge's API too).
func (r *UpdateJobReconciler) forgeAuth(ctx context.Context, job *updatev1.UpdateJob, fresh *git.Auth) (engine.ForgeAuth, []string, error) {
	fa := engine.ForgeAuthOf(fresh)
	var secrets []string
	if ref := job.Spec.Push.PullRequest.SecretRef; ref != nil && ref.Name != "" {
		data, s, err := r.secretData(ctx, job.Namespace, ref)
		if err != nil {
			return engine.ForgeAuth{}, s, err
		}
		secrets, fa = s, engine.ForgeAuth{Token: string(data["token"]), Username: string(data["username"])}
		if fa.Token == "" {
			return fa, secrets, conditions.Stallf(conditions.InvalidSpecReason,
				"secret %s/%s (push.pullRequest.secretRef) has no key token", job.Namespace, ref.Name)
		}
	}
	if fa.Token == "" {
		return fa, secrets, conditions.Stallf(conditions.InvalidSpecReason,
			"push.pullRequest needs an API token: set push.pullRequest.secretRef to a Secret with key token, or give the repository Secret a bearerToken or password")
	}
	return fa, secrets, nil
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
