package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
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
		p := plan(srv.RepoURL("fleet"), func(p *writeback.Plan) {
			p.Path = "deploy"
			p.Update.Images = map[string]meta.ImageRef{"apps:app": {Name: "ghcr.io/acme/app", Tag: "1.5.0"}}
			p.Update.Discover = &writeback.Discover{Exclude: []string{"docker.io/*/*"}, WriteMarkers: writeMarkers}
		})
		out, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
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
			d.Images[0].Policy != "apps:app" || d.Images[0].Tag != "1.4.2" ||
			!slices.Equal(d.Images[0].Files, []string{"app.yaml", "kustomization.yaml"}) {
			t.Errorf("discovered %+v", d)
		}
		if n := len(out.Changes.Changes()); n != 2 {
			t.Errorf("%d changes, want 2", n)
		}
	}
}

// With discover, a Dockerfile's FROM and a Terraform file's image = "…"
// are updated by image name without a marker, and with writeMarkers
// marked on the line before, in the commit that updates them.
func TestRunDiscoverUpdatesADockerfileAndTerraform(t *testing.T) {
	for _, writeMarkers := range []bool{false, true} {
		srv := testgit.New(t, testgit.Options{})
		srv.CreateRepo(t, "fleet", map[string]string{"build/Dockerfile": "FROM golang:1.26 AS build\nFROM ghcr.io/acme/app:1.4.2\nCOPY --from=build /app /app\n",
			"build/task.tf": "resource \"x\" \"y\" {\n  image = \"ghcr.io/acme/app:1.4.2\"\n}\n"})
		p := plan(srv.RepoURL("fleet"), func(p *writeback.Plan) {
			p.Path = "build"
			p.Update.Images = map[string]meta.ImageRef{"apps:app": {Name: "ghcr.io/acme/app", Tag: "1.5.0"}}
			p.Update.Discover = &writeback.Discover{Exclude: []string{"docker.io/*/*"}, WriteMarkers: writeMarkers}
		})
		out, err := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t)).Run(context.Background(), p)
		if err != nil || out.Commit == "" {
			t.Fatalf("commit %q, %v", out.Commit, err)
		}
		want := "FROM golang:1.26 AS build\nFROM ghcr.io/acme/app:1.5.0\nCOPY --from=build /app /app\n"
		if writeMarkers {
			want = strings.Replace(want, "FROM ghcr.io", "# {\"$imagepolicy\": \"apps:app\"}\nFROM ghcr.io", 1)
		}
		if got := testgit.Git(t, srv.BarePath("fleet"), "show", "main:build/Dockerfile"); got != want {
			t.Errorf("writeMarkers %v:\n%s\nwant:\n%s", writeMarkers, got, want)
		}
		// An HCL file's image = "…" is discovered and set the same way.
		wantTF := "resource \"x\" \"y\" {\n  image = \"ghcr.io/acme/app:1.5.0\"\n}\n"
		if writeMarkers {
			wantTF = strings.Replace(wantTF, "  image", "  # {\"$imagepolicy\": \"apps:app\"}\n  image", 1)
		}
		if got := testgit.Git(t, srv.BarePath("fleet"), "show", "main:build/task.tf"); got != wantTF {
			t.Errorf("writeMarkers %v, task.tf:\n%s\nwant:\n%s", writeMarkers, got, wantTF)
		}
		if d := out.Discovered; d == nil || len(d.Images) != 1 || d.Images[0].Name != "ghcr.io/acme/app" {
			t.Errorf("discovered %+v", d)
		}
	}
}
