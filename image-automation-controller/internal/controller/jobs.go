package controller

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
)

// Labels and annotations on the UpdateJobs an automation creates.
const (
	// AutomationLabel names the automation, for kubectl -l (when the name
	// fits in a label value).
	AutomationLabel = "image.toolkit.dev/automation"
	// InputsAnnotation is the hash of what the job was made from: its spec,
	// the branch head and the automation's generation.
	InputsAnnotation = "image.toolkit.dev/inputs"
	// GenerationAnnotation is the automation's generation the job applies.
	GenerationAnnotation = "image.toolkit.dev/automation-generation"
	// RunAnnotation numbers an automation's jobs in the order they were
	// made (creation times have whole seconds, too coarse to order them).
	RunAnnotation = "image.toolkit.dev/run"
)

// jobOwnerIndex indexes UpdateJobs by the UIDs of the
// ImageUpdateAutomations whose updates they carry: the one that controls
// a job, and a batch's members.
const jobOwnerIndex = ".metadata.ownerReferences.automation"

func jobAutomations(o client.Object) []string {
	j, ok := o.(*updatev1.UpdateJob)
	if !ok || ownerUID(j) == "" {
		return nil
	}
	var out []string
	for _, uid := range j.Automations() {
		out = append(out, string(uid))
	}
	return out
}

// ownerUID returns the UID of the ImageUpdateAutomation controlling job.
func ownerUID(job client.Object) string {
	ref := metav1.GetControllerOf(job)
	if ref == nil || ref.Kind != imagev1.ImageUpdateAutomationKind || !strings.HasPrefix(ref.APIVersion, imagev1.GroupVersion.Group+"/") {
		return ""
	}
	return string(ref.UID)
}

// jobSpec is the UpdateJob for one run of an automation of namespace,
// looking for holds (and overriding the released ones) as holds says.
func jobSpec(namespace string, a *imagev1.ImageUpdateAutomationSpec, src gitsource.Source, setters []updatev1.PolicySetter, holds *updatev1.HoldSpec) updatev1.UpdateJobSpec {
	spec := updatev1.UpdateJobSpec{
		Repository: *src.Repository.DeepCopy(),
		Checkout:   updatev1.GitCheckoutSpec{Reference: src.Ref},
		Update:     updatev1.UpdateSpec{Setters: setters, Holds: holds},
		Commit:     *a.GitSpec.Commit.DeepCopy(),
		Push:       a.GitSpec.Push.DeepCopy(),
	}
	spec.Update.Path = src.Path
	if a.Update != nil && a.Update.Path != "" {
		spec.Update.Path = a.Update.Path
	}
	spec.Update.ArgoCD = argoCDOverrides(a, src, setters)
	if a.Update != nil {
		for _, c := range a.Update.Charts {
			spec.Update.Charts = append(spec.Update.Charts, updatev1.ChartUpdate{Policy: updatev1.PolicyKey(namespace, c.Policy),
				Application: c.Application, Namespace: cmp.Or(c.Namespace, namespace), Chart: c.Chart})
		}
	}
	if d := a.Discover; d != nil {
		spec.Update.Discover = d.DiscoverSpec.DeepCopy()
	}
	if spec.Update.Setters == nil {
		spec.Update.Setters = []updatev1.PolicySetter{}
	}
	return spec
}

