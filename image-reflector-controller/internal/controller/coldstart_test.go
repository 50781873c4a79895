package controller

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A cold start writes each object once: an ImageRepository its scan, an
// ImagePolicy its answer. No finalizer is written, no DependencyNotReady
// while a policy waits for its repository's first scan, and nothing is
// read that the cache has. The requests are counted where they leave the
// manager (a rest.Config WrapTransport), against the real API server.
func TestColdStartWritesEachObjectOnce(t *testing.T) {
	const n = 10
	reg := testregistry.New(t, testregistry.Options{})
	ns := namespace(t)
	var objs []client.Object
	var policies []*imagev1.ImagePolicy
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		reg.PushTags(t, name, []string{"1.0.0", "1.1.0"})
		r, p := repoFor(ns, name, reg, name), policyFor(ns, name, name, semverChoice("1.x"))
		r.SetLabels(map[string]string{"shard": "second"})
		p.SetLabels(map[string]string{"shard": "second"})
		objs = append(objs, r, p)
		policies = append(policies, p)
	}
	// Everything exists before the controller starts, as on a cold start.
	create(t, objs...)

	var mu sync.Mutex
	requests := map[string]int{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			// A write the server refused (a conflict with a write the
			// cache did not show yet) wrote nothing: only writes that
			// landed count.
			if err != nil || resp.StatusCode >= 300 {
				if err == nil && req.Method != http.MethodGet && strings.Contains(req.URL.Path, imagev1.GroupVersion.Group) {
					t.Logf("refused: %s %s: %d", req.Method, req.URL.Path, resp.StatusCode)
				}
				return resp, err
			}
			_, rest, ok := strings.Cut(req.URL.Path, "/namespaces/"+ns+"/")
			if ok && strings.Contains(req.URL.Path, imagev1.GroupVersion.Group) {
				// resource[/name[/subresource]]
				parts := strings.Split(rest, "/")
				what := parts[0]
				if len(parts) == 3 {
					what += "/" + parts[2]
				}
				mu.Lock()
				requests[req.Method+" "+what]++
				mu.Unlock()
			}
			return resp, err
		})
	}
	second, _ := labels.Parse("shard=second")
	stop, err := env.StartManagerOn(cfg, func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = second },
		func(mgr ctrl.Manager) error { return setupReconcilers(mgr, t.TempDir()) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, p := range policies {
		waitReason(t, p, conditions.SucceededReason)
		if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.1.0" {
			t.Errorf("%s: latestRef %+v, want 1.1.0", p.Name, p.Status.LatestRef)
		}
	}
	// A write that follows the answer would be a second one: give it the
	// time a reconcile takes.
	time.Sleep(time.Second)
	mu.Lock()
	got := maps.Clone(requests)
	mu.Unlock()
	want := map[string]int{"PATCH imagerepositories/status": n, "PATCH imagepolicies/status": n}
	if !maps.Equal(got, want) {
		t.Errorf("requests on the objects: %v, want %v", got, want)
	}
}
