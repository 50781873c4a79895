package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/runtime/events"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// testClock is the real time plus an offset a test moves forward.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// clocked is a manager of its own (objects labelled shard=second) whose
// repository and policy reconcilers share a test clock, with its registry
// metrics at hand.
type clocked struct {
	clock   *testClock
	metrics *registry.Metrics
}

func startClocked(t *testing.T) *clocked {
	t.Helper()
	c := &clocked{clock: &testClock{}, metrics: registry.NewMetrics()}
	dir := t.TempDir()
	second, _ := labels.Parse("shard=second")
	stop, err := env.StartManagerWith(func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = second }, func(mgr ctrl.Manager) error {
		st, err := store.Open(dir)
		if err != nil {
			return err
		}
		rec := metrics.NewRecorder("reflector")
		regClient := registry.New(100, 100, c.metrics)
		ev := events.New(events.NewWriter(mgr.GetClient(), mgr.GetScheme(), "image-reflector-controller"))
		if err := (&ImageRepositoryReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev,
			Metrics: rec, ScanMetrics: NewScanMetrics(), Registry: regClient, Store: st, Clock: c.clock.Now}).SetupWithManager(mgr, ctrlOptions()); err != nil {
			return err
		}
		return (&ImagePolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Events: ev,
			Metrics: rec, Registry: regClient, Store: st, Clock: c.clock.Now}).SetupWithManager(context.Background(), mgr, ctrlOptions())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c
}

func second(objs ...client.Object) {
	for _, o := range objs {
		o.SetLabels(map[string]string{"shard": "second"})
	}
}

// reconcileNow requests a reconcile and waits until it was handled with
// the given Ready reason.
func reconcileNow(t *testing.T, obj client.Object, reason string) *metav1.Condition {
	t.Helper()
	v := time.Now().Format(time.RFC3339Nano)
	requestReconcile(t, obj, v)
	var cond *metav1.Condition
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		cond = conditions.Get(obj.(conditions.Getter), conditions.ReadyCondition)
		var handled string
		switch o := obj.(type) {
		case *imagev1.ImagePolicy:
			handled = o.Status.LastHandledReconcileAt
		case *imagev1.ImageRepository:
			handled = o.Status.LastHandledReconcileAt
		}
		return handled == v && cond != nil && cond.Reason == reason, nil
	})
	return cond
}

func withMinimumAge(d time.Duration, source imagev1.AgeSource) func(*imagev1.ImagePolicy) {
	return func(p *imagev1.ImagePolicy) {
		p.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: d}, Source: source}
	}
}

