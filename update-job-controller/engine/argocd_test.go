package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// A plan with Argo CD override files writes each one beside the setters'
// markers, in the same commit: a new file for one Application, the
// existing file of another merged (its other parameters kept), and the
// result names the Application of each change.
func TestRunWritesArgoCDOverrideFiles(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	existing := "helm:\n  parameters:\n  - name: replicaCount\n    value: \"2\"\n    forcestring: false\n"
	srv.CreateRepo(t, "argo", map[string]string{
		"apps/web/kustomization.yaml":      "resources: []\n",
		"apps/api/values.yaml":             "image: {}\n",
		"apps/api/.argocd-source-api.yaml": existing,
		"apps/marked/deploy.yaml":          deployment,
	})
	p := plan(srv.RepoURL("argo"), func(p *writeback.Plan) {
		p.Path = "apps"
		p.Update.ArgoCD = []writeback.ArgoCDOverride{
			{File: "apps/web/.argocd-source-web.yaml", Type: "Kustomize", Images: []writeback.ArgoCDImage{{Policy: "apps:podinfo", ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "podinfo"}}}},
			{File: "apps/api/.argocd-source-api.yaml", Type: "Helm", Images: []writeback.ArgoCDImage{{Policy: "apps:podinfo"}}},
		}
	})
	out, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Commit == "" {
		t.Fatal("no commit")
	}
	bare := srv.BarePath("argo")
	show := func(f string) string { return testgit.Git(t, bare, "show", "main:"+f) }
	if got, want := show("apps/web/.argocd-source-web.yaml"), "kustomize:\n  images:\n  - podinfo=ghcr.io/stefanprodan/podinfo:6.5.0\n"; got != want {
		t.Errorf("web's file:\n%s\nwant:\n%s", got, want)
	}
	if got := show("apps/api/.argocd-source-api.yaml"); !strings.Contains(got, "- name: replicaCount\n    value: \"2\"") ||
		!strings.Contains(got, "- name: image.tag\n    value: 6.5.0\n    forcestring: true") ||
		!strings.Contains(got, "- name: image.repository\n    value: ghcr.io/stefanprodan/podinfo") {
		t.Errorf("api's file:\n%s", got)
	}
	if got := show("apps/marked/deploy.yaml"); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("the marker was not set in the same run:\n%s", got)
	}
	if n := strings.Count(testgit.Git(t, bare, "log", "--format=%ae", "main"), "bot@"); n != 1 {
		t.Errorf("%d commits of ours, want one", n)
	}
	apps := map[string]int{}
	for _, f := range out.Changes.Files {
		for _, o := range f.Objects {
			if o.Kind == "Application" {
				apps[f.Path+" "+o.Name] += len(o.Changes)
			}
		}
	}
	if apps["web/.argocd-source-web.yaml web"] != 1 || apps["api/.argocd-source-api.yaml api"] != 2 {
		t.Errorf("changes by Application: %v", apps)
	}

	// Run again: everything is up to date, no commit.
	again, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
	if err != nil || again.Commit != "" {
		t.Errorf("second run: commit %q, err %v", again.Commit, err)
	}
}

// A file Argo CD could not read fails the job instead of being rewritten.
func TestRunRefusesAnOverrideFileArgoCDCannotRead(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "broken", map[string]string{"app/.argocd-source-app.yaml": "kustomize:\n  images: 3\n"})
	p := plan(srv.RepoURL("broken"), func(p *writeback.Plan) {
		p.Path = "app"
		p.Update.ArgoCD = []writeback.ArgoCDOverride{{File: "app/.argocd-source-app.yaml", Type: "Kustomize",
			Images: []writeback.ArgoCDImage{{Policy: "apps:podinfo"}}}}
	})
	_, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
	var e *Error
	if !errors.As(err, &e) || !e.Terminal || !strings.Contains(err.Error(), "app/.argocd-source-app.yaml") {
		t.Fatalf("err = %v, want a terminal error naming the file", err)
	}
}

// A chart version is an Application's targetRevision: in the repository
// holding the Application (app of apps), a :tag marker on it follows an
// ImagePolicy over the chart repository, whose latest "tag" is the chart
// version. Multi-source Applications mark the chart source's.
func TestRunSetsAChartApplicationsTargetRevision(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	app := `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: shop
  namespace: argocd
spec:
  project: default
  sources:
  - repoURL: https://charts.example.com
    chart: shop
    targetRevision: 1.2.0 # {"$imagepolicy": "argocd:shop-chart:tag"}
  - repoURL: https://git.example.com/values.git
    targetRevision: main
    ref: values
`
	srv.CreateRepo(t, "apps", map[string]string{"apps/shop.yaml": app})
	p := plan(srv.RepoURL("apps"), func(p *writeback.Plan) {
		p.Update.Images = map[string]meta.ImageRef{"argocd:shop-chart": {Name: "https://charts.example.com/shop", Tag: "1.3.0"}}
	})
	out, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
	if err != nil || out.Commit == "" {
		t.Fatalf("commit %q, %v", out.Commit, err)
	}
	got := testgit.Git(t, srv.BarePath("apps"), "show", "main:apps/shop.yaml")
	if want := strings.Replace(app, "targetRevision: 1.2.0", "targetRevision: 1.3.0", 1); got != want {
		t.Errorf("apps/shop.yaml:\n%s\nwant:\n%s", got, want)
	}
}

// Without a marker, a plan's Charts name the Application whose chart
// version follows a policy: the targetRevision of its chart source is set
// where its manifest is, found by name (another Application's, a git
// source's and another namespace's stay), and what changed is reported
// under the Application.
func TestRunFollowsAnApplicationsChartWithoutAMarker(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	apps := `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: shop
  namespace: argocd
spec:
  project: default
  sources:
  - repoURL: https://charts.example.com
    chart: shop
    targetRevision: 1.2.0
  - repoURL: https://git.example.com/values.git
    targetRevision: main
    ref: values
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: shop
  namespace: staging
spec:
  source:
    repoURL: https://charts.example.com
    chart: shop
    targetRevision: 1.0.0
`
	srv.CreateRepo(t, "apps", map[string]string{"apps/shop.yaml": apps, "apps/README.md": "not YAML\n"})
	p := plan(srv.RepoURL("apps"), func(p *writeback.Plan) {
		p.Update.Images = map[string]meta.ImageRef{"argocd:shop-chart": {Name: "https://charts.example.com/shop", Tag: "1.3.0"}}
		p.Update.Charts = []writeback.Chart{{Policy: "argocd:shop-chart", ArgoCDChart: meta.ArgoCDChart{Application: "shop", Namespace: "argocd"}}}
	})
	out, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
	if err != nil || out.Commit == "" {
		t.Fatalf("commit %q, %v", out.Commit, err)
	}
	got := testgit.Git(t, srv.BarePath("apps"), "show", "main:apps/shop.yaml")
	if want := strings.Replace(apps, "targetRevision: 1.2.0", "targetRevision: 1.3.0", 1); got != want {
		t.Errorf("apps/shop.yaml:\n%s\nwant:\n%s", got, want)
	}
	var changed []string
	for _, f := range out.Changes.Files {
		for _, o := range f.Objects {
			for _, c := range o.Changes {
				changed = append(changed, o.Kind+" "+o.Name+": "+c.OldValue+" -> "+c.NewValue)
			}
		}
	}
	if want := []string{"Application shop: 1.2.0 -> 1.3.0"}; !slices.Equal(changed, want) {
		t.Errorf("changes %v, want %v", changed, want)
	}
}
