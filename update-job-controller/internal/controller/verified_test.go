package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
	"toolkit.dev/image-toolkit/tests/testkit/testregistry"
)

// What was verified is what is written: a verified setter's tag is read
// again right before the commit. Where it still points to the verified
// digest the job commits; re-pushed with another image (here written by a
// tag-only marker, which alone would not notice), the job fails with
// VerifiedImageMoved and commits nothing.
func TestRunRefusesAVerifiedTagThatMoved(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	verified := reg.Push(t, "podinfo", "6.5.0")
	create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("podinfo"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	setVerified := func(j *updatev1.UpdateJob) {
		s := &j.Spec.Update.Setters[0]
		s.Name, s.Tag, s.Digest = reg.Repo("podinfo"), "6.5.0", verified
		s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: "podinfo"}}
	}

	srv.CreateRepo(t, "still", map[string]string{"deploy/app.yaml": deployment})
	ok := newJob(ns, "verified-still", srv.RepoURL("still"), setVerified)
	create(t, ok)
	if got := waitFinished(t, ok); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("tag at the verified digest: phase %s, Ready %+v", got.Status.Phase, conditions.Get(got, conditions.ReadyCondition))
	}

	// With a platform the setter writes the platform's manifest, and the
	// tag is held to the index that verified, which lists it.
	index, per := reg.PushIndex(t, "multi", "1.0.0", time.Now(), "linux/amd64", "linux/arm64")
	create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "multi"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("multi"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	srv.CreateRepo(t, "platform", map[string]string{"deploy/app.yaml": deployment})
	arm := newJob(ns, "verified-platform", srv.RepoURL("platform"), func(j *updatev1.UpdateJob) {
		s := &j.Spec.Update.Setters[0]
		s.Name, s.Tag, s.Digest = reg.Repo("multi"), "1.0.0", per["linux/arm64"]
		s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: "multi"}, Digest: index}
	})
	create(t, arm)
	if got := waitFinished(t, arm); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("platform of a verified index: phase %s, Ready %+v", got.Status.Phase, conditions.Get(got, conditions.ReadyCondition))
	}

	moved := reg.Push(t, "podinfo", "6.5.0")
	srv.CreateRepo(t, "moved", map[string]string{"deploy/app.yaml": deployment})
	before := head(t, srv, "moved", "main")
	j := newJob(ns, "verified-moved", srv.RepoURL("moved"), setVerified)
	create(t, j)
	got := waitFinished(t, j)
	c := conditions.Get(got, conditions.ReadyCondition)
	if got.Status.Phase != updatev1.UpdateJobFailed || c == nil || c.Reason != updatev1.VerifiedImageMovedReason ||
		!strings.Contains(c.Message, moved) || !strings.Contains(c.Message, verified) {
		t.Fatalf("re-pushed tag: phase %s, Ready %+v; want Failed, VerifiedImageMoved naming both digests", got.Status.Phase, c)
	}
	if got.Status.Attempts > 1 {
		t.Errorf("%d attempts: a moved tag is not retried (the policy makes a new job)", got.Status.Attempts)
	}
	if after := head(t, srv, "moved", "main"); after != before {
		t.Errorf("main moved to %s: the re-pushed tag was written", after)
	}
}
