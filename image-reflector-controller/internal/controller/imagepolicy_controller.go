package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/imagesource"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/healthwatch"
	"toolkit.dev/image-toolkit/pkg/runtime/index"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/runtime/predicates"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
	"toolkit.dev/image-toolkit/pkg/runtime/shard"
	"toolkit.dev/image-toolkit/pkg/signature"
)

// dependencyRetry is how soon a policy whose repository is not ready looks
// again; the repository watch usually comes first.
const dependencyRetry = 30 * time.Second

// firstScanRetry is how soon a policy waiting for its repository's first
// reconcile looks again; that reconcile's outcome wakes it through the
// repository watch long before.
const firstScanRetry = 5 * time.Minute

// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagepolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imagerepositories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// ImagePolicyReconciler selects the latest image of ImagePolicy objects.
type ImagePolicyReconciler struct {
	client.Client
	APIReader client.Reader
	Events    *events.Recorder
	Metrics   *metrics.Recorder
	Registry  *registry.Client
	Store     *store.Store
	// Cloud issues the credentials of digest and build time lookups in
	// repositories with a cloud provider.
	Cloud *cloudauth.Issuer
	// PromotionMetrics counts promotions; nil records none.
	PromotionMetrics *PromotionMetrics
	// Clock is the time minimum ages are measured at; time.Now when nil.
	// Tests move it where waiting would be slow.
	Clock func() time.Time
	// VerifyMetrics count signature verifications; none when nil.
	VerifyMetrics *VerifyMetrics
	// VerifyRetry is how long a verdict that did not verify holds
	// (DefaultVerifyRetry when 0).
	VerifyRetry time.Duration
	// HealthRemote are the flags about healthOf kubeconfigs.
	HealthRemote healthwatch.RemoteOptions
	// Shard is the controller's --watch-label-selector (nil: all): a
	// repository outside it is a misconfiguration, said so.
	Shard labels.Selector

	verifiers    verifiers
	verifyFlight singleflight.Group

	// Build times looked up lately, by store object and tag: policies of
	// one repository evaluated at once look a new tag up once (the flight),
	// and one that read the store before another saved finds it here.
	buildFlight singleflight.Group
	builtMu     sync.Mutex
	built       map[string]time.Time

	kindOnce sync.Once
	kind     *reconcile.Kind[*imagev1.ImagePolicy, policyState]

	// watches are the kinds promotion policies read, watched once needed.
	watches *healthwatch.Watches
	// byRepository indexes policies by their ImageRepository's
	// namespace/name; promotion indexes promotion policies. Both are fed
	// by the For watch (index.Predicate).
	byRepository *index.Index
	promotion    promotionIndexes
}

// maxRecentBuilt bounds the recent build times kept in memory; the store
// has them all.
const maxRecentBuilt = 10000

func (r *ImagePolicyReconciler) recentBuilt(key string) (time.Time, bool) {
	r.builtMu.Lock()
	defer r.builtMu.Unlock()
	t, ok := r.built[key]
	return t, ok
}

func (r *ImagePolicyReconciler) rememberBuilt(key string, t time.Time) {
	r.builtMu.Lock()
	defer r.builtMu.Unlock()
	if r.built == nil || len(r.built) >= maxRecentBuilt {
		r.built = map[string]time.Time{}
	}
	r.built[key] = t
}

