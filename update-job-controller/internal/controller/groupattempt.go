package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// jobGroup is the jobs a leader runs with it as one commit.
type jobGroup struct {
	key     string
	members []*member
}

// member is a job of a group other than its leader: claimed by this
// runner like the leader (its own status write, guarded by its
// resourceVersion), run in the leader's reconcile, its outcome written to
// its own status.
type member struct {
	job *updatev1.UpdateJob
	run jobRun
}

// writers bounds the status writes a group makes at once: enough to keep
// the API server busy (its priority and fairness queues the rest), as a
// group of a thousand members writes each member three times, on the way
// to its push.
const writers = 32

// forEach runs f for each member, writers at a time.
func forEach(members []*member, f func(m *member)) {
	sem := make(chan struct{}, writers)
	var wg sync.WaitGroup
	for _, m := range members {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(m)
		})
	}
	wg.Wait()
}

// gatherGroup decides whether the job leads a group now, waits for one of
// its key to end, or runs alone (gather says how). Jobs that share nothing
// (pull requests, container mode) run alone at once. A batch job runs as
// a group of itself: it gathers no member, but waits and is waited for
// like any group of its key.
func (r *UpdateJobReconciler) gatherGroup(ctx context.Context, s *jobScope) (reconcile.Result, error) {
	job := s.Obj
	plan := s.State.plan
	if job.IsBatch() && s.State.err != nil {
		// Its own update cannot run; its members' say where the
		// commit goes.
		plan, _ = commitPlan(job)
	}
	key := groupKey(job, plan)
	if key == "" {
		return reconcile.Continue, nil
	}
	self := client.ObjectKeyFromObject(job)
	if r.groups.waitIfBusy(key, self) {
		return reconcile.StopAfter(r.LeaseDuration), nil
	}
	// Read only (gather copies nothing it keeps: a member is copied
	// before its claim): no copy of every job of the namespace per run.
	list := &updatev1.UpdateJobList{}
	if err := r.List(ctx, list, client.InNamespace(job.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Continue, fmt.Errorf("listing UpdateJobs: %w", err)
	}
	g := gather(groupInput{leader: job, plan: plan, key: key, runner: r.Runner, running: r.groups.isRunning,
		now: s.Start, lease: r.LeaseDuration, backoff: r.backoff}, list.Items)
	if g.busy != "" {
		// Another runner's group: it wakes no one here, so look again
		// soon.
		ctrl.LoggerFrom(ctx).V(1).Info("waiting for the group of another runner", "job", g.busy)
		return reconcile.StopAfter(2 * time.Second), nil
	}
	jobs := []*updatev1.UpdateJob{job}
	group := &jobGroup{key: key}
	for _, c := range g.members {
		jobs = append(jobs, c.job)
		group.members = append(group.members, &member{job: c.job, run: jobRun{plan: c.plan}})
	}
	if !r.groups.begin(key, self, jobs...) {
		if r.groups.waitIfBusy(key, self) {
			return reconcile.StopAfter(r.LeaseDuration), nil
		}
		return reconcile.StopAfter(lookAgain), nil
	}
	s.State.group = group
	return reconcile.Continue, nil
}

// markClaimed makes job this runner's next attempt.
func (r *UpdateJobReconciler) markClaimed(job *updatev1.UpdateJob, leader string) {
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
	if leader == "" {
		conditions.MarkReconciling(job, updatev1.ClaimedReason, "attempt %d running on %s", st.Attempts, r.Runner)
	} else {
		conditions.MarkReconciling(job, updatev1.ClaimedReason, "attempt %d running on %s, in one commit with UpdateJob %s",
			st.Attempts, r.Runner, leader)
	}
}

// claimMembers claims the group's members once its leader is claimed; a
// member another runner (or its own reconcile) changed meanwhile conflicts
// and stays out.
func (r *UpdateJobReconciler) claimMembers(ctx context.Context, leader string, g *jobGroup) {
	var mu sync.Mutex
	var claimed []*member
	forEach(g.members, func(m *member) {
		job := m.job.DeepCopy()
		helper := patch.NewHelper(job, r.Client)
		r.markClaimed(job, leader)
		if err := helper.Patch(ctx, job, patch.WithOptimisticLock()); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("a member of the group stays out", "job", job.Name, "error", err.Error())
			return
		}
		m.job = job
		m.run.claim = &claim{r: r, job: job.DeepCopy()}
		mu.Lock()
		claimed = append(claimed, m)
		mu.Unlock()
	})
	// Keep the gathered order, the commit message's.
	g.members = slices.DeleteFunc(g.members, func(m *member) bool { return !slices.Contains(claimed, m) })
}

