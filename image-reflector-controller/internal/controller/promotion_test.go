package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

const (
	devCommit   = "1111111111111111111111111111111111111111"
	laterCommit = "2222222222222222222222222222222222222222"
)

// healthCRDs installs stand-ins for Flux's Kustomization and Argo CD's
// Application: served as their projects serve them, with a status
// subresource, any content kept. Their status is written in the tests as
// the controllers write it (pkg/health's table tests hold the reading to
// the real shapes).
var healthCRDs sync.Once

func installHealthCRDs(t *testing.T) {
	t.Helper()
	var err error
	healthCRDs.Do(func() {
		_, err = envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
			testenv.OpenCRD("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
			testenv.OpenCRD("argoproj.io", "v1alpha1", "Application", "applications"),
		}})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kustomization creates a Kustomization and returns a function that
// writes its status as kustomize-controller does: Ready with the applied
// revision, or a failed health check at the attempted one.
func kustomization(t *testing.T, ns, name string) func(ready bool, revision string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
	u.SetKind("Kustomization")
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, "./apps/dev", "spec", "path")
	create(t, u)
	return func(ready bool, revision string) {
		t.Helper()
		setKustomizationStatus(u, ready, revision)
		if err := env.Client.Status().Update(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
}

// setKustomizationStatus writes into u the status kustomize-controller
// writes: Ready with the applied revision, or a failed health check at
// the attempted one.
func setKustomizationStatus(u *unstructured.Unstructured, ready bool, revision string) {
	status, reason := "True", "ReconciliationSucceeded"
	if !ready {
		status, reason = "False", "HealthCheckFailed"
	}
	st := map[string]any{
		"observedGeneration":    u.GetGeneration(),
		"lastAttemptedRevision": revision,
		"conditions": []any{map[string]any{
			"type": "Ready", "status": status, "reason": reason, "message": "Applied revision: " + revision,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": u.GetGeneration(),
		}},
	}
	if ready {
		st["lastAppliedRevision"] = revision
	}
	u.Object["status"] = st
}

// upstreamAutomation creates the dev automation and returns a function
// that records in its status what a job applied, and where.
func upstreamAutomation(t testing.TB, ns, name string) func(policy string, img meta.ImageRef, revision string) {
	t.Helper()
	a := &imagev1.ImageUpdateAutomation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: imagev1.ImageUpdateAutomationSpec{
			Interval: metav1.Duration{Duration: 5 * time.Minute},
			GitSpec: imagev1.GitSpec{
				Repository: &updatev1.GitRepositorySpec{URL: "https://git.example.com/org/fleet.git"},
				Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
				Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
			},
		},
	}
	create(t, a)
	return func(policy string, img meta.ImageRef, revision string) {
		t.Helper()
		a.Status.ObservedPolicies = imagev1.ObservedPolicies{policy: img}
		a.Status.AppliedRevision = revision
		if err := env.Client.Status().Update(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
}

func promotionPolicy(ns, name, repo string, from imagev1.PromotionSource, soak time.Duration, healthOf ...imagev1.HealthObjectReference) *imagev1.ImagePolicy {
	return policyFor(ns, name, repo, imagev1.ImagePolicyChoice{Promotion: &imagev1.PromotionPolicy{
		From: from, HealthOf: healthOf, Soak: &metav1.Duration{Duration: soak}}})
}

func getPolicy(t *testing.T, p *imagev1.ImagePolicy) {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
}

// A promotion policy waits while the upstream's health object is
// degraded, starts the soak when it is seen healthy at the commit the
// upstream automation applied (a watched status change, no poll), and
// promotes exactly the upstream's image, digest included, when the soak
// ends (a timer, nothing else changes). A new upstream image that the
// health object does not run yet leaves the promoted one in place.
func TestPromotionFollowsWhatRanHealthyAfterTheSoak(t *testing.T) {
	installHealthCRDs(t)
	ns := namespace(t)
	repo := newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	})
	create(t, repo)
	setKustomization := kustomization(t, ns, "apps-dev")
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0", Digest: "sha256:" + strings.Repeat("2", 64)}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	setKustomization(false, "main@sha1:"+devCommit)

	const soak = 3 * time.Second
	p := promotionPolicy(ns, "app-prod", "app", imagev1.PromotionSource{Automation: "dev"}, soak,
		imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-dev"})
	create(t, p)
	cond := waitReason(t, p, imagev1.UpstreamNotHealthyReason)
	if cond.Status != metav1.ConditionFalse || p.Status.LatestRef != nil || p.Status.PendingRef == nil ||
		*p.Status.PendingRef.Image != v2 || p.Status.PendingRef.HealthSeen != nil || !strings.Contains(cond.Message, "is Degraded") {
		t.Fatalf("degraded upstream: %+v, pending %+v, latest %v", cond, p.Status.PendingRef, p.Status.LatestRef)
	}
	if h := p.Status.Promotion.Health; len(h) != 1 || h[0].State != "Degraded" || h[0].Object != "Kustomization/"+ns+"/apps-dev" {
		t.Errorf("status.promotion.health %+v", h)
	}

	setKustomization(true, "main@sha1:"+devCommit)
	healthy := time.Now()
	waitReason(t, p, imagev1.SoakNotElapsedReason)
	pr := p.Status.PendingRef
	if pr.HealthSeen == nil || pr.EligibleAt == nil || pr.UpstreamRevision != "main@sha1:"+devCommit ||
		!pr.EligibleAt.Time.Equal(pr.HealthSeen.Add(soak)) || p.Status.LatestRef != nil {
		t.Fatalf("soaking: pending %+v, latest %v", pr, p.Status.LatestRef)
	}
	promotions := testutil.ToFloat64(promotionMetrics.Promotions)
	waitReason(t, p, conditions.SucceededReason)
	if n := testutil.ToFloat64(promotionMetrics.Promotions) - promotions; n != 1 {
		t.Errorf("promotions_total moved by %v, want 1", n)
	}
	if p.Status.LatestRef == nil || *p.Status.LatestRef != v2 || p.Status.PendingRef != nil {
		t.Fatalf("promoted %v (pending %+v), want %v exactly", p.Status.LatestRef, p.Status.PendingRef, v2)
	}
	if since := time.Since(healthy); since < soak-time.Second {
		t.Errorf("promoted %s after health was seen, soak %s", since, soak)
	}
	if st := p.Status.Promotion; st.PromotedRevision != "main@sha1:"+devCommit || st.PromotedHealthSeen == nil || st.Policy != "app-dev" {
		t.Errorf("status.promotion %+v", st)
	}

	// dev moves on; its Kustomization still runs the earlier commit.
	v3 := meta.ImageRef{Name: "registry.example/app", Tag: "1.3.0", Digest: "sha256:" + strings.Repeat("3", 64)}
	setUpstream("app-dev", v3, "main@sha1:"+laterCommit)
	cond = waitReason(t, p, imagev1.UpstreamNotHealthyReason)
	if cond.Status != metav1.ConditionTrue || *p.Status.LatestRef != v2 || *p.Status.PendingRef.Image != v3 ||
		!strings.Contains(cond.Message, "not main@"+devCommit[:12]) && !strings.Contains(cond.Message, "runs main@"+devCommit[:12]) {
		t.Errorf("new upstream image not yet run: %+v, latest %v, pending %+v", cond, p.Status.LatestRef, p.Status.PendingRef)
	}
}

// Promotions that follow each other in a circle are refused, Stalled.
func TestPromotionCycleIsStalled(t *testing.T) {
	installHealthCRDs(t)
	ns := namespace(t)
	create(t, newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	}))
	ks := imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps"}
	a := promotionPolicy(ns, "a", "app", imagev1.PromotionSource{Automation: "x", Policy: "b"}, 0, ks)
	b := promotionPolicy(ns, "b", "app", imagev1.PromotionSource{Automation: "y", Policy: "a"}, 0, ks)
	create(t, a, b)
	cond := waitReason(t, a, imagev1.PromotionCycleReason)
	if !strings.Contains(cond.Message, "a ← b ← a") || !conditions.IsTrue(a, conditions.StalledCondition) {
		t.Errorf("cycle: %+v", cond)
	}
}

