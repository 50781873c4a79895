package health

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

func event(apiVersion, kind, severity, reason string) []byte {
	return fmt.Appendf(nil, `{"involvedObject":{"apiVersion":%q,"kind":%q,"namespace":"flux-system","name":"apps"},"severity":%q,"reason":%q,`+
		`"timestamp":"2026-12-07T10:00:00Z","message":"m","metadata":{"revision":"main@sha1:abc"}}`, apiVersion, kind, severity, reason)
}

// Which Flux events are a verdict: the success events of
// kustomize-controller and helm-controller are Healthy at their revision,
// error events Degraded unless they only wait on something else, a
// rollback Degraded, and every other info event (a change set, health
// checks still running) Progressing, never Healthy.
func TestFluxEventsAreVerdictsOnlyWhenTheAttemptEnded(t *testing.T) {
	const ks, hr = "kustomize.toolkit.fluxcd.io/v1", "helm.toolkit.fluxcd.io/v2"
	for _, tt := range []struct {
		apiVersion, kind, severity, reason string
		want                               State
	}{
		{ks, "Kustomization", "info", "ReconciliationSucceeded", Healthy},
		{ks, "Kustomization", "info", "Progressing", Progressing},
		{ks, "Kustomization", "error", "HealthCheckFailed", Degraded},
		{ks, "Kustomization", "error", "BuildFailed", Degraded},
		{ks, "Kustomization", "error", "DependencyNotReady", Progressing},
		{ks, "Kustomization", "error", "ArtifactFailed", Progressing},
		{hr, "HelmRelease", "info", "UpgradeSucceeded", Healthy},
		{hr, "HelmRelease", "info", "TestSucceeded", Healthy},
		{hr, "HelmRelease", "error", "UpgradeFailed", Degraded},
		{hr, "HelmRelease", "info", "RollbackSucceeded", Degraded},
	} {
		p, err := FromFluxEvent(event(tt.apiVersion, tt.kind, tt.severity, tt.reason))
		if err != nil {
			t.Fatalf("%s %s: %v", tt.kind, tt.reason, err)
		}
		if p.Health.State != tt.want || p.Health.Revision != "main@sha1:abc" || p.Name != "apps" || p.Namespace != "flux-system" {
			t.Errorf("%s %s %s: %+v, want %s at main@sha1:abc", tt.kind, tt.severity, tt.reason, p, tt.want)
		}
	}
	if _, err := FromFluxEvent(event("source.toolkit.fluxcd.io/v1", "GitRepository", "info", "NewArtifact")); !errors.Is(err, ErrNotAHealthObject) {
		t.Errorf("a GitRepository's event: %v, want ErrNotAHealthObject", err)
	}
	// A Kustomization of another group is not Flux's.
	if _, err := FromFluxEvent(event("example.com/v1", "Kustomization", "info", "ReconciliationSucceeded")); !errors.Is(err, ErrNotAHealthObject) {
		t.Errorf("another group's Kustomization: %v, want ErrNotAHealthObject", err)
	}
	for _, bad := range []string{`{`, `{"severity":"info"}`, `{"involvedObject":{"kind":"Kustomization","name":"a","apiVersion":"kustomize.toolkit.fluxcd.io/v1"},"severity":"info"}`} {
		if _, err := FromFluxEvent([]byte(bad)); err == nil || errors.Is(err, ErrNotAHealthObject) {
			t.Errorf("%s: %v, want an error saying what is missing", bad, err)
		}
	}
}

// An Argo CD post is read by the rules of a watched Application.
func TestArgoCDPostsAreReadAsTheApplication(t *testing.T) {
	received := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		status string
		want   State
	}{
		{`{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"}}`, Healthy},
		{`{"sync":{"status":"OutOfSync","revision":"abc"},"health":{"status":"Healthy"}}`, Progressing},
		{`{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Degraded"}}`, Degraded},
		{`{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"},"operationState":{"phase":"Failed","syncResult":{"revision":"abc"}}}`, Degraded},
		{`{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"},"operationState":{"phase":"Running"}}`, Progressing},
	} {
		p, err := FromArgoApplication([]byte(`{"metadata":{"name":"guestbook","namespace":"argocd"},"status":`+tt.status+`}`), received)
		if err != nil {
			t.Fatal(err)
		}
		if p.Health.State != tt.want || p.Health.Revision != "abc" || p.Group != "argoproj.io" || !p.At.Equal(received) {
			t.Errorf("%s: %+v, want %s", tt.status, p, tt.want)
		}
	}
	if _, err := FromArgoApplication([]byte(`{"metadata":{"name":"guestbook"}}`), received); err == nil || !strings.Contains(err.Error(), "docs/policies.md") {
		t.Errorf("a post without status: %v", err)
	}
}

// Recording keeps one entry per object, the newest first: the time it
// first had its state and revision stays, an older push arriving late is
// dropped, and past the cap the least recently pushed object goes.
func TestRecordKeepsOneEntryPerObjectNewestFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	push := func(name string, s State, rev string, at time.Time) Push {
		return Push{Group: "g", Kind: "K", Namespace: "ns", Name: name, At: at, Health: Health{State: s, Revision: rev, Since: at}}
	}
	objs, _ := Record(nil, push("a", Healthy, "r1", t0))
	objs, _ = Record(objs, push("a", Healthy, "r1", t0.Add(time.Minute)))
	if len(objs) != 1 || !objs[0].Since.Time.Equal(t0) || !objs[0].LastPushed.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a second healthy push: %+v, want since %s", objs, t0)
	}
	objs, _ = Record(objs, push("a", Healthy, "r2", t0.Add(2*time.Minute)))
	if !objs[0].Since.Time.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("a new revision keeps the old since: %+v", objs[0])
	}
	if _, changed := Record(objs, push("a", Degraded, "r1", t0.Add(30*time.Second))); changed {
		t.Error("an older push changed the record")
	}
	for i := range imagev1.MaxPushedObjects + 5 {
		objs, _ = Record(objs, push(fmt.Sprint("o", i), Healthy, "r", t0.Add(time.Duration(i)*time.Second)))
	}
	if len(objs) != imagev1.MaxPushedObjects || objs[0].Object != fmt.Sprint("K/ns/o", imagev1.MaxPushedObjects+4) {
		t.Errorf("%d objects, first %s", len(objs), objs[0].Object)
	}
	for _, o := range objs {
		if o.Object == "K/ns/a" {
			t.Error("the least recently pushed object was kept past the cap")
		}
	}
}