func (r *ImagePolicyReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler and its watch of repositories.
func (r *ImagePolicyReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	r.byRepository = index.New(func(o client.Object) []string {
		return []string{repositoryKey(o.(*imagev1.ImagePolicy)).String()}
	})
	r.setupPromotion()
	// The indexes follow the policies in the handler that queues their
	// reconciles (index.Predicate): a policy waiting for its repository's
	// first scan is in the index by the time it waits.
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&imagev1.ImagePolicy{}, builder.WithPredicates(index.Predicate(predicate.Or(predicates.SpecOrRequest(), predicates.AnnotationChanged(imagev1.ApproveAnnotation)),
			r.byRepository, r.promotion.upstream, r.promotion.follow, r.promotion.health))).
		Watches(&imagev1.ImageRepository{},
			handler.EnqueueRequestsFromMapFunc(policiesByIndex(r.byRepository, keyOf)),
			builder.WithPredicates(scanChanged{})).
		// A policy created, changed or deleted upstream of a promotion
		// may close or open a cycle.
		Watches(&imagev1.ImagePolicy{},
			handler.EnqueueRequestsFromMapFunc(policiesByIndex(r.promotion.follow, keyOf)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A promotion group's member that moved, or whose wait changed,
		// may let the others move (or hold them).
		Watches(&imagev1.ImagePolicy{},
			handler.EnqueueRequestsFromMapFunc(r.promotionGroupOf()),
			builder.WithPredicates(groupMemberChanged{})).
		WithOptions(opts).
		Build(r)
	if err != nil {
		return err
	}
	r.watches = &healthwatch.Watches{Ctrl: c, Cache: mgr.GetCache(), Mapper: mgr.GetRESTMapper(),
		Readers: policiesByKey(r.promotion.health), Secrets: r.APIReader, Remote: r.HealthRemote, Cloud: r.Cloud}
	return nil
}

func repositoryKey(p *imagev1.ImagePolicy) types.NamespacedName {
	ns := p.Spec.ImageRepositoryRef.Namespace
	if ns == "" {
		ns = p.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: p.Spec.ImageRepositoryRef.Name}
}

// keyOf is an object's namespace/name, the value the indexes keep for a
// repository, an upstream automation or a followed policy.
func keyOf(o client.Object) string { return client.ObjectKeyFromObject(o).String() }

// scanChanged passes repository events that can change a policy's answer:
// a new scan revision, a new Ready status (its first one included, which
// policies waiting for a first scan need), or a spec change (accessFrom).
type scanChanged struct{ predicate.Funcs }

func (scanChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*imagev1.ImageRepository)
	n, okN := e.ObjectNew.(*imagev1.ImageRepository)
	if !okO || !okN {
		return false
	}
	rev := func(r *imagev1.ImageRepository) string {
		if r.Status.LastScanResult == nil {
			return ""
		}
		return r.Status.LastScanResult.Revision
	}
	ready := func(r *imagev1.ImageRepository) metav1.ConditionStatus {
		if c := conditions.Get(r, conditions.ReadyCondition); c != nil {
			return c.Status
		}
		return ""
	}
	return rev(o) != rev(n) || o.Generation != n.Generation || ready(o) != ready(n)
}

// policyScope is one reconcile of one ImagePolicy.
type policyScope = reconcile.Scope[*imagev1.ImagePolicy, policyState]

// policyState is what the phases of one reconcile hand on.
type policyState struct {
	// specChanged says the spec is not the one the status was made for (a
	// reflected digest may belong to another platform).
	specChanged bool
	// prevPending is the pending ref the last reconcile recorded: a
	// promotion's soak goes on from it.
	prevPending *imagev1.PendingRef
	sel         *policy.Policy
	platform    *v1.Platform
	repoKey     types.NamespacedName
	repo        *imagev1.ImageRepository
	entry       store.Entry
	// now is the time the tags were evaluated at.
	now time.Time
	// tag is the best tag of the scan; latest what the policy chooses,
	// which a held downgrade keeps at the previous latestRef.
	tag    string
	latest meta.ImageRef
	held   bool
	// candidates are the kept tags, best first, that spec.verify walks;
	// walk is what it found.
	candidates []string
	walk       *signature.Walk
	// requeue is when to look again once the choice is recorded.
	requeue time.Duration
	// source is what latest says it was built from; nil when unknown.
	source *meta.ImageSource
}

// Reconcile selects the latest image of one ImagePolicy.
func (r *ImagePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.kindOnce.Do(func() { r.kind = r.newKind() })
	return r.kind.Reconcile(ctx, req)
}

// newKind is the ImagePolicy's reconcile: check the rules, find the
// repository's tags, evaluate them, hold a downgrade, reflect the digest,
// record the choice. Once it has the tags, it records how they were
// evaluated in status.lastSelection, and the tag a minimum age holds back
// in status.pendingRef.
func (r *ImagePolicyReconciler) newKind() *reconcile.Kind[*imagev1.ImagePolicy, policyState] {
	return &reconcile.Kind[*imagev1.ImagePolicy, policyState]{
		Name: imagev1.ImagePolicyKind, Client: r.Client, Metrics: r.Metrics,
		New: func() *imagev1.ImagePolicy { return &imagev1.ImagePolicy{} },
		// A deleted promotion's remote clusters stop with their last reader.
		Forget: func(key client.ObjectKey) {
			if r.watches != nil {
				r.watches.Forget(key)
			}
		},
		Suspended: func(o *imagev1.ImagePolicy) bool { return o.Spec.Suspend },
		Request:   func(o *imagev1.ImagePolicy) *meta.ReconcileRequestStatus { return &o.Status.ReconcileRequestStatus },
		// Every failure is also a Warning event, as a failed scan is; a
		// wait by design (a minimum age, a promotion's upstream health
		// or soak) is not a failure. The Writer counts repeats.
		OnFailure: func(ctx context.Context, s *policyScope, f *conditions.Failure, msg string) {
			switch f.Reason {
			case imagev1.MinimumAgeNotReachedReason, imagev1.UpstreamNotHealthyReason, imagev1.SoakNotElapsedReason, imagev1.AwaitingApprovalReason,
				imagev1.PromotionGroupWaitingReason:
				return
			}
			r.Events.Warning(ctx, s.Obj, f.Reason, "Select", msg)
		},
		Phases: []reconcile.Phase[*imagev1.ImagePolicy, policyState]{
			{Name: "validate", Run: r.validate},
			{Name: "promote", Run: r.promote},
			{Name: "repository", Run: r.repository},
			{Name: "evaluate", Run: r.evaluate},
			{Name: "hold", Run: r.hold},
			{Name: "verify", Run: r.verifySignatures},
			{Name: "digest", Run: r.reflectDigest},
			{Name: "source", Run: r.readSource},
			{Name: "record", Run: r.recordLatest},
		},
	}
}

// validate checks the policy's rules and platform.
func (r *ImagePolicyReconciler) validate(_ context.Context, s *policyScope) (reconcile.Result, error) {
	obj := s.Obj
	s.State.specChanged = obj.Status.ObservedGeneration != obj.Generation
	obj.Status.ObservedGeneration = obj.Generation
	s.State.prevPending, obj.Status.PendingRef = obj.Status.PendingRef, nil
	var err error
	if pr := obj.Spec.Policy.Promotion; pr != nil {
		// Exactly one kind is the API server's rule; a promotion orders
		// no tags, so New has nothing to build.
		if err := policy.CheckPromotion(pr); err != nil {
			return reconcile.Continue, conditions.Stall(imagev1.InvalidPolicyReason, err)
		}
		return reconcile.Continue, nil
	}
	if s.State.sel, err = policy.New(obj.Spec.Policy, obj.Spec.FilterTags); err != nil {
		// A breakdown by rules that no longer stand would mislead.
		obj.Status.LastSelection = nil
		return reconcile.Continue, conditions.Stall(imagev1.InvalidPolicyReason, err)
	}
	if obj.Spec.Platform != "" {
		p, err := v1.ParsePlatform(obj.Spec.Platform)
		if err != nil || p.OS == "" || p.Architecture == "" {
			obj.Status.LastSelection = nil
			return reconcile.Continue, conditions.Stallf(imagev1.InvalidPolicyReason, "spec.platform %q is not os/architecture[/variant]", obj.Spec.Platform)
		}
		s.State.platform = p
	}
	return reconcile.Continue, nil
}

// repository finds the ImageRepository, checks the policy may use it
// and can apply to it, and reads its stored tags.
func (r *ImagePolicyReconciler) repository(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj := s.Obj
	repoKey := repositoryKey(obj)
	repo := &imagev1.ImageRepository{}
	if err := r.Get(ctx, repoKey, repo); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Continue, err
		}
		// Retried all the same: relabelling the repository into the
		// shard brings it into the cache, whose watch wakes the policy.
		if err := shard.Outside(ctx, r.APIReader, r.Shard, imagev1.GroupVersion.WithKind("ImageRepository"), repoKey); err != nil {
			return reconcile.Continue, conditions.Retry(conditions.DependencyNotReadyReason, err).After(dependencyRetry)
		}
		return reconcile.Continue, conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository %s not found", repoKey).After(dependencyRetry)
	}
	if repoKey.Namespace != obj.Namespace {
		allowed, err := r.allowed(ctx, repo, obj.Namespace)
		if err != nil {
			return reconcile.Continue, err
		}
		if !allowed {
			return reconcile.Continue, conditions.Retryf(conditions.AccessDeniedReason,
				"ImageRepository %s does not grant access to namespace %s (spec.accessFrom)", repoKey, obj.Namespace)
		}
	}
	if err := helmChartFits(obj, repo, repoKey, s.State.platform); err != nil {
		obj.Status.LastSelection = nil
		return reconcile.Continue, err
	}
	if repo.Status.LastScanResult == nil {
		if waitsForFirstScan(obj, repo) {
			return reconcile.Wait(firstScanRetry), nil
		}
		return reconcile.Continue, conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository %s has not been scanned yet", repoKey).After(dependencyRetry)
	}
	entry, err := r.Store.Get(repoKey.String())
	if err != nil {
		return reconcile.Continue, conditions.Retryf(conditions.DependencyNotReadyReason, "no stored tags for ImageRepository %s yet", repoKey).After(dependencyRetry)
	}
	s.State.repoKey, s.State.repo, s.State.entry = repoKey, repo, entry
	return reconcile.Continue, nil
}