// Argo CD's Application counts by health.status and sync.revision, its
// bare commit hash matched against the upstream's revision.
func TestPromotionReadsArgoCDApplications(t *testing.T) {
	installHealthCRDs(t)
	ns := namespace(t)
	create(t, newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	}))
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	app := &unstructured.Unstructured{}
	app.SetAPIVersion("argoproj.io/v1alpha1")
	app.SetKind("Application")
	app.SetNamespace(ns)
	app.SetName("dev")
	create(t, app)
	p := promotionPolicy(ns, "app-prod", "app", imagev1.PromotionSource{Automation: "dev", Policy: "app-dev"}, 0,
		imagev1.HealthObjectReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Application", Name: "dev"})
	create(t, p)
	waitReason(t, p, imagev1.UpstreamNotHealthyReason)
	app.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": "Synced", "revision": devCommit},
		"health": map[string]any{"status": "Healthy", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
	}
	if err := env.Client.Status().Update(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitReason(t, p, conditions.SucceededReason)
	getPolicy(t, p)
	if p.Status.LatestRef == nil || *p.Status.LatestRef != v2 {
		t.Errorf("latest %v, want %v", p.Status.LatestRef, v2)
	}
}

// idleRequests is the count of the controller's requests that are not
// watches, on the resources a promotion reads and writes, in namespace ns
// or across namespaces.
func idleRequests(ns string) int {
	return env.Requests.In(ns, "imagepolicies", "imageupdateautomations", "kustomizations", "imagerepositories")
}

// A promotion watches, it does not poll: once it has promoted, or while
// it waits for health, it makes no API request at all (the controller's
// requests in the test's namespace and across namespaces, watches
// excluded). The issue's figure "API reads per promotion policy per
// minute while idle" is this count.
func TestPromotionIsWatchedNotPolled(t *testing.T) {
	installHealthCRDs(t)
	ns := namespace(t)
	create(t, newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	}))
	setKustomization := kustomization(t, ns, "apps-dev")
	setUpstream := upstreamAutomation(t, ns, "dev")
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}
	setUpstream("app-dev", v2, "main@sha1:"+devCommit)
	setKustomization(true, "main@sha1:"+devCommit)
	ks := imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-dev"}
	promoted := promotionPolicy(ns, "promoted", "app", imagev1.PromotionSource{Automation: "dev"}, 0, ks)
	waiting := promotionPolicy(ns, "waiting", "app", imagev1.PromotionSource{Automation: "dev"}, 0,
		imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-missing"})
	create(t, promoted, waiting)
	waitReason(t, promoted, conditions.SucceededReason)
	waitReason(t, waiting, imagev1.UpstreamNotHealthyReason)

	// The reason a wait returns on is written by a reconcile that may
	// start another (the other policy's status change): idleness starts
	// once a second passes without either.
	settle(t, func() float64 { return float64(idleRequests(ns)) + policyReconciles(t) })
	const window = 10 * time.Second
	before, reconciles := idleRequests(ns), policyReconciles(t)
	time.Sleep(window)
	after := idleRequests(ns)
	// Nor does it reconcile on a timer, reading its cache.
	if reconciles == 0 {
		t.Fatal("no ImagePolicy reconcile counted at all: the metric is not the controller's")
	}
	if n := policyReconciles(t) - reconciles; n != 0 {
		t.Errorf("%v ImagePolicy reconciles in %s of idleness; want none", n, window)
	}
	perMinute := float64(after-before) / 2 * float64(time.Minute/window)
	t.Logf("API requests per promotion policy per minute while idle: %.1f (over %s, 2 policies)", perMinute, window)
	if after != before {
		t.Errorf("%v requests on the promotion's resources in %s of idleness; want none", after-before, window)
	}
}

