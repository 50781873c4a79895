package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
	"toolkit.dev/image-toolkit/pkg/schedule"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/status,verbs=get;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/finalizers,verbs=update
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// sourceIndex indexes automations by the namespace/name of their sourceRef.
const sourceIndex = ".spec.sourceRef"

// ImageUpdateAutomationReconciler reconciles ImageUpdateAutomation objects:
// it decides when the repository needs an update and creates an UpdateJob
// for it, then records the job's outcome.
type ImageUpdateAutomationReconciler struct {
	client.Client
	// APIReader reads Secrets and lists UpdateJobs past the cache.
	APIReader  client.Reader
	Events     *events.Recorder
	Metrics    *metrics.Recorder
	Automation *AutomationMetrics
	// NoCrossNamespaceRefs refuses sourceRefs to other namespaces.
	NoCrossNamespaceRefs bool
	// JobHistoryLimit is how many finished UpdateJobs to keep per
	// automation.
	JobHistoryLimit int
	// RequestHandled, when set, is told of each reconcile request handled
	// (the git push webhook receiver observes its latency so).
	RequestHandled func(namespace, name, value string)
	// Clock is the time update windows and runs are measured at; time.Now
	// when nil. Tests move it to a window's edge instead of waiting for it.
	Clock func() time.Time

	// jobsMu makes listing the jobs in flight and creating one a single
	// step for this process (the leader), so that two automations sharing
	// a policy cannot both see none in flight and both create one.
	jobsMu sync.Mutex
}

