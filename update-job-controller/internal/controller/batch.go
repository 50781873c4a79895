package controller

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// A batch job (spec.members, pkg/apis/update/v1beta1/members.go) is one
// UpdateJob carrying many automations' updates of one branch: the
// image-automation-controller makes one instead of a job per automation,
// so that a monorepo's tag costs one object, one claim and one outcome
// write, where a runtime group (group.go) costs three writes per member.
// Its members run as runtime group members do (engine.RunGroup, one
// commit), but they are not jobs: no claim, heartbeat or write of their
// own. The job's claim covers them, its status.pushingCommit is theirs,
// and each one's outcome is r.outcome on the member's View, folded into
// the job's status.members (SetMember) by the job's own outcome write.

// batchMember is a member of a batch job: its automation's UID (the key
// of its View) and what its update did.
type batchMember struct {
	uid types.UID
	run jobRun
}

// planBatch reads a batch's plans: its own (spec.update) and each
// member's, from the member's View (its update, message template and
// automation, for .AutomationObject). A plan that cannot work fails its
// own update alone, recorded with the others' outcomes; only a batch none
// of whose plans can work, or whose shared settings cannot (nothing to
// record the members by, a pull request), fails as a job's invalid spec
// does.
func (r *UpdateJobReconciler) planBatch(s *jobScope) error {
	job, st := s.Obj, &s.State
	ctl := metav1.GetControllerOf(job)
	if ctl == nil {
		// View and SetMember know a member by its automation, which
		// the members' views are controlled by in the controller's
		// stead.
		return conditions.Stallf(conditions.InvalidSpecReason,
			"spec.members: a batch needs the automation that controls it (a controller ownerReference): its members' outcomes are recorded under their automations")
	}
	if p := job.Spec.Push; p != nil && p.PullRequest != nil {
		return conditions.Stallf(conditions.InvalidSpecReason,
			"spec.members: a batch's updates share one commit pushed to a branch; push.pullRequest cannot be set with them")
	}
	// spec.members is an atomic list: the API server does not check
	// that its UIDs are unique, so this does (a member twice would be
	// one outcome recorded for two updates).
	seen := make(map[types.UID]bool, len(job.Spec.Members))
	for _, m := range job.Spec.Members {
		if seen[m.UID] {
			return conditions.Stallf(conditions.InvalidSpecReason,
				"spec.members: the automation %s (uid %s) is a member twice", m.Automation, m.UID)
		}
		seen[m.UID] = true
	}
	st.automations = true
	st.plan, st.err = batchPlan(job)
	first, runnable := st.err, st.err == nil
	st.batch = nil
	for _, m := range job.Spec.Members {
		if m.UID == ctl.UID {
			continue // the job's own update, not a member's
		}
		v, ok := job.View(m.UID)
		if !ok {
			continue
		}
		plan, err := batchPlan(v)
		st.batch = append(st.batch, &batchMember{uid: m.UID, run: jobRun{plan: plan, err: err, automations: true}})
		runnable = runnable || err == nil
	}
	if !runnable {
		return first
	}
	return nil
}

// batchPlan is the plan of one update of a batch: planOf, and not a
// container, which runs alone.
func batchPlan(view *updatev1.UpdateJob) (writeback.Plan, error) {
	plan, err := planOf(view)
	if err == nil && plan.Update.Container != nil {
		return writeback.Plan{}, conditions.Stallf(conditions.InvalidSpecReason,
			"update.container runs alone: it cannot share a batch's commit")
	}
	return plan, err
}

// commitPlan is a plan that says where the job's commit goes (what
// groupKey reads): its own, or for a batch whose own update cannot run,
// its first member's that can, which shares the repository, checkout,
// push and author.
func commitPlan(job *updatev1.UpdateJob) (writeback.Plan, error) {
	if !job.IsBatch() {
		return planOf(job)
	}
	plan, err := batchPlan(job)
	if err == nil {
		return plan, nil
	}
	for _, m := range job.Spec.Members {
		if v, ok := job.View(m.UID); ok {
			if p, e := batchPlan(v); e == nil {
				return p, nil
			}
		}
	}
	return plan, err
}

