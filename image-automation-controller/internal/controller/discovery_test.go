package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// An automation with spec.discover makes a first UpdateJob with no setters
// that only discovers; from what the job found it makes an ImageRepository
// and an ImagePolicy per image (owned, labelled, the policy from the tag),
// follows the namespace's own policy for an image instead of making one,
// reports an image without a default policy, and runs again when a policy
// it made chooses an image, with that setter and discovery on; when the
// image leaves the repository, what it made goes and the namespace's own
// objects stay.
func TestDiscoverMakesAndRemovesObjects(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	ctx := context.Background()
	// The namespace's own policy for nginx.
	create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "nginx"},
		Spec: imagev1.ImageRepositorySpec{Image: "nginx", Interval: metav1.Duration{Duration: time.Hour}}})
	mine := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "nginx-ours"},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "nginx"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "~1.27"}}}}
	create(t, mine)
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"none": "none"}}
		a.Spec.Discover = &imagev1.DiscoverSpec{DiscoverSpec: updatev1.DiscoverSpec{Exclude: []string{"quay.io/*/*"}},
			Registries: []imagev1.DiscoverRegistry{{Host: "ghcr.io", SecretRef: &meta.LocalObjectReference{Name: "ghcr"}}}}
	})

	first := waitJobsOf(t, a, 1)[0]
	if d := first.Spec.Update.Discover; d == nil || !slices.Equal(d.Exclude, []string{"quay.io/*/*"}) || len(first.Spec.Update.Setters) != 0 {
		t.Fatalf("first job's update %+v", first.Spec.Update)
	}
	head := f.head()
	finish(t, &first, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = head
		j.Status.Result = &updatev1.UpdateResult{Discovered: []meta.DiscoveredImage{
			{ImageRef: meta.ImageRef{Name: "docker.io/library/nginx", Tag: "1.27.1"}, Locations: 1},
			{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/app", Tag: "1.4.2"}, Locations: 2, Files: []string{"a.yaml", "k.yaml"}},
			{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/tool", Tag: "main"}, Locations: 1},
		}}
	})
	a = waitAutomation(t, a, "discovered images recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.Discovered) == 3 && a.Status.Discovered[1].Policy != ""
	})
	got := a.Status.Discovered
	if got[0].Policy != "nginx-ours" || got[0].Owned || got[1].Policy != "fleet-app" || !got[1].Owned ||
		got[2].Policy != "" || got[2].Reason == "" {
		t.Errorf("status.discovered %+v", got)
	}
	repo := &imagev1.ImageRepository{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "fleet-app"}, repo); err != nil {
		t.Fatal(err)
	}
	if repo.Spec.Image != "ghcr.io/acme/app" || repo.Spec.SecretRef == nil || repo.Spec.SecretRef.Name != "ghcr" ||
		repo.Labels[imagev1.DiscoveredByLabel] != "fleet" || metav1.GetControllerOf(repo) == nil {
		t.Errorf("repository %+v", repo)
	}
	pol := &imagev1.ImagePolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "fleet-app"}, pol); err != nil {
		t.Fatal(err)
	}
	if pol.Spec.Policy.SemVer == nil || pol.Spec.Policy.SemVer.Range != ">=1.4.2 <2.0.0" || pol.Spec.ImageRepositoryRef.Name != "fleet-app" {
		t.Errorf("policy %+v", pol.Spec)
	}
	for _, n := range []string{"fleet-nginx", "fleet-tool"} {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: n}, &imagev1.ImagePolicy{}); !apierrors.IsNotFound(err) {
			t.Errorf("ImagePolicy %s: %v, want none", n, err)
		}
	}

	// The policy it made chooses 1.5.0: a job with that setter.
	now := metav1.NowMicro()
	pol.Status.LatestRef = &meta.ImageRef{Name: "ghcr.io/acme/app", Tag: "1.5.0"}
	pol.Status.LatestRefTime = &now
	if err := env.Client.Status().Update(ctx, pol); err != nil {
		t.Fatal(err)
	}
	second := unfinished(t, waitJobsOf(t, a, 2))
	want := []updatev1.PolicySetter{{Policy: f.ns + ":fleet-app", ImageRef: meta.ImageRef{Name: "ghcr.io/acme/app", Tag: "1.5.0"}}}
	if !slices.Equal(withoutTimes(second.Spec.Update.Setters), want) || second.Spec.Update.Discover == nil {
		t.Errorf("second job's update %+v", second.Spec.Update)
	}

	// The app leaves the repository.
	finish(t, &second, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = head
		j.Status.Result = &updatev1.UpdateResult{Discovered: []meta.DiscoveredImage{{ImageRef: meta.ImageRef{Name: "docker.io/library/nginx", Tag: "1.27.1"}, Locations: 1}}}
	})
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "fleet-app"}, &imagev1.ImagePolicy{})
		err2 := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "fleet-app"}, &imagev1.ImageRepository{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2), nil
	})
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "nginx-ours"}, &imagev1.ImagePolicy{}); err != nil {
		t.Errorf("the namespace's own ImagePolicy: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "nginx"}, &imagev1.ImageRepository{}); err != nil {
		t.Errorf("the namespace's own ImageRepository: %v", err)
	}
}

// An object of the name discovery would use that the automation did not
// make is left exactly as it is: the image is reported as not followed,
// and nothing of the namespace's is overwritten or deleted.
func TestDiscoverNeverTouchesOthersObjects(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	ctx := context.Background()
	theirs := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "fleet-taken"},
		Spec: imagev1.ImageRepositorySpec{Image: "quay.io/someone/else", Interval: metav1.Duration{Duration: time.Hour}}}
	create(t, theirs)
	a := f.automation("fleet", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"none": "none"}}
		a.Spec.Discover = &imagev1.DiscoverSpec{}
	})
	job := waitJobsOf(t, a, 1)[0]
	finish(t, &job, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) {
		j.Status.CheckoutRevision = f.head()
		j.Status.Result = &updatev1.UpdateResult{Discovered: []meta.DiscoveredImage{{ImageRef: meta.ImageRef{Name: "ghcr.io/acme/taken", Tag: "1.0.0"}, Locations: 1}}}
	})
	a = waitAutomation(t, a, "the image reported", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.Discovered) == 1 && a.Status.Discovered[0].Reason != ""
	})
	if d := a.Status.Discovered[0]; d.Policy != "" || d.Owned {
		t.Errorf("discovered %+v", d)
	}
	got := &imagev1.ImageRepository{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Image != "quay.io/someone/else" || got.Labels[imagev1.DiscoveredByLabel] != "" || len(got.OwnerReferences) != 0 {
		t.Errorf("their ImageRepository was changed: %+v", got)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "fleet-taken"}, &imagev1.ImagePolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("an ImagePolicy was made beside their repository: %v", err)
	}
}