// waitsForFirstScan reports whether a policy that never had a Ready
// condition waits, writing nothing, for its repository's first reconcile:
// that reconcile always writes the repository's Ready condition, True with
// the tags or False with why not, and the repository watch (scanChanged)
// wakes the policy with it. So on a cold start each policy is written
// once, with its answer, not first with DependencyNotReady. A suspended
// repository is never reconciled: the policy says so at once.
func waitsForFirstScan(obj *imagev1.ImagePolicy, repo *imagev1.ImageRepository) bool {
	return conditions.Get(obj, conditions.ReadyCondition) == nil &&
		conditions.Get(repo, conditions.ReadyCondition) == nil && !repo.Spec.Suspend
}

// helmChartFits refuses what a chart of a Helm repository cannot give:
// an index.yaml lists versions, not manifests, so there is no digest a
// HelmRelease could pin, and no platform.
func helmChartFits(obj *imagev1.ImagePolicy, repo *imagev1.ImageRepository, repoKey types.NamespacedName, platform *v1.Platform) error {
	if !isHelmChart(repo) {
		return nil
	}
	if d := obj.Spec.DigestReflectionPolicy; d != "" && d != imagev1.ReflectNever {
		return conditions.Stallf(imagev1.InvalidPolicyReason,
			"digestReflectionPolicy %s: ImageRepository %s is a chart of a Helm repository (%s), whose index has no manifest digests; use Never",
			d, repoKey, repo.Spec.Image)
	}
	if platform != nil {
		return conditions.Stallf(imagev1.InvalidPolicyReason,
			"spec.platform: ImageRepository %s is a chart of a Helm repository (%s), which has no platforms", repoKey, repo.Spec.Image)
	}
	return nil
}

