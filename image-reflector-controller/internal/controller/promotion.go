package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	apimeta "toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/promotion"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/healthwatch"
	"toolkit.dev/image-toolkit/pkg/runtime/index"
	"toolkit.dev/image-toolkit/pkg/runtime/reconcile"
)

// A promotion policy reads the status of its upstream automation and of
// the objects of healthOf. It watches them: the automation through the
// manager's typed cache, each healthOf kind through an informer started
// the first time a policy names it (a cluster without Flux or Argo CD
// starts none). Only the end of a soak is a timer.
//
// The reflector may read the health kinds it has RBAC for: Flux's
// Kustomization and HelmRelease and Argo CD's Application by default; the
// chart's rbac.healthRules adds others.
// +kubebuilder:rbac:groups=image.toolkit.dev,resources=imageupdateautomations,verbs=get;list;watch
// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=get;list;watch
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=argoproj.io,resources=applications,verbs=get;list;watch

// promotionIndexes index promotion policies by their upstream automation
// (namespace/name, or "namespace/" when they name only a policy), by the
// policy they follow (from.policy, or the one status.promotion found: a
// new or changed policy there may close a cycle) and by each healthOf
// object (group/Kind/namespace/name).
type promotionIndexes struct {
	upstream, follow, health *index.Index
}

// kindRetry is how soon a policy naming a health kind the cluster does
// not serve looks again (a CRD installed later).
const kindRetry = time.Minute

var automationGVK = imagev1.GroupVersion.WithKind("ImageUpdateAutomation")

// watchUpstreams watches the upstream automations, whose CRD a reflector
// installed alone does not have, once a promotion needs them.
func (r *ImagePolicyReconciler) watchUpstreams() error {
	w := r.watches
	return w.Ensure(automationGVK, func() source.Source {
		return source.Kind[client.Object](w.Cache, &imagev1.ImageUpdateAutomation{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfAutomation()), upstreamChanged{})
	})
}

func equalField(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// upstreamChanged passes the automation changes a promotion reads.
type upstreamChanged struct{ predicate.Funcs }

func (upstreamChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*imagev1.ImageUpdateAutomation)
	n, okN := e.ObjectNew.(*imagev1.ImageUpdateAutomation)
	if !okO || !okN {
		return false
	}
	return o.Status.AppliedRevision != n.Status.AppliedRevision || !equalField(o.Status.ObservedPolicies, n.Status.ObservedPolicies) ||
		!equalField(o.Status.LastJob, n.Status.LastJob)
}

func healthKeys(p *imagev1.ImagePolicy) []string {
	if pr := p.Spec.Policy.Promotion; pr != nil {
		return healthwatch.Keys(pr.HealthOf, p.Namespace)
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// setupPromotion makes the indexes of promotion policies; their upstream
// automations and healthOf kinds are watched as policies name them.
func (r *ImagePolicyReconciler) setupPromotion() {
	r.promotion.upstream = index.New(func(o client.Object) []string {
		p := o.(*imagev1.ImagePolicy)
		if pr := p.Spec.Policy.Promotion; pr != nil {
			// "ns/" when it names only a policy: any automation of the
			// namespace may be the one that applies it.
			return []string{p.Namespace + "/" + pr.From.Automation}
		}
		return nil
	})
	r.promotion.follow = index.New(func(o client.Object) []string {
		p := o.(*imagev1.ImagePolicy)
		pr := p.Spec.Policy.Promotion
		if pr == nil {
			return nil
		}
		if pr.From.Policy != "" {
			return []string{p.Namespace + "/" + pr.From.Policy}
		}
		if st := p.Status.Promotion; st != nil && st.Policy != "" {
			return []string{p.Namespace + "/" + st.Policy}
		}
		return nil
	})
	r.promotion.health = index.New(func(o client.Object) []string {
		return healthKeys(o.(*imagev1.ImagePolicy))
	})
}

// policiesByIndex maps an object to the policies an index names it in.
func policiesByIndex(ix *index.Index, key func(client.Object) string) handler.MapFunc {
	byKey := policiesByKey(ix)
	return func(ctx context.Context, o client.Object) []ctrl.Request { return byKey(ctx, key(o)) }
}

// policiesByKey maps an index key to the policies named under it.
func policiesByKey(ix *index.Index) func(context.Context, string) []ctrl.Request {
	return func(ctx context.Context, key string) []ctrl.Request {
		keys, err := ix.Lookup(ctx, key)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "looking up the policies of an object")
			return nil
		}
		reqs := make([]ctrl.Request, len(keys))
		for i, k := range keys {
			reqs[i] = ctrl.Request{NamespacedName: k}
		}
		return reqs
	}
}

