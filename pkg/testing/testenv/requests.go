package testenv

import (
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Requests counts the API requests of the manager MainWith starts, watches
// excluded, by namespace and resource. The API server's own counter
// (APIRequests) has no namespace: in a package whose earlier tests left
// repositories scanning on their intervals, a test of idleness on that
// counter saw their writes as its own (CI: "1 requests on the promotion's
// resources in 10s of idleness"). This counter asks about one test's
// namespace, plus the cluster-wide calls a poll across namespaces would
// make.
type Requests struct {
	mu sync.Mutex
	n  map[requestKey]int
}

type requestKey struct{ namespace, resource string }

// wrap counts the requests that rt sends.
func (r *Requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if ns, resource, ok := requestOn(req); ok {
			r.mu.Lock()
			if r.n == nil {
				r.n = map[requestKey]int{}
			}
			r.n[requestKey{ns, resource}]++
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// In is the count of requests on the resources in namespace ns or across
// all namespaces.
func (r *Requests) In(ns string, resources ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	for k, n := range r.n {
		if (k.namespace == ns || k.namespace == "") && slices.Contains(resources, k.resource) {
			total += n
		}
	}
	return total
}

// requestOn is the namespace ("" for cluster scope) and resource of a
// request that is not a watch; ok is false for watches and for paths that
// name no resource (discovery, /metrics).
func requestOn(req *http.Request) (ns, resource string, ok bool) {
	if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", "", false
	}
	if len(parts) > 0 && parts[0] == "watch" {
		return "", "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		return parts[1], parts[2], true
	}
	if len(parts) >= 1 && parts[0] != "" {
		return "", parts[0], true
	}
	return "", "", false
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