// evaluate ranks the stored tags by the policy. The breakdown is
// recorded whether or not a tag is chosen: "why not" is the question it
// answers most.
func (r *ImagePolicyReconciler) evaluate(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	st.now = r.now()
	opts := policy.Options{Now: st.now, Top: imagev1.MaxTopCandidates}
	if obj.Spec.Verify != nil {
		// The candidates to verify, best first; the status lists five.
		opts.Top = MaxVerifyCandidates
	}
	if m := obj.Spec.MinimumAge; m != nil {
		opts.MinimumAge, opts.Source = m.Duration.Duration, m.Source
	}
	if prev := obj.Status.LatestRef; prev != nil && prev.Name == st.repo.Spec.Image {
		opts.Keep = prev.Tag
	}
	times := &storeTimes{r: r, repo: st.repo, entry: st.entry, platform: st.platform}
	opts.Times = times
	res, err := st.sel.Evaluate(ctx, st.entry.Tags, opts)
	times.save(ctx, st.repoKey.String())

	explained := res.Selection
	explained.ScanRevision = st.entry.Revision
	st.candidates = explained.TopCandidates
	if len(explained.TopCandidates) > imagev1.MaxTopCandidates {
		explained.TopCandidates = explained.TopCandidates[:imagev1.MaxTopCandidates]
	}
	obj.Status.LastSelection = &explained
	if res.Pending != nil {
		obj.Status.PendingRef = &imagev1.PendingRef{Tag: res.Pending.Tag, EligibleAt: ptrTime(res.Pending.EligibleAt)}
		// Evaluated again when the pending tag is old enough, without a
		// scan. The store keeps whole seconds: a second more is sure to
		// find it eligible.
		st.requeue = res.Pending.EligibleAt.Sub(st.now).Truncate(time.Second) + time.Second
	}
	if err != nil {
		return reconcile.Continue, evaluationFailure(err, st.requeue)
	}
	st.tag = explained.Selected()
	return reconcile.Continue, nil
}

