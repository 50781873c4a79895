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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// Turn-taking between automations that write the same branch: a run makes
// its job only while no other automation's job in flight sets one of its
// policies to another value, weighed under one lock per push target from
// the cache plus the jobs this process made that the cache has not shown
// yet (recentJobs). The decision itself, weighTurn, is pure.

// policyBusyError: another automation's job in flight sets one of the
// policies this run would set, or (moved) a policy picked another image
// since the run read it.
type policyBusyError struct {
	job, automation, policy string
	moved                   bool
}

func (e *policyBusyError) Error() string {
	if e.moved {
		return fmt.Sprintf("policy %s picked another image since this run read it; running again", e.policy)
	}
	return fmt.Sprintf("waiting for UpdateJob %s of automation %s, which sets policy %s too, to end", e.job, e.automation, e.policy)
}

// takeTurn is createJob's one step under the lock: it weighs the jobs and
// either returns the automation's job in flight, or a *policyBusyError, or
// the job to make, which it reserves (in recentJobs, as if made) before
// the lock is let go. So the checks and the create, API calls, run outside
// the lock, many automations at once, while a run that would set one of
// the policies to another value sees the reservation and waits. taken, when
// set, is a job whose name turned out to be another's.
func (r *ImageUpdateAutomationReconciler) takeTurn(ctx context.Context, obj *imagev1.ImageUpdateAutomation, spec *updatev1.UpdateJobSpec,
	inputs string, times map[string]time.Time, taken *updatev1.UpdateJob) (job, own *updatev1.UpdateJob, err error) {
	r.jobsMu.Lock()
	defer r.jobsMu.Unlock()
	jobs, err := r.weighedJobs(ctx, obj, spec)
	if err != nil {
		return nil, nil, err
	}
	t := weighTurn(obj.UID, spec, jobs)
	switch {
	case t.own != nil:
		return nil, t.own, nil
	case t.busy != nil:
		return nil, nil, t.busy
	}
	if target, ok := pushTarget(spec); ok {
		queued, busy := r.batches.pendingTurn(obj.UID, target, policyValues(spec.Update.Setters))
		switch {
		case queued:
			return nil, nil, errQueued
		case busy != nil:
			return nil, nil, busy
		}
	}
	if taken != nil {
		t.taken[taken.Name] = true
	}
	job = newJob(obj, *spec, inputs, t, times)
	// The job controller reads the automation (for the message template's
	// .AutomationObject) from this controller reference.
	if err := controllerutil.SetControllerReference(obj, job, r.Scheme()); err != nil {
		return nil, nil, err
	}
	r.recent.add(job)
	return job, nil, nil
}

// errNameTaken: a job of that name exists and is not the automation's.
var errNameTaken = errors.New("exists and is not an unfinished job of this automation")

// jobTargetIndex indexes the unfinished UpdateJobs of automations by
// where they push (pushTarget).
const jobTargetIndex = ".spec.pushTarget.inFlight"

func jobTarget(o client.Object) []string {
	j, ok := o.(*updatev1.UpdateJob)
	if !ok || ownerUID(j) == "" || j.Status.Phase.Finished() {
		return nil
	}
	if t, ok := pushTarget(&j.Spec); ok {
		return []string{t}
	}
	return nil
}

// weighedJobs are the jobs createJob weighs for a run of obj that would
// make spec: the automation's own, the unfinished ones of its push target,
// and those this process made that the cache does not show yet.
func (r *ImageUpdateAutomationReconciler) weighedJobs(ctx context.Context, obj *imagev1.ImageUpdateAutomation, spec *updatev1.UpdateJobSpec) ([]updatev1.UpdateJob, error) {
	own := &updatev1.UpdateJobList{}
	if err := r.List(ctx, own, client.InNamespace(obj.Namespace), client.MatchingFields{jobOwnerIndex: string(obj.UID)}); err != nil {
		return nil, fmt.Errorf("listing UpdateJobs: %w", err)
	}
	jobs := own.Items
	if target, ok := pushTarget(spec); ok {
		// Read only: weighTurn copies what it keeps of others' jobs.
		others := &updatev1.UpdateJobList{}
		if err := r.List(ctx, others, client.InNamespace(obj.Namespace), client.MatchingFields{jobTargetIndex: target},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing UpdateJobs: %w", err)
		}
		for i := range others.Items {
			if !slices.Contains(others.Items[i].Automations(), obj.UID) {
				jobs = append(jobs, others.Items[i])
			}
		}
	}
	return append(jobs, r.recent.unseen(ctx, r.Client, obj.Namespace)...), nil
}

