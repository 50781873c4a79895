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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
)

// Finalizer removes an ImageRepository's stored tags when it is deleted.
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImageRepository{}, builder.WithPredicates(predicates.SpecOrRequest())).
		WithOptions(opts).
		Complete(r)
}

// Reconcile scans one ImageRepository when its interval has passed, its spec
// changed or a reconcile was requested.
func (r *ImageRepositoryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	obj := &imagev1.ImageRepository{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(imagev1.ImageRepositoryKind, req.Namespace, req.Name)
			r.ScanMetrics.StoredTags.DeleteLabelValues(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer r.Metrics.RecordDuration(imagev1.ImageRepositoryKind, start)
	helper := patch.NewHelper(obj, r.Client)
	defer func() {
		if err := helper.Patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, err)
		}
		r.Metrics.RecordReady(imagev1.ImageRepositoryKind, obj)
	}()

	object := req.String()
	if !obj.DeletionTimestamp.IsZero() {
		if err := r.Store.Delete(object); err != nil {
			return ctrl.Result{}, err
		}
		r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))
		controllerutil.RemoveFinalizer(obj, Finalizer)
		return ctrl.Result{}, nil
	}
	controllerutil.AddFinalizer(obj, Finalizer)
	r.Metrics.RecordSuspend(imagev1.ImageRepositoryKind, obj, obj.Spec.Suspend)
	if obj.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	requested := false
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok && v != obj.Status.LastHandledReconcileAt {
		obj.Status.SetLastHandledReconcileRequest(v)
		requested = true
		if r.RequestHandled != nil {
			r.RequestHandled(obj.Namespace, obj.Name, v)
		}
	}

	var repo name.Repository
	var chart *helmChart
	var err error
	if isHelmChart(obj) {
		chart, err = parseHelmChart(obj)
	} else {
		repo, err = parseImage(obj)
	}
	if err != nil {
		conditions.MarkStalled(obj, imagev1.ImageURLInvalidReason, "%s", err)
		obj.Status.ObservedGeneration = obj.Generation
		return ctrl.Result{}, nil
	}
	exclude, err := compileExclusions(obj.Spec.ExclusionList)
	if err != nil {
		conditions.MarkStalled(obj, imagev1.InvalidExclusionListReason, "%s", err)
		obj.Status.ObservedGeneration = obj.Generation
		return ctrl.Result{}, nil
	}
	if chart != nil {
		obj.Status.CanonicalImageName = chart.name()
	} else {
		obj.Status.CanonicalImageName = imagename.Canonical(repo)
	}
	interval := obj.Spec.Interval.Duration

	a, err := resolveAccess(ctx, r.APIReader, obj, repo, chart, r.Cloud)
	if f := conditions.AsFailure(err); err != nil && f.Stalled {
		conditions.MarkStalled(obj, f.Reason, "%s", err)
		obj.Status.ObservedGeneration = obj.Generation
		return ctrl.Result{}, nil
	}
	if err != nil {
		reason := conditions.AsFailure(err).Reason
		conditions.MarkFailed(obj, reason, "%s", events.Redact(err.Error()))
		r.Events.Warning(ctx, obj, reason, "Scan", err.Error())
		return ctrl.Result{RequeueAfter: r.retryAfter(object, interval)}, nil
	}

	// Up to date: nothing changed and the interval has not passed.
	if h, err := r.Store.Header(object); err == nil && h.Key == a.key && !requested &&
		obj.Status.ObservedGeneration == obj.Generation && obj.Status.LastScanResult != nil &&
		conditions.IsReady(obj) && r.since(h.ScanTime) < interval {
		return ctrl.Result{RequeueAfter: interval - r.since(h.ScanTime)}, nil
	}

	// A reconcile request asks for a scan now, not a neighbour's recent one.
	entry, shared, err := r.scan(ctx, obj, object, a, exclude, requested)
	if err != nil {
		r.ScanMetrics.Scans.WithLabelValues("failed").Inc()
		reason := scanFailureReason(err)
		msg := events.Redact(err.Error(), a.secrets...)
		conditions.MarkFailed(obj, reason, "%s", msg)
		r.Events.Warning(ctx, obj, reason, "Scan", msg)
		return ctrl.Result{RequeueAfter: r.retryAfter(object, interval)}, nil
	}
	r.succeeded(object)
	if shared {
		r.ScanMetrics.Scans.WithLabelValues("shared").Inc()
	} else {
		r.ScanMetrics.Scans.WithLabelValues("scanned").Inc()
	}
	r.ScanMetrics.StoredTags.WithLabelValues(req.Namespace, req.Name).Set(float64(len(entry.Tags)))
	r.ScanMetrics.StoreBytes.Set(float64(r.Store.Size()))

	obj.Status.LastScanResult = &imagev1.ScanResult{
		Revision:      entry.Revision,
		TagCount:      len(entry.Tags),
		ExcludedCount: entry.Excluded,
		ScanTime:      metav1.NewTime(entry.ScanTime),
		LatestTags:    latestTags(entry.Tags, 10),
	}
	obj.Status.ObservedExclusionList = append([]string(nil), obj.Spec.ExclusionList...)
	obj.Status.ObservedGeneration = obj.Generation
	conditions.MarkReady(obj, conditions.SucceededReason, "successful scan: found %d tags", len(entry.Tags))
	return ctrl.Result{RequeueAfter: interval - r.since(entry.ScanTime)}, nil
}

// scan lists the repository's tags, or takes them from a repository with
// the same key scanned within this one's interval, and stores them. It
// reports whether the tags came from another scan. With now, recent scans
// are not reused.
func (r *ImageRepositoryReconciler) scan(ctx context.Context, obj *imagev1.ImageRepository, object string,
	a *access, exclude []*regexp.Regexp, now bool) (store.Entry, bool, error) {
	interval := obj.Spec.Interval.Duration
	timeout := interval
	if obj.Spec.Timeout != nil {
		timeout = obj.Spec.Timeout.Duration
	}
	type outcome struct {
		entry  store.Entry
		reused bool
	}
	// Everything from "is there a fresh scan?" to "record this scan" runs
	// once per key at a time, so two repositories of one image never both
	// scan. The scan runs on its own deadline: one caller's cancellation
	// must not fail the others waiting on it.
	flight := func() (any, error) {
		if f, ok := r.fresh.get(a.key); ok && !now && r.since(f.at) < interval {
			if e, err := r.Store.Get(f.object); err == nil && e.Key == a.key {
				return outcome{e, f.object != object}, nil
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
			return nil, err
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
		if err := r.Store.Put(e); err != nil {
			return nil, err
		}
		r.fresh.put(a.key, object, e.ScanTime)
		return outcome{e, false}, nil
	}
	flightKey := a.key
	if now {
		flightKey += "\x00now"
	}
	v, err, joined := r.inflight.Do(flightKey, flight)
	if err != nil {
		return store.Entry{}, false, err
	}
	o := v.(outcome) // Tags are shared read-only between the callers
	e := o.entry
	if e.Object != object {
		e.Object = object
		if err := r.Store.Put(e); err != nil {
			return store.Entry{}, false, err
		}
	}
	return e, o.reused || joined, nil
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
