package controller

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

func argoSource(images []string, written ...argocd.Source) gitsource.Source {
	return gitsource.Source{Describe: "Application argocd/shop", Path: "apps", Applications: []*gitsource.Application{{
		Application:   argocd.Application{Name: "shop", Namespace: "argocd", Images: images, Sources: written},
		Written:       written,
		ArgoNamespace: "argocd",
	}}}
}

// A job of strategy ArgoCD writes one override file per written source,
// with the policies whose image the Application runs at another tag (in
// the spelling its manifests use) and those spec.update.argoCD forces,
// with their Helm names; other policies stay out, named or not, and
// strategy Setters writes no file.
func TestArgoCDOverridesFollowWhatTheApplicationRuns(t *testing.T) {
	src := argoSource([]string{"podinfo:6.5.0", "docker.io/library/redis:7.2"},
		argocd.Source{Index: 0, Path: "apps/web", Type: argocd.TypeKustomize},
		argocd.Source{Index: 1, Path: "apps/api/", Type: argocd.TypeHelm})
	setters := []updatev1.PolicySetter{
		{Policy: "argocd:podinfo", ImageRef: meta.ImageRef{Name: "docker.io/library/podinfo", Tag: "6.5.1"}},
		{Policy: "argocd:redis", ImageRef: meta.ImageRef{Name: "docker.io/library/redis", Tag: "7.4"}},
		{Policy: "argocd:other", ImageRef: meta.ImageRef{Name: "ghcr.io/org/other", Tag: "1"}},
		{Policy: "argocd:sidecar", ImageRef: meta.ImageRef{Name: "ghcr.io/org/sidecar", Tag: "2"}},
	}
	spec := &imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD,
		ArgoCD: &imagev1.ArgoCDUpdate{Images: []imagev1.ArgoCDImage{{Policy: "sidecar", Force: true, ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageSpec: "sidecar.image"}}, {Policy: "other", ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageName: "other.image"}}}}}}
	images := []updatev1.ArgoCDOverrideImage{
		{Policy: "argocd:podinfo", ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "podinfo"}},
		{Policy: "argocd:redis", ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "docker.io/library/redis"}},
		{Policy: "argocd:sidecar", ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageSpec: "sidecar.image"}},
	}
	want := []updatev1.ArgoCDOverride{
		{File: "apps/web/.argocd-source-shop.yaml", Type: "Kustomize", Images: images},
		{File: "apps/api/.argocd-source-shop.yaml", Type: "Helm", Images: images},
	}
	if got := argoCDOverrides(spec, src, setters); !reflect.DeepEqual(got, want) {
		t.Errorf("overrides\n%+v\nwant\n%+v", got, want)
	}
	// An image the Application already runs as the policy says needs no
	// override: once Argo CD runs the new podinfo, only redis is written.
	src.Applications[0].Images[0] = "podinfo:6.5.1"
	if got := argoCDOverrides(spec, src, setters); len(got) != 2 || len(got[0].Images) != 2 || got[0].Images[0].Policy != "argocd:redis" {
		t.Errorf("with podinfo running 6.5.1: %+v", got)
	}
	job := jobSpec("argocd", spec, src, setters, nil)
	if job.Update.Path != "apps" || len(job.Update.ArgoCD) != 2 {
		t.Errorf("job update %+v", job.Update)
	}
	spec.Update.Strategy = imagev1.UpdateStrategySetters
	if got := jobSpec("argocd", spec, src, setters, nil); got.Update.ArgoCD != nil || got.Update.Path != "apps" {
		t.Errorf("strategy Setters: update %+v", got.Update)
	}
}

// Strategy ArgoCD needs an Application whose sources Argo CD renders as
// Kustomize or Helm; an Application not compared yet is waited for.
func TestCheckArgoCD(t *testing.T) {
	obj := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "a"},
		Spec: imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}}}
	for _, tc := range []struct {
		name    string
		src     gitsource.Source
		reason  string
		stalled bool
	}{
		{"kustomize", argoSource(nil, argocd.Source{Type: argocd.TypeKustomize}), "", false},
		{"not an Application", gitsource.Source{Describe: "GitRepository argocd/fleet"}, imagev1.UnsupportedUpdateStrategyReason, true},
		{"directory", argoSource(nil, argocd.Source{Type: "Directory"}), imagev1.UnsupportedUpdateStrategyReason, true},
		{"not compared yet", argoSource(nil, argocd.Source{}), conditions.DependencyNotReadyReason, false},
	} {
		err := checkArgoCD(obj, &tc.src)
		f, _ := err.(*conditions.Failure)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason != "" && (f == nil || f.Reason != tc.reason || f.Stalled != tc.stalled):
			t.Errorf("%s: %v, want reason %s (stalled %v)", tc.name, err, tc.reason, tc.stalled)
		}
	}
}

