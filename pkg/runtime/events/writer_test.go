package events

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
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
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// The Writer writes to a real API server: envtest's kube-apiserver.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, nil)
}

// newWriter returns a Writer through c (env's client when nil) whose
// retries are running until the test ends.
func newWriter(t *testing.T, c client.Client) *Writer {
	t.Helper()
	if c == nil {
		c = env.Client
	}
	w := NewWriter(c, env.Scheme, "test-controller")
	start(t, w)
	return w
}

// start runs w's retries until the test ends.
func start(t *testing.T, w *Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// eventsIn lists the events.k8s.io events of a namespace.
func eventsIn(t *testing.T, ns string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func policyIn(ns string) *imagev1.ImagePolicy {
	return &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, UID: "uid-1", ResourceVersion: "7"}}
}

// An event is written as client-go's recorder writes it: named after its
// object, in its namespace, with the object and related object, type,
// reason, action, note, the reporting controller and instance.
func TestWriterWritesAnEvent(t *testing.T) {
	ns := env.Namespace(t)
	w := newWriter(t, nil)
	related := &corev1.ObjectReference{APIVersion: "image.toolkit.dev/v1beta1", Kind: "ImageUpdateAutomation", Namespace: ns, Name: "apps"}
	before := time.Now().Add(-time.Second)
	w.Write(context.Background(), policyIn(ns), related, corev1.EventTypeNormal, "NewImage", "Select", "latest image is app:1.0.1")

	got := eventsIn(t, ns)
	if len(got) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(got), got)
	}
	e := got[0]
	if !strings.HasPrefix(e.Name, "app.") || e.Regarding.Kind != "ImagePolicy" || e.Regarding.APIVersion != "image.toolkit.dev/v1beta1" ||
		e.Regarding.Name != "app" || e.Regarding.UID != "uid-1" {
		t.Errorf("name %q regarding %+v", e.Name, e.Regarding)
	}
	if e.Related == nil || *e.Related != *related {
		t.Errorf("related %+v, want %+v", e.Related, related)
	}
	if e.Type != corev1.EventTypeNormal || e.Reason != "NewImage" || e.Action != "Select" || e.Note != "latest image is app:1.0.1" {
		t.Errorf("type %q reason %q action %q note %q", e.Type, e.Reason, e.Action, e.Note)
	}
	if e.ReportingController != "test-controller" || !strings.HasPrefix(e.ReportingInstance, "test-controller-") {
		t.Errorf("reporting %q %q", e.ReportingController, e.ReportingInstance)
	}
	if e.EventTime.Time.Before(before) || e.Series != nil {
		t.Errorf("eventTime %v series %+v", e.EventTime, e.Series)
	}
}

// A repeat within six minutes (same object, related object, type, reason
// and action) adds to the series of the first event, as client-go's
// recorder does; an event differing in any of those is an event of its
// own; a repeat after the window starts anew.
func TestWriterCountsRepeatsAsASeries(t *testing.T) {
	ns := env.Namespace(t)
	w := newWriter(t, nil)
	now := time.Now()
	w.now = func() time.Time { return now }
	ctx := context.Background()
	other := &corev1.ObjectReference{Kind: "ImageUpdateAutomation", Namespace: ns, Name: "b"}
	write := func(related *corev1.ObjectReference, reason, action string, after time.Duration) {
		now = now.Add(after) // events are named by the time
		w.Write(ctx, policyIn(ns), related, corev1.EventTypeWarning, reason, action, "no answer")
	}
	for range 3 {
		write(nil, "ScanFailed", "Scan", time.Minute)
	}
	write(other, "ScanFailed", "Scan", time.Second)
	write(nil, "AuthenticationFailed", "Scan", time.Second)
	write(nil, "ScanFailed", "Select", time.Second)
	write(nil, "ScanFailed", "Scan", seriesWindow+time.Second)

	var series []string
	for _, e := range eventsIn(t, ns) {
		count := int32(1)
		if e.Series != nil {
			count = e.Series.Count
		}
		related := ""
		if e.Related != nil {
			related = e.Related.Name
		}
		series = append(series, fmt.Sprintf("%s/%s/%s:%d", e.Reason, e.Action, related, count))
	}
	want := []string{"ScanFailed/Scan/:3", "ScanFailed/Scan/b:1", "AuthenticationFailed/Scan/:1", "ScanFailed/Select/:1", "ScanFailed/Scan/:1"}
	slices.Sort(series)
	slices.Sort(want)
	if fmt.Sprint(series) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", series, want)
	}
}

