package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// In PR mode the change reaches the branch through a person's merge: the
// first branch commit found carrying every image the request proposed
// (a merge or squash commit) is the one rollback judges, and it stays
// the judged one; the request's head commit never is, nor a commit a
// person made by hand with the same images.
func TestRollbackJudgesTheCommitThatMergedTheRequest(t *testing.T) {
	const (
		head   = "1111111111111111111111111111111111111111"
		before = "2222222222222222222222222222222222222222"
		merge  = "3333333333333333333333333333333333333333"
		later  = "4444444444444444444444444444444444444444"
	)
	web := func(tag string) meta.ImageRef { return meta.ImageRef{Name: "r/web", Tag: tag} }
	obj := &imagev1.ImageUpdateAutomation{}
	obj.Status.History = []imagev1.PushRecord{{Commit: head, PullRequest: 7,
		Images: []imagev1.PushedImage{{Policy: "web", ImageRef: web("1.1.0"), From: "1.0.0"}}}}
	noChange := func(rev string, tag string) *updatev1.UpdateJob {
		j := setterJob("", map[string]meta.ImageRef{"web": web(tag)})
		j.Status.Phase, j.Status.CheckoutRevision = updatev1.UpdateJobNoChange, "main@sha1:"+rev
		return j
	}

	// Open, the request has reached nothing, not even at its head commit.
	obj.Status.AppliedRevision = "main@sha1:" + head
	if last, _ := lastOwnCommit(obj); last != nil {
		t.Fatalf("an open request is judged: %+v", last)
	}
	// A job that wants other images says nothing about the request.
	merged(obj, noChange(before, "1.0.0"))
	if m := obj.Status.History[0].Merged; m != "" {
		t.Fatalf("merged at %s, where the branch has the old image", m)
	}
	// A person wrote the image by hand and a job closed the request: no
	// commit after is the automation's, neither that job's nor a later
	// one's.
	obj.Status.LastPullRequest = &meta.PullRequestStatus{Number: 7, Action: meta.PullRequestClosedNow}
	merged(obj, noChange(merge, "1.1.0"))
	if m := obj.Status.History[0].Merged; m != "" {
		t.Fatalf("merged at %s, a commit made by hand", m)
	}
	obj.Status.LastPullRequest.Action = meta.PullRequestOpened
	// The branch carries the request's image: that commit is judged.
	merged(obj, noChange(merge, "1.1.0"))
	obj.Status.AppliedRevision = "main@sha1:" + merge
	if last, c := lastOwnCommit(obj); last == nil || c != merge {
		t.Fatalf("judged %q, want the merge commit %s", c, merge)
	}
	// A person's later commit on top does not move what was judged, and
	// the automation stops judging, as in push mode.
	merged(obj, noChange(later, "1.1.0"))
	obj.Status.AppliedRevision = "main@sha1:" + later
	if m := obj.Status.History[0].Merged; m != merge {
		t.Fatalf("merged moved to %s", m)
	}
	if last, _ := lastOwnCommit(obj); last != nil {
		t.Fatalf("a person's commit on top is judged")
	}
	// The revert is held at the merge commit.
	obj.Status.AppliedRevision = "main@sha1:" + merge
	last, c := lastOwnCommit(obj)
	if n := holdRolledBack(obj, last, c, "broke", obj.CreationTimestamp.Time); n != 1 || obj.Status.Holds[0].Commit != merge ||
		obj.Status.Holds[0].Value != web("1.0.0").String() {
		t.Fatalf("holds %+v", obj.Status.Holds)
	}
}

// spec.rollback watches its healthOf objects, it does not poll them: an
// automation judging a commit that reached a healthy Kustomization makes
// no API request on Kustomizations over 30 s of idleness, and yet a
// failure written afterwards is acted on at once.
func TestRollbackIsWatchedNotPolled(t *testing.T) {
	ctx := context.Background()
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		testenv.OpenCRD("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
	}}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, testgit.Options{})
	a, pushed := f.rolloutWatchedBy(t, imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps"})
	// The Kustomization applied the commit and is healthy, as
	// kustomize-controller writes it.
	ks := &unstructured.Unstructured{}
	ks.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
	ks.SetKind("Kustomization")
	ks.SetNamespace(f.ns)
	ks.SetName("apps")
	create(t, ks)
	setReady := func(status, reason string) {
		t.Helper()
		rev := "main@sha1:" + pushed
		ks.Object["status"] = map[string]any{"observedGeneration": ks.GetGeneration(), "lastAttemptedRevision": rev, "lastAppliedRevision": rev,
			"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": "revision " + rev,
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": ks.GetGeneration()}}}
		if err := env.Client.Status().Update(ctx, ks); err != nil {
			t.Fatal(err)
		}
	}
	setReady("True", "ReconciliationSucceeded")
	waitAutomation(t, a, "the commit reached the Kustomization", func(a *imagev1.ImageUpdateAutomation) bool {
		rb := a.Status.Rollback
		return rb != nil && rb.ReachedAt != nil && rb.Reason == imagev1.RollbackWatchingReason
	})

	const idle = 30 * time.Second
	before, err := testenv.APIRequests(ctx, env.Config, "kustomizations")
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 {
		t.Fatal("no request on Kustomizations counted at all, not even the informer's list: the count is not the API server's")
	}
	time.Sleep(idle)
	after, err := testenv.APIRequests(ctx, env.Config, "kustomizations")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("API requests on Kustomizations in %s of idleness: %v", idle, after-before)
	if after != before {
		t.Errorf("%v requests on Kustomizations in %s of idleness; want none", after-before, idle)
	}

	// Watched: a failure is seen without a request to reconcile.
	setReady("False", "HealthCheckFailed")
	waitAutomation(t, a, "the rollback", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.Rollback.Reason == imagev1.RolledBackReason && len(a.Status.Holds) == 1 &&
			a.Status.Holds[0].Value == "ghcr.io/org/app:1.0.0"
	})
}

