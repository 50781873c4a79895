package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

func job(ns, name string, mutate func(*updatev1.UpdateJob)) *updatev1.UpdateJob {
	j := &updatev1.UpdateJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{
				URL:       "ssh://git@git.example.com/org/fleet.git",
				SecretRef: &meta.LocalObjectReference{Name: "deploy-key"},
			},
			Checkout: updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Update: updatev1.UpdateSpec{Path: "./apps", Setters: []updatev1.PolicySetter{
				{Policy: "apps:podinfo", ImageRef: meta.ImageRef{Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0",
					Digest: "sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c"}},
				{Policy: "apps:redis", ImageRef: meta.ImageRef{Name: "localhost:5000/redis", Tag: "7.2.4"}},
			}},
			Commit: updatev1.CommitSpec{
				Author:     updatev1.CommitUser{Name: "bot", Email: "bot@example.com"},
				SigningKey: &updatev1.SigningKey{SecretRef: meta.LocalObjectReference{Name: "ssh-signing"}, Type: updatev1.SigningKeySSH},
			},
			TTLSecondsAfterFinished: ptr.To[int32](3600),
			ActiveDeadlineSeconds:   ptr.To[int64](600),
		},
	}
	mutate(j)
	return j
}

func TestCRDInstalled(t *testing.T) {
	env.ExpectCRD(t, "updatejobs.update.toolkit.dev", "uj", "Phase", "Attempts", "Commit", "Age")
}

func TestDefaultsRoundTripAndPending(t *testing.T) {
	ctx := context.Background()
	j := job(env.Namespace(t), "podinfo", func(*updatev1.UpdateJob) {})
	if err := env.Client.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	got := &updatev1.UpdateJob{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.BackoffLimit == nil || *got.Spec.BackoffLimit != 3 {
		t.Errorf("backoffLimit = %v, want 3", got.Spec.BackoffLimit)
	}
	if got.Spec.Repository.Timeout == nil || got.Spec.Repository.Timeout.Duration != time.Minute {
		t.Errorf("timeout = %v, want 60s", got.Spec.Repository.Timeout)
	}
	if len(got.Spec.Update.Setters) != 2 || got.Spec.Update.Setters[0].Digest == "" ||
		got.Spec.Commit.SigningKey.Type != updatev1.SigningKeySSH || *got.Spec.ActiveDeadlineSeconds != 600 {
		t.Errorf("spec did not round-trip: %+v", got.Spec)
	}

	// A runner claims the job; its credentials Secret does not exist, so
	// the attempt fails and the job waits for a retry.
	testenv.Eventually(t, 20*time.Second, func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(j), got)
		c := conditions.Get(got, conditions.ReadyCondition)
		return c != nil && c.Reason == conditions.SecretNotFoundReason, err
	})
	c := conditions.Get(got, conditions.ReadyCondition)
	if got.Status.Attempts < 1 || got.Status.ObservedGeneration != got.Generation ||
		!strings.Contains(c.Message, "deploy-key") {
		t.Errorf("status = %+v", got.Status)
	}
}

func TestSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	j := job(env.Namespace(t), "immutable", func(*updatev1.UpdateJob) {})
	if err := env.Client.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	// A merge patch carries no resourceVersion, so the runner's status
	// writes cannot make this a conflict instead of a rejection.
	bump := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"backoffLimit":5}}`))
	err := env.Client.Patch(ctx, j, bump)
	if err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("update of spec: got %v, want a 'spec is immutable' rejection", err)
	}
	// Metadata stays writable.
	labels := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`))
	if err := env.Client.Patch(ctx, j, labels); err != nil {
		t.Errorf("label patch rejected: %v", err)
	}
}