// policiesOfAutomation maps an automation to the promotions naming it, and
// to those of its namespace naming only a policy.
func (r *ImagePolicyReconciler) policiesOfAutomation() handler.MapFunc {
	named := policiesByIndex(r.promotion.upstream, keyOf)
	anyInNamespace := policiesByIndex(r.promotion.upstream, func(o client.Object) string { return o.GetNamespace() + "/" })
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		return append(named(ctx, o), anyInNamespace(ctx, o)...)
	}
}

// promote is a promotion policy's whole reconcile: find the upstream's
// image, read the health of healthOf, decide (pkg/promotion) and record.
// Other policies go on to the tags.
func (r *ImagePolicyReconciler) promote(ctx context.Context, s *policyScope) (reconcile.Result, error) {
	obj := s.Obj
	pr := obj.Spec.Policy.Promotion
	if pr == nil {
		obj.Status.Promotion = nil
		r.watches.Forget(client.ObjectKeyFromObject(obj))
		return reconcile.Continue, nil
	}
	obj.Status.LastSelection, obj.Status.HeldRef = nil, nil
	prevPending := s.State.prevPending
	st := obj.Status.Promotion
	if st == nil || (pr.From.Automation != "" && st.Automation != pr.From.Automation) {
		st = &imagev1.PromotionStatus{}
	}
	st.Automation = pr.From.Automation
	obj.Status.Promotion = st

	if chain := r.promotionCycle(ctx, obj); chain != nil {
		return reconcile.Stop, conditions.Stallf(imagev1.PromotionCycleReason, "promotions follow each other in a cycle: %s", strings.Join(chain, " ← "))
	}
	up, followed, err := r.upstream(ctx, obj)
	if err != nil {
		return reconcile.Stop, err
	}
	st.Policy = followed
	if err := r.sameRepository(ctx, obj, up.Image); err != nil {
		return reconcile.Stop, err
	}
	objects, err := r.healthOf(ctx, obj)
	if err != nil {
		return reconcile.Stop, err
	}
	soak := time.Duration(0)
	if pr.Soak != nil {
		soak = pr.Soak.Duration
	}
	d := promotion.Decide(promotion.Input{Upstream: up, Objects: objects, Soak: soak,
		Latest: obj.Status.LatestRef, Pending: prevPending, Now: r.now()})
	st.Health = d.Health
	obj.Status.PendingRef = d.Pending
	if d.Promote == nil {
		if obj.Status.LatestRef == nil {
			// Nothing chosen yet: the policy is not ready.
			return reconcile.Stop, conditions.Retry(d.Reason, fmt.Errorf("%s", d.Message)).After(d.Requeue)
		}
		// The current choice stands, and the policy says why the next
		// one waits.
		reason := d.Reason
		conditions.MarkReady(obj, reason, "latest image is %s; %s", obj.Status.LatestRef, d.Message)
		return reconcile.StopAfter(d.Requeue), nil
	}
	if d.HealthSeen != nil {
		st.PromotedRevision, st.PromotedHealthSeen = up.Revision, d.HealthSeen
		r.PromotionMetrics.promoted(r.now().Sub(d.HealthSeen.Time))
	}
	s.State.latest = *d.Promote
	res, err := r.recordLatest(ctx, s)
	conditions.MarkReady(obj, conditions.SucceededReason, "%s", d.Message)
	res.Stop = true
	return res, err
}

