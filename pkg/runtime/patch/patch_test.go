package patch

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, nil, testenv.UpdateJobChart)
}

func newJob(t *testing.T) *updatev1.UpdateJob {
	t.Helper()
	job := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: env.Namespace(t)},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/org/repo.git"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{
				{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"}},
			}},
			Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}},
		},
	}
	if err := env.Client.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job
}

func get(t *testing.T, obj client.Object) *updatev1.UpdateJob {
	t.Helper()
	fresh := &updatev1.UpdateJob{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), fresh); err != nil {
		t.Fatal(err)
	}
	return fresh
}

func TestPatchWritesMetadataAndStatus(t *testing.T) {
	ctx := context.Background()
	job := newJob(t)
	h := NewHelper(job, env.Client)
	job.Annotations = map[string]string{"example.com/note": "x"}
	job.Finalizers = []string{"example.com/keep"}
	job.Status.Phase = updatev1.UpdateJobRunning
	job.Status.Runner = "replica-a"
	conditions.MarkReconciling(job, conditions.ProgressingReason, "working")
	if err := h.Patch(ctx, job); err != nil {
		t.Fatal(err)
	}
	// The caller's status survives the metadata patch's response.
	if job.Status.Runner != "replica-a" {
		t.Errorf("in-memory status lost: %+v", job.Status)
	}
	fresh := get(t, job)
	if fresh.Annotations["example.com/note"] != "x" || len(fresh.Finalizers) != 1 {
		t.Errorf("metadata not written: %+v", fresh.ObjectMeta)
	}
	if fresh.Status.Phase != updatev1.UpdateJobRunning || fresh.Status.Runner != "replica-a" ||
		!conditions.IsTrue(fresh, conditions.ReconcilingCondition) {
		t.Errorf("status not written: %+v", fresh.Status)
	}
	if fresh.ResourceVersion != job.ResourceVersion {
		t.Errorf("in-memory resourceVersion %s, server %s", job.ResourceVersion, fresh.ResourceVersion)
	}

	// Clean up the finalizer so the namespace can go.
	h = NewHelper(fresh, env.Client)
	fresh.Finalizers = nil
	if err := h.Patch(ctx, fresh); err != nil {
		t.Fatal(err)
	}
}

func TestPatchWithoutChangesSendsNothing(t *testing.T) {
	job := newJob(t)
	rv := job.ResourceVersion
	if err := NewHelper(job, env.Client).Patch(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if fresh := get(t, job); fresh.ResourceVersion != rv {
		t.Errorf("resourceVersion moved from %s to %s without a change", rv, fresh.ResourceVersion)
	}
}

func TestPatchOptimisticLock(t *testing.T) {
	ctx := context.Background()
	job := newJob(t)

	// Another writer claims the job after our snapshot.
	mine := NewHelper(job, env.Client)
	other := job.DeepCopy()
	otherHelper := NewHelper(other, env.Client)
	other.Status.Phase = updatev1.UpdateJobRunning
	other.Status.Runner = "replica-b"
	if err := otherHelper.Patch(ctx, other, WithOptimisticLock()); err != nil {
		t.Fatal(err)
	}

	job.Status.Phase = updatev1.UpdateJobRunning
	job.Status.Runner = "replica-a"
	err := mine.Patch(ctx, job, WithOptimisticLock())
	if !apierrors.IsConflict(err) {
		t.Fatalf("want a Conflict, got %v", err)
	}
	if fresh := get(t, job); fresh.Status.Runner != "replica-b" {
		t.Errorf("runner = %q, the first claim must stand", fresh.Status.Runner)
	}
}