// evaluationFailure says why an evaluation chose no tag; requeue is when
// a pending tag becomes eligible.
func evaluationFailure(err error, requeue time.Duration) error {
	var noMatch *policy.NoMatchError
	var tooNew *policy.TooNewError
	var lookup *policy.LookupError
	var notFound *registry.PlatformNotFoundError
	switch {
	case errors.As(err, &noMatch):
		return conditions.Retry(imagev1.NoMatchingTagReason, err)
	case errors.As(err, &tooNew):
		return conditions.Retry(imagev1.MinimumAgeNotReachedReason, err).After(requeue)
	case errors.As(err, &notFound):
		// A new tag or a new scan may bring the platform; they trigger
		// an evaluation, so no timer.
		return conditions.Retry(imagev1.PlatformNotFoundReason, err)
	case errors.As(err, &lookup):
		return conditions.Retry(imagev1.BuildTimeLookupFailedReason, err).After(dependencyRetry)
	}
	return err
}

// hold keeps latestRef, digest included, when the best tag would be a
// downgrade (holdDowngrade): its tag is not in the registry's listing to
// look one up. A scan that lists the same tags as this one changes no
// revision and triggers no evaluation, so it looks again once the next
// scan is due (with some slack for the scan itself), and again as long as
// none came.
func (r *ImagePolicyReconciler) hold(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	st := &s.State
	if !r.holdDowngrade(ctx, s.Obj, st.sel, st.repo, st.entry, st.tag, st.specChanged) {
		return reconcile.Continue, nil
	}
	interval := st.repo.Spec.Interval.Duration
	slack := max(interval/10, 2*time.Second)
	again := max(st.entry.ScanTime.Add(interval+slack).Sub(st.now), slack)
	if st.requeue > 0 {
		again = min(again, st.requeue)
	}
	st.latest, st.held, st.requeue = *s.Obj.Status.LatestRef, true, again
	return reconcile.Continue, nil
}

// reflectDigest makes the chosen tag the latest image, with its digest
// when the policy reflects digests.
func (r *ImagePolicyReconciler) reflectDigest(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	if st.held {
		return reconcile.Continue, nil
	}
	prev := obj.Status.LatestRef
	st.latest = meta.ImageRef{Name: st.repo.Spec.Image, Tag: st.tag}
	if st.walk != nil {
		// The digest that verified is the one written: never looked up
		// again by tag, which may have moved since. With a platform, it
		// is that platform's manifest in the verified index, read by the
		// index's digest: the index's signature covers the digests it
		// lists, so the platform's image is as trusted as the index.
		st.latest.Digest = st.walk.Verdict.Digest
		if st.platform != nil {
			digest, err := r.digest(ctx, st.repo, st.walk.Verdict.Digest, st.platform)
			if err != nil {
				return reconcile.Continue, digestErr(err)
			}
			st.latest.Digest = digest
			obj.Status.Verification.PlatformDigest = digest
		}
		return reconcile.Continue, nil
	}
	switch obj.Spec.DigestReflectionPolicy {
	case imagev1.ReflectAlways:
		st.requeue = minPositive(st.requeue, obj.Spec.Interval.Duration)
	case imagev1.ReflectIfNotPresent:
		if prev != nil && !st.specChanged && prev.Name == st.latest.Name && prev.Tag == st.tag && prev.Digest != "" {
			st.latest.Digest = prev.Digest
			return reconcile.Continue, nil
		}
	default:
		return reconcile.Continue, nil
	}
	digest, err := r.digest(ctx, st.repo, st.tag, st.platform)
	if err != nil {
		return reconcile.Continue, digestErr(err)
	}
	st.latest.Digest = digest
	return reconcile.Continue, nil
}

