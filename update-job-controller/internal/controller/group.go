package controller

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// MaxGroup bounds the jobs one commit carries (the leader included): a
// commit message lists each job's changes, and each member costs three
// status writes (claim, pushingCommit, outcome).
const MaxGroup = 1000

// groupKey says which jobs can share one commit: plans with the same
// writeback GroupKey, in the same namespace, with the same repository
// settings (credentials, proxy, provider) and signing key, so that the
// leader's credentials are every member's own. Empty: the job shares
// nothing (a pull request, container mode).
func groupKey(job *updatev1.UpdateJob, plan writeback.Plan) string {
	k := plan.GroupKey()
	if k == "" {
		return ""
	}
	b, err := json.Marshal(struct {
		Namespace  string
		Repository updatev1.GitRepositorySpec
		SigningKey *updatev1.SigningKey
	}{job.Namespace, job.Spec.Repository, job.Spec.Commit.SigningKey})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return k + string(b)
}

// candidate is a job that may join a group, with its plan.
type candidate struct {
	job  *updatev1.UpdateJob
	plan writeback.Plan
}

// gathering is what the namespace's jobs say about a group a leader is
// about to run.
type gathering struct {
	// busy names a job of the same key that is running (here, or on a
	// runner whose heartbeat is fresh): the leader waits for it, and its
	// group absorbs what arrived meanwhile once it ends.
	busy string
	// members join the leader's commit, ordered by automation, then name.
	members []candidate
}

// groupInput is what gather reads besides the jobs.
type groupInput struct {
	leader *updatev1.UpdateJob
	plan   writeback.Plan
	key    string
	runner string
	// running says whether this runner is running the job now.
	running func(types.UID) bool
	now     time.Time
	lease   time.Duration
	backoff func(attempts int32) time.Duration
}

// gather picks the leader's group from the namespace's jobs (the cache's
// view: a member's claim is a write guarded by the resourceVersion, so a
// stale view costs a conflict, never a job run twice). The rule, one
// in-flight group per branch: while a job of the same key runs (a batch
// job too), the leader waits; otherwise every job of the key that is
// ready now joins, up to MaxGroup, except that a batch job neither joins
// a group nor gathers one (a batch leader's group is itself). Ready is
// Pending (or new) and out of its backoff. A job that sets a policy of
// the group to another value waits for the next group: one commit never
// holds two values of a policy.
func gather(in groupInput, jobs []updatev1.UpdateJob) gathering {
	var g gathering
	if in.key == "" {
		return g
	}
	values := valuesOf(in.plan.Update.Images)
	for i := range jobs {
		j := &jobs[i]
		if j.UID == in.leader.UID || j.Namespace != in.leader.Namespace || j.DeletionTimestamp != nil {
			continue
		}
		// What the status says first: a plan is made only for the jobs
		// it matters for, as finished jobs pile up (a thousand
		// automations' jobs, each gathering over all of them).
		st := &j.Status
		busy := false
		switch {
		case in.running(j.UID):
			busy = true
		case st.Phase == updatev1.UpdateJobRunning:
			if st.Runner == in.runner || st.HeartbeatTime == nil || in.now.Sub(st.HeartbeatTime.Time) >= in.lease {
				continue
			}
			busy = true
		case st.Phase != "" && st.Phase != updatev1.UpdateJobPending:
			continue
		case st.Attempts > backoffLimit(j):
			continue
		case st.HeartbeatTime != nil && in.now.Sub(st.HeartbeatTime.Time) < in.backoff(st.Attempts):
			continue
		}
		plan, err := commitPlan(j)
		if err != nil || groupKey(j, plan) != in.key {
			continue
		}
		if busy {
			g.busy = j.Name
			continue
		}
		if in.leader.IsBatch() || j.IsBatch() {
			// A batch's members are its spec's: it leads no group of
			// jobs and joins none, though it runs as one group of its
			// key (busy above).
			continue
		}
		if plan.Resume == "" && st.Attempts > 0 {
			plan.Resume = carriedBy(j, jobs)
		}
		if !values.agree(plan.Update.Images) {
			continue
		}
		g.members = append(g.members, candidate{job: j, plan: plan})
	}
	if g.busy != "" {
		g.members = nil
		return g
	}
	slices.SortFunc(g.members, func(a, b candidate) int {
		if c := strings.Compare(a.plan.Commit.Automation.Name, b.plan.Commit.Automation.Name); c != 0 {
			return c
		}
		return strings.Compare(a.job.Name, b.job.Name)
	})
	// Agreement is checked against the leader only above; a member that
	// disagrees with an earlier member waits too.
	kept := g.members[:0]
	for _, c := range g.members {
		if len(kept)+1 >= MaxGroup {
			break
		}
		if values.agree(c.plan.Update.Images) {
			values.add(c.plan.Update.Images)
			kept = append(kept, c)
		}
	}
	g.members = kept
	return g
}

