package promotion

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

const (
	commitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	commitB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

var (
	t0     = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	image2 = &meta.ImageRef{Name: "registry.example/app", Tag: "1.2.0", Digest: "sha256:2222"}
	image1 = &meta.ImageRef{Name: "registry.example/app", Tag: "1.1.0", Digest: "sha256:1111"}
)

func kustomization(state health.State, rev string) Object {
	return Object{Name: "Kustomization/flux-system/apps-dev", Found: true, Health: health.Health{State: state, Revision: rev, Reason: "R"}}
}

func upstream(rev string) Upstream {
	return Upstream{Name: "ImageUpdateAutomation dev (policy app-dev)", Image: image2, Revision: rev}
}

func seenAt(t time.Time) *imagev1.PendingRef {
	s := metav1.NewTime(t)
	return &imagev1.PendingRef{Tag: image2.Tag, Image: image2, HealthSeen: &s}
}

func TestDecide(t *testing.T) {
	tests := map[string]struct {
		in         Input
		promote    *meta.ImageRef
		reason     string
		healthSeen time.Time // of the pending ref or the promotion
		requeue    time.Duration
		messageHas string
	}{
		"no upstream image yet waits on the dependency": {
			in:     Input{Upstream: Upstream{Name: "dev"}, Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}},
			reason: conditions.DependencyNotReadyReason, messageHas: "applied no image",
		},
		"healthy at the upstream commit starts the soak": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1, Now: t0},
			reason: imagev1.SoakNotElapsedReason, healthSeen: t0, requeue: time.Hour + time.Second, messageHas: "1h0m0s left",
		},
		"the soak goes on from when health was first seen": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1, Pending: seenAt(t0), Now: t0.Add(40 * time.Minute)},
			reason: imagev1.SoakNotElapsedReason, healthSeen: t0, requeue: 20*time.Minute + time.Second,
		},
		"after the soak the upstream's image, digest included, is promoted": {
			in:      Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1, Pending: seenAt(t0), Now: t0.Add(time.Hour)},
			promote: image2, reason: conditions.SucceededReason, healthSeen: t0,
		},
		"no soak promotes as soon as health is seen": {
			in:      Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Now: t0},
			promote: image2, reason: conditions.SucceededReason, healthSeen: t0,
		},
		"a later commit the upstream found holding the image keeps the soak": {
			in:     Input{Upstream: upstream("main@sha1:" + commitB), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitB)}, Soak: time.Hour, Latest: image1, Pending: seenAt(t0), Now: t0.Add(30 * time.Minute)},
			reason: imagev1.SoakNotElapsedReason, healthSeen: t0,
		},
		"health at another revision is no evidence": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitB)}, Soak: time.Hour, Latest: image1, Pending: seenAt(t0), Now: t0.Add(2 * time.Hour)},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "runs main@bbbbbbbbbbbb, not main@aaaaaaaaaaaa",
		},
		"Argo CD's bare hash matches the upstream commit": {
			in:      Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{{Name: "Application/argocd/dev", Found: true, Health: health.Health{State: health.Healthy, Revision: commitA}}}, Now: t0},
			promote: image2, reason: conditions.SucceededReason, healthSeen: t0,
		},
		"degraded health waits and forgets the soak": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Degraded, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1, Pending: seenAt(t0), Now: t0.Add(2 * time.Hour)},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "is Degraded",
		},
		"after a relapse the soak starts again": {
			// The previous reconcile saw it Degraded and recorded no
			// healthSeen.
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1, Pending: &imagev1.PendingRef{Tag: "1.2.0", Image: image2}, Now: t0.Add(2 * time.Hour)},
			reason: imagev1.SoakNotElapsedReason, healthSeen: t0.Add(2 * time.Hour), requeue: time.Hour + time.Second,
		},
		"a soak seen for another image does not count": {
			in: Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Soak: time.Hour, Latest: image1,
				Pending: &imagev1.PendingRef{Image: &meta.ImageRef{Name: image2.Name, Tag: image2.Tag, Digest: "sha256:other"}, HealthSeen: &metav1.Time{Time: t0}}, Now: t0.Add(2 * time.Hour)},
			reason: imagev1.SoakNotElapsedReason, healthSeen: t0.Add(2 * time.Hour),
		},
		"an image only proposed upstream waits": {
			in:     Input{Upstream: upstream(""), Objects: []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}, Now: t0},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "only proposed",
		},
		"a missing object waits": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{{Name: "Kustomization/flux-system/apps-dev"}}, Now: t0},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "not found",
		},
		"progressing is no verdict": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Progressing, "main@sha1:"+commitA)}, Now: t0},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "is Progressing",
		},
		"objects without a revision are gates, not evidence": {
			in:     Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{{Name: "Deployment/dev/app", Found: true, Health: health.Health{State: health.Healthy}}}, Now: t0},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "names the revision",
		},
		"a gate beside a revision promotes when both are healthy": {
			in: Input{Upstream: upstream("main@sha1:" + commitA), Now: t0, Objects: []Object{
				{Name: "Deployment/dev/app", Found: true, Health: health.Health{State: health.Healthy}},
				kustomization(health.Healthy, "main@sha1:"+commitA)}},
			promote: image2, reason: conditions.SucceededReason, healthSeen: t0,
		},
		"a gate that is not healthy blocks": {
			in: Input{Upstream: upstream("main@sha1:" + commitA), Now: t0, Objects: []Object{
				kustomization(health.Healthy, "main@sha1:"+commitA),
				{Name: "HelmRelease/dev/app", Found: true, Health: health.Health{State: health.Degraded, Reason: "UpgradeFailed"}}}},
			reason: imagev1.UpstreamNotHealthyReason, messageHas: "HelmRelease/dev/app is Degraded (UpgradeFailed)",
		},
		"already promoted stays whatever the health": {
			in:      Input{Upstream: upstream("main@sha1:" + commitA), Objects: []Object{kustomization(health.Degraded, "main@sha1:"+commitA)}, Latest: image2, Now: t0},
			promote: image2, reason: conditions.SucceededReason,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := Decide(tt.in)
			if (d.Promote == nil) != (tt.promote == nil) || (d.Promote != nil && *d.Promote != *tt.promote) {
				t.Errorf("Promote = %v, want %v", d.Promote, tt.promote)
			}
			if d.Reason != tt.reason {
				t.Errorf("Reason = %s, want %s (%s)", d.Reason, tt.reason, d.Message)
			}
			if !strings.Contains(d.Message, tt.messageHas) {
				t.Errorf("Message %q lacks %q", d.Message, tt.messageHas)
			}
			if d.Requeue != tt.requeue && tt.requeue != 0 {
				t.Errorf("Requeue = %s, want %s", d.Requeue, tt.requeue)
			}
			if tt.promote == nil && tt.in.Upstream.Image != nil {
				if d.Pending == nil || *d.Pending.Image != *tt.in.Upstream.Image || d.Pending.UpstreamRevision != tt.in.Upstream.Revision {
					t.Fatalf("Pending = %+v, want the upstream's image and revision", d.Pending)
				}
			}
			var seen *metav1.Time
			if d.Pending != nil {
				seen = d.Pending.HealthSeen
			} else {
				seen = d.HealthSeen
			}
			switch {
			case tt.healthSeen.IsZero() && seen != nil:
				t.Errorf("health seen at %s, want none", seen)
			case !tt.healthSeen.IsZero() && (seen == nil || !seen.Time.Equal(tt.healthSeen)):
				t.Errorf("health seen at %v, want %s", seen, tt.healthSeen)
			}
			if len(d.Health) != len(tt.in.Objects) {
				t.Errorf("Health has %d entries for %d objects", len(d.Health), len(tt.in.Objects))
			}
		})
	}
}

func TestCycle(t *testing.T) {
	follows := map[string]string{"prod": "staging", "staging": "dev", "a": "b", "b": "a", "x": "a"}
	next := func(p string) (string, bool) { up, ok := follows[p]; return up, ok }
	if c := Cycle("prod", next); c != nil {
		t.Errorf("dev → staging → prod is no cycle: %v", c)
	}
	if c := Cycle("a", next); !slices.Equal(c, []string{"a", "b", "a"}) {
		t.Errorf("a ⇄ b: %v", c)
	}
	if c := Cycle("x", next); c != nil {
		t.Errorf("x follows a cycle it is not part of, which its members report: %v", c)
	}
	follows["self"] = "self"
	if c := Cycle("self", next); !slices.Equal(c, []string{"self", "self"}) {
		t.Errorf("a policy following itself: %v", c)
	}
}