// upstream finds the image the upstream automation applied for the
// followed policy, and the commit holding it.
func (r *ImagePolicyReconciler) upstream(ctx context.Context, obj *imagev1.ImagePolicy) (promotion.Upstream, string, error) {
	from := obj.Spec.Policy.Promotion.From
	auto := &imagev1.ImageUpdateAutomation{}
	key := types.NamespacedName{Namespace: obj.Namespace, Name: from.Automation}
	if err := r.watchUpstreams(); err != nil {
		if meta.IsNoMatchError(err) {
			return promotion.Upstream{}, "", conditions.Retryf(conditions.DependencyNotReadyReason,
				"ImageUpdateAutomation %s: the cluster does not serve ImageUpdateAutomations", key).After(kindRetry)
		}
		return promotion.Upstream{}, "", err
	}
	if from.Automation == "" {
		found, err := r.automationApplying(ctx, obj.Namespace, from.Policy)
		if err != nil {
			return promotion.Upstream{}, "", err
		}
		auto, key.Name = found, found.Name
		obj.Status.Promotion.Automation = found.Name
	} else if err := r.Get(ctx, key, auto); err != nil {
		if apierrors.IsNotFound(err) {
			return promotion.Upstream{}, "", conditions.Retryf(conditions.DependencyNotReadyReason, "ImageUpdateAutomation %s not found", key)
		}
		return promotion.Upstream{}, "", err
	}
	followed := from.Policy
	if followed == "" {
		names := make([]string, 0, len(auto.Status.ObservedPolicies))
		for n := range auto.Status.ObservedPolicies {
			names = append(names, n)
		}
		sort.Strings(names)
		switch len(names) {
		case 0:
		case 1:
			followed = names[0]
		default:
			return promotion.Upstream{}, "", conditions.Stallf(imagev1.InvalidPolicyReason,
				"ImageUpdateAutomation %s applies %d policies (%s): spec.policy.promotion.from.policy must say which to follow",
				key, len(names), strings.Join(names, ", "))
		}
	}
	if followed == obj.Name {
		return promotion.Upstream{}, "", conditions.Stallf(imagev1.PromotionCycleReason, "the policy follows itself through ImageUpdateAutomation %s", key)
	}
	up := promotion.Upstream{Name: fmt.Sprintf("ImageUpdateAutomation %s (policy %s)", key.Name, cmpOr(followed, "?"))}
	if ref, ok := auto.Status.ObservedPolicies[followed]; ok && followed != "" &&
		(auto.Status.LastJob == nil || !slices.Contains(auto.Status.LastJob.UnmarkedPolicies, followed)) {
		img := ref
		up.Image, up.Revision = &img, auto.Status.AppliedRevision
	}
	return up, followed, nil
}

// automationApplying finds the one automation of a namespace that applies
// a policy (its status.observedPolicies names it), for a promotion that
// names only the policy.
func (r *ImagePolicyReconciler) automationApplying(ctx context.Context, namespace, policy string) (*imagev1.ImageUpdateAutomation, error) {
	var list imagev1.ImageUpdateAutomationList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var found []string
	var auto *imagev1.ImageUpdateAutomation
	for i := range list.Items {
		if _, ok := list.Items[i].Status.ObservedPolicies[policy]; ok {
			found, auto = append(found, list.Items[i].Name), &list.Items[i]
		}
	}
	switch len(found) {
	case 0:
		return nil, conditions.Retryf(conditions.DependencyNotReadyReason, "no ImageUpdateAutomation in %s has applied policy %s yet", namespace, policy)
	case 1:
		return auto, nil
	}
	sort.Strings(found)
	return nil, conditions.Stallf(imagev1.InvalidPolicyReason, "ImageUpdateAutomations %s all apply policy %s: spec.policy.promotion.from.automation must say which to follow",
		strings.Join(found, ", "), policy)
}

