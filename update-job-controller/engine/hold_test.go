package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

const twoContainers = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
      - name: sidecar
        image: ghcr.io/example/sidecar:1.0.0 # {"$imagepolicy": "apps:sidecar"}
`

// A person's hand rollback of a value the automation wrote is left as it
// is, and reported, while the other marker of the same file keeps
// updating; the values a person first wrote are not holds; a released
// hold is overridden.
func TestRunLeavesAHandRollback(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "held", map[string]string{"deploy/app.yaml": twoContainers})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	run := func(podinfo, sidecar string, released ...writeback.HoldKey) Result {
		t.Helper()
		res, err := e.Run(context.Background(), plan(srv.RepoURL("held"), func(p *writeback.Plan) {
			p.Path = "deploy"
			p.Update.Images = map[string]meta.ImageRef{
				"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: podinfo},
				"apps:sidecar": {Name: "ghcr.io/example/sidecar", Tag: sidecar},
			}
			p.Update.Holds = &writeback.Holds{Released: released}
		}))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	file := func() string {
		t.Helper()
		testgit.Git(t, clone.Dir, "pull", "-q", "origin", "main")
		b, err := os.ReadFile(filepath.Join(clone.Dir, "deploy/app.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// The values as first committed are a person's, not holds.
	if res := run("6.5.0", "1.1.0"); res.Commit == "" || len(res.Holds) != 0 {
		t.Fatalf("first run: commit %q, holds %+v; want a commit and no hold", res.Commit, res.Holds)
	}
	rolled := strings.Replace(file(), "podinfo:6.5.0", "podinfo:6.4.0", 1)
	hand := clone.Commit("roll podinfo back", map[string]string{"deploy/app.yaml": rolled})
	clone.Push()

	res := run("6.5.0", "1.2.0")
	if len(res.Holds) != 1 {
		t.Fatalf("holds %+v, want the rollback", res.Holds)
	}
	h := res.Holds[0]
	want := Hold{HoldKey: writeback.HoldKey{Path: "deploy/app.yaml", Setter: "apps:podinfo", Commit: hand}, Line: 10,
		Value: "ghcr.io/stefanprodan/podinfo:6.4.0", From: "ghcr.io/stefanprodan/podinfo:6.5.0",
		Want: "ghcr.io/stefanprodan/podinfo:6.5.0", Author: "test <test@example.com>"}
	h.Since = want.Since
	if h != want {
		t.Errorf("hold\n%+v\nwant\n%+v", h, want)
	}
	got := file()
	if !strings.Contains(got, "podinfo:6.4.0") || !strings.Contains(got, "sidecar:1.2.0") {
		t.Errorf("after the rollback, the file is\n%s\nwant podinfo held at 6.4.0 and the sidecar at 1.2.0", got)
	}

	// Released, the value follows the policy again, and nothing is held.
	if res := run("6.5.0", "1.2.0", want.HoldKey); res.Commit == "" || len(res.Holds) != 0 {
		t.Fatalf("released: commit %q, holds %+v; want a commit and no hold", res.Commit, res.Holds)
	}
	if got := file(); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("after the release, the file is\n%s\nwant podinfo at 6.5.0", got)
	}
}

// An image in an Argo CD override file that a person rolled back by hand
// is left as a marked value is, for Kustomize and Helm sources alike: the
// job blames its line, reports the hold with image references, writes the
// other images of the file, and writes it again once released.
func TestRunLeavesAHandRollbackInAnOverrideFile(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "argo", map[string]string{
		"apps/web/kustomization.yaml": "resources: []\n",
		"apps/api/values.yaml":        "image: {}\n",
	})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	web, api := "apps/web/.argocd-source-web.yaml", "apps/api/.argocd-source-api.yaml"
	run := func(podinfo, sidecar string, released ...writeback.HoldKey) Result {
		t.Helper()
		res, err := e.Run(context.Background(), plan(srv.RepoURL("argo"), func(p *writeback.Plan) {
			p.Path = "apps"
			p.Update.Images = map[string]meta.ImageRef{
				"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: podinfo},
				"apps:sidecar": {Name: "ghcr.io/example/sidecar", Tag: sidecar},
			}
			p.Update.ArgoCD = []writeback.ArgoCDOverride{
				{File: web, Type: "Kustomize", Images: []writeback.ArgoCDImage{{Policy: "apps:podinfo", ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "podinfo"}}, {Policy: "apps:sidecar"}}},
				{File: api, Type: "Helm", Images: []writeback.ArgoCDImage{{Policy: "apps:podinfo"}}},
			}
			p.Update.Holds = &writeback.Holds{Released: released}
		}))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	file := func(f string) string {
		t.Helper()
		testgit.Git(t, clone.Dir, "pull", "-q", "origin", "main")
		b, err := os.ReadFile(filepath.Join(clone.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if res := run("6.5.0", "1.1.0"); res.Commit == "" || len(res.Holds) != 0 {
		t.Fatalf("first run: commit %q, holds %+v; want a commit and no hold", res.Commit, res.Holds)
	}
	// A person rolls podinfo back in both files.
	hand := clone.Commit("roll podinfo back", map[string]string{
		web: strings.Replace(file(web), "podinfo:6.5.0", "podinfo:6.4.0", 1),
		api: strings.Replace(file(api), "value: 6.5.0", "value: 6.4.0", 1),
	})
	clone.Push()

	res := run("6.5.0", "1.2.0")
	if len(res.Holds) != 2 {
		t.Fatalf("holds %+v, want the rollback in both files", res.Holds)
	}
	for i, want := range []Hold{
		{HoldKey: writeback.HoldKey{Path: api, Setter: "apps:podinfo", Commit: hand}, Line: 7},
		{HoldKey: writeback.HoldKey{Path: web, Setter: "apps:podinfo", Commit: hand}, Line: 3},
	} {
		h := res.Holds[i]
		want.Value, want.From, want.Want = "ghcr.io/stefanprodan/podinfo:6.4.0", "ghcr.io/stefanprodan/podinfo:6.5.0", "ghcr.io/stefanprodan/podinfo:6.5.0"
		want.Author, want.Since = "test <test@example.com>", h.Since
		if h != want {
			t.Errorf("hold\n%+v\nwant\n%+v", h, want)
		}
	}
	if got := file(web); !strings.Contains(got, "podinfo=ghcr.io/stefanprodan/podinfo:6.4.0") || !strings.Contains(got, "sidecar:1.2.0") {
		t.Errorf("web's file:\n%s\nwant podinfo held at 6.4.0 and the sidecar at 1.2.0", got)
	}
	if got := file(api); !strings.Contains(got, "value: 6.4.0") {
		t.Errorf("api's file:\n%s\nwant podinfo held at 6.4.0", got)
	}

	// Released, both follow the policy again.
	if res := run("6.5.0", "1.2.0", res.Holds[0].HoldKey, res.Holds[1].HoldKey); res.Commit == "" || len(res.Holds) != 0 {
		t.Fatalf("released: commit %q, holds %+v; want a commit and no hold", res.Commit, res.Holds)
	}
	if !strings.Contains(file(web), "podinfo:6.5.0") || !strings.Contains(file(api), "value: 6.5.0") {
		t.Errorf("after the release:\n%s\n%s", file(web), file(api))
	}
}

// A person's hold of one member of a promotion group holds the group: the
// other member's new value, promoted with it from the same upstream
// commit, is left as well and reported as held with the member; released,
// both move in one commit.
func TestAHoldOfOneGroupMemberHoldsTheGroup(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "held", map[string]string{"deploy/app.yaml": twoContainers})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	group := map[string]string{"apps:podinfo": "dev@main@sha1:aaaa", "apps:sidecar": "dev@main@sha1:aaaa"}
	run := func(podinfo, sidecar string, groups map[string]string, released ...writeback.HoldKey) Result {
		t.Helper()
		res, err := e.Run(context.Background(), plan(srv.RepoURL("held"), func(p *writeback.Plan) {
			p.Path = "deploy"
			p.Update.Images = map[string]meta.ImageRef{
				"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: podinfo},
				"apps:sidecar": {Name: "ghcr.io/example/sidecar", Tag: sidecar},
			}
			p.Update.Holds = &writeback.Holds{Released: released}
			p.Update.Groups = groups
		}))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	file := func() string {
		t.Helper()
		testgit.Git(t, clone.Dir, "pull", "-q", "origin", "main")
		b, err := os.ReadFile(filepath.Join(clone.Dir, "deploy/app.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if res := run("6.5.0", "1.1.0", nil); res.Commit == "" {
		t.Fatal("the first run committed nothing")
	}
	hand := clone.Commit("roll podinfo back", map[string]string{"deploy/app.yaml": strings.Replace(file(), "podinfo:6.5.0", "podinfo:6.4.0", 1)})
	clone.Push()

	res := run("6.6.0", "1.2.0", group)
	if res.Commit != "" {
		t.Errorf("a run with every member of the group held committed %s:\n%s", res.Commit, file())
	}
	if len(res.Holds) != 2 {
		t.Fatalf("holds %+v, want podinfo's and the sidecar's with it", res.Holds)
	}
	if h := res.Holds[0]; h.Setter != "apps:podinfo" || h.Commit != hand || h.HeldWith != "" {
		t.Errorf("first hold %+v, want podinfo's, by the hand commit", h)
	}
	want := Hold{HoldKey: writeback.HoldKey{Path: "deploy/app.yaml", Setter: "apps:sidecar"}, Line: 12,
		Value: "ghcr.io/example/sidecar:1.1.0", Want: "ghcr.io/example/sidecar:1.2.0", HeldWith: "apps:podinfo"}
	if h := res.Holds[1]; h != want {
		t.Errorf("second hold\n%+v\nwant\n%+v", h, want)
	}
	if got := file(); !strings.Contains(got, "podinfo:6.4.0") || !strings.Contains(got, "sidecar:1.1.0") {
		t.Errorf("the file is\n%s\nwant both left", got)
	}

	// Released, the group moves in one commit.
	res = run("6.6.0", "1.2.0", group, res.Holds[0].HoldKey)
	if got := file(); res.Commit == "" || len(res.Holds) != 0 || !strings.Contains(got, "podinfo:6.6.0") || !strings.Contains(got, "sidecar:1.2.0") {
		t.Errorf("released: commit %q, holds %+v, file\n%s", res.Commit, res.Holds, got)
	}
}