// One case per CEL rule, plus the schema constraints users meet most.
func TestValidationRejects(t *testing.T) {
	ns := env.Namespace(t)
	tests := []struct {
		name   string
		mutate func(*updatev1.UpdateJob)
		want   string
	}{
		{"empty checkout ref", func(j *updatev1.UpdateJob) {
			j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{}
		}, "ref must set one of branch, tag, semver, name or commit"},
		{"tag checkout with nowhere to push", func(j *updatev1.UpdateJob) {
			j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1.0.0"}
		}, "a job that does not check out a branch needs push.branch, push.refspec or push.pullRequest.base"},
		{"tag checkout, pull request without a base", func(j *updatev1.UpdateJob) {
			j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1.0.0"}
			j.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{}}
		}, "needs push.branch, push.refspec or push.pullRequest.base"},
		{"pull request with a push branch", func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{Branch: "auto", PullRequest: &updatev1.PullRequestSpec{}}
		}, "push.branch and push.refspec cannot be set with it"},
		{"unknown forge", func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "phabricator"}}
		}, "spec.push.pullRequest.provider"},
		{"unknown merge method", func(j *updatev1.UpdateJob) {
			j.Spec.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{AutoMerge: "fast-forward"}}
		}, "spec.push.pullRequest.autoMerge"},
		{"escaping path", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Path = "../outside"
		}, "path must be relative and stay inside the repository"},
		{"no setters", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters = nil
		}, "set setters, discover or container"},
		{"container with setters", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Container = &updatev1.UpdateContainer{Image: "busybox"}
		}, "container runs instead of the setters"},
		{"container with discover", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters = nil
			j.Spec.Update.Discover = &updatev1.DiscoverSpec{}
			j.Spec.Update.Container = &updatev1.UpdateContainer{Image: "busybox"}
		}, "container runs instead of the setters"},
		{"container without image", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters = nil
			j.Spec.Update.Container = &updatev1.UpdateContainer{}
		}, "spec.update.container.image"},
		{"container pull policy", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters = nil
			j.Spec.Update.Container = &updatev1.UpdateContainer{Image: "busybox", ImagePullPolicy: "Sometimes"}
		}, "spec.update.container.imagePullPolicy"},
		{"duplicate policy", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters[1].Policy = j.Spec.Update.Setters[0].Policy
		}, "Duplicate value"},
		{"policy without namespace", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters[0].Policy = "podinfo"
		}, "spec.update.setters[0].policy"},
		{"bad tag", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters[0].Tag = "has space"
		}, "spec.update.setters[0].tag"},
		{"bad digest", func(j *updatev1.UpdateJob) {
			j.Spec.Update.Setters[0].Digest = "not a digest"
		}, "spec.update.setters[0].digest"},
		{"bad commit", func(j *updatev1.UpdateJob) {
			j.Spec.Checkout.Reference.Commit = "HEAD~1"
		}, "spec.checkout.ref.commit"},
		{"negative backoff", func(j *updatev1.UpdateJob) {
			j.Spec.BackoffLimit = ptr.To[int32](-1)
		}, "spec.backoffLimit"},
		{"zero deadline", func(j *updatev1.UpdateJob) {
			j.Spec.ActiveDeadlineSeconds = ptr.To[int64](0)
		}, "spec.activeDeadlineSeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env.ExpectInvalid(t, job(ns, "bad", tt.mutate), tt.want)
		})
	}
}

// A container-mode job needs nothing but its image; its timeout defaults
// to 10 minutes.
func TestContainerJobAccepted(t *testing.T) {
	j := job(env.Namespace(t), "container", func(j *updatev1.UpdateJob) {
		j.Spec.Update.Setters = nil
		j.Spec.Update.Container = &updatev1.UpdateContainer{Image: "busybox"}
		// No runner must pick it up: this is about the API only.
		j.Labels = map[string]string{unmanagedLabel: "true"}
	})
	if err := env.Client.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if to := j.Spec.Update.Container.Timeout; to == nil || to.Duration != 10*time.Minute {
		t.Errorf("timeout defaulted to %v, want 10m", to)
	}
}

// A tag checkout is fine when the job says where to push, or which branch
// its pull request merges into.
func TestTagCheckoutWithPushBranch(t *testing.T) {
	for name, push := range map[string]*updatev1.PushSpec{
		"tag":    {Branch: "release-1.0"},
		"tag-pr": {PullRequest: &updatev1.PullRequestSpec{Base: "release-1.0"}},
	} {
		j := job(env.Namespace(t), name, func(j *updatev1.UpdateJob) {
			j.Spec.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1.0.0"}
			j.Spec.Push = push
		})
		if err := env.Client.Create(context.Background(), j); err != nil {
			t.Error(err)
		}
	}
}