// heartbeatMembers looks at the members' claims every interval until the
// returned stop is called, and renews those whose heartbeat is older than
// renewAfter: a thousand members renewed at each tick wrote a thousand
// times more per tick, on an API server the group already keeps busy. A
// member whose claim is lost is left to the runner that took it.
func (g *jobGroup) heartbeatMembers(ctx context.Context, interval, renewAfter time.Duration) (stop func()) {
	return every(ctx, interval, func() bool {
		forEach(g.members, func(m *member) {
			if m.run.claim.beatAge() < renewAfter {
				return
			}
			err := m.run.claim.update(ctx, func(job *updatev1.UpdateJob) {
				job.Status.HeartbeatTime = &metav1.Time{Time: time.Now()}
			})
			if err != nil && !errors.Is(err, errClaimLost) && ctx.Err() == nil {
				ctrl.LoggerFrom(ctx).Error(err, "renewing the heartbeat of a member of the group", "job", m.job.Name)
			}
		})
		return true
	})
}

// attemptGroup runs the leader's plan and its members' as one commit
// (engine.RunGroup), and hands each its own outcome.
func (r *UpdateJobReconciler) attemptGroup(ctx context.Context, job *updatev1.UpdateJob, st *jobRun) {
	g := st.group
	fail := func(err error) {
		st.err = err
		for _, m := range g.members {
			m.run.err, m.run.secrets = err, st.secrets
		}
	}
	auth, signer, secrets, err := r.gitAndSigner(ctx, job)
	st.secrets = secrets
	if err != nil {
		fail(err)
		return
	}
	plans := []writeback.Plan{st.plan}
	verified := slices.Clone(job.Spec.Update.Setters)
	for _, m := range g.members {
		plans = append(plans, m.run.plan)
		verified = append(verified, m.job.Spec.Update.Setters...)
	}
	hooks := engine.Hooks{
		// What was verified is what is written, as for a job alone and a
		// batch: one moved tag refuses the commit.
		BeforeCommit: func(ctx context.Context, _ *engine.Change) error { return r.checkVerified(ctx, verified) },
		BeforePush: func(ctx context.Context, p engine.Push) error {
			if err := st.claim.verify(ctx); err != nil {
				return err
			}
			return r.recordPushing(ctx, st, g, p)
		},
		OnEvent: r.observe,
	}
	eng := engine.New(engine.Settings{WorkDir: r.WorkDir, PushRetries: r.PushRetries, Hooks: hooks},
		engine.Credentials{Git: auth, Signer: signer}, r.Cache)
	outs := eng.RunGroup(ctx, plans)
	shared, quiet := reporters(outs)
	st.out, st.err, st.shared, st.quiet = outs[0].Result, failure(outs[0].Err), shared[0], quiet[0]
	for i, m := range g.members {
		m.run.out, m.run.err, m.run.secrets, m.run.started = outs[i+1].Result, failure(outs[i+1].Err), secrets, st.started
		m.run.shared, m.run.quiet = shared[i+1], quiet[i+1]
	}
}