// runs are the batch's updates, its own first.
func (st *jobRun) runs() []*jobRun {
	runs := []*jobRun{st}
	for _, m := range st.batch {
		runs = append(runs, &m.run)
	}
	return runs
}

// attemptBatch runs the batch's plans that can run as one commit
// (engine.RunGroup) under the job's claim, and hands each update its own
// outcome.
func (r *UpdateJobReconciler) attemptBatch(ctx context.Context, job *updatev1.UpdateJob, st *jobRun) {
	runs := st.runs()
	automations, specs := batchUpdates(job, st)
	auth, signer, secrets, err := r.gitAndSigner(ctx, job)
	var taking []*jobRun
	var takingAutomations []types.UID
	var plans []writeback.Plan
	var verified []updatev1.PolicySetter
	for i, run := range runs {
		run.secrets, run.started = secrets, st.started
		switch {
		case run.err != nil:
			// Its plan cannot work (planBatch): it failed alone.
		case err != nil:
			run.err = err
		default:
			resumeIfCarried(job, &run.plan, automations[i])
			taking, plans = append(taking, run), append(plans, run.plan)
			takingAutomations = append(takingAutomations, automations[i])
			verified = append(verified, specs[i].Setters...)
		}
	}
	if len(plans) == 0 {
		return
	}
	hooks := engine.Hooks{
		// What was verified is what is written, for every update the
		// commit may carry: one moved tag refuses the commit.
		BeforeCommit: func(ctx context.Context, _ *engine.Change) error { return r.checkVerified(ctx, verified) },
		BeforePush: func(ctx context.Context, p engine.Push) error {
			// One write for every update the commit carries, which lands
			// only while the batch is still ours (claim.update): a runner
			// that dies after the push leaves it to the next attempt,
			// whose plans of the automations it names resume from it
			// (resumeIfCarried).
			carried := make([]types.UID, 0, len(p.Plans))
			for _, i := range p.Plans {
				carried = append(carried, takingAutomations[i])
			}
			return st.claim.update(ctx, func(job *updatev1.UpdateJob) {
				pushing(job, p)
				job.Status.Carries = carried
			})
		},
		OnEvent: r.observe,
	}
	eng := engine.New(engine.Settings{WorkDir: r.WorkDir, PushRetries: r.PushRetries, Hooks: hooks},
		engine.Credentials{Git: auth, Signer: signer}, r.Cache)
	outs := eng.RunGroup(ctx, plans)
	shared, quiet := reporters(outs)
	for i, run := range taking {
		run.out, run.err = outs[i].Result, failure(outs[i].Err)
		run.shared, run.quiet = shared[i], quiet[i]
	}
	if slices.ContainsFunc(shared, func(n int) bool { return n > 0 }) {
		// A commit landed: the batch ends with this attempt. A retry
		// would run again the updates the commit carries, and its own
		// push would replace status.pushingCommit, the one record of
		// which commit carries them.
		for _, run := range runs {
			run.err = lastTry(run.err, "the batch's commit landed without this update")
		}
	}
}

// batchUpdates is, in the order of jobRun.runs, each update's automation
// (the key of status.carries: the job's own is its controller's, which
// planBatch made sure there is) and its spec, for its verified setters.
func batchUpdates(job *updatev1.UpdateJob, st *jobRun) ([]types.UID, []*updatev1.UpdateSpec) {
	automations := []types.UID{""}
	if ctl := metav1.GetControllerOf(job); ctl != nil {
		automations[0] = ctl.UID
	}
	specs := []*updatev1.UpdateSpec{&job.Spec.Update}
	for _, m := range st.batch {
		automations = append(automations, m.uid)
		spec := &updatev1.UpdateSpec{}
		if i := slices.IndexFunc(job.Spec.Members, func(s updatev1.UpdateJobMember) bool { return s.UID == m.uid }); i >= 0 {
			spec = &job.Spec.Members[i].Update
		}
		specs = append(specs, spec)
	}
	return automations, specs
}