// imageValues are the values a group sets, by policy key.
type imageValues map[string]meta.ImageRef

func valuesOf(images map[string]meta.ImageRef) imageValues {
	v := imageValues{}
	v.add(images)
	return v
}

func (v imageValues) add(images map[string]meta.ImageRef) {
	for k, ref := range images {
		v[k] = ref
	}
}

// agree reports whether images set no policy of v to another value.
func (v imageValues) agree(images map[string]meta.ImageRef) bool {
	for k, ref := range images {
		if have, ok := v[k]; ok && have != ref {
			return false
		}
	}
	return true
}

// groups is this runner's bookkeeping of the groups it runs: which jobs
// are in one now (their own reconciles must not take them up as lost
// attempts), and which jobs wait for a group of their key to end, to be
// reconciled as soon as it does. One group per key at a time.
type groups struct {
	mu      sync.Mutex
	running map[types.UID]bool
	leaders map[types.NamespacedName]*runningGroup
	keys    map[string]*runningGroup
	wake    chan event.GenericEvent
}

type runningGroup struct {
	key     string
	jobs    []*updatev1.UpdateJob
	waiting map[types.NamespacedName]bool
}

func newGroups() *groups {
	return &groups{running: map[types.UID]bool{}, leaders: map[types.NamespacedName]*runningGroup{},
		keys: map[string]*runningGroup{}, wake: make(chan event.GenericEvent, 1024)}
}

func (g *groups) isRunning(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[uid]
}

// waitIfBusy records job as waiting when a group of key runs, and reports
// whether one does; the group's end wakes it.
func (g *groups) waitIfBusy(key string, job types.NamespacedName) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	rg := g.keys[key]
	if rg == nil {
		return false
	}
	rg.waiting[job] = true
	return true
}

// begin records the group of key led by leader, with its jobs (the
// leader's first), as running: false when a group of key runs already.
// Members are recorded before they are claimed, so that their own
// reconciles never see this runner's claim without the group.
func (g *groups) begin(key string, leader types.NamespacedName, jobs ...*updatev1.UpdateJob) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys[key] != nil {
		return false
	}
	rg := &runningGroup{key: key, jobs: jobs, waiting: map[types.NamespacedName]bool{}}
	g.keys[key], g.leaders[leader] = rg, rg
	for _, j := range jobs {
		g.running[j.UID] = true
	}
	return true
}

// finish ends the group leader leads, if any: its jobs are reconciled
// again (a finished member's TTL counts from now, a member not claimed
// goes on alone), and so are the jobs that waited for it. Reconciles of
// one job never overlap, so the leader's reconcile is the group's.
func (g *groups) finish(leader types.NamespacedName) {
	g.mu.Lock()
	rg := g.leaders[leader]
	if rg == nil {
		g.mu.Unlock()
		return
	}
	delete(g.leaders, leader)
	delete(g.keys, rg.key)
	var wake []types.NamespacedName
	for _, j := range rg.jobs {
		delete(g.running, j.UID)
		if nn := (types.NamespacedName{Namespace: j.Namespace, Name: j.Name}); nn != leader {
			wake = append(wake, nn)
		}
	}
	for nn := range rg.waiting {
		wake = append(wake, nn)
	}
	g.mu.Unlock()
	// The reader is the controller's own queue, which this reconcile
	// must not wait for.
	go func() {
		for _, nn := range wake {
			j := &updatev1.UpdateJob{}
			j.Namespace, j.Name = nn.Namespace, nn.Name
			g.wake <- event.GenericEvent{Object: j}
		}
	}()
}
