package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// fleetScale is the size the Fleet page is measured at: this many
// automations and as many policies, in one namespace (the worst case for
// selecting policies, which is per namespace), each automation selecting
// one policy by label, half of them a tag behind.
const fleetScale = 1000

// BenchmarkFleetPage measures the Fleet page over the test API server at
// fleetScale automations and policies: the server time of a whole page
// (p50 and p95 over b.N loads, on loopback) and its weight (the HTML, and
// the embedded stylesheet and script a first load fetches).
//
//	KUBEBUILDER_ASSETS=$PWD/bin/testenv go test -run '^$' -bench FleetPage -benchtime 50x ./tk-image/internal/dashboard/
func BenchmarkFleetPage(b *testing.B) {
	ns := "bench"
	ctx := context.Background()
	createFleet(b, ns, fleetScale)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := New(ctx, env.Config, env.Scheme, Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	weight := 0
	for _, asset := range []string{"/assets/style.css", "/assets/live.js"} {
		weight += len(fetch(b, srv.URL+asset))
	}
	html := fetch(b, srv.URL+"/?namespace="+ns)
	if n := strings.Count(html, `<tr id="a/`); n != fleetScale {
		b.Fatalf("the page lists %d automations, want %d", n, fleetScale)
	}
	b.ResetTimer()
	times := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		fetch(b, srv.URL+"/?namespace="+ns)
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[len(times)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(len(html))/1024, "html-KiB")
	b.ReportMetric(float64(len(fetchGzip(b, srv.URL+"/?namespace="+ns)))/1024, "gzip-KiB")
	b.ReportMetric(float64(weight)/1024, "assets-KiB")
}

// createFleet creates n policies and n automations with statuses in ns.
func createFleet(tb testing.TB, ns string, n int) {
	tb.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- createPair(ctx, ns, i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
}

func createPair(ctx context.Context, ns string, i int) error {
	name := fmt.Sprintf("app-%04d", i)
	p := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}}
	p.Spec.ImageRepositoryRef.Name = name
	p.Spec.Policy.SemVer = &imagev1.SemVerPolicy{Range: "1.x"}
	if err := env.Client.Create(ctx, p); err != nil {
		return err
	}
	newest := meta.ImageRef{Name: "registry.example.com/team/" + name, Tag: "1.4.0"}
	p.Status.LatestRef = &newest
	p.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionTrue, Reason: conditions.SucceededReason,
		Message: "latest image tag resolved to 1.4.0", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		return err
	}
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	a.Spec.Interval = metav1.Duration{Duration: 5 * time.Minute}
	a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: "https://github.com/org/" + name + ".git"}
	a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}
	a.Spec.GitSpec.Commit.Author.Email = "bot@example.com"
	if err := env.Client.Create(ctx, a); err != nil {
		return err
	}
	applied := newest
	if i%2 == 1 {
		applied.Tag = "1.3.0"
	}
	now := metav1.Now()
	a.Status.ObservedPolicies = imagev1.ObservedPolicies{name: applied}
	a.Status.LastPushCommit = fmt.Sprintf("%040x", i)
	a.Status.LastPushTime, a.Status.LastAutomationRunTime = &now, &now
	a.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionTrue, Reason: conditions.SucceededReason,
		Message: "pushed commit to main", LastTransitionTime: now}}
	return env.Client.Status().Update(ctx, a)
}

func fetch(tb testing.TB, u string) string {
	tb.Helper()
	code, body := get(tb, u)
	if code != http.StatusOK {
		tb.Fatalf("GET %s: %d", u, code)
	}
	return body
}

// fetchGzip returns a page as it travels to a browser that accepts gzip.
func fetchGzip(tb testing.TB, u string) []byte {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	// Set by hand, the client leaves the body compressed.
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
		tb.Fatalf("GET %s: %v, Content-Encoding %q", u, err, resp.Header.Get("Content-Encoding"))
	}
	return body
}
