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

// An approval is of one digest: the promotion waits, after health and
// soak, until the annotations name the waiting image's digest, and an
// approval of another image (an older one, a typo) approves nothing.
func TestApprovalGatesThePromotionOfExactlyOneDigest(t *testing.T) {
	healthy := []Object{kustomization(health.Healthy, "main@sha1:"+commitA)}
	base := Input{Upstream: upstream("main@sha1:" + commitA), Objects: healthy, Latest: image1, Now: t0,
		RequireApproval: true, Policy: "prod/app"}
	by := func(digest string) *meta.Approval { return &meta.Approval{Digest: digest, By: "alice@example.com"} }

	d := Decide(base)
	if d.Promote != nil || d.Reason != imagev1.AwaitingApprovalReason {
		t.Fatalf("without an approval: promote %v, reason %s; want none, AwaitingApproval", d.Promote, d.Reason)
	}
	if want := "tk-image approve policy app -n prod"; !strings.Contains(d.Message, want) || !strings.Contains(d.Message, image2.Digest) {
		t.Errorf("message %q does not say how to approve (%q) and what (%s)", d.Message, want, image2.Digest)
	}
	if d.Pending == nil || d.Pending.Image == nil || *d.Pending.Image != *image2 {
		t.Errorf("pendingRef %+v does not name the waiting image", d.Pending)
	}

	old := base
	old.Approval = by(image1.Digest)
	d = Decide(old)
	if d.Promote != nil || d.Reason != imagev1.AwaitingApprovalReason || !strings.Contains(d.Message, "is for another image") {
		t.Errorf("an approval of the older digest: promote %v, reason %s, message %q; want a wait that says the approval is for another image", d.Promote, d.Reason, d.Message)
	}

	ok := base
	ok.Approval = by(image2.Digest)
	d = Decide(ok)
	if d.Promote == nil || *d.Promote != *image2 || d.Approval == nil || d.Approval.By != "alice@example.com" || d.Approval.Digest != image2.Digest {
		t.Fatalf("an approval of the waiting digest: promote %v approval %+v; want %v approved by alice", d.Promote, d.Approval, image2)
	}
	if !strings.Contains(d.Message, "approved by alice@example.com") {
		t.Errorf("message %q does not name the approver", d.Message)
	}

	// Approved while the soak goes on: it waits for the soak, says it is
	// approved, and the approval keeps the time it was first seen.
	early := ok
	early.Soak, early.Pending = time.Hour, nil
	d = Decide(early)
	if d.Promote != nil || d.Reason != imagev1.SoakNotElapsedReason || d.Pending.Approval == nil || !d.Pending.Approval.SeenAt.Time.Equal(t0) {
		t.Fatalf("approved during the soak: promote %v reason %s pending approval %+v; want a soak wait with the approval seen at %s", d.Promote, d.Reason, d.Pending.Approval, t0)
	}
	later := early
	later.Pending, later.Now = d.Pending, t0.Add(time.Hour)
	d = Decide(later)
	if d.Promote == nil || d.Approval == nil || !d.Approval.SeenAt.Time.Equal(t0) {
		t.Errorf("after the soak: promote %v approval %+v; want the promotion with the approval seen at %s", d.Promote, d.Approval, t0)
	}

	// Unhealthy: an approval is no health.
	sick := ok
	sick.Objects = []Object{kustomization(health.Degraded, "main@sha1:"+commitA)}
	if d = Decide(sick); d.Promote != nil || d.Reason != imagev1.UpstreamNotHealthyReason {
		t.Errorf("approved but unhealthy: promote %v reason %s; want none, UpstreamNotHealthy", d.Promote, d.Reason)
	}

	// Without approval Required the annotation changes nothing.
	free := old
	free.RequireApproval = false
	if d = Decide(free); d.Promote == nil || d.Approval != nil {
		t.Errorf("approval None: promote %v approval %+v; want the promotion, no approval", d.Promote, d.Approval)
	}
}