// readSource reads what the chosen image says it was built from, once per
// image: while latestRef stays, the status keeps what was read. A failed
// read is not the policy's failure (the image is chosen; only the words of
// the commit that brings it lack its source): it is logged and tried again
// at the policy's next reconcile. Chart versions carry no such labels.
func (r *ImagePolicyReconciler) readSource(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj, st := s.Obj, &s.State
	if prev := obj.Status.LatestRef; st.held || isHelmChart(st.repo) || (prev != nil && *prev == st.latest && obj.Status.LatestSource != nil) {
		st.source = obj.Status.LatestSource
		return reconcile.Continue, nil
	}
	reference := st.latest.Digest
	if reference == "" {
		reference = st.latest.Tag
	}
	annotations, labels, err := r.labels(ctx, st.repo, reference, st.platform)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("reading the image's source labels", "image", st.latest.String(), "error", err.Error())
		return reconcile.Continue, nil
	}
	src := imagesource.Read(annotations, labels)
	if w := st.walk; w != nil && w.Tag == st.latest.Tag {
		src = imagesource.Verified(src, w.Verdict.Attestations)
	}
	st.source = &src
	return reconcile.Continue, nil
}

// labels reads the annotations and config labels of repo's image at
// reference (a tag or a digest) with the repository's credentials.
func (r *ImagePolicyReconciler) labels(ctx context.Context, repo *imagev1.ImageRepository, reference string, platform *v1.Platform) (annotations, labels map[string]string, err error) {
	err = r.withAccess(ctx, repo, func(ctx context.Context, ref name.Repository, a *access) error {
		annotations, labels, err = r.Registry.Labels(ctx, ref, reference, platform, a.opts)
		return err
	})
	return annotations, labels, err
}

// digestErr is the condition of a failed digest lookup.
func digestErr(err error) error {
	var notFound *registry.PlatformNotFoundError
	if errors.As(err, &notFound) {
		return conditions.Retry(imagev1.PlatformNotFoundReason, err)
	}
	return conditions.Retry(imagev1.DigestLookupFailedReason, err).After(dependencyRetry)
}

// recordLatest writes the choice to the status, with an event when it
// changed, and says when to look again.
func (r *ImagePolicyReconciler) recordLatest(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj, latest := s.Obj, s.State.latest
	prev := obj.Status.LatestRef
	if prev == nil || *prev != latest {
		ev := r.Events.WithMetadata(map[string]string{events.MetaLatestImage: latest.String()})
		if prev != nil {
			p := *prev
			obj.Status.ObservedPreviousRef = &p
			obj.Status.ObservedPreviousSource = obj.Status.LatestSource
			ev.WithMetadata(map[string]string{events.MetaPreviousImage: p.String()}).Normal(ctx, obj, "NewImage", "Select",
				"latest image for "+latest.Name+" changed from "+prev.String()+" to "+latest.String())
		} else {
			ev.Normal(ctx, obj, "NewImage", "Select", "latest image for "+latest.Name+" is "+latest.String())
		}
		obj.Status.LatestRef = &latest
		obj.Status.LatestSource = s.State.source
		now := metav1.NowMicro()
		obj.Status.LatestRefTime = &now
	}
	if s.State.source != nil {
		obj.Status.LatestSource = s.State.source
	}
	if w := s.State.walk; w != nil && len(w.Skipped) > 0 {
		conditions.MarkReady(obj, imagev1.SignatureVerificationFailedReason, "latest image tag for %s resolved to %s: %s",
			latest.Name, latest.Tag, w.Summary())
	} else if h := obj.Status.HeldRef; h != nil {
		conditions.MarkReady(obj, imagev1.DowngradeHeldReason,
			"latest image tag for %s stays %s: %d consecutive scan(s) did not list it and the best tag listed, %s, ranks lower; it moves after %d",
			latest.Name, h.Tag, h.MissingScans, h.Candidate, imagev1.DowngradeScans)
	} else if pr := obj.Status.PendingRef; pr != nil {
		conditions.MarkReady(obj, conditions.SucceededReason, "latest image tag for %s resolved to %s; %s follows at %s (minimumAge)",
			latest.Name, latest.Tag, pr.Tag, pr.EligibleAt.UTC().Format(time.RFC3339))
	} else if w := s.State.walk; w != nil {
		conditions.MarkReady(obj, conditions.SucceededReason, "latest image tag for %s resolved to %s, signature verified (%s)", latest.Name, latest.Tag, w.Verdict.Signer)
	} else {
		conditions.MarkReady(obj, conditions.SucceededReason, "latest image tag for %s resolved to %s", latest.Name, latest.Tag)
	}
	return reconcile.Result{RequeueAfter: s.State.requeue}, nil
}

