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

// promotionGroupOf maps a promotion policy to the promotion policies of
// its upstream automation (those naming it, and those of the namespace
// naming only a policy, which may resolve to it) that wait for their
// group.
func (r *ImagePolicyReconciler) promotionGroupOf() handler.MapFunc {
	byKey := policiesByKey(r.promotion.upstream)
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		p, ok := o.(*imagev1.ImagePolicy)
		if !ok || p.Spec.Policy.Promotion == nil {
			return nil
		}
		keys := []string{p.Namespace + "/", p.Namespace + "/" + cmpOr(p.Spec.Policy.Promotion.From.Automation, statusAutomation(p))}
		var out []ctrl.Request
		for _, k := range slices.Compact(keys) {
			for _, req := range byKey(ctx, k) {
				if req.Name == p.Name || slices.Contains(out, req) {
					continue
				}
				// Only a member waiting for its group decides by the
				// others: waking the rest would make every change of one
				// member a reconcile of all.
				q := &imagev1.ImagePolicy{}
				if err := r.Get(ctx, req.NamespacedName, q); err != nil {
					continue
				}
				if c := meta.FindStatusCondition(q.Status.Conditions, conditions.ReadyCondition); c != nil && c.Reason == imagev1.PromotionGroupWaitingReason {
					out = append(out, req)
				}
			}
		}
		return out
	}
}

// groupMemberChanged passes the changes of a promotion policy its group
// decides by: its choice, its approval, its wait's reason, its spec. A
// soak's time left, which changes at every reconcile, is none of them, so
// two members never wake each other in turn.
type groupMemberChanged struct{ predicate.Funcs }

func (groupMemberChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*imagev1.ImagePolicy)
	n, okN := e.ObjectNew.(*imagev1.ImagePolicy)
	if !okO || !okN || (o.Spec.Policy.Promotion == nil && n.Spec.Policy.Promotion == nil) {
		return false
	}
	reason := func(p *imagev1.ImagePolicy) string {
		if c := meta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition); c != nil {
			return c.Reason
		}
		return ""
	}
	return o.Generation != n.Generation || !equalField(o.Status.LatestRef, n.Status.LatestRef) || reason(o) != reason(n) ||
		o.Annotations[imagev1.ApproveAnnotation] != n.Annotations[imagev1.ApproveAnnotation]
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
	d, up, err := r.decide(ctx, obj, prevPending)
	if err != nil {
		return reconcile.Stop, err
	}
	st.Policy = up.followed
	if d.Promote != nil && d.HealthSeen != nil {
		// A new promotion: the images its upstream commit moved with
		// this one move together.
		d = r.withGroup(ctx, obj, up, d)
	}
	st.Group = d.Group
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
		st.PromotedRevision, st.PromotedHealthSeen, st.Approval = up.Revision, d.HealthSeen, d.Approval
		r.PromotionMetrics.promoted(r.now().Sub(d.HealthSeen.Time))
	}
	s.State.latest = *d.Promote
	res, err := r.recordLatest(ctx, s)
	conditions.MarkReady(obj, conditions.SucceededReason, "%s", d.Message)
	res.Stop = true
	return res, err
}

// upstreamOf is a policy's upstream as decided: the promotion input, and
// which policy of the automation it follows.
type upstreamOf struct {
	promotion.Upstream
	automation, followed string
}

// decide reads what a promotion policy's decision needs (its upstream's
// image, the health of healthOf, its approval) and decides. The group's
// other members are decided the same way.
func (r *ImagePolicyReconciler) decide(ctx context.Context, obj *imagev1.ImagePolicy, prevPending *imagev1.PendingRef) (promotion.Decision, upstreamOf, error) {
	pr := obj.Spec.Policy.Promotion
	up, followed, err := r.upstream(ctx, obj)
	if err != nil {
		return promotion.Decision{}, upstreamOf{}, err
	}
	out := upstreamOf{Upstream: up, automation: obj.Status.Promotion.Automation, followed: followed}
	if err := r.sameRepository(ctx, obj, up.Image); err != nil {
		return promotion.Decision{}, out, err
	}
	objects, err := r.healthOf(ctx, obj)
	if err != nil {
		return promotion.Decision{}, out, err
	}
	soak := time.Duration(0)
	if pr.Soak != nil {
		soak = pr.Soak.Duration
	}
	return promotion.Decide(promotion.Input{Upstream: up, Objects: objects, Soak: soak,
		Latest: obj.Status.LatestRef, Pending: prevPending, Now: r.now(),
		RequireApproval: pr.Approval == imagev1.ApprovalRequired, Approval: promotion.ReadApproval(obj),
		Policy: obj.Namespace + "/" + obj.Name}), out, nil
}

// withGroup holds a promotion back while another member of its group
// cannot move: the other promotion policies following the same upstream
// automation whose images differ from their latest, so that what ran
// together upstream reaches this environment together (pkg/promotion's
// Group). Each member is decided as its own reconcile would decide it
// now, not as its status last said, so no member moves ahead because
// another has not been reconciled yet.
func (r *ImagePolicyReconciler) withGroup(ctx context.Context, obj *imagev1.ImagePolicy, up upstreamOf, d promotion.Decision) promotion.Decision {
	var list imagev1.ImagePolicyList
	if err := r.List(ctx, &list, client.InNamespace(obj.Namespace)); err != nil {
		return promotion.Group(d, up.Upstream, []promotion.Member{{Name: "(the namespace's promotion policies)", Err: err}})
	}
	var members []promotion.Member
	for i := range list.Items {
		o := list.Items[i].DeepCopy()
		pr := o.Spec.Policy.Promotion
		if o.Name == obj.Name || pr == nil || o.Spec.Suspend {
			continue
		}
		if a := cmpOr(pr.From.Automation, statusAutomation(o)); a != up.automation {
			continue
		}
		if o.Status.Promotion == nil {
			o.Status.Promotion = &imagev1.PromotionStatus{Automation: pr.From.Automation}
		}
		md, mup, err := r.decide(ctx, o, o.Status.PendingRef)
		members = append(members, promotion.Member{Name: o.Name, Upstream: mup.Upstream, Latest: o.Status.LatestRef, Decision: md, Err: err})
	}
	return promotion.Group(d, up.Upstream, members)
}

func statusAutomation(p *imagev1.ImagePolicy) string {
	if st := p.Status.Promotion; st != nil {
		return st.Automation
	}
	return ""
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
