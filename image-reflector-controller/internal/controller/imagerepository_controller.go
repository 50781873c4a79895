package controller

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sync/singleflight"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
)

// Finalizer is the finalizer earlier versions added to every
// ImageRepository to remove its stored tags on deletion. None is added
// now: it cost every repository a write of its own on its first scan
// (half of a cold start's writes). A deleted repository's tags go when
// its reconcile finds it gone, and at start-up (SweepStore) for those
// deleted while the controller was away; objects that still carry it are
// released when deleted.
const Finalizer = "image.toolkit.dev/finalizer"

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories/status,verbs=get;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;serviceaccounts,verbs=get
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create

// ImageRepositoryReconciler scans registries for ImageRepository objects.
type ImageRepositoryReconciler struct {
	client.Client
	// APIReader reads Secrets and ServiceAccounts without caching them.
	APIReader   client.Reader
	Events      *events.Recorder
	Metrics     *metrics.Recorder
	ScanMetrics *ScanMetrics
	Registry    *registry.Client
	Store       *store.Store
	// Cloud issues the credentials of repositories with a cloud
	// provider (aws, gcp, azure).
	Cloud *cloudauth.Issuer
	// RequestHandled, when set, is told of each reconcile request handled
	// (the webhook receiver measures its latency to scan start with it).
	RequestHandled func(namespace, name, value string)
	// Clock dates scans, and so the first sighting of each tag that
	// minimum ages count from; time.Now when nil. Tests share one with the
	// ImagePolicyReconciler to pass days in a moment.
	Clock func() time.Time

	kindOnce sync.Once
	kind     *reconcile.Kind[*imagev1.ImageRepository, repositoryState]
	inflight singleflight.Group
	fresh    freshScans

	failMu   sync.Mutex
	failures map[string]int
}

// SetupWithManager registers the reconciler.
func (r *ImageRepositoryReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	// Scans other replicas or an earlier run of this one stored can be
	// shared too.
	if headers, err := r.Store.Headers(); err == nil {
		for _, h := range headers {
			r.fresh.put(h.Key, h.Object, h.ScanTime)
		}
	}
	err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		log := ctrl.Log.WithName("store")
		if n, err := r.SweepStore(ctx, mgr.GetClient()); err != nil {
			log.Error(err, "removing the stored tags of deleted ImageRepositories")
		} else if n > 0 {
			log.Info("removed the stored tags of deleted ImageRepositories", "count", n)
		}
		return nil
	}))
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageRepository{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// repositoryScope is one reconcile of one ImageRepository.
type repositoryScope = reconcile.Scope[*imagev1.ImageRepository, repositoryState]

// repositoryState is what the phases of one reconcile hand on.
type repositoryState struct {
	// object is namespace/name, the repository's key in the store.
	object string
	// repo is spec.image as a registry repository; chart is set instead
	// for a chart of an HTTP(S) Helm repository.
	repo    name.Repository
	chart   *helmChart
	exclude []*regexp.Regexp
	access  *access
	// entry is the scan's outcome; shared says it came from another
	// repository's recent scan.
	entry  store.Entry
	shared bool
}

// Reconcile scans one ImageRepository when its interval has passed, its spec
// changed or a reconcile was requested.
func (r *ImageRepositoryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.kindOnce.Do(func() { r.kind = r.newKind() })
	return r.kind.Reconcile(ctx, req)
}

// newKind is the ImageRepository's reconcile: parse the spec, resolve
// the credentials, stop when the last scan is fresh, scan, record.
func (r *ImageRepositoryReconciler) newKind() *reconcile.Kind[*imagev1.ImageRepository, repositoryState] {
	return &reconcile.Kind[*imagev1.ImageRepository, repositoryState]{
		Name: imagev1.ImageRepositoryKind, Client: r.Client, Metrics: r.Metrics,
		New:       func() *imagev1.ImageRepository { return &imagev1.ImageRepository{} },
		Suspended: func(o *imagev1.ImageRepository) bool { return o.Spec.Suspend },
		Request:   func(o *imagev1.ImageRepository) *meta.ReconcileRequestStatus { return &o.Status.ReconcileRequestStatus },
		RequestHandled: func(namespace, name, value string) {
			if r.RequestHandled != nil {
				r.RequestHandled(namespace, name, value)
			}
		},
		Finalizer: Finalizer,
		Finalize:  r.forgetTags,
		Forget:    r.forget,
		Phases: []reconcile.Phase[*imagev1.ImageRepository, repositoryState]{
			{Name: "parse", Run: r.parse},
			{Name: "access", Run: r.resolve},
			{Name: "freshness", Run: r.freshness},
			{Name: "scan", Run: r.scanTags},
			{Name: "record", Run: r.record},
		},
		Retry: func(s *repositoryScope, _ *conditions.Failure) time.Duration {
			return r.retryAfter(s.State.object, s.Obj.Spec.Interval.Duration)
		},
		OnFailure: r.onFailure,
	}
}

// forgetTags removes a deleted repository's stored tags.
func (r *ImageRepositoryReconciler) forgetTags(_ context.Context, obj *imagev1.ImageRepository) error {
	if err := r.Store.Delete(client.ObjectKeyFromObject(obj).String()); err != nil {
		return err
	}
	r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))
	return nil
}