// holdDowngrade applies the never-a-downgrade rule to tag, the best tag of
// the latest scan: when the current latestRef's tag is missing from that
// scan and ranks above tag, latestRef stays (with status.heldRef
// counting the scans) until imagev1.DowngradeScans consecutive complete
// scans have lacked it; it reports whether latestRef is held. A spec change, another image or a listed latestRef
// clear the hold: the user's edit, not the registry, moves the policy then.
func (r *ImagePolicyReconciler) holdDowngrade(ctx context.Context, obj *imagev1.ImagePolicy, sel *policy.Policy,
	repo *imagev1.ImageRepository, entry store.Entry, tag string, specChanged bool) bool {
	prev := obj.Status.LatestRef
	if prev == nil || prev.Name != repo.Spec.Image || specChanged || tag == "" || tag == prev.Tag ||
		slices.Contains(entry.Tags, prev.Tag) || !ranksAbove(sel, prev.Tag, tag) {
		obj.Status.HeldRef = nil
		return false
	}
	h := missedScan(obj.Status.HeldRef, prev.Tag, entry.ScanTime)
	h.Candidate = tag
	if h.MissingScans >= imagev1.DowngradeScans {
		obj.Status.HeldRef = nil
		r.Events.Warning(ctx, obj, "Downgrade", "Select", fmt.Sprintf("tag %s of %s was missing from %d consecutive scans: moving to %s",
			prev.Tag, prev.Name, h.MissingScans, tag))
		return false
	}
	obj.Status.HeldRef = h
	return true
}

// missedScan is held, the hold of tag, after a complete scan that
// finished at scanTime did not list tag. The scan is known by its time,
// kept to the second as the API server stores a metav1.Time: a reconcile
// that sees the same scan again, with the hold read back from the API
// (its fraction of a second gone), counts nothing. Compared at full
// precision, that re-read scan looked newer and counted twice, so one
// listing without the tag moved latestRef down. Two scans within one
// second count once: the hold lasts longer, never shorter.
func missedScan(held *imagev1.HeldRef, tag string, scanTime time.Time) *imagev1.HeldRef {
	scan := metav1.NewTime(scanTime.Truncate(time.Second))
	switch {
	case held == nil || held.Tag != tag:
		return &imagev1.HeldRef{Tag: tag, MissingScans: 1, LastScanTime: scan}
	case scan.After(held.LastScanTime.Time):
		h := *held
		h.MissingScans++
		h.LastScanTime = scan
		return &h
	}
	return held
}

// ranksAbove reports whether the policy prefers a to b. Policies that rank
// by build time cannot ask the registry about a tag it no longer lists:
// for them a missing tag is held whatever replaces it, one scan at most
// longer than needed.
func ranksAbove(sel *policy.Policy, a, b string) bool {
	prefers, ok := sel.Prefers(a, b)
	return prefers || !ok
}

// minPositive is the lesser of two durations, ignoring zeros (no timer).
func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// storeTimes gives an evaluation the tag times of the store, and looks up
// build times the store does not have yet in the registry, to be saved
// after the evaluation.
type storeTimes struct {
	r        *ImagePolicyReconciler
	repo     *imagev1.ImageRepository
	entry    store.Entry
	platform *v1.Platform

	access  *access
	fetched map[string]time.Time
}

// index finds a tag in the entry; scans store tags sorted.
func (s *storeTimes) index(tag string) (int, bool) {
	i, ok := slices.BinarySearch(s.entry.Tags, tag)
	if !ok || i >= len(s.entry.Times) {
		return 0, false
	}
	return i, true
}

func (s *storeTimes) Seen(tag string) (time.Time, bool) {
	i, ok := s.index(tag)
	if !ok || s.entry.Times[i].Seen.IsZero() {
		return time.Time{}, false
	}
	return s.entry.Times[i].Seen, true
}

// noBuildTime is stored for an image whose config has no build time, so
// that it is not asked again; policy.Evaluate ignores a time that early.
var noBuildTime = time.Unix(0, 0).UTC()

