package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/healthwatch"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/selection"
)

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/status,verbs=get;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations/finalizers,verbs=update
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=update.toolkit.dev,resources=updatejobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// sourceIndex indexes automations by their sourceRef (gitsource.SourceKey).
const sourceIndex = ".spec.sourceRef"

// sourceIndexKey is the automation's key in sourceIndex, "" without a
// sourceRef.
func sourceIndexKey(a *imagev1.ImageUpdateAutomation) string {
	ref := a.Spec.SourceRef
	if ref == nil {
		return ""
	}
	ns := ref.Namespace
	if ns == "" {
		ns = a.Namespace
	}
	return gitsource.SourceKey(gitsource.SourceKindOf(ref), ns, ref.Name)
}

// ImageUpdateAutomationReconciler reconciles ImageUpdateAutomation objects:
// it decides when the repository needs an update and creates an UpdateJob
// for it, then records the job's outcome.
type ImageUpdateAutomationReconciler struct {
	client.Client
	// APIReader reads Secrets and lists UpdateJobs past the cache.
	APIReader client.Reader
	// HealthRemote are the flags about rollback.healthOf kubeconfigs.
	HealthRemote healthwatch.RemoteOptions
	// Cloud reaches the clusters of rollback.healthOf kubeConfig.configMapRef
	// references with a cloud identity.
	Cloud      *cloudauth.Issuer
	Events     *events.Recorder
	Metrics    *metrics.Recorder
	Automation *AutomationMetrics
	// NoCrossNamespaceRefs refuses sourceRefs to other namespaces.
	NoCrossNamespaceRefs bool
	// ArgoCDNamespace is where Argo CD runs, which names override files
	// and holds its repository Secrets (--argocd-namespace).
	ArgoCDNamespace string
	// WatchNamespace is the one namespace the controller watches
	// (--watch-namespace), where it reads Applications; all when empty.
	WatchNamespace string
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
	recent recentJobs
	// batches are the jobs of branches waiting to be made as one
	// (batch.go).
	batches *batches
	// heads, sources and policies share reads between runs (sharedReads).
	heads    sharedReads[string]
	sources  sharedReads[*source]
	policies sharedReads[*imagev1.ImagePolicy]

	// apps is the Application cache and watch (applications.go).
	apps *applications

	kindOnce sync.Once
	k        *reconcile.Kind[*imagev1.ImageUpdateAutomation, run]
	// health reads and watches spec.rollback.healthOf.
	health *healthwatch.Watches
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
	r.batches = newBatches(ctx, r.makeBatch)
	r.batches.lookup = func(nn types.NamespacedName) (updatev1.UpdateJobPhase, time.Time, bool) {
		j := &updatev1.UpdateJob{}
		if err := mgr.GetCache().Get(ctx, nn, j, client.UnsafeDisableDeepCopy); err != nil {
			return "", time.Time{}, false
		}
		return j.Status.Phase, j.CreationTimestamp.Time, true
	}
	if err := r.indexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageUpdateAutomation{}, builder.WithPredicates(predicate.Or(predicates.SpecOrRequest(), predicates.AnnotationChanged(imagev1.ReleaseHoldsAnnotation)))).
		// Every automation a job carries, a batch's members too.
		Watches(&updatev1.UpdateJob{}, handler.EnqueueRequestsFromMapFunc(automationsOfJob), builder.WithPredicates(jobFinished{})).
		WatchesRawSource(crsource.Channel(r.batches.wake, &handler.EnqueueRequestForObject{})).
		Watches(&imagev1.ImagePolicy{}, r.policyHandler()).
		WithOptions(opts)

	b = r.watchSources(mgr, b)
	c, err := b.Build(r.kind())
	if err != nil {
		return err
	}
	if r.apps, err = newApplications(mgr, r.WatchNamespace); err != nil {
		return err
	}
	r.apps.ctrl, r.apps.handler = c, r.applicationHandler()
	r.health = &healthwatch.Watches{Ctrl: c, Cache: mgr.GetCache(), Mapper: mgr.GetRESTMapper(),
		Readers: r.automationsByHealth(), Secrets: r.APIReader, Remote: r.HealthRemote, Cloud: r.Cloud}
	return nil
}

