package runner

import (
	"context"
	"strings"
	"testing"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
)

// unmarked is a repository without a single marker: one image in a
// Deployment and a kustomization, another excluded, one in a README.
var unmarked = map[string]string{
	"deploy/app.yaml":           "kind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: ghcr.io/acme/app:1.4.2 # the app\n      - name: db\n        image: docker.io/library/postgres:16.1\n",
	"deploy/kustomization.yaml": "resources: [app.yaml]\nimages:\n- name: ghcr.io/acme/app\n  newTag: 1.4.2\n",
	"deploy/README.md":          "image: ghcr.io/acme/app:1.4.2\n",
}

// With discover, a job updates every discovered location of an image a
// setter names, by image name, without markers, in one commit (the
// Deployment and the kustomization), leaves excluded images and
// non-YAML files alone, and reports what it found; with writeMarkers the
// same commit also writes the markers.
func TestRunDiscover(t *testing.T) {
	for _, writeMarkers := range []bool{false, true} {
		srv := testgit.New(t, testgit.Options{})
		srv.CreateRepo(t, "fleet", unmarked)
		s := spec(srv.RepoURL("fleet"), func(s *updatev1.UpdateJobSpec) {
			s.Update.Path = "deploy"
			s.Update.Setters = []updatev1.PolicySetter{{Policy: "apps:app", Name: "ghcr.io/acme/app", Tag: "1.5.0"}}
			s.Update.Discover = &updatev1.DiscoverSpec{Exclude: []string{"docker.io/*/*"}, WriteMarkers: writeMarkers}
		})
		plan, err := NewPlan(s)
		if err != nil {
			t.Fatal(err)
		}
		cache, err := gitops.NewCache(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		out, err := Run(context.Background(), cache, Input{Spec: s, Plan: plan, WorkDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if out.Commit == "" {
			t.Fatal("no commit")
		}
		show := func(p string) string { return testgit.Git(t, srv.BarePath("fleet"), "show", "main:"+p) }
		app, kust := show("deploy/app.yaml"), show("deploy/kustomization.yaml")
		wantApp := "        image: ghcr.io/acme/app:1.5.0 # the app\n"
		wantKust := "  newTag: 1.5.0\n"
		if writeMarkers {
			wantApp = "        # {\"$imagepolicy\": \"apps:app\"}\n" + wantApp
			wantKust = "  newTag: 1.5.0 # {\"$imagepolicy\": \"apps:app:tag\"}\n"
		}
		if !strings.Contains(app, wantApp) || !strings.Contains(app, "postgres:16.1\n") || !strings.HasSuffix(kust, wantKust) {
			t.Errorf("writeMarkers %v:\napp.yaml:\n%s\nkustomization.yaml:\n%s", writeMarkers, app, kust)
		}
		if show("deploy/README.md") != unmarked["deploy/README.md"] {
			t.Error("README changed")
		}
		d := out.Discovered
		if d == nil || len(d.Images) != 1 || d.Images[0].Name != "ghcr.io/acme/app" || d.Images[0].Locations != 2 ||
			d.Images[0].Policy != "apps:app" || d.Images[0].Tag != "1.4.2" || strings.Join(d.Images[0].Files, ",") != "app.yaml,kustomization.yaml" {
			t.Errorf("discovered %+v", d)
		}
		if n := len(out.Result.Changes()); n != 2 {
			t.Errorf("%d changes, want 2", n)
		}
	}
}

// A discovery job without setters is valid (it reports what it finds, for
// the automation to make policies); without discovery, setters are
// required, and discovery patterns must compile.
func TestNewPlanDiscover(t *testing.T) {
	for _, tt := range []struct {
		d       *updatev1.DiscoverSpec
		setters bool
		err     string
	}{
		{&updatev1.DiscoverSpec{}, false, ""},
		{nil, false, "update.setters is empty"},
		{&updatev1.DiscoverSpec{Include: []string{"ghcr.io/[acme"}}, true, "pattern"},
	} {
		_, err := NewPlan(spec("http://example.com/org/r.git", func(s *updatev1.UpdateJobSpec) {
			s.Update.Discover = tt.d
			if !tt.setters {
				s.Update.Setters = nil
			}
		}))
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%+v: %v, want %q", tt.d, err, tt.err)
		}
	}
}
