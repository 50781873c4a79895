package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// Batches: the jobs that automations of one branch decide to make at the
// same time become one UpdateJob (spec.members), one claim, one checkout,
// one commit and one outcome write. A monorepo's thousand automations
// following one base image made a thousand UpdateJobs per tag, each a
// create, a claim and an outcome on the API server, which was the whole
// cost of the tag (BenchmarkMonorepoAutomations). Now a run that would make
// a job that can share a commit hands it to the branch's pending batch and
// writes nothing. The batch is made once the branch's runs have stopped
// arriving for batchQuiet, or batchWindow after its first run, or when it
// is full; while the branch's last batch is being made or still runs, the
// next one gathers what arrives (up to batchHold), as it would wait for
// that one anyway. Its automations record it when it ends, or, when it
// runs longer than batchAdoptAfter, name it in their statuses meanwhile.
// Every automation reads the batch as its own job (UpdateJob.View), with
// its own outcome.
//
// Turns are taken as for jobs in flight (takeTurn): a pending batch holds
// the values its runs set, and a run that would set one of them to another
// value waits for the batch, made and finished.

const (
	// batchQuiet is how long a pending batch waits for another run of its
	// branch before it is made; batchWindow bounds the wait from its
	// first run. A single automation's job waits batchQuiet.
	batchQuiet  = 100 * time.Millisecond
	batchWindow = time.Second
	// batchBytes bounds the members' updates of one batch as JSON, below
	// the API server's object size limit with their results.
	batchBytes = 512 << 10
	// batchHold bounds how long a pending batch is held while the last
	// batch of its branch runs; batchPoll is how often it looks. A batch
	// made batchClaimGrace ago and not claimed holds none (creation
	// times have whole seconds).
	batchHold       = 30 * time.Second
	batchPoll       = 100 * time.Millisecond
	batchClaimGrace = 3 * time.Second
	// batchAdoptAfter: a batch that runs longer is named in its
	// automations' statuses while it runs; one that ends sooner is only
	// recorded, so that a thousand status writes do not compete with
	// the batch's own on the API server. With a few seconds here, the
	// second batch of a thousand automations, waiting its turn behind the
	// first, was named in hundreds of statuses while it ran: as many
	// reconciles and writes beside its own writes of a large object
	// (BenchmarkMonorepoAutomations).
	batchAdoptAfter = 30 * time.Second
	// batchCreateTimeout bounds the create of a batch.
	batchCreateTimeout = 30 * time.Second
)

// batches are the pending batches of this process, by batchKey.
type batches struct {
	mu      sync.Mutex
	pending map[string]*pendingBatch
	// byUID is the batch each pending automation is in.
	byUID map[types.UID]*pendingBatch
	// wake reconciles the automations of a batch once it is made (or
	// could not be).
	wake chan event.GenericEvent
	// create makes a batch's job and tells the reconciler's recent jobs.
	create func(ctx context.Context, job *updatev1.UpdateJob) error
	// solo are automations whose batch could not be made: their next
	// run makes its job alone, so that its own error reaches its status.
	solo map[types.UID]bool
	// made is the last batch made of each key, and lookup reads a
	// batch's phase and creation time (the reconciler's cache): a pending
	// batch is held while the last one of its key runs.
	made   map[string]madeBatch
	lookup func(types.NamespacedName) (phase updatev1.UpdateJobPhase, created time.Time, ok bool)
	// creating counts the batches of each key being created.
	creating map[string]int
	// adoptAfter is how long after a batch is made its automations are
	// woken to name it in their statuses, if it has not ended by then.
	adoptAfter time.Duration
	// decided is when each automation of a batch decided to make its
	// job: the run that adopts the batch records it as its run time,
	// on the reconciler's clock (update windows are judged on it).
	decided map[types.UID]time.Time
	// shared are the automations of decided whose batch was made with
	// others (adoptLater).
	shared map[types.UID]bool
	ctx    context.Context
}

// madeBatch is a batch this process made, and when.
type madeBatch struct {
	name types.NamespacedName
	at   time.Time
}

type pendingBatch struct {
	key     string
	target  string
	entries []*batchEntry
	bytes   int
	// values are the policies' values the batch sets.
	values map[string]meta.ImageRef
	first  time.Time
	timer  *time.Timer
}

// batchEntry is one automation's job as it would have been made alone.
type batchEntry struct {
	auto types.NamespacedName
	uid  types.UID
	job  *updatev1.UpdateJob
}

func newBatches(ctx context.Context, create func(context.Context, *updatev1.UpdateJob) error) *batches {
	return &batches{pending: map[string]*pendingBatch{}, byUID: map[types.UID]*pendingBatch{},
		solo: map[types.UID]bool{}, decided: map[types.UID]time.Time{}, shared: map[types.UID]bool{}, made: map[string]madeBatch{}, creating: map[string]int{}, adoptAfter: batchAdoptAfter, wake: make(chan event.GenericEvent, 4096), create: create, ctx: ctx}
}