// forget drops what is kept of a repository that is gone: its stored
// tags and its series.
func (r *ImageRepositoryReconciler) forget(key client.ObjectKey) {
	r.ScanMetrics.StoredTags.Delete(key.Namespace, key.Name)
	if err := r.Store.Delete(key.String()); err != nil {
		ctrl.Log.WithName("store").Error(err, "removing the stored tags of a deleted ImageRepository", "object", key.String())
	}
	r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))
}

// SweepStore removes the stored tags of repositories that no longer
// exist (deleted while no controller ran) once the cache has synced: the
// store is this controller's, and a repository it does not see (deleted,
// or in another shard) is not scanned by it.
func (r *ImageRepositoryReconciler) SweepStore(ctx context.Context, c client.Reader) (int, error) {
	// The headers first: an entry written after them is not looked at,
	// and one written before them is of a repository the cache has by the
	// time of the list.
	headers, err := r.Store.Headers()
	if err != nil {
		return 0, err
	}
	var list imagev1.ImageRepositoryList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	exists := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		exists[client.ObjectKeyFromObject(&list.Items[i]).String()] = true
	}
	removed := 0
	for _, h := range headers {
		if exists[h.Object] {
			continue
		}
		if err := r.Store.Delete(h.Object); err != nil {
			return removed, err
		}
		removed++
	}
	r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))
	return removed, nil
}

// onFailure reports a failure: a stalled spec is observed as it stands
// (no retry helps until it changes); any other failure is a Warning
// event, and a failed scan is counted.
func (r *ImageRepositoryReconciler) onFailure(ctx context.Context, s *repositoryScope, f *conditions.Failure, msg string) {
	if f.Stalled {
		s.Obj.Status.ObservedGeneration = s.Obj.Generation
		return
	}
	if s.Phase == "scan" {
		r.ScanMetrics.Scans.WithLabelValues("failed").Inc()
	}
	r.Events.Warning(ctx, s.Obj, f.Reason, "Scan", msg)
}

// parse checks spec.image and spec.exclusionList, and names the image
// in status.canonicalImageName.
func (r *ImageRepositoryReconciler) parse(_ context.Context, s *repositoryScope) (reconcile.Result, error) {
	obj := s.Obj
	s.State.object = client.ObjectKeyFromObject(obj).String()
	var err error
	if isHelmChart(obj) {
		s.State.chart, err = parseHelmChart(obj)
	} else {
		s.State.repo, err = parseImage(obj)
	}
	if err != nil {
		return reconcile.Continue, conditions.Stall(imagev1.ImageURLInvalidReason, err)
	}
	if s.State.exclude, err = compileExclusions(obj.Spec.ExclusionList); err != nil {
		return reconcile.Continue, conditions.Stall(imagev1.InvalidExclusionListReason, err)
	}
	if s.State.chart != nil {
		obj.Status.CanonicalImageName = s.State.chart.name()
	} else {
		obj.Status.CanonicalImageName = imagename.Canonical(s.State.repo)
	}
	return reconcile.Continue, nil
}

// resolve reads the credentials, TLS and proxy settings the scan needs.
func (r *ImageRepositoryReconciler) resolve(ctx context.Context, s *repositoryScope) (reconcile.Result, error) {
	a, err := resolveAccess(ctx, r.APIReader, s.Obj, s.State.repo, s.State.chart, r.Cloud)
	if err != nil {
		// Whatever stopped it (an API error included) is reported and
		// retried on the repository's own backoff.
		return reconcile.Continue, conditions.AsFailure(err)
	}
	s.State.access = a
	return reconcile.Continue, nil
}