func (r *ImageUpdateAutomationReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler and its watches: its own jobs,
// ImagePolicies, and Flux GitRepositories when their kind is installed.
func (r *ImageUpdateAutomationReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.JobHistoryLimit < 0 {
		return fmt.Errorf("the job history limit must not be negative, got %d", r.JobHistoryLimit)
	}
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &updatev1.UpdateJob{}, jobOwnerIndex, func(o client.Object) []string {
		if uid := ownerUID(o); uid != "" {
			return []string{uid}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, sourceIndex, func(o client.Object) []string {
		a := o.(*imagev1.ImageUpdateAutomation)
		if a.Spec.SourceRef == nil {
			return nil
		}
		ns := a.Spec.SourceRef.Namespace
		if ns == "" {
			ns = a.Namespace
		}
		return []string{ns + "/" + a.Spec.SourceRef.Name}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageUpdateAutomation{}, builder.WithPredicates(predicates.SpecOrRequest())).
		Owns(&updatev1.UpdateJob{}, builder.WithPredicates(jobPhaseChanged{})).
		Watches(&imagev1.ImagePolicy{}, r.policyHandler()).
		WithOptions(opts)

	// Without Flux installed there is nothing to watch; automations
	// referring to a GitRepository then say its kind is missing.
	gvk := gitsource.GitRepositoryGVK
	if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		repo := &metav1.PartialObjectMetadata{}
		repo.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(repo, handler.EnqueueRequestsFromMapFunc(r.automationsOfSource),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	return b.Complete(r)
}

// Reconcile runs one automation step: validate, record a finished job,
// and, when something changed, create the next UpdateJob.
func (r *ImageUpdateAutomationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	obj := &imagev1.ImageUpdateAutomation{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImageUpdateAutomationKind, req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImageUpdateAutomationKind, start)
	r.Metrics.RecordSuspend(imagev1.ImageUpdateAutomationKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	helper := patch.NewHelper(obj, r.Client)
	requested := false
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok && v != obj.Status.LastHandledReconcileAt {
		requested = true
		obj.Status.SetLastHandledReconcileRequest(v)
		if r.RequestHandled != nil {
			r.RequestHandled(obj.Namespace, obj.Name, v)
		}
	}
	d, err := r.reconcile(ctx, obj, requested)
	// The status is written against the object as read: if it changed in
	// between (or the cache was behind), the write fails and the step runs
	// again from fresh state, so an outcome is never recorded twice.
	if perr := helper.Patch(ctx, obj, patch.WithOptimisticLock()); perr != nil {
		if apierrors.IsConflict(perr) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	d.tally.commit(r.Automation)
	r.Metrics.RecordReady(imagev1.ImageUpdateAutomationKind, obj)
	if d.wake > 0 && err == nil && !conditions.IsTrue(obj, conditions.StalledCondition) &&
		(d.result.RequeueAfter == 0 || d.wake < d.result.RequeueAfter) {
		d.result.RequeueAfter = d.wake
	}
	// Old jobs go only once the status no longer needs them.
	if d.finished != nil {
		if perr := r.pruneJobs(ctx, d.finished); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return d.result, err
}

// decision is what one reconciliation decided, for Reconcile to carry out
// once the status is written: when to look again, the outcomes and
// latencies to count (only then, so a run that loses a write conflict and
// runs again counts nothing twice), and the finished jobs to prune.
type decision struct {
	result   ctrl.Result
	tally    tally
	finished []updatev1.UpdateJob
	// wake is when the update window opens or closes: the status then
	// changes, and a change waiting for the window gets its job.
	wake time.Duration
}

func (d *decision) requeue(r ctrl.Result) *decision {
	d.result = r
	return d
}

func (r *ImageUpdateAutomationReconciler) reconcile(ctx context.Context, obj *imagev1.ImageUpdateAutomation,
	requested bool) (*decision, error) {
	d := &decision{}
	interval := obj.Spec.Interval.Duration
	now := r.now()
	sel, err := validateSpec(obj)
	if err != nil {
		markStalled(obj, err)
		return d.requeue(ctrl.Result{}), nil
	}
	win, err := r.window(obj, now)
	if err != nil {
		markStalled(obj, err)
		return d.requeue(ctrl.Result{}), nil
	}
	d.wake = win.wake
	src, err := r.resolveSource(ctx, obj)
	var f *conditions.Failure
	switch {
	case err == nil:
	case !errors.As(err, &f):
		conditions.MarkFailed(obj, conditions.FailedReason, "%s", err)
		return d.requeue(ctrl.Result{}), err
	case !f.Stalled:
		// Something is missing, and Secrets are not watched: look again
		// soon, backing off the longer it stays missing, up to the interval.
		wait := time.Second
		if c := conditions.Get(obj, conditions.ReadyCondition); c != nil && c.Reason == f.Reason {
			wait = max(wait, min(time.Since(c.LastTransitionTime.Time), interval))
		}
		return d.requeue(ctrl.Result{RequeueAfter: conditions.Apply(obj, f.After(wait), interval)}), nil
	default:
		// The source and its Secrets are read again every interval.
		markStalled(obj, err)
		return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
	}
	pols, err := r.selectPolicies(ctx, obj, sel)
	if err != nil {
		return d.requeue(ctrl.Result{}), err
	}

	inFlight, finished, err := r.jobsOf(ctx, obj)
	if err != nil {
		return d.requeue(ctrl.Result{}), err
	}
	d.finished = finished
	var last *updatev1.UpdateJob
	recorded := false
	if len(finished) > 0 {
		last = &finished[0]
		if obj.Status.LastJob == nil || obj.Status.LastJob.UID != last.UID {
			d.tally = r.record(ctx, obj, last)
			recorded = true
		}
	}
	if inFlight != nil {
		adopt(obj, inFlight)
		conditions.MarkReconciling(obj, conditions.ProgressingReason, "UpdateJob %s is %s", inFlight.Name, phaseOf(inFlight))
		return d.requeue(ctrl.Result{}), nil
	}
	// Discovery keeps the objects of the images the last job found, and
	// adds the policies it follows; without spec.discover it removes what
	// it made.
	if obj.Spec.Discover != nil || len(obj.Status.Discovered) > 0 {
		if err := r.reconcileDiscovered(ctx, obj, pols); err != nil {
			conditions.MarkFailed(obj, conditions.FailedReason, "discovered images: %s", err)
			return d.requeue(ctrl.Result{}), err
		}
	}
	if len(pols.setters) == 0 && obj.Spec.Discover == nil {
		conditions.MarkFailed(obj, conditions.DependencyNotReadyReason,
			"no ImagePolicy in namespace %s matches spec.policySelector and has a latest image yet", obj.Namespace)
		return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
	}

	head := ""
	if gitsource.BranchOnly(src.Ref) {
		ctx, cancel := context.WithTimeout(ctx, src.Repository.Timeout.Duration)
		oid, err := git.Branch(ctx, src.Repository.URL, src.remote, src.Ref.Branch)
		cancel()
		if err != nil {
			reason := conditions.GitOperationFailedReason
			if errors.Is(err, git.ErrAuthentication) {
				reason = conditions.AuthenticationFailedReason
			}
			msg := events.Redact(err.Error(), src.remote.Secrets()...)
			conditions.MarkFailed(obj, reason, "reading the head of branch %s of %s: %s", src.Ref.Branch, src.Describe, msg)
			d.tally.outcome(OutcomeFailed)
			return d.requeue(ctrl.Result{RequeueAfter: min(interval, time.Minute)}), nil
		}
		head = git.FormatRevision(src.Ref.Branch, oid)
	}

	spec := jobSpec(obj, src, pols)
	inputs := inputsHash(spec, head, obj.Generation)
	next := interval
	due := requested || obj.Status.LastAutomationRunTime == nil
	if !due {
		next = obj.Status.LastAutomationRunTime.Add(interval).Sub(now)
		due = next <= 0
	}
	// The last run had these very inputs (it failed, or pushed somewhere
	// the head does not show): run again only when an interval has passed
	// or a reconcile is requested.
	if last != nil && last.Annotations[InputsAnnotation] == inputs && !due {
		return d.requeue(ctrl.Result{RequeueAfter: next}), nil
	}
	if canShortCircuit(src.Ref, obj.Spec.GitSpec.Push) && obj.Status.ObservedGeneration == obj.Generation &&
		head == obj.Status.ObservedSourceRevision && maps.Equal(pols.observed, obj.Status.ObservedPolicies) {
		if recorded {
			// The run that just ended is the last one; its outcome
			// stays the message.
			return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
		}
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: now}
		conditions.MarkReady(obj, conditions.SucceededReason, "nothing changed since the last run: %s and %d policies as they were", head, len(pols.setters))
		d.tally.outcome(OutcomeSkipped)
		return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
	}

	if !win.open {
		// No job outside the windows, whatever asked for the run (the
		// interval, a reconcile request, a git push, a policy): the
		// status says what waits and for when, and d.wake brings the
		// run back when the window opens.
		markOutsideWindow(obj, win, pendingChanges(obj, pols, head))
		return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
	}

	job, existed, err := r.createJob(ctx, obj, spec, inputs, changeTimes(pols, obj.Status.ObservedPolicies))
	var busy *policyBusyError
	if errors.As(err, &busy) {
		// Not a failure: the other job sets the same value or an older
		// one; this run makes its job once that one has ended.
		conditions.MarkReconciling(obj, conditions.ProgressingReason, "%s", busy)
		if busy.moved {
			return d.requeue(ctrl.Result{RequeueAfter: 100 * time.Millisecond}), nil
		}
		return d.requeue(ctrl.Result{RequeueAfter: min(interval, 2*time.Second)}), nil
	}
	if err != nil {
		if apierrors.IsInvalid(err) {
			markStalled(obj, conditions.Stallf(conditions.InvalidSpecReason, "the UpdateJob for this automation is invalid: %s", err))
			return d.requeue(ctrl.Result{}), nil
		}
		conditions.MarkFailed(obj, conditions.FailedReason, "creating the UpdateJob: %s", err)
		return d.requeue(ctrl.Result{}), err
	}
	if existed {
		adopt(obj, job)
	} else {
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: now}
		r.Events.WithMetadata(map[string]string{events.MetaRevision: head}).Normal(ctx, obj, "UpdateJobCreated", "Update", fmt.Sprintf("created UpdateJob %s for %d policies at %s", job.Name, len(pols.setters), revisionOr(head, src.Ref)))
	}
	conditions.MarkReconciling(obj, conditions.ProgressingReason, "UpdateJob %s is %s", job.Name, phaseOf(job))
	return d.requeue(ctrl.Result{RequeueAfter: interval}), nil
}

// adopt makes the status own up to a job in flight that a run whose status
// was never written made (before a restart, or a lost write): that run
// started when the job was made.
func adopt(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	if lr := obj.Status.LastAutomationRunTime; lr == nil || lr.Before(&job.CreationTimestamp) {
		obj.Status.LastAutomationRunTime = job.CreationTimestamp.DeepCopy()
	}
}

// markStalled records a problem retrying cannot fix. When the spec changed
// since the last recorded run, that run's revision no longer says the
// repository is up to date for this spec: it is dropped, so that the run
// after the problem is fixed makes a job even if nothing else changed.
func markStalled(obj *imagev1.ImageUpdateAutomation, err error) {
	if obj.Status.ObservedGeneration != obj.Generation {
		obj.Status.ObservedSourceRevision = ""
	}
	obj.Status.ObservedGeneration = obj.Generation
	conditions.Apply(obj, err, 0)
}

func phaseOf(j *updatev1.UpdateJob) string {
	if j.Status.Phase == "" {
		return string(updatev1.UpdateJobPending)
	}
	return string(j.Status.Phase)
}

func revisionOr(head string, ref updatev1.GitRepositoryRef) string {
	if head != "" {
		return head
	}
	for _, s := range []string{ref.Commit, ref.Name, ref.SemVer, ref.Tag, ref.Branch} {
		if s != "" {
			return s
		}
	}
	return ""
}

// jobPhaseChanged passes job creations, deletions and phase changes, not
// the runner's heartbeats.
type jobPhaseChanged struct{ predicate.Funcs }

func (jobPhaseChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*updatev1.UpdateJob)
	n, ok2 := e.ObjectNew.(*updatev1.UpdateJob)
	return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase
}

// policyHandler enqueues, when a policy's latestRef or labels change, the
// automations of its namespace whose selector matches it before or after.
func (r *ImageUpdateAutomationReconciler) policyHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueueAdder, pols ...*imagev1.ImagePolicy) {
		list := &imagev1.ImageUpdateAutomationList{}
		if err := r.List(ctx, list, client.InNamespace(pols[0].Namespace)); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for an ImagePolicy change")
			return
		}
		for _, a := range list.Items {
			sel, err := policySelector(&a)
			if err != nil {
				continue // Stalled until its spec changes
			}
			for _, p := range pols {
				// A policy discovery made belongs to its automation,
				// whatever the selector says.
				if p.Labels[imagev1.DiscoveredByLabel] == a.Name && a.Spec.Discover != nil {
					q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
					break
				}
				if p.Status.LatestRef != nil && sel.Matches(labels.Set(p.Labels)) {
					q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
					break
				}
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueueAdder) {
			if p, ok := e.Object.(*imagev1.ImagePolicy); ok {
				enqueue(ctx, q, p)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueueAdder) {
			o, ok1 := e.ObjectOld.(*imagev1.ImagePolicy)
			n, ok2 := e.ObjectNew.(*imagev1.ImagePolicy)
			if !ok1 || !ok2 || (equalRef(o.Status.LatestRef, n.Status.LatestRef) && maps.Equal(o.Labels, n.Labels)) {
				return
			}
			enqueue(ctx, q, o, n)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueueAdder) {
			if p, ok := e.Object.(*imagev1.ImagePolicy); ok {
				enqueue(ctx, q, p)
			}
		},
	}
}

type workqueueAdder = workqueue.TypedRateLimitingInterface[reconcile.Request]

func equalRef(a, b *imagev1.ImageRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// automationsOfSource maps a GitRepository to the automations using it.
func (r *ImageUpdateAutomationReconciler) automationsOfSource(ctx context.Context, o client.Object) []reconcile.Request {
	list := &imagev1.ImageUpdateAutomationList{}
	if err := r.List(ctx, list, client.MatchingFields{sourceIndex: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for a GitRepository change")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, a := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
	}
	return reqs
}

// windowState is where the automation stands in its update windows.
type windowState struct {
	sched *schedule.Schedule
	span  schedule.Span
	// open is true without a schedule.
	open bool
	// wake is how long until the window opens or closes; 0 without a
	// schedule.
	wake time.Duration
}

// window reads spec.schedule at now and records the window open now, or
// the next, in status.nextWindow. A schedule that does not parse, or never
// opens, is Stalled: waiting cannot fix it.
func (r *ImageUpdateAutomationReconciler) window(obj *imagev1.ImageUpdateAutomation, now time.Time) (windowState, error) {
	sched, err := schedule.OfAutomation(obj.Spec.Schedule)
	if err != nil {
		obj.Status.NextWindow = nil
		return windowState{}, conditions.Stallf(imagev1.InvalidScheduleReason, "spec.schedule: %s", err)
	}
	if sched == nil {
		obj.Status.NextWindow = nil
		return windowState{open: true}, nil
	}
	span, open, ok := sched.At(now)
	if !ok {
		obj.Status.NextWindow = nil
		return windowState{}, conditions.Stallf(imagev1.InvalidScheduleReason,
			"spec.schedule: no window opens within five years (%s)", sched.Describe())
	}
	obj.Status.NextWindow = &imagev1.UpdateWindowStatus{Start: metav1.NewTime(span.Start), End: metav1.NewTime(span.End)}
	edge := span.Start
	if open {
		edge = span.End
	}
	// Never zero: a zero RequeueAfter would mean no requeue at all.
	return windowState{sched: sched, span: span, open: open, wake: max(edge.Sub(now), time.Millisecond)}, nil
}

// waitSuffix ends a failed job's message while the retry waits for a
// window, so that it is replaced rather than repeated on every run.
const waitSuffix = "; the next UpdateJob waits for the update window opening at "

// markOutsideWindow says that a run found changes but no window is open.
// A failed last job stays Ready=False with its reason (a failure must not
// look healthy while the fix waits for a window); otherwise Ready=True,
// since waiting is what the automation was told to do.
func markOutsideWindow(obj *imagev1.ImageUpdateAutomation, win windowState, pending string) {
	opens := win.span.Start.UTC().Format(time.RFC3339)
	if c := conditions.Get(obj, conditions.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse &&
		obj.Status.LastJob != nil && obj.Status.LastJob.Phase == updatev1.UpdateJobFailed {
		base, _, _ := strings.Cut(c.Message, waitSuffix)
		conditions.MarkFailed(obj, c.Reason, "%s%s%s", base, waitSuffix, opens)
		return
	}
	conditions.MarkReady(obj, imagev1.OutsideUpdateWindowReason,
		"%s; no UpdateJob outside the update windows: the next opens at %s until %s (%s)",
		pending, opens, win.span.End.UTC().Format(time.RFC3339), win.sched.Describe())
}

// pendingChanges says what a run outside the windows found changed since
// the last recorded run.
func pendingChanges(obj *imagev1.ImageUpdateAutomation, pols *selection, head string) string {
	var changed []string
	for name, ref := range pols.observed {
		if prev, ok := obj.Status.ObservedPolicies[name]; !ok || prev != ref {
			changed = append(changed, name+" ("+orDigest(ref)+")")
		}
	}
	slices.Sort(changed)
	const maxListed = 5
	if n := len(changed); n > maxListed {
		changed = append(changed[:maxListed], fmt.Sprintf("%d more", n-maxListed))
	}
	if len(obj.Status.ObservedPolicies) == 0 && obj.Status.ObservedSourceRevision == "" {
		return "no run has applied ImagePolicies " + strings.Join(changed, ", ") + " yet"
	}
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, "ImagePolicies "+strings.Join(changed, ", "))
	}
	if head != "" && obj.Status.ObservedSourceRevision != "" && head != obj.Status.ObservedSourceRevision {
		parts = append(parts, "the branch head ("+head+")")
	}
	if g := obj.Status.ObservedGeneration; g != 0 && g != obj.Generation {
		parts = append(parts, "the spec")
	}
	if len(parts) == 0 {
		// Another push branch or a refspec: drift there is invisible,
		// so a run is made every interval.
		return "a run is due"
	}
	return strings.Join(parts, " and ") + " changed since the last run"
}

func orDigest(ref imagev1.ImageRef) string {
	if ref.Tag != "" {
		return ref.Tag
	}
	return ref.Digest
}