// Soak time by first sighting, with days passed on the controllers' clock:
// a new repository's tags wait out the minimum age (Ready=False,
// MinimumAgeNotReached, pendingRef the tag and when); once old enough the
// best is chosen; a tag pushed later waits in pendingRef while the chosen
// one stays, and is chosen when its time comes, all without a rescan.
func TestMinimumAgeSeen(t *testing.T) {
	c := startClocked(t)
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0", "1.1.0"})
	ns := namespace(t)
	repo := repoFor(ns, "app", reg, "app")
	p := policyFor(ns, "soak", "app", semverChoice("*"))
	withMinimumAge(24*time.Hour, imagev1.AgeSeen)(p)
	second(repo, p)
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	scanned := repo.Status.LastScanResult.ScanTime.Time
	create(t, p)

	cond := waitReason(t, p, imagev1.MinimumAgeNotReachedReason)
	if p.Status.LatestRef != nil || p.Status.PendingRef == nil || p.Status.PendingRef.Tag != "1.1.0" ||
		!p.Status.PendingRef.EligibleAt.Equal(&metav1.Time{Time: scanned.Add(24 * time.Hour)}) {
		t.Fatalf("latestRef %+v, pendingRef %+v; want none, 1.1.0 at %s", p.Status.LatestRef, p.Status.PendingRef, scanned.Add(24*time.Hour))
	}
	if !strings.Contains(cond.Message, "1.1.0 will be at") || p.Status.LastSelection.TooNew != 2 {
		t.Errorf("message %q, selection %+v", cond.Message, p.Status.LastSelection)
	}

	c.clock.Advance(24 * time.Hour)
	reconcileNow(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Tag != "1.1.0" || p.Status.PendingRef != nil {
		t.Fatalf("a day later: latestRef %+v, pendingRef %+v", p.Status.LatestRef, p.Status.PendingRef)
	}

	reg.PushTags(t, "app", []string{"1.2.0"})
	reconcileNow(t, repo, conditions.SucceededReason)
	rescanned := repo.Status.LastScanResult.ScanTime.Time
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
		return p.Status.PendingRef != nil, err
	})
	cond = conditions.Get(p, conditions.ReadyCondition)
	if p.Status.LatestRef.Tag != "1.1.0" || p.Status.PendingRef.Tag != "1.2.0" ||
		!p.Status.PendingRef.EligibleAt.Equal(&metav1.Time{Time: rescanned.Add(24 * time.Hour)}) || cond.Reason != conditions.SucceededReason ||
		!strings.Contains(cond.Message, "1.2.0 follows at") {
		t.Fatalf("after a new tag: latestRef %+v, pendingRef %+v, %+v", p.Status.LatestRef, p.Status.PendingRef, cond)
	}

	lists := reg.TagListRequests()
	c.clock.Advance(25 * time.Hour)
	reconcileNow(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Tag != "1.2.0" || p.Status.PendingRef != nil {
		t.Errorf("after the soak: latestRef %+v, pendingRef %+v", p.Status.LatestRef, p.Status.PendingRef)
	}
	if n := reg.TagListRequests() - lists; n != 0 {
		t.Errorf("the policy's re-evaluation scanned %d times", n)
	}
}

// The policy looks again by itself when the pending tag is old enough
// (a requeue at pendingRef.eligibleAt, in real time here, 3 s): no scan
// and no reconcile request is needed.
func TestMinimumAgeRequeue(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)
	repo := repoFor(ns, "app", reg, "app")
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	p := policyFor(ns, "soon", "app", semverChoice("*"))
	withMinimumAge(3*time.Second, imagev1.AgeSeen)(p)
	lists := reg.TagListRequests()
	create(t, p)
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
		return p.Status.LatestRef != nil, err
	})
	if p.Status.LatestRef.Tag != "1.0.0" || p.Status.PendingRef != nil || !conditions.IsReady(p) {
		t.Errorf("latestRef %+v, pendingRef %+v", p.Status.LatestRef, p.Status.PendingRef)
	}
	if seen := repo.Status.LastScanResult.ScanTime.Time; p.Status.LatestRefTime.Time.Before(seen.Add(3 * time.Second)) {
		t.Errorf("chosen at %s, before the minimum age passed at %s", p.Status.LatestRefTime, seen.Add(3*time.Second))
	}
	if n := reg.TagListRequests() - lists; n != 0 {
		t.Errorf("%d scans", n)
	}
}