// The Writer remembers at most seriesEntries events for their repeats: a
// repeat of the event seen longest ago, once forgotten, is an event of its
// own. The memory of a burst of events is bounded.
func TestWriterForgetsTheOldestPastItsBound(t *testing.T) {
	ns := env.Namespace(t)
	w := newWriter(t, nil)
	ctx := context.Background()
	write := func(i int) {
		p := policyIn(ns)
		p.Name = fmt.Sprintf("app-%d", i)
		w.Write(ctx, p, nil, corev1.EventTypeNormal, "NewImage", "Select", "m")
	}
	for i := range seriesEntries + 1 {
		if i == 0 || i == seriesEntries {
			write(i)
			continue
		}
		// The entries between are remembered without writing them: 4,096
		// events would be a slow test of a map's bound.
		p := policyIn(ns)
		p.Name = fmt.Sprintf("app-%d", i)
		ref := &corev1.ObjectReference{APIVersion: "image.toolkit.dev/v1beta1", Kind: "ImagePolicy", Namespace: ns, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: p.Name + ".x", Namespace: ns}}
		w.count(seriesKey{eventType: corev1.EventTypeNormal, reason: "NewImage", action: "Select", regarding: *ref}, ev, w.now())
	}
	if n := w.recent.Len(); n != seriesEntries || len(w.series) != seriesEntries {
		t.Fatalf("%d remembered (%d in the map), want %d", n, len(w.series), seriesEntries)
	}
	write(0)             // forgotten: a new event
	write(seriesEntries) // remembered: a repeat
	counts := map[string][]int32{}
	for _, e := range eventsIn(t, ns) {
		c := int32(1)
		if e.Series != nil {
			c = e.Series.Count
		}
		counts[e.Regarding.Name] = append(counts[e.Regarding.Name], c)
	}
	if fmt.Sprint(counts["app-0"]) != "[1 1]" || fmt.Sprint(counts[fmt.Sprintf("app-%d", seriesEntries)]) != "[2]" {
		t.Errorf("events by object: %v", counts)
	}
}

// A repeat whose first event is gone (the API server keeps events an hour,
// or someone deleted it) is written as an event of its own, with its count.
func TestWriterRewritesARepeatOfAGoneEvent(t *testing.T) {
	ns := env.Namespace(t)
	w := newWriter(t, nil)
	ctx := context.Background()
	w.Write(ctx, policyIn(ns), nil, corev1.EventTypeWarning, "ScanFailed", "Scan", "no answer")
	for _, e := range eventsIn(t, ns) {
		if err := env.Client.Delete(ctx, &e); err != nil {
			t.Fatal(err)
		}
	}
	w.Write(ctx, policyIn(ns), nil, corev1.EventTypeWarning, "ScanFailed", "Scan", "no answer")
	got := eventsIn(t, ns)
	if len(got) != 1 || got[0].Series == nil || got[0].Series.Count != 2 || got[0].Note != "no answer" {
		t.Errorf("events %+v, want one of a series of 2", got)
	}
}

// failing answers 503 to the first n event writes, and passes the rest to
// the API server: the API server unavailable for a moment.
type failing struct {
	next  http.RoundTripper
	n     atomic.Int32
	tried atomic.Int32
}

func (f *failing) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.Contains(r.URL.Path, "/events") {
		return f.next.RoundTrip(r)
	}
	if f.tried.Add(1) <= f.n.Load() {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Request: r,
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: http.NoBody}, nil
	}
	return f.next.RoundTrip(r)
}

// A write that fails in a way that may pass (503 here) is queued, and
// retried in the background with backoff until written; the caller does
// not wait for the retries. One refused for good (an invalid event) is not
// retried.
func TestWriterRetriesWhatMayPass(t *testing.T) {
	ns := env.Namespace(t)
	f := &failing{}
	f.n.Store(2)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { f.next = rt; return f }
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Not started yet: what Write left for the retries is still queued.
	w := NewWriter(c, env.Scheme, "test-controller")
	w.Write(context.Background(), policyIn(ns), nil, corev1.EventTypeNormal, "NewImage", "Select", "m")
	if n, q := f.tried.Load(), len(w.retry); n != 1 || q != 1 {
		t.Fatalf("after Write: %d attempts, %d queued; want 1 and 1", n, q)
	}
	start(t, w)
	testenv.Eventually(t, 30*time.Second, func() (bool, error) { return len(eventsIn(t, ns)) == 1, nil })
	if n := f.tried.Load(); n != 3 {
		t.Errorf("%d attempts, want 3 (two 503s, then written)", n)
	}

	// Refused for good: a note over the API's limit.
	w = NewWriter(c, env.Scheme, "test-controller")
	f.tried.Store(0)
	f.n.Store(0)
	w.Write(context.Background(), policyIn(ns), nil, corev1.EventTypeNormal, "Pushed", "Push", strings.Repeat("x", 2*maxNoteLength))
	if n, q := f.tried.Load(), len(w.retry); n != 1 || q != 0 {
		t.Errorf("an invalid event: %d attempts, %d queued; want 1 and 0", n, q)
	}
}

// Writes from many reconcilers at once are each written; the series map
// is safe for them (go test -race).
func TestWriterConcurrentWrites(t *testing.T) {
	ns := env.Namespace(t)
	w := newWriter(t, nil)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			p := policyIn(ns)
			p.Name = fmt.Sprintf("app-%d", i%10)
			w.Write(context.Background(), p, nil, corev1.EventTypeNormal, "NewImage", "Select", "m")
		})
	}
	wg.Wait()
	// One event an object: a repeat's patch that reaches the API server
	// before the first event is retried until it exists, and never
	// written as a second event.
	testenv.Eventually(t, 30*time.Second, func() (bool, error) {
		counts := map[string]int32{}
		for _, e := range eventsIn(t, ns) {
			counts[e.Regarding.Name]++
		}
		return len(counts) == 10 && len(eventsIn(t, ns)) == 10, nil
	})
}