// spec.rollback reads health pushed from a cluster it cannot reach
// (healthOf[].webhookRef): the HealthWebhook's status.objects, as the
// reflector's receiver records Flux's events there (pkg/health.Record),
// woken by the watch on the HealthWebhook. Healthy at the commit, the
// automation watches; the failure pushed afterwards reverts it at once.
func TestRollbackReadsHealthPushedToAHealthWebhook(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testgit.Options{})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "dev-health-token"}, Data: map[string][]byte{"token": []byte("k")}})
	wh := &imagev1.HealthWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "dev"},
		Spec: imagev1.HealthWebhookSpec{Type: imagev1.HealthFluxHMAC, SecretRef: meta.LocalObjectReference{Name: "dev-health-token"}}}
	create(t, wh)
	a, pushed := f.rolloutWatchedBy(t, imagev1.HealthObjectReference{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization",
		Namespace: "flux-system", Name: "apps", WebhookRef: &meta.LocalObjectReference{Name: "dev"}})
	push := func(state health.State, reason string) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(wh), wh); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		wh.Status.Objects, _ = health.Record(wh.Status.Objects, health.Push{Group: "kustomize.toolkit.fluxcd.io", Kind: "Kustomization",
			Namespace: "flux-system", Name: "apps", At: now,
			Health: health.Health{State: state, Revision: "main@sha1:" + pushed, Reason: reason, Since: now}})
		if err := env.Client.Status().Update(ctx, wh); err != nil {
			t.Fatal(err)
		}
	}
	push(health.Healthy, "ReconciliationSucceeded")
	waitAutomation(t, a, "the commit reached dev's pushed Kustomization", func(a *imagev1.ImageUpdateAutomation) bool {
		rb := a.Status.Rollback
		return rb != nil && rb.ReachedAt != nil && rb.Reason == imagev1.RollbackWatchingReason
	})
	push(health.Degraded, "HealthCheckFailed")
	waitAutomation(t, a, "the rollback", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.Rollback.Reason == imagev1.RolledBackReason && len(a.Status.Holds) == 1 &&
			a.Status.Holds[0].Value == "ghcr.io/org/app:1.0.0"
	})
}

// rolloutWatchedBy makes the automation "fleet" of policy app (1.1.0)
// with spec.rollback reading health, and has its job push the commit
// moving app from 1.0.0 to 1.1.0; it returns the automation and the
// commit.
func (f *fixture) rolloutWatchedBy(t *testing.T, ref imagev1.HealthObjectReference) (*imagev1.ImageUpdateAutomation, string) {
	t.Helper()
	f.policy("app", nil, "1.1.0")
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.Rollback = &imagev1.RollbackSpec{Window: metav1.Duration{Duration: 10 * time.Minute},
			HealthOf: []imagev1.HealthObjectReference{ref}}
	})
	first := f.head()
	job := waitJobs(t, f.ns, 1)[0]
	pushed := f.work.Commit("update images", map[string]string{"apps/app.yaml": "image: ghcr.io/org/app:1.1.0\n"})
	f.work.Push()
	finish(t, &job, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision, j.Status.PushedCommit, j.Status.PushedRefs = first, pushed, []string{"refs/heads/main"}
		j.Status.Result = &updatev1.UpdateResult{Files: []meta.FileResult{{Path: "apps/app.yaml", Objects: []meta.ObjectResult{{
			Changes: []meta.Change{{Setter: f.ns + ":app", OldValue: "ghcr.io/org/app:1.0.0", NewValue: "ghcr.io/org/app:1.1.0"}}}}}}}
	})
	return a, pushed
}