// resumeIfCarried keeps plan.Resume (status.pushingCommit, which each View
// shares) only for an update of the automation the commit carries, by
// status.carries. Without it the engine takes an update as landed when the
// commit changed files under its path, and an automation whose path holds
// another's (apps and apps/web) would be called landed with the other's
// change, its own failure or no-change of the killed attempt lost. A
// status from before status.carries was written for batches names none,
// and every update resumes as it did.
func resumeIfCarried(job *updatev1.UpdateJob, plan *writeback.Plan, automation types.UID) {
	if c := job.Status.Carries; len(c) > 0 && !slices.Contains(c, automation) {
		plan.Resume = ""
	}
}

// reporters says, for each outcome of a RunGroup (a batch's updates, or a
// runtime group's jobs, the leader first), how many updates its commit
// carries (0 without one) and whether another update's event reports that
// commit. Per commit (the one pushed, or one an earlier
// attempt pushed that some plans resumed from), one Succeeded event, the
// first carried update's: the job's own unless its update failed or
// changed nothing.
func reporters(outs []engine.Outcome) (shared []int, quiet []bool) {
	carries, first := map[string]int{}, map[string]int{}
	for i, o := range outs {
		if o.Err == nil && o.Commit != "" {
			if carries[o.Commit]++; carries[o.Commit] == 1 {
				first[o.Commit] = i
			}
		}
	}
	shared, quiet = make([]int, len(outs)), make([]bool, len(outs))
	for i, o := range outs {
		if o.Err == nil && o.Commit != "" {
			shared[i], quiet[i] = carries[o.Commit], first[o.Commit] != i
		}
	}
	return shared, quiet
}

// lastTry makes a retryable failure final, saying why the job will not
// run the update again.
func lastTry(err error, why string) error {
	if err == nil {
		return nil
	}
	f := conditions.AsFailure(err)
	if f.Stalled {
		return err
	}
	return conditions.Stall(f.Reason, fmt.Errorf("%w (not retried: %s)", err, why)).Redacting(f.Secrets...)
}

// batchOutcome writes each member's outcome into the job, within the
// job's own outcome write (after r.outcome on the job): r.outcome on the
// member's View, folded back with SetMember. A member whose update would
// be retried is Failed once the job has ended: nothing runs it again.
func (r *UpdateJobReconciler) batchOutcome(job *updatev1.UpdateJob, st *jobRun) {
	for _, m := range st.batch {
		v, ok := job.View(m.uid)
		if !ok {
			continue
		}
		run := &m.run
		run.outcome, run.notes = "", nil
		err := run.err
		if job.Status.Phase.Finished() {
			run.err = lastTry(err, "the batch ended")
		}
		r.outcome(v, run)
		run.err = err // a conflict runs this again from the attempt's failure
		job.SetMember(v)
	}
}

// endMembers ends the members a batch that ends without running them
// leaves unfinished (its spec, its deadline, its attempts): each Failed
// with its own plan's failure if it had one, else the job's, counted with
// the job's outcome (the job's event says why).
func (r *UpdateJobReconciler) endMembers(job *updatev1.UpdateJob, st *jobRun, reason, msg string) {
	if !job.IsBatch() {
		return
	}
	ran := map[types.UID]*jobRun{}
	for _, m := range st.batch {
		ran[m.uid] = &m.run
	}
	ctl := metav1.GetControllerOf(job)
	st.batch = nil
	for _, m := range job.Spec.Members {
		if ctl != nil && m.UID == ctl.UID {
			continue
		}
		v, ok := job.View(m.UID)
		if !ok || slices.ContainsFunc(job.Status.Members, func(s updatev1.MemberStatus) bool {
			return s.UID == m.UID && s.Phase.Finished()
		}) {
			continue
		}
		why, whyMsg := reason, msg
		if run := ran[m.UID]; run != nil && run.err != nil {
			f := conditions.AsFailure(run.err)
			why, whyMsg = f.Reason, f.Error()
		}
		failJob(v, why, whyMsg)
		job.SetMember(v)
		st.batch = append(st.batch, &batchMember{uid: m.UID, run: jobRun{outcome: OutcomeFailed}})
	}
}

// countedMembers counts each member's written outcome and emits its
// events on its View of the written job.
func (r *UpdateJobReconciler) countedMembers(ctx context.Context, st *jobRun, job *updatev1.UpdateJob) {
	for _, m := range st.batch {
		if v, ok := job.View(m.uid); ok {
			r.counted(ctx, &m.run, v)
		}
	}
}
