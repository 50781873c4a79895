package rollback

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
)

const (
	before = "main@sha1:1111111111111111111111111111111111111111"
	commit = "main@sha1:2222222222222222222222222222222222222222"
	ks     = "Kustomization/flux-system/apps"
)

func obj(state health.State, rev string, since time.Time) health.Object {
	return health.Object{Name: ks, Found: true, Health: health.Health{State: state, Revision: rev, Since: since, Reason: "r", Message: "m"}}
}

func TestDecide(t *testing.T) {
	pushed := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	now := pushed.Add(time.Minute)
	reached := func(at time.Time, before ...imagev1.HealthStatus) *imagev1.RollbackStatus {
		return &imagev1.RollbackStatus{Commit: commit, ReachedAt: &metav1.Time{Time: at}, Before: before, Reason: imagev1.RollbackWatchingReason}
	}
	healthyBefore := imagev1.HealthStatus{Object: ks, State: string(health.Healthy), Revision: before}
	failingBefore := imagev1.HealthStatus{Object: ks, State: string(health.Degraded), Revision: before}
	for _, c := range []struct {
		name    string
		objects []health.Object
		prior   *imagev1.RollbackStatus
		revert  bool
		reason  string
		msg     string
	}{
		{"not reached yet: the object runs the revision before", []health.Object{obj(health.Healthy, before, pushed.Add(-time.Hour))}, nil,
			false, imagev1.RollbackWatchingReason, "has not reached"},
		{"reached, healthy: watching", []health.Object{obj(health.Healthy, commit, now)}, reached(now, healthyBefore),
			false, imagev1.RollbackWatchingReason, "watching until"},
		{"healthy before, failing at the commit within the window: reverted", []health.Object{obj(health.Degraded, commit, now)}, reached(now.Add(-30*time.Second), healthyBefore),
			true, imagev1.RolledBackReason, "failed within 5m0s of reaching Kustomization/flux-system/apps (r: m): reverted"},
		{"failing before, failing at the commit: not blamed", []health.Object{obj(health.Degraded, commit, now)}, reached(now.Add(-30*time.Second), failingBefore),
			false, imagev1.UnhealthyBeforeReason, "as it was before the commit reached it"},
		{"nothing seen before; the failure turned before the push and stays: not blamed", []health.Object{obj(health.Degraded, commit, pushed.Add(-time.Hour))}, nil,
			false, imagev1.UnhealthyBeforeReason, "not blamed"},
		{"nothing seen before; the failure turned after the push: reverted", []health.Object{obj(health.Degraded, commit, pushed.Add(10*time.Second))}, nil,
			true, imagev1.RolledBackReason, "reverted"},
		{"failing after the window: not blamed, passed", []health.Object{obj(health.Degraded, commit, now)}, reached(now.Add(-10*time.Minute), healthyBefore),
			false, imagev1.RollbackPassedReason, "passed the 5m0s window"},
		{"still progressing at the commit: watching", []health.Object{obj(health.Progressing, commit, now)}, reached(now, healthyBefore),
			false, imagev1.RollbackWatchingReason, "watching"},
		{"a later revision than the commit (a person's commit on top): no verdict on it", []health.Object{obj(health.Degraded, "main@sha1:3333333333333333333333333333333333333333", now)}, nil,
			false, imagev1.RollbackWatchingReason, "has not reached"},
		{"a commit already reverted stays reverted", []health.Object{obj(health.Degraded, commit, now)},
			&imagev1.RollbackStatus{Commit: commit, ReachedAt: &metav1.Time{Time: now}, Reason: imagev1.RolledBackReason, Message: "reverted before"},
			false, imagev1.RolledBackReason, "reverted before"},
		{"the prior status of another commit is not carried over", []health.Object{obj(health.Healthy, before, now)},
			&imagev1.RollbackStatus{Commit: before, Reason: imagev1.RollbackPassedReason},
			false, imagev1.RollbackWatchingReason, "has not reached"},
		{"the object does not exist: watching", []health.Object{{Name: ks}}, nil, false, imagev1.RollbackWatchingReason, "has not reached"},
	} {
		d := Decide(Input{Commit: commit, PushedAt: pushed, Window: 5 * time.Minute, Objects: c.objects, Prior: c.prior, Now: now})
		if d.Revert != c.revert || d.Status.Reason != c.reason || !strings.Contains(d.Status.Message, c.msg) {
			t.Errorf("%s: revert %t, %s: %s; want %t, %s (%q)", c.name, d.Revert, d.Status.Reason, d.Status.Message, c.revert, c.reason, c.msg)
		}
		if d.Status.Commit != commit || len(d.Status.Health) != len(c.objects) {
			t.Errorf("%s: status %+v", c.name, d.Status)
		}
	}
}

// What an object ran before the commit reached it is remembered, and the
// remembered state decides once it does.
func TestBeforeIsRemembered(t *testing.T) {
	pushed := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	in := Input{Commit: commit, PushedAt: pushed, Window: 5 * time.Minute, Now: pushed.Add(time.Second),
		Objects: []health.Object{obj(health.Degraded, before, pushed.Add(-time.Hour))}}
	d := Decide(in)
	if len(d.Status.Before) != 1 || d.Status.Before[0].State != string(health.Degraded) {
		t.Fatalf("before %+v", d.Status.Before)
	}
	// The failure at the commit has a fresh transition time, but the
	// object was failing before: not blamed.
	in.Prior, in.Now = &d.Status, pushed.Add(time.Minute)
	in.Objects = []health.Object{obj(health.Degraded, commit, pushed.Add(50*time.Second))}
	if d := Decide(in); d.Revert || d.Status.Reason != imagev1.UnhealthyBeforeReason || d.Requeue <= 0 {
		t.Errorf("revert %t, %s, requeue %s", d.Revert, d.Status.Reason, d.Requeue)
	}
}
