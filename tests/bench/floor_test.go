package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// BenchmarkFloor measures what bounds a cold start from below on this
// machine, for BenchmarkReflectorScale to be stated as a multiple of:
//
//   - status-writes: status merge patches of 20,000 ImageRepositories
//     through the envtest API server, with a plain client (no client-side
//     limit), 16 at once (64 were no faster): the writes a cold start of
//     10,000 repositories and 10,000 policies cannot do without (one per
//     object), with as many objects stored (2,000 wrote a third faster:
//     the API server's cost of a write grows with what it stores);
//   - status-writes-scan-shape: the same writes with the status a first
//     scan writes (a Ready condition, the canonical name, the revision, ten
//     latest tags, the exclusion list): how much of a cold start's multiple
//     is the size of what it writes, which the API server decodes,
//     validates, tracks in managedFields and stores on every write;
//   - cold-start-requests: every API request a cold start of 10,000
//     repositories makes, with a plain client, 16 object pairs at once: for
//     each pair, a repository status and a policy status of the shapes the
//     reflector writes, and the policy's NewImage event; with a watch open
//     on each kind, as the reflector's informers and the benchmark's own
//     watch have. It is the cold start without the controller: what is
//     left of the cold start's time beyond it is the reflector's own;
//   - tags-list: tags/list requests of 100 tags from the benchmark's test
//     registry, 16 at once.
//
// Run with
//
//	go test -run '^$' -bench BenchmarkFloor -benchtime 1x ./tests/bench/
func BenchmarkFloor(b *testing.B) {
	b.Run("status-writes", func(b *testing.B) {
		for range b.N {
			floorStatusWrites(b, 20000, false)
		}
	})
	b.Run("status-writes-scan-shape", func(b *testing.B) {
		for range b.N {
			floorStatusWrites(b, 20000, true)
		}
	})
	b.Run("cold-start-requests", func(b *testing.B) {
		for range b.N {
			floorColdStartRequests(b, 10000)
		}
	})
	b.Run("tags-list", func(b *testing.B) {
		for range b.N {
			floorTagsList(b, 20000)
		}
	})
}

// floorWorkers is how many requests the floors keep in flight.
const floorWorkers = 16

func floorStatusWrites(b *testing.B, n int, scanShape bool) {
	b.StopTimer()
	ctx := context.Background()
	cluster, stop := startCluster(b)
	defer stop()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = -1, -1
	c, err := client.New(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "floor"}}); err != nil {
		b.Fatal(err)
	}
	repos := make([]*imagev1.ImageRepository, n)
	parallel(b, n, func(i int) error {
		repos[i] = &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: "floor"},
			Spec: imagev1.ImageRepositorySpec{Image: "registry.example/team/app", Interval: metav1.Duration{Duration: time.Hour}}}
		return c.Create(ctx, repos[i])
	})
	b.StartTimer()
	start := time.Now()
	parallel(b, n, func(i int) error {
		r := repos[i]
		p := client.MergeFrom(r.DeepCopy())
		r.Status.LastScanResult = &imagev1.ScanResult{TagCount: 100, ScanTime: metav1.Now()}
		if scanShape {
			scanStatus(&r.Status, i)
		}
		return c.Status().Patch(ctx, r, p)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "writes/s")
}

