package testenv

import (
	"net/http"
	"testing"
)

// The counter tells a namespaced request from a cluster-wide one and
// leaves out watches and paths on no resource, so an idleness test that
// reads it cannot pass by miscounting.
func TestRequestsAreCountedByNamespaceAndResource(t *testing.T) {
	for _, tt := range []struct {
		method, url  string
		ns, resource string
		ok           bool
	}{
		{"PATCH", "/apis/image.toolkit.dev/v1beta1/namespaces/a/imagepolicies/p/status", "a", "imagepolicies", true},
		{"GET", "/api/v1/namespaces/a/secrets/s", "a", "secrets", true},
		{"GET", "/apis/image.toolkit.dev/v1beta1/imagerepositories?limit=500", "", "imagerepositories", true},
		{"GET", "/apis/image.toolkit.dev/v1beta1/imagerepositories?watch=true&resourceVersion=5", "", "", false},
		{"GET", "/apis/image.toolkit.dev/v1beta1/watch/namespaces/a/imagepolicies", "", "", false},
		{"GET", "/apis/image.toolkit.dev/v1beta1", "", "", false},
		{"GET", "/metrics", "", "", false},
	} {
		req, err := http.NewRequest(tt.method, "https://127.0.0.1:6443"+tt.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		ns, resource, ok := requestOn(req)
		if ns != tt.ns || resource != tt.resource || ok != tt.ok {
			t.Errorf("%s %s: %q %q %v, want %q %q %v", tt.method, tt.url, ns, resource, ok, tt.ns, tt.resource, tt.ok)
		}
	}
}