// application creates an Argo CD Application of fleet's main branch with
// the status Argo CD writes once it has compared it: how it rendered the
// source and the images its Pods run.
func (f *fixture) application(name, path, sourceType string, labels map[string]string, images ...string) {
	f.t.Helper()
	f.applicationOf("fleet", "main", name, path, sourceType, labels, images...)
}

// applicationOf is application on another repository or branch.
func (f *fixture) applicationOf(repo, rev, name, path, sourceType string, labels map[string]string, images ...string) {
	f.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"project":     "default",
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"},
			"source":      map[string]any{"repoURL": f.git.RepoURL(repo), "path": path, "targetRevision": rev},
		},
		"status": map[string]any{"sourceType": sourceType, "summary": map[string]any{"images": toAny(images)}},
	}}
	u.SetGroupVersionKind(gitsource.ApplicationGVK)
	u.SetNamespace(f.ns)
	u.SetName(name)
	u.SetLabels(labels)
	create(f.t, u)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// One automation over the Applications spec.applicationSelector selects
// makes one UpdateJob for all of them: their repository and branch, their
// common path, and the override file of each source with the policies the
// Application runs. An Application labelled into the selection later makes
// a new job even though neither the branch nor a policy changed.
func TestApplicationSelectorMakesOneJobWithEachOverrideFile(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	shop := map[string]string{"team": "shop"}
	f.application("web", "apps/web", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	f.application("api", "apps/api", "Helm", shop, "ghcr.io/org/app:1.0.0", "docker.io/library/redis:7")
	f.application("other", "elsewhere", "Kustomize", map[string]string{"team": "other"}, "ghcr.io/org/app:1.0.0")
	f.policy("app", nil, "1.1.0")
	a := f.automation("shop", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		a.Spec.ApplicationSelector = &metav1.LabelSelector{MatchLabels: shop}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}
	})
	job := waitJobs(t, f.ns, 1)[0]
	images := []updatev1.ArgoCDOverrideImage{{Policy: f.ns + ":app", ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "ghcr.io/org/app"}}}
	want := []updatev1.ArgoCDOverride{
		{File: "apps/api/.argocd-source-" + f.ns + "_api.yaml", Type: "Helm", Images: images},
		{File: "apps/web/.argocd-source-" + f.ns + "_web.yaml", Type: "Kustomize", Images: images},
	}
	if job.Spec.Repository.URL != f.git.RepoURL("fleet") || job.Spec.Checkout.Reference.Branch != "main" || job.Spec.Update.Path != "apps" ||
		!reflect.DeepEqual(job.Spec.Update.ArgoCD, want) {
		t.Fatalf("job spec %+v\nwant override files %+v", job.Spec, want)
	}
	finish(t, &job, updatev1.UpdateJobSucceeded, nil)
	waitAutomation(t, a, "the job recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Name == job.Name
	})

	f.application("cart", "apps/cart", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	second := waitJobs(t, f.ns, 2)
	next := unfinished(t, second)
	if len(next.Spec.Update.ArgoCD) != 3 || next.Spec.Update.ArgoCD[1].File != "apps/cart/.argocd-source-"+f.ns+"_cart.yaml" {
		t.Errorf("after a new Application: override files %+v", next.Spec.Update.ArgoCD)
	}
}