// batchKey says which jobs one batch can carry: everything of the spec but
// the update and the commit message, which each member keeps, and the
// namespace. Empty: the job shares no commit (a pull request has its own
// branch, a container's commit is its whole tree).
func batchKey(job *updatev1.UpdateJob) string {
	if _, ok := pushTarget(&job.Spec); !ok || job.Spec.Update.Container != nil {
		return ""
	}
	spec := job.Spec.DeepCopy()
	spec.Update = updatev1.UpdateSpec{}
	spec.Commit.MessageTemplate, spec.Commit.MessageTemplateValues = "", nil
	b, err := json.Marshal(struct {
		Namespace string
		Spec      *updatev1.UpdateJobSpec
	}{job.Namespace, spec})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return string(b)
}

// pendingTurn is what the pending batches say about a run of uid that
// would make a job setting mine on target: queued (the run's automation
// is in a batch already), or busy (a batch of the target sets one of its
// policies to another value).
func (b *batches) pendingTurn(uid types.UID, target string, mine map[string]meta.ImageRef) (queued bool, busy *policyBusyError) {
	if b == nil {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byUID[uid] != nil {
		return true, nil
	}
	for _, p := range b.pending {
		if p.target != target {
			continue
		}
		for policy, ref := range mine {
			if have, ok := p.values[policy]; ok && have != ref {
				e := p.entries[0]
				return false, &policyBusyError{job: e.job.Name, automation: e.auto.Name, policy: policy}
			}
		}
	}
	return false, nil
}

// takeDecided returns, once, when uid decided to make the job its batch
// carries.
func (b *batches) takeDecided(uid types.UID) (time.Time, bool) {
	if b == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.decided[uid]
	delete(b.decided, uid)
	delete(b.shared, uid)
	return t, ok
}

// adoptLater is how long a run of uid that found job in flight waits
// before it names the job in its status, when the job is a batch of
// several automations this process made for uid's decision (not yet taken
// by adopt or record) and younger than adoptAfter (a job of one
// automation is named at once, one write): until then the run writes nothing, and the
// batch's end or its adoptAfter wake brings it back. A run that handles a
// reconcile request answers it now.
func (b *batches) adoptLater(uid types.UID, job *updatev1.UpdateJob, requested bool, now time.Time) (time.Duration, bool) {
	if b == nil || requested || job == nil {
		return 0, false
	}
	b.mu.Lock()
	_, ok := b.decided[uid]
	ok = ok && b.shared[uid]
	b.mu.Unlock()
	if !ok {
		return 0, false
	}
	left := job.CreationTimestamp.Add(b.adoptAfter).Sub(now)
	return left, left > 0
}

// pendingFor reports whether a batch of key is pending.
func (b *batches) pendingFor(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending[key] != nil
}

// takeSolo reports whether uid's job must be made alone, once (always
// without batches: a reconciler not set up with a manager).
func (b *batches) takeSolo(uid types.UID) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.solo[uid] {
		delete(b.solo, uid)
		return true
	}
	return false
}

