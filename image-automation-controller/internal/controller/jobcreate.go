package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// Making a run's UpdateJob: the policies' values checked past the cache,
// the job created (or handed to the branch's pending batch), and the
// cache's indexes the creation looks up by.

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
	if err := r.fresh(ctx, obj); err != nil {
		return nil, false, err
	}
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

// errStale: the automation as read is behind the API server's.
var errStale = errors.New("the automation changed since it was read")

// fresh refuses to make a job from an automation the cache showed behind
// the API server: its status (the holds a rollback just recorded, the
// push history) decides what the job writes, and a job is a side effect
// that outlives the status write, which fails against a stale object. A
// run right after the rollback's own write could otherwise make a job
// without the hold and push the broken image again (tests/e2e
// TestChainRollback, under load). One metadata read past the cache per
// job made.
func (r *ImageUpdateAutomationReconciler) fresh(ctx context.Context, obj *imagev1.ImageUpdateAutomation) error {
	cur := &metav1.PartialObjectMetadata{}
	cur.SetGroupVersionKind(imagev1.GroupVersion.WithKind(imagev1.ImageUpdateAutomationKind))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return err
	}
	if cur.ResourceVersion != obj.ResourceVersion {
		return errStale
	}
	return nil
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