// Applications on two repositories under one automation are two targets:
// one UpdateJob each, on its own repository with its own override files;
// status.targets names each target's commit, and a target whose job fails
// fails alone: the other keeps its commit and makes no new job, and the
// automation's Ready condition names the one that failed.
func TestApplicationsOnSeveralRepositoriesGetAJobEach(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.git.CreateRepo(t, "stage", map[string]string{"apps/web/kustomization.yaml": "resources: []\n"})
	a := f.shopOnTwoRepositories("main")
	js := waitJobs(t, f.ns, 2)
	byRepo := map[string]updatev1.UpdateJob{}
	for _, j := range js {
		byRepo[j.Spec.Repository.URL] = j
	}
	fleet, stage := byRepo[f.git.RepoURL("fleet")], byRepo[f.git.RepoURL("stage")]
	if fleet.Name == "" || stage.Name == "" {
		t.Fatalf("jobs on %v, want one on each repository", slices.Collect(maps.Keys(byRepo)))
	}
	for _, c := range []struct {
		job  updatev1.UpdateJob
		file string
	}{{fleet, "apps/web/.argocd-source-" + f.ns + "_web.yaml"}, {stage, "apps/web/.argocd-source-" + f.ns + "_web-stage.yaml"}} {
		if o := c.job.Spec.Update.ArgoCD; c.job.Spec.Checkout.Reference.Branch != "main" || c.job.Spec.Update.Path != "apps/web" ||
			len(o) != 1 || o[0].File != c.file {
			t.Errorf("job %s on %s: checkout %+v, path %q, overrides %+v", c.job.Name, c.job.Spec.Repository.URL,
				c.job.Spec.Checkout.Reference, c.job.Spec.Update.Path, o)
		}
	}
	// As if the job had pushed the branch's head.
	pushed := strings.TrimPrefix(f.head(), "main@sha1:")
	finish(t, &fleet, updatev1.UpdateJobSucceeded, func(j *updatev1.UpdateJob) { j.Status.PushedCommit = pushed })
	finish(t, &stage, updatev1.UpdateJobFailed, nil)
	got := waitAutomation(t, a, "both targets recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.Targets) == 2 && a.Status.Targets[0].LastJob != nil && a.Status.Targets[1].LastJob != nil
	})
	ft, st := got.Status.Targets[0], got.Status.Targets[1]
	if ft.URL != f.git.RepoURL("fleet") || ft.Branch != "main" || ft.LastPushCommit != pushed || ft.Ready == nil ||
		ft.Ready.Status != metav1.ConditionTrue || !slices.Equal(ft.Applications, []string{f.ns + "/web"}) {
		t.Errorf("fleet target %+v", ft)
	}
	if st.URL != f.git.RepoURL("stage") || st.LastPushCommit != "" || st.Ready == nil || st.Ready.Status != metav1.ConditionFalse ||
		st.LastJob.Name != stage.Name {
		t.Errorf("stage target %+v", st)
	}
	if c := ready(got); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "1 of 2 targets failed: "+f.git.RepoURL("stage")) ||
		got.Status.LastPushCommit != pushed {
		t.Errorf("automation Ready %+v, last push %q", c, got.Status.LastPushCommit)
	}
	// A requested reconcile retries the failed target; the pushed one is
	// up to date and makes no job.
	request(t, got, "again")
	js = waitJobs(t, f.ns, 3)
	if next := unfinished(t, js); next.Spec.Repository.URL != f.git.RepoURL("stage") {
		t.Errorf("the retry is on %s, want the stage repository", next.Spec.Repository.URL)
	}

	// The stage Application leaves the selection (its labels change,
	// which the Application watch passes): one target again, and
	// status.targets goes.
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(gitsource.ApplicationGVK)
	app.SetNamespace(f.ns)
	app.SetName("web-stage")
	if err := env.Client.Patch(context.Background(), app, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"elsewhere"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitAutomation(t, a, "one target again", func(a *imagev1.ImageUpdateAutomation) bool { return a.Status.Targets == nil })
}