// recordPushing writes the commit about to be pushed before the push, so
// that a runner that dies after it leaves each job able to find it. When
// the commit carries the leader's change, one write does: the leader's
// status.pushingCommit, with the members it carries (status.carries),
// which a member taken up again reads (carriedBy). Otherwise each member
// the commit carries gets its own status.pushingCommit.
func (r *UpdateJobReconciler) recordPushing(ctx context.Context, st *jobRun, g *jobGroup, p engine.Push) error {
	var carried []*member
	leader := false
	for _, i := range p.Plans {
		if i == 0 {
			leader = true
		} else {
			carried = append(carried, g.members[i-1])
		}
	}
	if leader {
		uids := make([]types.UID, len(carried))
		for i, m := range carried {
			uids[i] = m.job.UID
		}
		return st.claim.update(ctx, func(job *updatev1.UpdateJob) {
			pushing(job, p)
			job.Status.Carries = uids
		})
	}
	var mu sync.Mutex
	var errs []error
	forEach(carried, func(m *member) {
		if err := m.run.claim.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, p) }); err != nil && !errors.Is(err, errClaimLost) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("UpdateJob %s: %w", m.job.Name, err))
			mu.Unlock()
		}
	})
	return errors.Join(errs...)
}

// carriedBy is the commit another job's attempt was about to push with
// job's change (status.carries), "" when none says so: job's
// Plan.Resume when its own status.pushingCommit is empty.
func carriedBy(job *updatev1.UpdateJob, jobs []updatev1.UpdateJob) string {
	for i := range jobs {
		l := &jobs[i]
		if l.Status.PushingCommit != "" && l.UID != job.UID && slices.Contains(l.Status.Carries, job.UID) {
			return l.Status.PushingCommit
		}
	}
	return ""
}

// pushing records, before the push, the commit about to be pushed and
// the revision it was made on: the automations of the branch read both to
// tell a head their jobs moved (no run needed) from one a person moved,
// and the push must not wait for the outcome to say so.
func pushing(job *updatev1.UpdateJob, p engine.Push) {
	job.Status.PushingCommit = p.Commit
	if p.Base != "" {
		job.Status.CheckoutRevision = p.Base
	}
}

// releaseMembers hands the members back, Pending, when the leader's
// attempt stopped before its outcome: this runner is stopping or lost the
// leader.
func (r *UpdateJobReconciler) releaseMembers(ctx context.Context, g *jobGroup) {
	if g == nil {
		return
	}
	wctx, cancel := outcomeContext(ctx)
	defer cancel()
	forEach(g.members, func(m *member) {
		if err := r.handBack(wctx, m.run.claim); err != nil && !errors.Is(err, errClaimLost) {
			ctrl.LoggerFrom(ctx).Error(err, "handing a member of the group back", "job", m.job.Name)
		}
	})
}

// recordMembers writes each member's outcome to its status, then counts
// it and emits its events, as recordOutcome does for the leader.
func (r *UpdateJobReconciler) recordMembers(ctx context.Context, g *jobGroup) {
	if g == nil {
		return
	}
	wctx, cancel := outcomeContext(ctx)
	defer cancel()
	forEach(g.members, func(m *member) {
		st := &m.run
		err := st.claim.update(wctx, func(job *updatev1.UpdateJob) {
			st.outcome, st.notes = "", nil
			r.outcome(job, st)
		})
		if err != nil {
			if !errors.Is(err, errClaimLost) {
				ctrl.LoggerFrom(ctx).Error(err, "recording the outcome of a member of the group", "job", m.job.Name)
			}
			return
		}
		r.noteFindings(st)
		r.counted(wctx, st, st.claim.job)
	})
}

// counted counts a written outcome and emits its events.
func (r *UpdateJobReconciler) counted(ctx context.Context, st *jobRun, job *updatev1.UpdateJob) {
	if st.outcome != "" {
		r.JobMetrics.Jobs.WithLabelValues(st.outcome).Inc()
		if !st.started.IsZero() {
			r.JobMetrics.Duration.WithLabelValues(st.outcome).Observe(time.Since(st.started).Seconds())
		}
	}
	for _, n := range st.notes {
		n(ctx, job)
	}
}
