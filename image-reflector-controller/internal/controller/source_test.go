package controller

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/imagesource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// The chosen image's source is read once, from its manifest annotations
// over its config labels, into status.latestSource: a rescan with nothing
// new reads nothing, a new image moves the old source to
// observedPreviousSource, and a hostile label is dropped with its reason.
func TestPolicyRecordsTheImagesSource(t *testing.T) {
	startClocked(t)
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushLabelled(t, "app", "1.0.0",
		map[string]string{imagesource.KeySource: "https://github.com/acme/app", imagesource.KeyRevision: "aaaaaaa", imagesource.KeyVersion: "1.0.0"},
		map[string]string{imagesource.KeyRevision: "1111111"})
	ns := namespace(t)
	repo := repoFor(ns, "app", reg, "app")
	p := policyFor(ns, "app", "app", semverChoice("*"))
	second(repo, p)
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	create(t, p)
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
		return p.Status.LatestSource != nil, err
	})
	if s := p.Status.LatestSource; s.URL != "https://github.com/acme/app" || s.Revision != "1111111" || s.Version != "1.0.0" || len(s.Dropped) != 0 {
		t.Fatalf("latestSource %+v, want the annotation's revision over the label's", s)
	}

	manifests, blobs := reg.ManifestRequests(), reg.BlobRequests()
	reconcileNow(t, repo, conditions.SucceededReason)
	reconcileNow(t, p, conditions.SucceededReason)
	if m, b := reg.ManifestRequests()-manifests, reg.BlobRequests()-blobs; m != 0 || b != 0 {
		t.Errorf("a rescan with nothing new read %d manifests and %d blobs", m, b)
	}

	reg.PushLabelled(t, "app", "1.1.0", map[string]string{imagesource.KeySource: "javascript:alert(1)", imagesource.KeyRevision: "bbbbbbb"}, nil)
	reconcileNow(t, repo, conditions.SucceededReason)
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
		return p.Status.LatestRef != nil && p.Status.LatestRef.Tag == "1.1.0", err
	})
	s, prev := p.Status.LatestSource, p.Status.ObservedPreviousSource
	if s == nil || s.URL != "" || s.Revision != "bbbbbbb" || len(s.Dropped) != 1 || !strings.Contains(s.Dropped[0], "is not an http(s) URL") {
		t.Errorf("latestSource of 1.1.0: %+v, want its revision and the script URL dropped", s)
	}
	if prev == nil || prev.Revision != "1111111" {
		t.Errorf("observedPreviousSource %+v, want 1.0.0's", prev)
	}
}