// settle waits until count holds still for a second (15 s at most).
func settle(t *testing.T, count func() float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for last := count(); ; {
		time.Sleep(time.Second)
		now := count()
		if now == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still reconciling after 15s: the promotion never settles")
		}
		last = now
	}
}

// policyReconciles is controller-runtime's count of ImagePolicy reconciles
// in this process.
func policyReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "imagepolicy" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// A promotion may name only the upstream policy: the one automation of
// the namespace that applies it is followed (and recorded in
// status.promotion.automation); two that apply it are refused, Stalled.
func TestPromotionFromAPolicyFindsItsAutomation(t *testing.T) {
	installHealthCRDs(t)
	ns := namespace(t)
	create(t, newRepository(ns, "app", func(r *imagev1.ImageRepository) {
		r.Spec.Image = "registry.example/app"
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	}))
	setKustomization := kustomization(t, ns, "apps-dev")
	setKustomization(true, "main@sha1:"+devCommit)
	p := promotionPolicy(ns, "app-prod", "app", imagev1.PromotionSource{Policy: "app-dev"}, 0,
		imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-dev"})
	env.ExpectInvalid(t, promotionPolicy(ns, "nowhere", "app", imagev1.PromotionSource{}, 0, p.Spec.Policy.Promotion.HealthOf...),
		"promotion.from needs an automation, a policy or both")
	create(t, p)
	cond := waitReason(t, p, conditions.DependencyNotReadyReason)
	if !strings.Contains(cond.Message, "has applied policy app-dev yet") {
		t.Errorf("no automation yet: %s", cond.Message)
	}
	// The automation's status wakes the policy: no timer needed.
	v2 := meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0"}
	upstreamAutomation(t, ns, "dev")("app-dev", v2, "main@sha1:"+devCommit)
	waitReason(t, p, conditions.SucceededReason)
	if p.Status.LatestRef == nil || *p.Status.LatestRef != v2 || p.Status.Promotion.Automation != "dev" {
		t.Errorf("latest %v, status.promotion %+v", p.Status.LatestRef, p.Status.Promotion)
	}
	upstreamAutomation(t, ns, "dev-too")("app-dev", v2, "main@sha1:"+devCommit)
	cond = waitReason(t, p, imagev1.InvalidPolicyReason)
	if !strings.Contains(cond.Message, "dev, dev-too all apply policy app-dev") {
		t.Errorf("two automations: %s", cond.Message)
	}
}