// recentJobs are the jobs this process made that its cache may not show
// yet; each is forgotten once the cache has it, or after recentFor (a job
// deleted before the cache saw it must not hold a branch).
type recentJobs struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]recentJob
}

type recentJob struct {
	job  *updatev1.UpdateJob
	made time.Time
}

const recentFor = time.Minute

func (rj *recentJobs) add(job *updatev1.UpdateJob) {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	if rj.jobs == nil {
		rj.jobs = map[types.NamespacedName]recentJob{}
	}
	rj.jobs[client.ObjectKeyFromObject(job)] = recentJob{job: job.DeepCopy(), made: time.Now()}
}

// drop forgets a job that was reserved (createJob) but not made.
func (rj *recentJobs) drop(job *updatev1.UpdateJob) {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	delete(rj.jobs, client.ObjectKeyFromObject(job))
}

// unseen returns the recent jobs of namespace the cache c does not hold
// yet, and forgets the others.
func (rj *recentJobs) unseen(ctx context.Context, c client.Reader, namespace string) []updatev1.UpdateJob {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	var out []updatev1.UpdateJob
	for key, r := range rj.jobs {
		if key.Namespace != namespace {
			continue
		}
		// Only whether the cache has it: no copy of the job.
		if time.Since(r.made) > recentFor || c.Get(ctx, key, &updatev1.UpdateJob{}, client.UnsafeDisableDeepCopy) == nil {
			delete(rj.jobs, key)
			continue
		}
		out = append(out, *r.job)
	}
	return out
}

// turn is what the namespace's jobs say about making this run's job.
type turn struct {
	// own is the automation's job in flight: the run is that job.
	own *updatev1.UpdateJob
	// busy names another automation's job in flight that sets one of the
	// run's policies to another value on the same branch: the run waits
	// for it.
	busy *policyBusyError
	// run is the highest run number of the automation's jobs; taken are
	// the names of the namespace's jobs.
	run   int
	taken map[string]bool
}

// weighTurn reads the namespace's jobs for a run of the automation uid that
// would make spec: whose turn it is (a pure decision, table-tested in
// decide_test.go).
func weighTurn(uid types.UID, spec *updatev1.UpdateJobSpec, jobs []updatev1.UpdateJob) turn {
	mine := policyValues(spec.Update.Setters)
	t := turn{taken: map[string]bool{}}
	for i := range jobs {
		j := &jobs[i]
		t.taken[j.Name] = true
		if ownerUID(j) == "" {
			continue
		}
		done := j.Status.Phase.Finished()
		// A batch is weighed as the jobs of its automations, without a
		// copy of it for each.
		for _, p := range parts(j) {
			switch {
			case p.uid == uid && !done && jobCheckoutKey(&j.Spec) == jobCheckoutKey(spec):
				if t.own == nil {
					t.own = j
					if j.IsBatch() {
						t.own, _ = j.View(uid)
					}
				}
			case p.uid == uid:
				t.run = max(t.run, runNumber(p.annotations))
			case t.busy == nil && !done && sameTarget(&j.Spec, spec):
				for _, s := range p.setters {
					if ref, ok := mine[s.Policy]; ok && ref != s.ImageRef {
						t.busy = &policyBusyError{job: j.Name, automation: p.automation, policy: s.Policy}
						break
					}
				}
			}
		}
	}
	return t
}

// part is one automation's update in a job: the controller's, or a
// batch member's.
type part struct {
	uid         types.UID
	automation  string
	setters     []updatev1.PolicySetter
	annotations map[string]string
}

func parts(j *updatev1.UpdateJob) []part {
	ctl := metav1.GetControllerOf(j)
	out := []part{{uid: ctl.UID, automation: ctl.Name, setters: j.Spec.Update.Setters, annotations: j.Annotations}}
	for _, m := range j.Spec.Members {
		out = append(out, part{uid: m.UID, automation: m.Automation, setters: m.Update.Setters, annotations: m.Annotations})
	}
	return out
}