// indexFields adds the cache's indexes the automation looks up by: jobs by
// automation, checkout target and commit; automations by policy key,
// Application namespace, source, repository and rollback health object.
func (r *ImageUpdateAutomationReconciler) indexFields(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &updatev1.UpdateJob{}, jobOwnerIndex, jobAutomations); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &updatev1.UpdateJob{}, jobTargetIndex, jobTarget); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &updatev1.UpdateJob{}, jobCommitIndex, jobCommits); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, policyKeyIndex, func(o client.Object) []string {
		return selection.AutomationKeys(o.(*imagev1.ImageUpdateAutomation))
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, applicationsIndex, func(o client.Object) []string {
		if a := o.(*imagev1.ImageUpdateAutomation); a.Spec.ApplicationSelector != nil {
			return []string{a.Namespace}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, sourceIndex, func(o client.Object) []string {
		if key := sourceIndexKey(o.(*imagev1.ImageUpdateAutomation)); key != "" {
			return []string{key}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, repositoryIndex, func(o client.Object) []string {
		if key := repositoryKey(o.(*imagev1.ImageUpdateAutomation)); key != "" {
			return []string{key}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &imagev1.ImageUpdateAutomation{}, rollbackHealthIndex, func(o client.Object) []string {
		a := o.(*imagev1.ImageUpdateAutomation)
		if rb := a.Spec.Rollback; rb != nil {
			return healthwatch.Keys(rb.HealthOf, a.Namespace)
		}
		return nil
	}); err != nil {
		return err
	}
	return nil
}

// watchSources adds a metadata watch of each installed source kind but
// Argo CD's Application. A source kind that is not installed (no Flux, no
// Argo CD) has nothing to watch; automations naming it then say its kind
// is missing. Applications have a watch of their own, started when first
// read (applications.go).
func (r *ImageUpdateAutomationReconciler) watchSources(mgr ctrl.Manager, b *builder.Builder) *builder.Builder {
	for _, name := range gitsource.SourceKindNames() {
		gvk := gitsource.SourceKinds[name].GVK
		if gvk == gitsource.ApplicationGVK {
			continue
		}
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			continue
		}
		src := &metav1.PartialObjectMetadata{}
		src.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(src, handler.EnqueueRequestsFromMapFunc(r.automationsOfSource(name)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	return b
}

// kind is the automation on the reconciler skeleton. The status is written
// against the object as read: if it changed in between (or the cache was
// behind), the write fails and the step runs again from fresh state, so an
// outcome is never recorded (or counted) twice.
func (r *ImageUpdateAutomationReconciler) kind() *reconcile.Kind[*imagev1.ImageUpdateAutomation, run] {
	r.kindOnce.Do(func() {
		r.k = &reconcile.Kind[*imagev1.ImageUpdateAutomation, run]{
			Name:    imagev1.ImageUpdateAutomationKind,
			Client:  r.Client,
			Metrics: r.Metrics,
			New:     func() *imagev1.ImageUpdateAutomation { return &imagev1.ImageUpdateAutomation{} },
			// A deleted automation's remote clusters stop with their last reader.
			Forget: func(key client.ObjectKey) {
				if r.health != nil {
					r.health.Forget(key)
				}
			},
			Suspended: func(a *imagev1.ImageUpdateAutomation) bool { return a.Spec.Suspend },
			Request: func(a *imagev1.ImageUpdateAutomation) *meta.ReconcileRequestStatus {
				return &a.Status.ReconcileRequestStatus
			},
			RequestHandled: func(namespace, name, value string) {
				if r.RequestHandled != nil {
					r.RequestHandled(namespace, name, value)
				}
			},
			Phases:         r.phases(),
			OptimisticLock: true,
			OnFailure: func(ctx context.Context, s *scope, f *conditions.Failure, msg string) {
				if f.Stalled {
					forgetRun(s.Obj)
				}
				// Every failure is also a Warning event, as a failed
				// UpdateJob is: what kubectl describe and the
				// dashboard's Events list. Waiting for the policies to
				// choose is no failure; the Writer counts repeats.
				if f.Reason != conditions.DependencyNotReadyReason {
					r.Events.Warning(ctx, s.Obj, f.Reason, "Reconcile", msg)
				}
			},
			AfterPatch: r.afterPatch,
		}
	})
	return r.k
}

// forgetRun, for a problem retrying cannot fix: when the spec changed
// since the last recorded run, that run's revision no longer says the
// repository is up to date for this spec. It is dropped, so that the run
// after the problem is fixed makes a job even if nothing else changed.
func forgetRun(obj *imagev1.ImageUpdateAutomation) {
	if obj.Status.ObservedGeneration != obj.Generation {
		obj.Status.ObservedSourceRevision = ""
	}
	obj.Status.ObservedGeneration = obj.Generation
}

// afterPatch counts the run's outcomes and prunes old jobs, once the
// status that records them is written.
func (r *ImageUpdateAutomationReconciler) afterPatch(ctx context.Context, s *scope) error {
	s.State.tally.commit(r.Automation)
	// Old jobs go only once the status no longer needs them.
	for _, finished := range append(s.State.prune, s.State.finished) {
		if err := r.pruneJobs(ctx, finished); err != nil {
			return err
		}
	}
	return nil
}

// adopt makes the status own up to a job in flight that a run whose status
// was never written made: a run that queued it in a batch, which started
// when it decided so (batch.go), or a run before a restart or whose write
// was lost, which started when the job was made.
func (r *ImageUpdateAutomationReconciler) adopt(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	if decided, ok := r.batches.takeDecided(obj.UID); ok {
		obj.Status.LastAutomationRunTime = &metav1.Time{Time: decided}
		return
	}
	adoptMadeJob(obj, job)
}

func adoptMadeJob(obj *imagev1.ImageUpdateAutomation, job *updatev1.UpdateJob) {
	if lr := obj.Status.LastAutomationRunTime; lr == nil || lr.Before(&job.CreationTimestamp) {
		obj.Status.LastAutomationRunTime = job.CreationTimestamp.DeepCopy()
	}
}

// jobFinished passes what an automation's decision depends on: a job
// finishing (or taken up again) and a job deleted. Not a job's creation,
// which the run that made it knows, nor Pending to Running, nor the
// runner's heartbeats: each woke a thousand automations for a run, two API
// reads and a status write apiece, that changed nothing.
type jobFinished struct{ predicate.Funcs }

func (jobFinished) Create(event.CreateEvent) bool { return false }

func (jobFinished) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*updatev1.UpdateJob)
	n, ok2 := e.ObjectNew.(*updatev1.UpdateJob)
	return !ok1 || !ok2 || o.Status.Phase.Finished() != n.Status.Phase.Finished()
}

// automationsOfJob maps a job to the automations whose updates it
// carries.
func automationsOfJob(_ context.Context, o client.Object) []ctrlreconcile.Request {
	j, ok := o.(*updatev1.UpdateJob)
	if !ok || ownerUID(j) == "" {
		return nil
	}
	var reqs []ctrlreconcile.Request
	for _, p := range parts(j) {
		reqs = append(reqs, ctrlreconcile.Request{NamespacedName: types.NamespacedName{Namespace: j.Namespace, Name: p.automation}})
	}
	return reqs
}

// policyKeyIndex indexes automations by the policies whose changes may
// concern them (selection.AutomationKeys).
const policyKeyIndex = ".spec.policySelector.keys"

// policyHandler enqueues, when a policy's latestRef or labels change, the
// automations of its namespace whose selector matches it before or after.
// The candidates come from policyKeyIndex, so a policy event reads the
// automations that may select it, not every automation of the namespace
// (BenchmarkShardedScale/30000: 30,000 policies × 3,000 automations). The
// policies of the first list are not looked at: every automation runs
// once its own cache has synced.
func (r *ImageUpdateAutomationReconciler) policyHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueueAdder, pols ...*imagev1.ImagePolicy) {
		keys := map[string]bool{}
		for _, p := range pols {
			for _, k := range selection.PolicyKeys(p) {
				keys[k] = true
			}
		}
		seen := map[string]bool{}
		for key := range keys {
			list := &imagev1.ImageUpdateAutomationList{}
			if err := r.List(ctx, list, client.InNamespace(pols[0].Namespace), client.MatchingFields{policyKeyIndex: key},
				client.UnsafeDisableDeepCopy); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for an ImagePolicy change")
				return
			}
			for i := range list.Items {
				a := &list.Items[i]
				if !seen[a.Name] && concernsAny(a, pols) {
					q.Add(ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
				}
				seen[a.Name] = true
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueueAdder) {
			if p, ok := e.Object.(*imagev1.ImagePolicy); ok && !e.IsInInitialList {
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

// concernsAny reports whether a change of any of pols concerns a.
func concernsAny(a *imagev1.ImageUpdateAutomation, pols []*imagev1.ImagePolicy) bool {
	sel, err := selection.Selector(a)
	if err != nil {
		return false // Stalled until its spec changes
	}
	return slices.ContainsFunc(pols, func(p *imagev1.ImagePolicy) bool { return selection.Concerns(a, sel, p) })
}

type workqueueAdder = workqueue.TypedRateLimitingInterface[ctrlreconcile.Request]

func equalRef(a, b *meta.ImageRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// automationsOfSource maps an object of a source kind to the automations
// using it.
func (r *ImageUpdateAutomationReconciler) automationsOfSource(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrlreconcile.Request {
		list := &imagev1.ImageUpdateAutomationList{}
		if err := r.List(ctx, list, client.MatchingFields{sourceIndex: gitsource.SourceKey(kind, o.GetNamespace(), o.GetName())}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing ImageUpdateAutomations for a source change", "kind", kind)
			return nil
		}
		reqs := make([]ctrlreconcile.Request, 0, len(list.Items))
		for _, a := range list.Items {
			reqs = append(reqs, ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
		}
		return reqs
	}
}