// freshness stops the reconcile when nothing changed and the interval
// has not passed since the stored scan.
func (r *ImageRepositoryReconciler) freshness(_ context.Context, s *repositoryScope) (reconcile.Result, error) {
	obj, interval := s.Obj, s.Obj.Spec.Interval.Duration
	if h, err := r.Store.Header(s.State.object); err == nil && h.Key == s.State.access.key && !s.Requested &&
		obj.Status.ObservedGeneration == obj.Generation && obj.Status.LastScanResult != nil &&
		conditions.IsReady(obj) && r.since(h.ScanTime) < interval {
		return reconcile.StopAfter(interval - r.since(h.ScanTime)), nil
	}
	return reconcile.Continue, nil
}

// scanTags lists and stores the tags. A reconcile request asks for a
// scan now, not a neighbour's recent one.
func (r *ImageRepositoryReconciler) scanTags(ctx context.Context, s *repositoryScope) (reconcile.Result, error) {
	a := s.State.access
	entry, shared, err := r.scan(ctx, s.Obj, s.State.object, a, s.State.exclude, s.Requested)
	if err != nil {
		return reconcile.Continue, conditions.Retry(scanFailureReason(err), err).Redacting(a.secrets...)
	}
	s.State.entry, s.State.shared = entry, shared
	return reconcile.Continue, nil
}

// record counts the scan and writes its outcome to the status.
func (r *ImageRepositoryReconciler) record(_ context.Context, s *repositoryScope) (reconcile.Result, error) {
	obj, entry := s.Obj, s.State.entry
	r.succeeded(s.State.object)
	if s.State.shared {
		r.ScanMetrics.Scans.WithLabelValues("shared").Inc()
	} else {
		r.ScanMetrics.Scans.WithLabelValues("scanned").Inc()
	}
	r.ScanMetrics.StoredTags.Set(float64(len(entry.Tags)), obj.Namespace, obj.Name)
	r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))

	obj.Status.LastScanResult = &imagev1.ScanResult{
		Revision:      entry.Revision,
		TagCount:      len(entry.Tags),
		ExcludedCount: entry.Excluded,
		ScanTime:      metav1.NewTime(entry.ScanTime),
		LatestTags:    latestTags(entry.Tags, 10),
		RecentTags:    recentTags(entry, imagev1.MaxRecentTags),
	}
	obj.Status.ObservedExclusionList = append([]string(nil), obj.Spec.ExclusionList...)
	obj.Status.ObservedGeneration = obj.Generation
	conditions.MarkReady(obj, conditions.SucceededReason, "successful scan: found %d tags", len(entry.Tags))
	return reconcile.Result{RequeueAfter: obj.Spec.Interval.Duration - r.since(entry.ScanTime)}, nil
}

// scanOutcome is what one scan of a key gives all the repositories
// waiting on it.
type scanOutcome struct {
	entry  store.Entry
	reused bool
}

// scan lists the repository's tags, or takes them from a repository with
// the same key scanned within this one's interval, and stores them. It
// reports whether the tags came from another scan. With now, recent scans
// are not reused.
func (r *ImageRepositoryReconciler) scan(ctx context.Context, obj *imagev1.ImageRepository, object string,
	a *access, exclude []*regexp.Regexp, now bool) (store.Entry, bool, error) {
	// Everything from "is there a fresh scan?" to "record this scan" runs
	// once per key at a time, so two repositories of one image never both
	// scan.
	flightKey := a.key
	if now {
		flightKey += "\x00now"
	}
	v, err, joined := r.inflight.Do(flightKey, func() (any, error) {
		return r.scanOnce(ctx, obj, object, a, exclude, now)
	})
	if err != nil {
		return store.Entry{}, false, err
	}
	o := v.(scanOutcome) // Tags are shared read-only between the callers
	e := o.entry
	if e.Object != object {
		e.Object = object
		var err error
		if e, err = r.Store.Put(e); err != nil {
			return store.Entry{}, false, err
		}
	}
	return e, o.reused || joined, nil
}