// add puts the job of the automation obj into the pending batch of its
// key, starting one when there is none; a batch full with it is made now.
// The caller holds the reconciler's jobsMu and has checked pendingTurn.
func (b *batches) add(key, target string, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob, decided time.Time) {
	size := 0
	if raw, err := json.Marshal(job.Spec.Update); err == nil {
		size = len(raw)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending[key]
	if p != nil && (len(p.entries) > updatev1.MaxMembers || p.bytes+size > batchBytes) {
		b.flushLocked(p)
		p = nil
	}
	now := time.Now()
	if p == nil {
		p = &pendingBatch{key: key, target: target, values: map[string]meta.ImageRef{}, first: now}
		b.pending[key] = p
	}
	p.entries = append(p.entries, &batchEntry{auto: client.ObjectKeyFromObject(obj), uid: obj.UID, job: job})
	p.bytes += size
	for _, s := range job.Spec.Update.Setters {
		p.values[s.Policy] = s.ImageRef
	}
	b.byUID[obj.UID] = p
	b.decided[obj.UID] = decided
	delete(b.shared, obj.UID)
	if len(p.entries) > updatev1.MaxMembers {
		b.flushLocked(p)
		return
	}
	wait := min(batchQuiet, batchWindow-now.Sub(p.first))
	if p.timer == nil {
		p.timer = time.AfterFunc(wait, func() { b.due(p) })
	} else {
		p.timer.Reset(wait)
	}
}

// due makes p once its wait is over, unless it was made already, or
// holds it while the last batch of its key runs (up to batchHold from
// its first run): the update-job-controller runs one commit per branch at
// a time, so what arrives meanwhile waits either way, and joins the next
// commit instead of making one more.
func (b *batches) due(p *pendingBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[p.key] != p {
		return
	}
	if time.Since(p.first) < batchHold && b.running(p.key) {
		p.timer.Reset(batchPoll)
		return
	}
	b.flushLocked(p)
}

// running reports whether a batch of key is being made, or was made and
// has not ended.
func (b *batches) running(key string) bool {
	if b.creating[key] > 0 {
		return true
	}
	last, ok := b.made[key]
	if !ok || b.lookup == nil {
		return false
	}
	// A batch no runner has claimed soon after it was made (none runs,
	// or all are busy elsewhere) holds nothing: the next is made at once,
	// as a job alone would be.
	phase, created, ok := b.lookup(last.name)
	if !ok {
		// Not in the cache yet: made a moment ago, it holds the next as
		// a batch being created does. Taken for gone, it let the
		// overflow of a full batch be made at once, a commit more
		// (BenchmarkMonorepoAutomations).
		return time.Since(last.at) < batchClaimGrace
	}
	return phase == updatev1.UpdateJobRunning || (!phase.Finished() && time.Since(created) < batchClaimGrace)
}

// flushLocked takes p out of the pending batches and makes it, outside
// the lock. Until the job is made and known to the reconciler (its
// recent jobs), the automations stay pending: a run of one of them meets
// its batch either pending or made, never neither.
func (b *batches) flushLocked(p *pendingBatch) {
	if b.pending[p.key] == p {
		delete(b.pending, p.key)
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	b.creating[p.key]++
	go func() {
		job := batchJob(p.entries)
		ctx, cancel := context.WithTimeout(b.ctx, batchCreateTimeout)
		err := b.create(ctx, job)
		cancel()
		b.mu.Lock()
		b.creating[p.key]--
		if b.creating[p.key] == 0 {
			delete(b.creating, p.key)
		}
		if err == nil {
			b.made[p.key] = madeBatch{name: client.ObjectKeyFromObject(job), at: time.Now()}
		}
		for _, e := range p.entries {
			if b.byUID[e.uid] == p {
				delete(b.byUID, e.uid)
			}
			if err != nil {
				b.solo[e.uid] = true
				delete(b.decided, e.uid)
			} else if len(p.entries) > 1 {
				b.shared[e.uid] = true
			}
		}
		b.mu.Unlock()
		if err != nil {
			ctrl.LoggerFrom(b.ctx).Error(err, "making a batch UpdateJob; its automations make their jobs alone",
				"job", job.Name, "automations", len(p.entries))
			b.wakeAll(p.entries)
			return
		}
		// A batch that ends within adoptAfter is recorded by each of its
		// automations as it ends (the job's watch wakes them): one
		// status write each. One that runs longer is named in their
		// statuses while it runs.
		nn := client.ObjectKeyFromObject(job)
		time.AfterFunc(b.adoptAfter, func() {
			if !b.ended(nn) {
				b.wakeAll(p.entries)
			}
		})
	}()
}

// wakeAll reconciles the entries' automations.
func (b *batches) wakeAll(entries []*batchEntry) {
	for _, e := range entries {
		a := &imagev1.ImageUpdateAutomation{}
		a.Namespace, a.Name = e.auto.Namespace, e.auto.Name
		select {
		case b.wake <- event.GenericEvent{Object: a}:
		case <-b.ctx.Done():
			return
		}
	}
}

// ended reports whether a batch made has ended (or is gone); without a
// lookup, no batch is known to have ended.
func (b *batches) ended(nn types.NamespacedName) bool {
	if b.lookup == nil {
		return false
	}
	phase, _, ok := b.lookup(nn)
	return !ok || phase.Finished()
}

// batchJob is one job for the entries: the job of the automation first by
// name (its name, labels, annotations, controller and update), with the
// others as members, by name, each an owner of the job, so that it lives
// while any of them does.
func batchJob(entries []*batchEntry) *updatev1.UpdateJob {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b *batchEntry) int { return strings.Compare(a.auto.Name, b.auto.Name) })
	job := sorted[0].job.DeepCopy()
	for _, e := range sorted[1:] {
		ctl := metav1.GetControllerOf(e.job)
		job.Spec.Members = append(job.Spec.Members, updatev1.UpdateJobMember{
			Automation: e.auto.Name, UID: e.uid, Annotations: e.job.Annotations,
			Update: e.job.Spec.Update, MessageTemplate: e.job.Spec.Commit.MessageTemplate,
			MessageTemplateValues: e.job.Spec.Commit.MessageTemplateValues,
		})
		job.OwnerReferences = append(job.OwnerReferences, metav1.OwnerReference{
			APIVersion: ctl.APIVersion, Kind: ctl.Kind, Name: ctl.Name, UID: ctl.UID})
	}
	return job
}

// lookAgainForBatch is how long after its batch window a queued run looks
// again, in case the wake of its batch was lost.
const lookAgainForBatch = 10 * time.Second