// healthOf reads the healthOf objects from the cache, watching their kinds.
func (r *ImagePolicyReconciler) healthOf(ctx context.Context, obj *imagev1.ImagePolicy) ([]promotion.Object, error) {
	return r.watches.Read(ctx, client.ObjectKeyFromObject(obj), obj.Spec.Policy.Promotion.HealthOf, imagev1.InvalidPolicyReason, kindRetry)
}

// promotionCycle follows the promotion upstream (the policy each one
// follows, named or the one its automation applies) and returns the
// chain when it comes back to obj.
func (r *ImagePolicyReconciler) promotionCycle(ctx context.Context, obj *imagev1.ImagePolicy) []string {
	next := func(name string) (string, bool) {
		p := obj
		if name != obj.Name {
			p = &imagev1.ImagePolicy{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, p); err != nil {
				return "", false
			}
		}
		pr := p.Spec.Policy.Promotion
		if pr == nil {
			return "", false
		}
		if pr.From.Policy != "" {
			return pr.From.Policy, true
		}
		auto := &imagev1.ImageUpdateAutomation{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: pr.From.Automation}, auto); err != nil || len(auto.Status.ObservedPolicies) != 1 {
			return "", false
		}
		for n := range auto.Status.ObservedPolicies {
			return n, true
		}
		return "", false
	}
	return promotion.Cycle(obj.Name, next)
}

// sameRepository refuses an upstream image of another repository than
// spec.imageRepositoryRef's: that reference is what the policy may
// promote, so a misnamed upstream cannot bring another image into the
// environment. The repository is not asked for tags or digests.
func (r *ImagePolicyReconciler) sameRepository(ctx context.Context, obj *imagev1.ImagePolicy, img *apimeta.ImageRef) error {
	if img == nil {
		return nil
	}
	key := repositoryKey(obj)
	repo := &imagev1.ImageRepository{}
	if err := r.Get(ctx, key, repo); err != nil {
		if apierrors.IsNotFound(err) {
			return conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository %s not found", key).After(dependencyRetry)
		}
		return err
	}
	if key.Namespace != obj.Namespace {
		if ok, err := r.allowed(ctx, repo, obj.Namespace); err != nil || !ok {
			return cmpErr(err, conditions.Retryf(conditions.AccessDeniedReason,
				"ImageRepository %s does not grant access to namespace %s (spec.accessFrom)", key, obj.Namespace))
		}
	}
	if repo.Spec.Image != img.Name {
		return conditions.Stallf(imagev1.InvalidPolicyReason, "the upstream's image %s is not of ImageRepository %s (%s)", img, key, repo.Spec.Image)
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// PromotionMetrics are the promotion policies' metrics.
type PromotionMetrics struct {
	Promotions     prometheus.Counter
	HealthToChoice prometheus.Histogram
}

// NewPromotionMetrics makes them, unregistered.
func NewPromotionMetrics() *PromotionMetrics {
	const ns, sub = "imagetoolkit", "reflector"
	return &PromotionMetrics{
		Promotions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "promotions_total", Help: "Images promotion policies promoted."}),
		HealthToChoice: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "promotion_health_to_promote_seconds", Help: "Time from health first seen at the upstream commit to the promotion (the soak included).",
			Buckets: []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400}}),
	}
}

// Collectors returns the metrics to register.
func (m *PromotionMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Promotions, m.HealthToChoice}
}

func (m *PromotionMetrics) promoted(sinceHealth time.Duration) {
	if m == nil {
		return
	}
	m.Promotions.Inc()
	m.HealthToChoice.Observe(max(sinceHealth, 0).Seconds())
}
