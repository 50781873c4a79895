package controller

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// A hold a job reports is recorded in status.holds with what keeps it;
// the jobs are told to look for holds; the release annotation ends it
// once, and the next job is told to override it.
func TestHoldsAreRecordedAndReleased(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.policy("app", nil, "1.1.0")
	a := f.automation("fleet", nil)
	job := waitJobs(t, f.ns, 1)[0]
	if job.Spec.Update.Holds == nil || len(job.Spec.Update.Holds.Released) != 0 {
		t.Fatalf("job holds %+v, want holds looked for and none released", job.Spec.Update.Holds)
	}
	since := metav1.Now()
	held := updatev1.Hold{HoldKey: updatev1.HoldKey{Path: "apps/app.yaml", Setter: f.ns + ":app", Commit: "0123456789abcdef0123456789abcdef01234567"},
		Line: 1, Value: "ghcr.io/org/app:1.0.0", From: "ghcr.io/org/app:1.1.0", Want: "ghcr.io/org/app:1.1.0", Author: "Jane <jane@example.com>", Since: &since}
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = f.head()
		j.Status.Result = &updatev1.UpdateResult{Holds: []updatev1.Hold{held}}
	})
	got := waitAutomation(t, a, "the hold recorded", func(a *imagev1.ImageUpdateAutomation) bool { return len(a.Status.Holds) == 1 })
	if h := got.Status.Holds[0]; h.HoldKey != held.HoldKey || h.Value != held.Value || h.Policy != "app" || h.Reason != imagev1.HeldByPersonReason {
		t.Fatalf("hold %+v", h)
	}

	// Released by the annotation: the next job overrides it.
	p := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"t1 app"}}}`, imagev1.ReleaseHoldsAnnotation)))
	if err := env.Client.Patch(context.Background(), a, p); err != nil {
		t.Fatal(err)
	}
	got = waitAutomation(t, a, "the release handled", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastHandledRelease == "t1" && len(a.Status.Holds) == 1 && a.Status.Holds[0].Reason == imagev1.HoldReleasedReason
	})
	next := unfinished(t, waitJobs(t, f.ns, 2))
	if h := next.Spec.Update.Holds; h == nil || len(h.Released) != 1 || h.Released[0] != held.HoldKey {
		t.Fatalf("the job after the release: holds %+v, want %+v released", h, held.HoldKey)
	}
	// The job overrode it: it reports no hold, and the hold is gone.
	finish(t, &next, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.PushedCommit = "89abcdef0123456789abcdef0123456789abcdef"
		j.Status.CheckoutRevision = f.head()
		j.Status.Result = &updatev1.UpdateResult{}
	})
	waitAutomation(t, a, "the hold gone", func(a *imagev1.ImageUpdateAutomation) bool { return len(a.Status.Holds) == 0 })
}

// A first push records the image it replaced, read from its changes:
// what a rollback of that push writes back.
func TestPushRecordReadsTheReplacedImageOfAFirstPush(t *testing.T) {
	job := setterJob("abc", map[string]meta.ImageRef{"web": {Name: "r/web", Tag: "1.1.0"}})
	job.Status.Result = &updatev1.UpdateResult{Files: []meta.FileResult{{Path: "a.yaml", Objects: []meta.ObjectResult{{Changes: []meta.Change{
		{Setter: "apps:web", OldValue: "r/web:1.0.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", NewValue: "r/web:1.1.0"}}}}}}}
	rec := pushRecord(nil, job, nil)
	if len(rec.Images) != 1 || rec.Images[0].From != "1.0.0" || rec.Images[0].FromDigest == "" {
		t.Errorf("images %+v, want web from 1.0.0 with its digest", rec.Images)
	}
}

// A revert carries only what the rolled-back commit changed: until the
// held image is what the automation applied, the other policies stay at
// their applied images (one that moved meanwhile waits, one never applied
// is left out); once the revert has landed, they follow their policies.
func TestRevertCarriesOnlyTheRolledBackValues(t *testing.T) {
	app1 := meta.ImageRef{Name: "ghcr.io/org/app", Tag: "1"}
	app2 := meta.ImageRef{Name: "ghcr.io/org/app", Tag: "2"}
	db1 := meta.ImageRef{Name: "ghcr.io/org/db", Tag: "1"}
	db2 := meta.ImageRef{Name: "ghcr.io/org/db", Tag: "2"}
	cache := meta.ImageRef{Name: "ghcr.io/org/cache", Tag: "1"}
	hold := imagev1.AutomationHold{Hold: updatev1.Hold{HoldKey: updatev1.HoldKey{Setter: "ns:app"}, Value: "ghcr.io/org/app:1"},
		Policy: "app", Reason: imagev1.RolledBackReason}
	sel := func() *selection.Selection {
		return &selection.Selection{
			Setters: []updatev1.PolicySetter{{Policy: "ns:app", ImageRef: app1}, {Policy: "ns:cache", ImageRef: cache},
				{Policy: "ns:db", ImageRef: db2, Verified: &updatev1.VerifiedImage{}}},
			Observed: imagev1.ObservedPolicies{"app": app1, "cache": cache, "db": db2},
		}
	}
	pending := sel()
	revertOnly(pending, []imagev1.AutomationHold{hold}, imagev1.ObservedPolicies{"app": app2, "db": db1})
	want := []updatev1.PolicySetter{{Policy: "ns:app", ImageRef: app1}, {Policy: "ns:db", ImageRef: db1}}
	if !reflect.DeepEqual(pending.Setters, want) || !reflect.DeepEqual(pending.Observed, imagev1.ObservedPolicies{"app": app1, "db": db1}) {
		t.Errorf("revert pending: setters %+v observed %+v, want %+v", pending.Setters, pending.Observed, want)
	}
	landed := sel()
	revertOnly(landed, []imagev1.AutomationHold{hold}, imagev1.ObservedPolicies{"app": app1, "db": db1})
	if !reflect.DeepEqual(landed, sel()) {
		t.Errorf("revert landed: setters %+v, want the policies' own", landed.Setters)
	}
	person := hold
	person.Path, person.Reason = "apps/app.yaml", imagev1.HeldByPersonReason
	mine := sel()
	revertOnly(mine, []imagev1.AutomationHold{person}, imagev1.ObservedPolicies{"app": app2, "db": db1})
	if !reflect.DeepEqual(mine, sel()) {
		t.Errorf("a person's hold pinned the other setters: %+v", mine.Setters)
	}
}