// Soak time by build time and newestBuild read image configs from the
// registry only for the candidates that decide, once: a second evaluation
// and a rescan with one new tag cost nothing, or that tag's lookup. The
// requests are counted by the registry and by the metric.
func TestBuildTimes(t *testing.T) {
	c := startClocked(t)
	reg := testregistry.New(t, testregistry.Options{})
	now := time.Now().UTC().Truncate(time.Second)
	built := map[string]time.Duration{"1.0.0": 90 * time.Hour, "1.1.0": 30 * time.Hour, "1.2.0": 80 * time.Hour, "1.3.0": 2 * time.Hour}
	for tag, age := range built {
		reg.PushBuilt(t, "app", tag, now.Add(-age))
	}
	reg.PushIndex(t, "app", "1.4.0", now.Add(-70*time.Hour), "linux/amd64", "linux/arm64")
	ns := namespace(t)
	repo := repoFor(ns, "app", reg, "app")
	second(repo)
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)

	reads := func() int64 { return reg.ManifestRequests() + reg.BlobRequests() }
	tests := []struct {
		name    string
		policy  func(*imagev1.ImagePolicy)
		want    string
		pending string
		// reads are the manifests and configs the first evaluation reads:
		// build times, and the chosen image's source labels (a manifest and
		// its config, once per chosen image).
		reads int64
	}{
		// 1.4.0 (an index: 3 reads) and 1.3.0 are younger than 72 h by
		// build time: 1.2.0 is the first old enough (2 + 3 + 2 reads),
		// and its labels are read (2).
		{name: "created", policy: withMinimumAge(72*time.Hour, imagev1.AgeCreated), want: "1.2.0", pending: "1.4.0", reads: 9},
		// By first sighting every tag is minutes old.
		{name: "seen", policy: withMinimumAge(72*time.Hour, imagev1.AgeSeen), pending: "1.4.0"},
		{name: "newest build", policy: func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{}}
		}, want: "1.3.0", reads: 6}, // 1.0.0 and 1.1.0, the others are cached; 1.3.0's labels
		{name: "newest build at least a day old", policy: func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 4}}
			withMinimumAge(24*time.Hour, imagev1.AgeCreated)(p)
		}, want: "1.1.0", pending: "1.3.0", reads: 2}, // 1.1.0's labels
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := policyFor(ns, strings.ReplaceAll(tc.name, " ", "-"), "app", semverChoice("*"))
			tc.policy(p)
			second(p)
			before := reads()
			create(t, p)
			reason := conditions.SucceededReason
			if tc.want == "" {
				reason = imagev1.MinimumAgeNotReachedReason
			}
			cond := waitReason(t, p, reason)
			if got := ""; p.Status.LatestRef != nil {
				got = p.Status.LatestRef.Tag
				if got != tc.want {
					t.Errorf("latestRef %s; want %s (%s)", got, tc.want, cond.Message)
				}
			}
			if pr := p.Status.PendingRef; (pr == nil && tc.pending != "") || (pr != nil && pr.Tag != tc.pending) {
				t.Errorf("pendingRef %+v; want %s", pr, tc.pending)
			}
			if n := reads() - before; n != tc.reads {
				t.Errorf("%d manifest and config reads; want %d", n, tc.reads)
			}
			before = reads()
			reconcileNow(t, p, reason)
			if n := reads() - before; n != 0 {
				t.Errorf("a second evaluation read %d manifests and configs", n)
			}
		})
	}
	if n := testutil.ToFloat64(c.metrics.Metadata.WithLabelValues(registry.PurposeBuildTime, "config")); n != 5 {
		t.Errorf("build-time config requests counted: %v; want 5, one per tag", n)
	}

	// A new tag costs its own lookup, once; the policies it moves read
	// their new image's labels: newest-build's 0.9.0, and the day-old
	// policy's 1.4.0 (an index: 3 reads), which 0.9.0 brought into its
	// four newest builds' reach.
	nb := &imagev1.ImagePolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "newest-build"}, nb); err != nil {
		t.Fatal(err)
	}
	reg.PushBuilt(t, "app", "0.9.0", now.Add(-time.Hour))
	before := reads()
	buildReads := func() float64 {
		return testutil.ToFloat64(c.metrics.Metadata.WithLabelValues(registry.PurposeBuildTime, "manifest")) +
			testutil.ToFloat64(c.metrics.Metadata.WithLabelValues(registry.PurposeBuildTime, "config"))
	}
	buildBefore := buildReads()
	reconcileNow(t, repo, conditions.SucceededReason)
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(nb), nb)
		return nb.Status.LatestRef.Tag == "0.9.0", err
	})
	if n, b := reads()-before, buildReads()-buildBefore; n != 7 || b != 2 {
		t.Errorf("a new tag cost %d manifest and config reads, %v of them for build times; want 7 and 2", n, b)
	}
}