func (s *storeTimes) Created(ctx context.Context, tag string) (time.Time, bool, error) {
	if i, ok := s.index(tag); ok && !s.entry.Times[i].Created.IsZero() {
		return s.entry.Times[i].Created, true, nil
	}
	if isHelmChart(s.repo) {
		// A chart version's creation time comes with the index, stored by
		// the scan; one the store lacks is not asked anywhere.
		return time.Time{}, false, nil
	}
	key := s.entry.Object + "\x00" + tag
	if t, ok := s.r.recentBuilt(key); ok {
		return t, true, nil
	}
	if s.access == nil {
		ref, err := parseImage(s.repo)
		if err != nil {
			return time.Time{}, false, err
		}
		if s.access, err = resolveAccess(ctx, s.r.APIReader, s.repo, ref, nil, s.r.Cloud); err != nil {
			return time.Time{}, false, err
		}
	}
	a := s.access
	v, err, _ := s.r.buildFlight.Do(key, func() (any, error) {
		// Its own deadline: a policy that gives up must not fail the
		// others waiting on the same lookup.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), repositoryTimeout(s.repo))
		defer cancel()
		t, err := s.r.Registry.Created(ctx, a.repo.Tag(tag), s.platform, a.opts)
		if err != nil {
			return nil, err
		}
		if t.IsZero() {
			t = noBuildTime
		}
		t = t.UTC()
		s.r.rememberBuilt(key, t)
		return t, nil
	})
	if err != nil {
		var nf *registry.PlatformNotFoundError
		if errors.As(err, &nf) {
			return time.Time{}, false, err
		}
		return time.Time{}, false, errors.New(events.Redact(err.Error(), a.secrets...))
	}
	t := v.(time.Time)
	if s.fetched == nil {
		s.fetched = map[string]time.Time{}
	}
	s.fetched[tag] = t
	return t, true, nil
}

// save stores the build times looked up, also after a failed evaluation:
// what was paid for is not asked again.
func (s *storeTimes) save(ctx context.Context, object string) {
	if s.access != nil {
		if tr, ok := s.access.opts.Transport.(*http.Transport); ok && tr != defaultTransport {
			tr.CloseIdleConnections()
		}
	}
	if len(s.fetched) == 0 {
		return
	}
	if err := s.r.Store.SetCreated(object, s.fetched); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "storing build times", "count", len(s.fetched))
	}
}

func repositoryTimeout(repo *imagev1.ImageRepository) time.Duration {
	if repo.Spec.Timeout != nil {
		return repo.Spec.Timeout.Duration
	}
	return repo.Spec.Interval.Duration
}

// allowed reports whether the repository's accessFrom selects namespace.
func (r *ImagePolicyReconciler) allowed(ctx context.Context, repo *imagev1.ImageRepository, namespace string) (bool, error) {
	if repo.Spec.AccessFrom == nil {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return false, err
	}
	for _, sel := range repo.Spec.AccessFrom.NamespaceSelectors {
		if labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(ns.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// digest looks up the digest of repo:tag with the repository's credentials:
// of the manifest the tag points to, or with a platform, of that
// platform's manifest in it. With a platform, tag may be a digest (of a
// verified index).
func (r *ImagePolicyReconciler) digest(ctx context.Context, repo *imagev1.ImageRepository, tag string, platform *v1.Platform) (d string, err error) {
	err = r.withAccess(ctx, repo, func(ctx context.Context, ref name.Repository, a *access) error {
		if platform == nil {
			d, err = r.Registry.Digest(ctx, ref.Tag(tag), a.opts)
			return err
		}
		var at name.Reference = ref.Tag(tag)
		if strings.HasPrefix(tag, "sha256:") {
			at = ref.Digest(tag)
		}
		d, err = r.Registry.PlatformDigest(ctx, at, *platform, a.opts)
		return err
	})
	return d, err
}

// withAccess runs call with repo's name and access (its credentials and
// transport), under the repository's timeout. Its errors are redacted of
// the credentials, but a missing platform, which is returned as it is.
func (r *ImagePolicyReconciler) withAccess(ctx context.Context, repo *imagev1.ImageRepository, call func(context.Context, name.Repository, *access) error) error {
	ref, err := parseImage(repo)
	if err != nil {
		return err
	}
	a, err := resolveAccess(ctx, r.APIReader, repo, ref, nil, r.Cloud)
	if err != nil {
		return err
	}
	if tr, ok := a.opts.Transport.(*http.Transport); ok && tr != defaultTransport {
		defer tr.CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(ctx, repositoryTimeout(repo))
	defer cancel()
	err = call(ctx, ref, a)
	var nf *registry.PlatformNotFoundError
	if err == nil || errors.As(err, &nf) {
		return err
	}
	return errors.New(events.Redact(err.Error(), a.secrets...))
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}
