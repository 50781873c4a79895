package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
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