// inputsHash identifies a run by what its job is made from.
func inputsHash(spec updatev1.UpdateJobSpec, head string, generation int64) string {
	b, err := json.Marshal(struct {
		Spec       updatev1.UpdateJobSpec `json:"spec"`
		Head       string                 `json:"head"`
		Generation int64                  `json:"generation"`
	}{spec, head, generation})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// jobName is <automation>-<10 hex digits>, from the inputs and the number
// of the attempt with these inputs, so that the same decision always makes
// the same name.
func jobName(automation, inputs string, attempt int) string {
	sum := sha256.Sum256([]byte(inputs + "/" + strconv.Itoa(attempt)))
	suffix := hex.EncodeToString(sum[:])[:10]
	prefix := automation
	if max := validation.DNS1123SubdomainMaxLength - len(suffix) - 1; len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	return prefix + "-" + suffix
}

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

// pushTarget is where a job's commit lands: its repository, by
// gitsource.RepositoryKey (any spelling of the URL), and branch. A job
// proposing a pull request writes its own head branch, which no other
// automation's job writes: it has no shared target.
func pushTarget(spec *updatev1.UpdateJobSpec) (string, bool) {
	branch := spec.Checkout.Reference.Branch
	if p := spec.Push; p != nil {
		if p.PullRequest != nil {
			return "", false
		}
		if p.Branch != "" {
			branch = p.Branch
		}
	}
	repo, ok := gitsource.RepositoryKey(spec.Repository.URL)
	if !ok {
		repo = strings.TrimSpace(spec.Repository.URL)
	}
	return repo + "@" + branch, true
}

// sameTarget reports whether two jobs push to the same branch of the same
// repository: only such jobs can set a file back and forth, so only
// they take turns. Automations sharing a policy across repositories or
// branches (one policy, many clusters) run at once.
func sameTarget(a, b *updatev1.UpdateJobSpec) bool {
	ta, ok := pushTarget(a)
	if !ok {
		return false
	}
	tb, ok := pushTarget(b)
	return ok && ta == tb
}

// createJob creates the run's UpdateJob, unless one is already in flight.
// The jobs it weighs are the automation's own and the unfinished jobs of
// its push target, from the cache (its sync precedes any run, so a job
// made before a restart is seen), plus the jobs this process made that
// the cache has not shown yet (recentJobs), so that a job made a moment ago
// is never made twice. Listing every job of the namespace from the API
// server, as before, made each run cost the namespace's jobs: with a
// thousand automations on one branch, seconds per run under the lock. It
// returns the job and whether it was there already.
//
// Automations that overlap (they select the same ImagePolicy and push to
// the same branch of the same repository, perhaps the same files) take
// turns: while another automation's job that sets
// one of this run's policies to another value is in flight, no job is made
// and the error is a *policyBusyError. Jobs that set a shared policy to the
// same value cannot set a file back and forth, so they are made at once,
// and the update-job-controller runs them as one commit (a monorepo's
// automations following one base image). Each job takes its policies' values when it is made,
// and a policy's value only rises (never a downgrade), so jobs of one
// policy that run one after the other write rising values. Run at once, a
// job made for an older value could push after one made for a newer
// value (a slow fetch, a retry after a lost push race) and set the file
// back, then its automation's next job forward again: a flip-flop
// (tests/faults TestOverlapNoFlipFlop). For the same reason the values are
// checked against the policies, read past the cache, once no such job is in
// flight: a run that read them before another automation's newer job ran
// and ended (its branch head read took a while) must not make a job for
// the older value.
func (r *ImageUpdateAutomationReconciler) createJob(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	spec updatev1.UpdateJobSpec, inputs string, times map[string]time.Time, batch bool, now time.Time) (*updatev1.UpdateJob, bool, error) {
	job, existing, err := r.takeTurn(ctx, obj, &spec, inputs, times, nil)
	if existing != nil || err != nil {
		return existing, existing != nil, err
	}
	if setters := unheld(spec.Update.Setters, obj.Status.Holds); len(setters) > 0 {
		pols, err := r.readSetPolicies(ctx, setters)
		if err != nil {
			r.recent.drop(job)
			return nil, false, err
		}
		if err := moved(setters, pols); err != nil {
			r.recent.drop(job)
			return nil, false, err
		}
	}
	if key := batchKey(job); batch && key != "" && !r.batches.takeSolo(obj.UID) && !r.aloneOnSource(ctx, obj, key) {
		// The reservation becomes the batch's entry in one step.
		target, _ := pushTarget(&job.Spec)
		r.jobsMu.Lock()
		r.recent.drop(job)
		r.batches.add(key, target, obj, job, now)
		r.jobsMu.Unlock()
		return nil, false, errQueued
	}
	made, existed, err := r.create(ctx, obj, job)
	if errors.Is(err, errNameTaken) {
		// Another automation's job has the name (names are cut to fit,
		// and only the jobs weighed are known to be taken): the next one.
		r.recent.drop(job)
		if job, existing, err = r.takeTurn(ctx, obj, &spec, inputs, times, job); existing != nil || err != nil {
			return existing, existing != nil, err
		}
		made, existed, err = r.create(ctx, obj, job)
	}
	switch {
	case err != nil || existed:
		r.recent.drop(job)
	default:
		r.recent.add(made)
	}
	return made, existed, err
}

// aloneOnSource reports whether obj is the only automation of its
// repository (repositoryIndex) and no batch of key is pending: its job
// can share a commit with no other, so it is made now rather than after
// batchQuiet, a tenth of a second of each tag's way to its commit
// (BenchmarkChainLargeRepo). When the cache cannot say, the run waits for
// others as before. Two automations naming one repository two ways (a
// sourceRef and its URL) are each alone: their jobs are two, which the
// update-job-controller's groups still make one commit.
func (r *ImageUpdateAutomationReconciler) aloneOnSource(ctx context.Context, obj *imagev1.ImageUpdateAutomation, key string) bool {
	repo := repositoryKey(obj)
	if repo == "" || r.batches.pendingFor(key) {
		return false
	}
	list := &imagev1.ImageUpdateAutomationList{}
	err := r.List(ctx, list, client.MatchingFields{repositoryIndex: repo}, client.UnsafeDisableDeepCopy)
	return err == nil && len(list.Items) == 1 && list.Items[0].UID == obj.UID
}

// repositoryIndex indexes automations by the repository they write to,
// as the spec names it (repositoryKey).
const repositoryIndex = ".spec.git.repository"

// repositoryKey is the repository an automation writes to as its spec
// names it: spec.git.repository's URL in its namespace, or its sourceRef
// (sourceIndexKey); "" when it names neither.
func repositoryKey(a *imagev1.ImageUpdateAutomation) string {
	if r := a.Spec.GitSpec.Repository; r != nil && r.URL != "" {
		return a.Namespace + " " + r.URL
	}
	return sourceIndexKey(a)
}

// errQueued: the run's job is in its branch's pending batch (batch.go).
var errQueued = errors.New("queued in a batch")

// makeBatch creates a batch's job and makes it known to the runs that
// weigh jobs before the cache shows it.
func (r *ImageUpdateAutomationReconciler) makeBatch(ctx context.Context, job *updatev1.UpdateJob) error {
	if err := r.Create(ctx, job); err != nil {
		return err
	}
	r.jobsMu.Lock()
	defer r.jobsMu.Unlock()
	r.recent.add(job)
	return nil
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
	t := takeTurn(obj.UID, spec, jobs)
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
		// Read only: takeTurn copies what it keeps of others' jobs.
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

// takeTurn reads the namespace's jobs for a run of the automation uid that
// would make spec.
func takeTurn(uid types.UID, spec *updatev1.UpdateJobSpec, jobs []updatev1.UpdateJob) turn {
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

// policyValues are the values setters set, by policy key.
func policyValues(setters []updatev1.PolicySetter) map[string]meta.ImageRef {
	out := make(map[string]meta.ImageRef, len(setters))
	for _, s := range setters {
		out[s.Policy] = s.ImageRef
	}
	return out
}

// readSetPolicies reads the policies the setters name past the cache, each
// once, and each read shared by the runs asking at once (a monorepo's
// automations follow one policy). A policy that is gone is left out. Not
// a list of the namespace: at 30,000 policies in one namespace that list
// took the API server longer than its request timeout.
func (r *ImageUpdateAutomationReconciler) readSetPolicies(ctx context.Context, setters []updatev1.PolicySetter) ([]imagev1.ImagePolicy, error) {
	var out []imagev1.ImagePolicy
	seen := map[string]bool{}
	for _, st := range setters {
		if seen[st.Policy] {
			continue
		}
		seen[st.Policy] = true
		ns, name, ok := updatev1.SplitPolicyKey(st.Policy)
		if !ok {
			continue
		}
		p, err := r.policies.read(ctx, st.Policy, func(ctx context.Context) (*imagev1.ImagePolicy, error) {
			p := &imagev1.ImagePolicy{}
			err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return p, err
		})
		if err != nil {
			return nil, fmt.Errorf("reading ImagePolicy %s: %w", st.Policy, err)
		}
		if p != nil {
			out = append(out, *p)
		}
	}
	return out, nil
}

// moved returns a *policyBusyError when a policy no longer has the value
// a setter was made from.
func moved(setters []updatev1.PolicySetter, policies []imagev1.ImagePolicy) error {
	now := map[string]*meta.ImageRef{}
	for i := range policies {
		now[updatev1.PolicyKey(policies[i].Namespace, policies[i].Name)] = policies[i].Status.LatestRef
	}
	for _, s := range setters {
		if ref := now[s.Policy]; ref == nil || *ref != (s.ImageRef) {
			return &policyBusyError{policy: s.Policy, moved: true}
		}
	}
	return nil
}

// newJob is the run's UpdateJob: named for its inputs (and the attempt
// with them), numbered after the automation's jobs, with the times the
// setters' policies picked their values.
func newJob(obj *imagev1.ImageUpdateAutomation, spec updatev1.UpdateJobSpec, inputs string, t turn, times map[string]time.Time) *updatev1.UpdateJob {
	name := ""
	for attempt := 0; name == "" || t.taken[name]; attempt++ {
		name = jobName(obj.Name, inputs, attempt)
	}
	job := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: obj.Namespace,
			// The automation's labels carry over, so a controller
			// sharded by --watch-label-selector sees its own jobs.
			Labels: maps.Clone(obj.Labels),
			Annotations: map[string]string{
				InputsAnnotation:     inputs,
				GenerationAnnotation: strconv.FormatInt(obj.Generation, 10),
				RunAnnotation:        strconv.Itoa(t.run + 1),
			},
		},
		Spec: spec,
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	if len(validation.IsValidLabelValue(obj.Name)) == 0 {
		job.Labels[AutomationLabel] = obj.Name
	}
	// The times are not inputs: the hash was taken without them.
	job.Spec.Update.Setters = slices.Clone(spec.Update.Setters)
	for i, s := range job.Spec.Update.Setters {
		if at, ok := times[s.Policy]; ok {
			job.Spec.Update.Setters[i].LatestRefTime = &metav1.Time{Time: at}
		}
	}
	return job
}

// create creates job; a job of that name already there is the run's when
// it is an unfinished job of the automation (made by a run whose status
// write was lost).
func (r *ImageUpdateAutomationReconciler) create(ctx context.Context, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) (*updatev1.UpdateJob, bool, error) {
	err := r.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		existing := &updatev1.UpdateJob{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), existing); err != nil {
			return nil, false, err
		}
		if ownerUID(existing) == string(obj.UID) && !existing.Status.Phase.Finished() {
			return existing, true, nil
		}
		return nil, false, fmt.Errorf("UpdateJob %s %w", job.Name, errNameTaken)
	}
	if err != nil {
		return nil, false, err
	}
	return job, false, nil
}