func floorColdStartRequests(b *testing.B, n int) {
	b.StopTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster, stop := startCluster(b)
	defer stop()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = -1, -1
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "floor"}}); err != nil {
		b.Fatal(err)
	}
	repos := make([]*imagev1.ImageRepository, n)
	policies := make([]*imagev1.ImagePolicy, n)
	parallel(b, n, func(i int) error {
		name := fmt.Sprintf("app-%05d", i)
		repos[i] = &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "floor"},
			Spec: imagev1.ImageRepositorySpec{Image: "registry.example/team/" + name, Interval: metav1.Duration{Duration: time.Hour}}}
		policies[i] = &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "floor"},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}}
		if err := c.Create(ctx, repos[i]); err != nil {
			return err
		}
		return c.Create(ctx, policies[i])
	})
	b.StartTimer()
	start := time.Now()
	// The watches the reflector's informers and the benchmark keep: every
	// write is sent to, and decoded by, each.
	for _, list := range []client.ObjectList{&imagev1.ImageRepositoryList{}, &imagev1.ImagePolicyList{}, &imagev1.ImagePolicyList{}} {
		if err := c.List(ctx, list, client.InNamespace("floor")); err != nil {
			b.Fatal(err)
		}
		w, err := c.Watch(ctx, list, client.InNamespace("floor"))
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		go func() {
			for range w.ResultChan() {
			}
		}()
	}
	parallel(b, n, func(i int) error {
		r, p := repos[i], policies[i]
		rp := client.MergeFrom(r.DeepCopy())
		r.Status.LastScanResult = &imagev1.ScanResult{TagCount: 100, ScanTime: metav1.Now()}
		scanStatus(&r.Status, i)
		if err := c.Status().Patch(ctx, r, rp); err != nil {
			return err
		}
		pp := client.MergeFrom(p.DeepCopy())
		p.Status.LatestRef = &meta.ImageRef{Name: r.Spec.Image, Tag: "1.0.99"}
		p.Status.LastSelection = &imagev1.TagSelection{ScanRevision: r.Status.LastScanResult.Revision, Considered: 100, Kept: 100}
		p.Status.ObservedGeneration = 1
		p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 1,
			LastTransitionTime: metav1.Now(), Reason: "Succeeded", Message: "latest image tag for " + r.Spec.Image + " resolved to 1.0.99"}}
		if err := c.Status().Patch(ctx, p, pp); err != nil {
			return err
		}
		now := metav1.NowMicro()
		return c.Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, now.UnixNano()), Namespace: "floor"},
			EventTime:  now, Type: corev1.EventTypeNormal, Reason: "NewImage", Action: "Select",
			ReportingController: "image-reflector-controller", ReportingInstance: "image-reflector-controller-floor",
			Regarding: corev1.ObjectReference{APIVersion: imagev1.GroupVersion.String(), Kind: "ImagePolicy",
				Namespace: "floor", Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
			Note: "latest image for " + r.Spec.Image + " is " + r.Spec.Image + ":1.0.99",
		})
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(elapsed.Seconds(), "s")
	b.ReportMetric(float64(3*n)/elapsed.Seconds(), "requests/s")
}

// scanStatus fills in what a first scan of 100 semver tags writes besides
// the tag count and scan time, at the sizes the reflector writes them.
func scanStatus(st *imagev1.ImageRepositoryStatus, i int) {
	st.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 1,
		LastTransitionTime: metav1.Now(), Reason: "Succeeded", Message: "successful scan: found 100 tags"}}
	st.ObservedGeneration = 1
	st.CanonicalImageName = "registry.example/team/app"
	st.ObservedExclusionList = []string{`^.*\.sig$`}
	st.LastScanResult.Revision = fmt.Sprintf("sha256:%064x", i)
	for j := range 10 {
		st.LastScanResult.LatestTags = append(st.LastScanResult.LatestTags, fmt.Sprintf("1.0.%d", 99-j))
	}
}

func floorTagsList(b *testing.B, n int) {
	b.StopTimer()
	reg := &tagsRegistry{tags: semverScale.tags(100)}
	sort.Strings(reg.tags)
	srv := httptest.NewServer(reg)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floorWorkers}, Timeout: 30 * time.Second}
	b.StartTimer()
	start := time.Now()
	parallel(b, n, func(i int) error {
		resp, err := hc.Get(fmt.Sprintf("%s/v2/team/app-%05d/tags/list?n=1000", srv.URL, i%10000))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var sink [4096]byte
		for {
			if _, err := resp.Body.Read(sink[:]); err != nil {
				break
			}
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("tags/list: %s", resp.Status)
		}
		return nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "requests/s")
}

// startCluster starts the control plane with the CRDs, and returns what
// stops it.
func startCluster(b *testing.B) (*localenv.Cluster, func()) {
	cluster, err := localenv.Start(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return cluster, func() { _ = cluster.Stop() }
}

// parallel runs f for 0..n-1, floorWorkers at once, and fails b on the
// first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range floorWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}