func TestReadApprovalNamesTheUserOrElseTheFieldManager(t *testing.T) {
	managed := func(manager string, at time.Time, key string) metav1.ManagedFieldsEntry {
		tm := metav1.NewTime(at)
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &tm, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:` + key + `":{}}}}`)}}
	}
	tests := map[string]struct {
		annotations map[string]string
		managed     []metav1.ManagedFieldsEntry
		want        *meta.Approval
	}{
		"no annotation is no approval": {want: nil},
		"approved-by names the user": {
			annotations: map[string]string{imagev1.ApproveAnnotation: "sha256:2222", imagev1.ApprovedByAnnotation: "alice@example.com"},
			managed:     []metav1.ManagedFieldsEntry{managed("tk-image", t0, imagev1.ApproveAnnotation)},
			want:        &meta.Approval{Digest: "sha256:2222", By: "alice@example.com"},
		},
		"without approved-by, the newest manager of the approve annotation": {
			annotations: map[string]string{imagev1.ApproveAnnotation: "sha256:2222"},
			managed: []metav1.ManagedFieldsEntry{managed("kubectl-annotate", t0.Add(time.Minute), imagev1.ApproveAnnotation),
				managed("helm", t0.Add(2*time.Minute), "other"), managed("tk-image", t0, imagev1.ApproveAnnotation)},
			want: &meta.Approval{Digest: "sha256:2222", By: "field manager kubectl-annotate"},
		},
		"nothing says who": {
			annotations: map[string]string{imagev1.ApproveAnnotation: " sha256:2222 "},
			want:        &meta.Approval{Digest: "sha256:2222", By: "unknown"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			obj := &imagev1.ImagePolicy{}
			obj.Annotations, obj.ManagedFields = tt.annotations, tt.managed
			got := ReadApproval(obj)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("ReadApproval = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A promotion waits for the members of its group that the same upstream
// commit moved and that cannot move yet, and says which and why; members
// whose image does not move with that commit, or that can move, hold
// nothing; a member that cannot be decided holds the group.
func TestGroupMovesTogetherOrWaits(t *testing.T) {
	rev := "main@sha1:" + commitA
	up := upstream(rev)
	ready := Decide(Input{Upstream: up, Objects: []Object{kustomization(health.Healthy, rev)}, Latest: image1, Now: t0})
	if ready.Promote == nil {
		t.Fatalf("the promotion under test is not ready: %+v", ready)
	}
	beta := &meta.ImageRef{Name: "registry.example/beta", Tag: "2.0.0", Digest: "sha256:b2"}
	betaOld := &meta.ImageRef{Name: "registry.example/beta", Tag: "1.0.0", Digest: "sha256:b1"}
	betaUp := Upstream{Name: "dev (policy beta)", Image: beta, Revision: rev}
	soaking := Decide(Input{Upstream: betaUp, Objects: []Object{kustomization(health.Healthy, rev)}, Soak: time.Hour, Latest: betaOld, Now: t0})

	tests := map[string]struct {
		members    []Member
		wait       bool
		messageHas string
		requeue    time.Duration
	}{
		"alone": {},
		"a member soaking holds it": {
			members: []Member{{Name: "beta-prod", Upstream: betaUp, Latest: betaOld, Decision: soaking}},
			wait:    true, messageHas: "beta-prod (SoakNotElapsed: ", requeue: time.Hour + time.Second,
		},
		"a member that can move holds nothing": {
			members: []Member{{Name: "beta-prod", Upstream: betaUp, Latest: betaOld, Decision: Decision{Promote: beta}}},
		},
		"a member already at its upstream image is not in the group": {
			members: []Member{{Name: "beta-prod", Upstream: betaUp, Latest: beta, Decision: soaking}},
		},
		"a member waiting at another upstream commit is not in the group": {
			members: []Member{{Name: "beta-prod", Upstream: Upstream{Name: "dev", Image: beta, Revision: "main@sha1:" + commitB}, Latest: betaOld, Decision: soaking}},
		},
		"a member that cannot be decided holds it": {
			members: []Member{{Name: "beta-prod", Err: conditions.Retryf(conditions.DependencyNotReadyReason, "ImageRepository beta not found")}},
			wait:    true, messageHas: "beta-prod (DependencyNotReady: ImageRepository beta not found)",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := Group(ready, up, tt.members)
			if !tt.wait {
				if d.Promote == nil || *d.Promote != *image2 {
					t.Fatalf("promote %v (%s: %s), want %v", d.Promote, d.Reason, d.Message, image2)
				}
				return
			}
			if d.Promote != nil || d.Reason != imagev1.PromotionGroupWaitingReason || !strings.Contains(d.Message, tt.messageHas) {
				t.Fatalf("promote %v, reason %s, message %q; want a group wait saying %q", d.Promote, d.Reason, d.Message, tt.messageHas)
			}
			if d.Requeue != tt.requeue {
				t.Errorf("requeue %s, want %s (the member's)", d.Requeue, tt.requeue)
			}
			if d.Pending == nil || d.Pending.Image == nil || *d.Pending.Image != *image2 || d.Pending.HealthSeen == nil {
				t.Errorf("pendingRef %+v, want the waiting image with its health seen", d.Pending)
			}
			if len(d.Group) != 1 || d.Group[0].Policy != "beta-prod" || d.Group[0].Ready {
				t.Errorf("group %+v, want beta-prod not ready", d.Group)
			}
		})
	}
}