// scanOnce is one flight of scan: a fresh scan of the key when there is
// one, else the registry's tags, filtered and stored. The listing runs
// on its own deadline: one caller's cancellation must not fail the others
// waiting on it.
func (r *ImageRepositoryReconciler) scanOnce(ctx context.Context, obj *imagev1.ImageRepository, object string,
	a *access, exclude []*regexp.Regexp, now bool) (scanOutcome, error) {
	interval := obj.Spec.Interval.Duration
	timeout := interval
	if obj.Spec.Timeout != nil {
		timeout = obj.Spec.Timeout.Duration
	}
	if f, ok := r.fresh.get(a.key); ok && !now && r.since(f.at) < interval {
		if e, err := r.Store.Get(f.object); err == nil && e.Key == a.key {
			return scanOutcome{e, f.object != object}, nil
		}
	}
	if tr, ok := a.opts.Transport.(*http.Transport); ok && tr != defaultTransport {
		defer tr.CloseIdleConnections()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	var tags []string
	var created map[string]time.Time
	var err error
	if a.chart != nil {
		tags, created, err = r.chartVersions(sctx, a)
	} else {
		tags, err = r.Registry.ListTags(sctx, a.repo, a.opts)
	}
	r.ScanMetrics.Duration.Observe(time.Since(start).Seconds())
	if err != nil {
		return scanOutcome{}, err
	}
	sorted, excluded := filterTags(tags, exclude)
	e := store.Entry{Object: object, Key: a.key, Revision: revision(sorted), ScanTime: r.now().UTC(),
		Excluded: excluded, Tags: sorted}
	if created != nil {
		e.Times = make([]store.Times, len(sorted))
		for i, t := range sorted {
			e.Times[i].Created = created[t]
		}
	}
	e, err = r.Store.Put(e)
	if err != nil {
		return scanOutcome{}, err
	}
	r.fresh.put(a.key, object, e.ScanTime)
	return scanOutcome{e, false}, nil
}

// chartVersions lists the versions of a chart of a Helm repository as
// tags, and their creation times from the index, stored as the tags' build
// times so that minimumAge (source created) and newestBuild need no
// request: a version the index does not date is stored as having no build
// time, and counts from its first sighting.
func (r *ImageRepositoryReconciler) chartVersions(ctx context.Context, a *access) ([]string, map[string]time.Time, error) {
	versions, _, err := r.Registry.ChartVersions(ctx, a.chart.index, a.chart.chart, a.opts)
	if err != nil {
		return nil, nil, err
	}
	tags := make([]string, 0, len(versions))
	created := make(map[string]time.Time, len(versions))
	for _, v := range versions {
		if strings.ContainsAny(v.Version, "\r\n") {
			continue // the store keeps a tag a line
		}
		if _, dup := created[v.Version]; dup {
			continue
		}
		tags = append(tags, v.Version)
		c := v.Created
		if c.IsZero() {
			c = noBuildTime
		}
		created[v.Version] = c
	}
	return tags, created, nil
}

// scanFailureReason tells a refused credential and a bad Helm index from
// other scan failures.
func scanFailureReason(err error) string {
	var indexErr *registry.HelmIndexError
	var notFound *registry.ChartNotFoundError
	switch {
	case conditions.NoSpace(err):
		// The tags were listed; storing them failed (the store's atomic
		// write left the last complete file in place).
		return conditions.StorageFullReason
	case registry.IsAuthError(err):
		return conditions.AuthenticationFailedReason
	case errors.As(err, &indexErr):
		return imagev1.InvalidHelmIndexReason
	case errors.As(err, &notFound):
		return imagev1.ChartNotFoundReason
	}
	return imagev1.ScanFailedReason
}

func (r *ImageRepositoryReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func (r *ImageRepositoryReconciler) since(t time.Time) time.Duration { return r.now().Sub(t) }

// retryAfter spaces retries of a failing repository: 5s, doubling, capped
// at the interval; the count resets on success.
func (r *ImageRepositoryReconciler) retryAfter(object string, interval time.Duration) time.Duration {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failures == nil {
		r.failures = map[string]int{}
	}
	n := min(r.failures[object], 16)
	r.failures[object]++
	return min(interval, 5*time.Second<<n)
}

func (r *ImageRepositoryReconciler) succeeded(object string) {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	delete(r.failures, object)
}