// changeTimes returns, for the setters whose value differs from what the
// last run applied, when their policy picked that value.
func changeTimes(sel *selection.Selection, last imagev1.ObservedPolicies) map[string]time.Time {
	out := map[string]time.Time{}
	for _, s := range sel.Setters {
		_, name, _ := updatev1.SplitPolicyKey(s.Policy)
		if prev, ok := last[name]; ok && prev == (s.ImageRef) {
			continue
		}
		if t, ok := sel.Times[s.Policy]; ok {
			out[s.Policy] = t
		}
	}
	return out
}

// jobsOf returns the automation's jobs from the cache: those in flight,
// oldest first, and the finished ones newest first.
func (r *ImageUpdateAutomationReconciler) jobsOf(ctx context.Context, obj *imagev1.ImageUpdateAutomation) (inFlight []*updatev1.UpdateJob, finished []updatev1.UpdateJob, err error) {
	list := &updatev1.UpdateJobList{}
	if err := r.List(ctx, list, client.InNamespace(obj.Namespace), client.MatchingFields{jobOwnerIndex: string(obj.UID)}); err != nil {
		return nil, nil, fmt.Errorf("listing UpdateJobs: %w", err)
	}
	// A batch is read as the automation's own job (its update and its
	// outcome).
	for _, j := range updatev1.ViewsOf(obj.UID, list.Items) {
		if j.Status.Phase.Finished() {
			finished = append(finished, j)
		} else {
			inFlight = append(inFlight, &j)
		}
	}
	slices.SortStableFunc(inFlight, func(a, b *updatev1.UpdateJob) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	slices.SortFunc(finished, func(a, b updatev1.UpdateJob) int {
		if c := runOf(&b) - runOf(&a); c != 0 {
			return c
		}
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return inFlight, finished, nil
}

// runOf is the job's run number, 0 when it has none.
func runOf(j *updatev1.UpdateJob) int {
	return runNumber(j.Annotations)
}

func runNumber(annotations map[string]string) int {
	n, _ := strconv.Atoi(annotations[RunAnnotation])
	return n
}

// record writes a finished job's outcome into the status, once per job:
// the job's reference, what it found and applied, and its outcome as the
// automation's Ready condition and events. A failed job's failure is the
// automation's Ready=False until a run decides otherwise; it is no failure
// of this run, which goes on to decide the next job. It returns what to
// count once the status is written.
func (r *ImageUpdateAutomationReconciler) record(ctx context.Context, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) tally {
	var t tally
	// The automation's events carry what its job did: commit, pull
	// request, replaced values.
	ev := r.Events.WithMetadata(events.UpdateJobMetadata(job))
	obj.Status.LastJob = jobReference(job)
	if decided, ok := r.batches.takeDecided(obj.UID); ok {
		// The batch ended before this automation named it (batch.go):
		// its run started when it decided to make the job.
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: decided}
	}
	if found, ok := discovered(job); ok {
		obj.Status.Discovered = found
	}
	if pr := job.Status.PullRequest; pr != nil {
		obj.Status.LastPullRequest = pr.DeepCopy()
	}
	recordHolds(ctx, ev, obj, job, &t)
	switch job.Status.Phase {
	case updatev1.UpdateJobSucceeded:
		obj.Status.ObservedSourceRevision = revisionAfterPush(job)
		before := obj.Status.ObservedPolicies
		applied(obj, job)
		obj.Status.AppliedRevision = appliedRevision(job)
		t.latencies = recordPush(ctx, ev, obj, job, time.Now())
		remember(obj, pushRecord(before, job, obj.Status.LastPushTime))
		t.outcome(OutcomePushed)
	case updatev1.UpdateJobNoChange:
		merged(obj, job)
		obj.Status.ObservedSourceRevision = job.Status.CheckoutRevision
		applied(obj, job)
		obj.Status.AppliedRevision = appliedRevision(job)
		recordNoChange(ctx, ev, obj, job)
		t.outcome(OutcomeNoChange)
	case updatev1.UpdateJobFailed:
		reason, msg := conditions.FailedReason, "no reason given"
		if c := conditions.Get(job, conditions.ReadyCondition); c != nil {
			if c.Reason != "" {
				reason = c.Reason
			}
			if c.Message != "" {
				msg = c.Message
			}
		}
		// The one way to a failure condition, though the reconcile
		// goes on: the next decision may replace it.
		f := failure(reason, "UpdateJob %s failed: %s", job.Name, msg)
		conditions.Record(obj, f, f.Error())
		ev.Warning(ctx, obj, reason, "Update", fmt.Sprintf("UpdateJob %s failed: %s", job.Name, msg))
		t.outcome(OutcomeFailed)
	}
	return t
}

// applied records the policies and generation a job applied.
func applied(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	obj.Status.ObservedPolicies = policiesOf(job)
	if gen, _ := strconv.ParseInt(job.Annotations[GenerationAnnotation], 10, 64); gen > 0 {
		obj.Status.ObservedGeneration = gen
	}
}

// recordPush records a job that pushed a commit (or proposed it), and
// returns the latencies from its policies' changes to the push.
func recordPush(ctx context.Context, ev *events.Recorder, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob, now time.Time) []float64 {
	pushed := now
	if ct := job.Status.CompletionTime; ct != nil {
		// completionTime has whole seconds: the push happened
		// within the second after it, and before now.
		pushed = minTime(now, ct.Add(time.Second))
	}
	obj.Status.LastPushCommit = job.Status.PushedCommit
	obj.Status.LastPushTime = job.Status.CompletionTime.DeepCopy()
	if obj.Status.LastPushTime == nil {
		obj.Status.LastPushTime = &metav1.Time{Time: now}
	}
	if pr := job.Status.PullRequest; pr != nil {
		conditions.MarkReady(obj, conditions.SucceededReason, "%s pull request #%d (UpdateJob %s): %s",
			pr.Action, pr.Number, job.Name, pr.URL)
		ev.Normal(ctx, obj, "PullRequest", "Push", fmt.Sprintf("UpdateJob %s %s pull request #%d: %s",
			job.Name, pr.Action, pr.Number, pr.URL))
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "pushed commit %s to %s (UpdateJob %s)",
			short(job.Status.PushedCommit), pushBranch(job), job.Name)
		ev.Normal(ctx, obj, "Pushed", "Push", fmt.Sprintf("UpdateJob %s pushed commit %s to %s",
			job.Name, job.Status.PushedCommit, pushBranch(job)))
	}
	var latencies []float64
	for _, s := range job.Spec.Update.Setters {
		if s.LatestRefTime != nil && !pushed.Before(s.LatestRefTime.Time) {
			latencies = append(latencies, pushed.Sub(s.LatestRefTime.Time).Seconds())
		}
	}
	return latencies
}

// pushRecord is the history entry of a job that pushed: the policies
// whose markers its commit changed (from its result's changes; a
// container-mode job reports files, not markers, so then the policies
// whose image differs from what was applied before), each with the image
// written and the tag it replaced.
func pushRecord(before imagev1.ObservedPolicies, job *updatev1.UpdateJob, at *metav1.Time) imagev1.PushRecord {
	rec := imagev1.PushRecord{Commit: job.Status.PushedCommit}
	if at != nil {
		rec.Time = *at
	}
	if pr := job.Status.PullRequest; pr != nil {
		rec.PullRequest = pr.Number
	}
	after := policiesOf(job)
	changed := map[string]bool{}
	// replaced is what the changes replaced, by policy: the image a
	// first push replaced, which no earlier run recorded.
	replaced := map[string]meta.ImageRef{}
	if res := job.Status.Result; res != nil {
		for _, f := range res.Files {
			for _, o := range f.Objects {
				for _, c := range o.Changes {
					if _, name, ok := updatev1.SplitPolicyKey(setterPolicy(c.Setter)); ok {
						changed[name] = true
						if _, seen := replaced[name]; !seen && c.Setter == setterPolicy(c.Setter) {
							if ref, err := setters.ParseImage(c.OldValue); err == nil {
								replaced[name] = ref
							}
						}
					}
				}
			}
		}
	}
	if len(changed) == 0 {
		for name, ref := range after {
			if before[name] != ref {
				changed[name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(changed)) {
		ref, ok := after[name]
		if !ok {
			continue
		}
		if len(rec.Images) == imagev1.MaxPushedImages {
			rec.MoreImages++
			continue
		}
		from, ok := before[name]
		if !ok {
			from = replaced[name]
		}
		rec.Images = append(rec.Images, imagev1.PushedImage{Policy: name, ImageRef: ref, From: from.Tag, FromDigest: from.Digest})
	}
	return rec
}

// setterPolicy is the policy key (NAMESPACE:NAME) of a marker's setter,
// which may name a field (NAMESPACE:NAME:tag).
func setterPolicy(setter string) string {
	if i := strings.Index(setter, ":"); i >= 0 {
		if j := strings.Index(setter[i+1:], ":"); j >= 0 {
			return setter[:i+1+j]
		}
	}
	return setter
}

// remember puts rec first in the automation's history, dropping the
// oldest beyond MaxHistory; a record of the commit already first (the
// same job read twice) replaces it.
func remember(obj *imagev1.ImageUpdateAutomation, rec imagev1.PushRecord) {
	h := obj.Status.History
	if len(h) > 0 && h[0].Commit == rec.Commit {
		h = h[1:]
	}
	obj.Status.History = append([]imagev1.PushRecord{rec}, h[:min(len(h), imagev1.MaxHistory-1)]...)
}

// merged records, on the last pull request the automation proposed, the
// checkout revision of the first job that found the branch carrying
// every image the request proposed (PushRecord.Merged): however a person
// merged it (merge commit, squash, rebase), that commit is where the
// automation's change reached the branch. A job that wants other images
// for those policies says nothing about the request. Nor does any job
// once one closed the request still open (status.lastPullRequest, kept
// until the next request): a person wrote those images on the branch by
// hand, and their commit is not the automation's to revert.
func merged(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	if len(obj.Status.History) == 0 {
		return
	}
	last := &obj.Status.History[0]
	_, hash, ok := git.ParseRevision(job.Status.CheckoutRevision)
	if last.PullRequest == 0 || last.Merged != "" || len(last.Images) == 0 || last.MoreImages > 0 || !ok {
		return
	}
	if pr := obj.Status.LastPullRequest; pr != nil && pr.Number == last.PullRequest && pr.Action == updatev1.PullRequestClosedNow {
		return
	}
	want := policiesOf(job)
	for _, img := range last.Images {
		if w, ok := want[img.Policy]; !ok || w.String() != img.ImageRef.String() {
			return
		}
	}
	last.Merged = hash
}

// recordNoChange records a job that found the files up to date.
func recordNoChange(ctx context.Context, ev *events.Recorder, obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	switch pr := job.Status.PullRequest; {
	case pr == nil:
		conditions.MarkReady(obj, conditions.SucceededReason, "no change needed at %s (UpdateJob %s)", job.Status.CheckoutRevision, job.Name)
	case pr.Action == updatev1.PullRequestClosedNow:
		conditions.MarkReady(obj, conditions.SucceededReason, "no change needed at %s: closed pull request #%d (UpdateJob %s): %s",
			job.Status.CheckoutRevision, pr.Number, job.Name, pr.URL)
		ev.Normal(ctx, obj, "PullRequest", "Push", fmt.Sprintf("UpdateJob %s closed pull request #%d: the base has its changes: %s",
			job.Name, pr.Number, pr.URL))
	default:
		conditions.MarkReady(obj, conditions.SucceededReason, "pull request #%d is up to date (UpdateJob %s): %s", pr.Number, job.Name, pr.URL)
	}
}

// jobReference names the finished job, with what its markers say about
// the policies: setters no marker names, and markers naming a policy the job
// had no value for. They are the commonest answer to "why was my image not
// updated", and outlive the job, which may be pruned.
func jobReference(job *updatev1.UpdateJob) *imagev1.UpdateJobReference {
	ref := &imagev1.UpdateJobReference{Name: job.Name, UID: job.UID, Phase: job.Status.Phase}
	r := job.Status.Result
	if r == nil {
		return ref
	}
	ref.UnmarkedPolicies = r.UnmarkedPolicies[:min(len(r.UnmarkedPolicies), imagev1.MaxLastJobPolicies)]
	// The job lists its unknown policies first.
	for _, m := range r.Markers {
		if m.Unknown && len(ref.UnknownPolicies) < imagev1.MaxLastJobPolicies {
			ref.UnknownPolicies = append(ref.UnknownPolicies, m.Policy)
		}
	}
	return ref
}

// policiesOf turns a job's setters back into observed policies.
func policiesOf(job *updatev1.UpdateJob) imagev1.ObservedPolicies {
	out := imagev1.ObservedPolicies{}
	for _, s := range job.Spec.Update.Setters {
		_, name, _ := updatev1.SplitPolicyKey(s.Policy)
		out[name] = s.ImageRef
	}
	return out
}

// revisionAfterPush is the checkout branch head once the job is done: the
// pushed commit when it pushed to the branch it checked out, so that the
// next run's ls-remote matches and short-circuits.
func revisionAfterPush(job *updatev1.UpdateJob) string {
	ref := job.Spec.Checkout.Reference
	if job.Status.PushedCommit != "" && gitsource.BranchOnly(ref) && pushBranch(job) == ref.Branch &&
		job.Status.PullRequest == nil {
		return git.FormatRevision(ref.Branch, job.Status.PushedCommit)
	}
	return job.Status.CheckoutRevision
}

// appliedRevision is the commit of the checkout branch whose files hold
// the job's images once it is done (status.appliedRevision, which
// promotions follow): the commit it pushed to that branch, or the head it
// found up to date; "" when the images are only proposed (a pull request
// still open, another push branch).
func appliedRevision(job *updatev1.UpdateJob) string {
	if pr := job.Status.PullRequest; pr != nil && pr.Action != updatev1.PullRequestClosedNow {
		return ""
	}
	if job.Status.Phase == updatev1.UpdateJobNoChange {
		return job.Status.CheckoutRevision
	}
	if rev := revisionAfterPush(job); job.Status.PushedCommit != "" && strings.HasSuffix(rev, ":"+job.Status.PushedCommit) {
		return rev
	}
	return ""
}

// pushBranch is where the job's commit went, as its plan says
// (jobplan.PushTarget): the push branch, else the refspec's destination;
// a pull request's head branch, which the runner named.
func pushBranch(job *updatev1.UpdateJob) string {
	if pr := job.Status.PullRequest; pr != nil {
		return pr.HeadBranch
	}
	t, err := jobplan.PushTarget(job.Spec.Checkout.Reference, job.Spec.Push)
	switch {
	case err != nil:
		return ""
	case t.Branch == "" && len(t.Extra) > 0:
		return strings.TrimPrefix(t.Extra[0].Dst, "refs/heads/")
	}
	return t.Branch
}

func short(oid string) string {
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// pruneJobs deletes the finished jobs beyond the newest limit.
func (r *ImageUpdateAutomationReconciler) pruneJobs(ctx context.Context, finished []updatev1.UpdateJob) error {
	for i := r.JobHistoryLimit; i < len(finished); i++ {
		j := &finished[i]
		if !r.controls(ctx, j) {
			continue
		}
		if err := r.Delete(ctx, j, client.Preconditions{UID: &j.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting UpdateJob %s: %w", j.Name, err)
		}
	}
	return nil
}

// controls reports whether the job j is a view of (UpdateJob.View) is
// controlled by the automation j's view is for: only that automation
// prunes a batch, under its own history limit, so that a member's
// history does not delete the batch its other members record.
func (r *ImageUpdateAutomationReconciler) controls(ctx context.Context, j *updatev1.UpdateJob) bool {
	raw := &updatev1.UpdateJob{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(j), raw, client.UnsafeDisableDeepCopy); err != nil {
		return !apierrors.IsNotFound(err)
	}
	return raw.UID == j.UID && ownerUID(raw) == ownerUID(j)
}
