package controller

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
)

// The write before a push (status.pushingCommit) is also the push's check
// that the job is still this runner's: it lands while the job is ours,
// also after someone else changed it (its labels), and is refused with
// errClaimLost once another runner took the job over, or the job is gone:
// the push needs no read of its own before it (attempt.go's BeforePush).
func TestAClaimWritesOnlyWhileTheJobIsOurs(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	j := newJob(ns, "claimed", "https://git.example.com/fleet.git", nil)
	j.Labels = map[string]string{unmanagedLabel: "true"} // not the suite runner's
	create(t, j)
	now := metav1.Now()
	base := j.DeepCopy()
	j.Status = updatev1.UpdateJobStatus{Phase: updatev1.UpdateJobRunning, Runner: "replica-x", Attempts: 1, StartTime: &now, HeartbeatTime: &now}
	if err := env.Client.Status().Patch(ctx, j, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	c := &claim{r: &UpdateJobReconciler{Client: env.Client, APIReader: env.Client, Runner: "replica-x"}, job: j.DeepCopy()}
	pushingCommit := func() string {
		t.Helper()
		got := &updatev1.UpdateJob{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.PushingCommit
	}

	if err := c.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, engine.Push{Commit: "c1"}) }); err != nil || pushingCommit() != "c1" {
		t.Fatalf("ours: err %v, pushingCommit %q; want c1 written", err, pushingCommit())
	}

	// A person labels the job: a conflict, and the job is still ours.
	labelled := &updatev1.UpdateJob{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), labelled); err != nil {
		t.Fatal(err)
	}
	before := labelled.DeepCopy()
	labelled.Labels["team"] = "apps"
	if err := env.Client.Patch(ctx, labelled, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if err := c.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, engine.Push{Commit: "c2"}) }); err != nil || pushingCommit() != "c2" {
		t.Fatalf("after a label: err %v, pushingCommit %q; want c2 written", err, pushingCommit())
	}

	// Another runner reclaims it (our heartbeat lapsed).
	taken := &updatev1.UpdateJob{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), taken); err != nil {
		t.Fatal(err)
	}
	taken.Status.Runner, taken.Status.Attempts, taken.Status.PushingCommit = "replica-y", 2, ""
	if err := env.Client.Status().Update(ctx, taken); err != nil {
		t.Fatal(err)
	}
	if err := c.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, engine.Push{Commit: "c3"}) }); !errors.Is(err, errClaimLost) || pushingCommit() != "" {
		t.Fatalf("reclaimed: err %v, pushingCommit %q; want errClaimLost and nothing written", err, pushingCommit())
	}

	if err := env.Client.Delete(ctx, taken); err != nil {
		t.Fatal(err)
	}
	gone := &claim{r: c.r, job: taken}
	if err := gone.update(ctx, func(job *updatev1.UpdateJob) { pushing(job, engine.Push{Commit: "c4"}) }); !errors.Is(err, errClaimLost) {
		t.Fatalf("deleted: err %v, want errClaimLost", err)
	}
}