// Applications are watched through their cache: a change of the images an
// Application runs (status.summary.images, which Argo CD writes without
// changing the generation) brings its automation back at once, with the
// new override files, long before its interval.
func TestApplicationStatusChangeRunsTheAutomation(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	shop := map[string]string{"team": "shop"}
	f.application("web", "apps/web", "Kustomize", shop, "ghcr.io/org/app:1.1.0")
	f.policy("app", nil, "1.1.0")
	f.policy("redis", nil, "7.4")
	a := f.automation("shop", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		a.Spec.ApplicationSelector = &metav1.LabelSelector{MatchLabels: shop}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}
		a.Spec.Interval = metav1.Duration{Duration: time.Hour}
	})
	first := waitJobs(t, f.ns, 1)[0]
	if len(first.Spec.Update.ArgoCD) != 0 {
		t.Fatalf("the Application runs what the policies say, yet overrides %+v", first.Spec.Update.ArgoCD)
	}
	head := strings.TrimPrefix(f.head(), "main@sha1:")
	finish(t, &first, updatev1.UpdateJobNoChange, func(j *updatev1.UpdateJob) { j.Status.CheckoutRevision = "main@sha1:" + head })
	waitAutomation(t, a, "the job recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.LastJob != nil && a.Status.LastJob.Name == first.Name
	})

	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(gitsource.ApplicationGVK)
	patch := func(status string) {
		t.Helper()
		app.SetNamespace(f.ns)
		app.SetName("web")
		// Argo CD's CRD has no status subresource: Argo CD patches the
		// object.
		if err := env.Client.Patch(context.Background(), app, client.RawPatch(types.MergePatchType, []byte(status))); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"status":{"summary":{"images":["ghcr.io/org/app:1.1.0","ghcr.io/org/redis:7.2"]}}}`)
	next := unfinished(t, waitJobs(t, f.ns, 2))
	if o := next.Spec.Update.ArgoCD; len(o) != 1 || len(o[0].Images) != 1 || o[0].Images[0].Policy != f.ns+":redis" {
		t.Errorf("after the Application ran redis 7.2: overrides %+v", o)
	}
}

// helm.valuesObject is written only where Argo CD renders it: not over a
// source's helm.values (the object would replace it whole), not where the
// Application's own helm.parameters set the same name (they win), not for
// a name a map path cannot spell; and the job's images carry the choice,
// automation-wide or per policy.
func TestHelmValuesObjectIsCheckedAndCarried(t *testing.T) {
	spec := func(all bool, images ...imagev1.ArgoCDImage) *imagev1.ImageUpdateAutomation {
		return &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "a"},
			Spec: imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD,
				ArgoCD: &imagev1.ArgoCDUpdate{HelmValuesObject: all, Images: images}}}}
	}
	helm := func(mutate func(*argocd.Source)) gitsource.Source {
		s := argocd.Source{Type: argocd.TypeHelm, Path: "apps/api"}
		mutate(&s)
		return argoSource([]string{"ghcr.io/org/api:1.0.0"}, s)
	}
	for _, tc := range []struct {
		name   string
		obj    *imagev1.ImageUpdateAutomation
		src    gitsource.Source
		reason string
	}{
		{"plain", spec(true), helm(func(*argocd.Source) {}), ""},
		{"helm.values", spec(true), helm(func(s *argocd.Source) { s.HelmValues = true }), imagev1.UnsupportedUpdateStrategyReason},
		{"helm.values, parameters written", spec(false), helm(func(s *argocd.Source) { s.HelmValues = true }), ""},
		{"a parameter of the default name", spec(true), helm(func(s *argocd.Source) { s.HelmParameters = []string{"replicas", "image.tag"} }),
			imagev1.UnsupportedUpdateStrategyReason},
		{"a parameter of a policy's name", spec(false, imagev1.ArgoCDImage{Policy: "api", ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageTag: "api.tag", HelmValuesObject: true}}),
			helm(func(s *argocd.Source) { s.HelmParameters = []string{"api.tag"} }), imagev1.UnsupportedUpdateStrategyReason},
		{"a list index", spec(false, imagev1.ArgoCDImage{Policy: "api", ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageSpec: "images[0]", HelmValuesObject: true}}),
			helm(func(*argocd.Source) {}), conditions.InvalidSpecReason},
	} {
		err := checkArgoCD(tc.obj, &tc.src)
		f, _ := err.(*conditions.Failure)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason != "" && (f == nil || f.Reason != tc.reason || !f.Stalled):
			t.Errorf("%s: %v, want reason %s, stalled", tc.name, err, tc.reason)
		}
	}
	setters := []updatev1.PolicySetter{
		{Policy: "argocd:api", ImageRef: meta.ImageRef{Name: "ghcr.io/org/api", Tag: "1.1.0"}},
	}
	src := helm(func(*argocd.Source) {})
	if o := argoCDOverrides(&spec(true).Spec, src, setters); len(o) != 1 || !o[0].Images[0].HelmValuesObject {
		t.Errorf("automation-wide: %+v", o)
	}
	if o := argoCDOverrides(&spec(false, imagev1.ArgoCDImage{Policy: "api", ArgoCDImageFields: meta.ArgoCDImageFields{HelmValuesObject: true}}).Spec, src, setters); len(o) != 1 || !o[0].Images[0].HelmValuesObject {
		t.Errorf("per policy: %+v", o)
	}
	if o := argoCDOverrides(&spec(false).Spec, src, setters); len(o) != 1 || o[0].Images[0].HelmValuesObject {
		t.Errorf("not asked for: %+v", o)
	}
}

// spec.update.charts becomes the job's charts, with the policy's key and
// the automation's namespace where the entry names none.
func TestChartsAreCarriedIntoTheJob(t *testing.T) {
	spec := &imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters,
		Charts: []imagev1.ChartUpdate{{ArgoCDChart: meta.ArgoCDChart{Application: "shop"}, Policy: "shop-chart"}, {ArgoCDChart: meta.ArgoCDChart{Application: "db", Namespace: "argocd", Chart: "redis"}, Policy: "redis-chart"}}}}
	job := jobSpec("apps", spec, gitsource.Source{}, nil, nil)
	want := []updatev1.ChartUpdate{
		{Policy: "apps:shop-chart", ArgoCDChart: meta.ArgoCDChart{Application: "shop", Namespace: "apps"}},
		{Policy: "apps:redis-chart", ArgoCDChart: meta.ArgoCDChart{Application: "db", Namespace: "argocd", Chart: "redis"}},
	}
	if !reflect.DeepEqual(job.Update.Charts, want) {
		t.Errorf("charts %+v, want %+v", job.Update.Charts, want)
	}
}

// A target that retrying cannot fix stalls alone: an Application on a
// second repository whose targetRevision names a tag there is
// TargetRevisionNotBranch in its status.targets entry, while the first
// target makes its job; the automation, whose only failed target is
// stalled, is Stalled too, not retried as a transient failure (before the
// targets ran on the skeleton's parts, the sum was always retried).
func TestAStalledTargetStallsAloneAndIsNotRetried(t *testing.T) {
	f := newFixture(t, testgit.Options{})
	f.git.CreateRepo(t, "stage", map[string]string{"apps/web/kustomization.yaml": "resources: []\n"})
	testgit.Git(t, f.git.BarePath("stage"), "tag", "v1", "main")
	a := f.shopOnTwoRepositories("v1")
	js := waitJobs(t, f.ns, 1)
	if js[0].Spec.Repository.URL != f.git.RepoURL("fleet") {
		t.Errorf("the job is on %s, want the fleet repository", js[0].Spec.Repository.URL)
	}
	got := waitAutomation(t, a, "the stage target stalled", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.Targets) == 2 && conditions.IsTrue(a, conditions.StalledCondition)
	})
	var stage imagev1.TargetStatus
	for _, ts := range got.Status.Targets {
		if ts.URL == f.git.RepoURL("stage") {
			stage = ts
		}
	}
	if stage.Ready == nil || stage.Ready.Status != metav1.ConditionFalse || stage.Ready.Reason != imagev1.TargetRevisionNotBranchReason {
		t.Errorf("stage target Ready %+v, want False/%s", stage.Ready, imagev1.TargetRevisionNotBranchReason)
	}
	if c := ready(got); c.Reason != imagev1.TargetRevisionNotBranchReason || !strings.Contains(c.Message, "1 of 2 targets failed") {
		t.Errorf("automation Ready %+v", c)
	}
	// Still one job: the fleet target's is in flight, and the stalled one
	// makes none.
	if js := waitJobsSettled(t, f.ns); len(js) != 1 {
		t.Errorf("%d jobs, want the fleet target's one", len(js))
	}
}

// shopOnTwoRepositories is an Argo CD automation of the Applications
// labelled team=shop: web on fleet's main, and web-stage on the stage
// repository at stageRevision; the policy app has chosen 1.1.0.
func (f *fixture) shopOnTwoRepositories(stageRevision string) *imagev1.ImageUpdateAutomation {
	f.t.Helper()
	shop := map[string]string{"team": "shop"}
	f.application("web", "apps/web", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	f.applicationOf("stage", stageRevision, "web-stage", "apps/web", "Kustomize", shop, "ghcr.io/org/app:1.0.0")
	f.policy("app", nil, "1.1.0")
	return f.automation("shop", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Repository, a.Spec.GitSpec.Checkout = nil, nil
		a.Spec.ApplicationSelector = &metav1.LabelSelector{MatchLabels: shop}
		a.Spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD}
	})
}

// spec.update.files becomes the job's files as written: the policy is
// already the setter's key, as a marker names it.
func TestFilesAreCarriedIntoTheJob(t *testing.T) {
	files := []meta.FileUpdate{{Path: "ecs/task.json", Pointer: "/containerDefinitions/0/image", Policy: "apps:app:tag"}}
	spec := &imagev1.ImageUpdateAutomationSpec{Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Files: files}}
	if job := jobSpec("apps", spec, gitsource.Source{}, nil, nil); !reflect.DeepEqual(job.Update.Files, files) {
		t.Errorf("files %+v, want %+v", job.Update.Files, files)
	}
}
