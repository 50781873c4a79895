package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
`

func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// bareRepository is a bare repository on disk with the manifest on main.
func bareRepository(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	work, bare := filepath.Join(root, "work"), filepath.Join(root, "team", "fleet.git")
	if err := os.MkdirAll(filepath.Join(work, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "deploy", "app.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCLI(t, root, "init", "-q", "--bare", "--initial-branch=main", bare)
	gitCLI(t, work, "init", "-q", "--initial-branch=main")
	gitCLI(t, work, "add", "-A")
	gitCLI(t, work, "-c", "user.name=someone", "-c", "user.email=someone@example.com", "commit", "-q", "-m", "initial")
	gitCLI(t, work, "push", "-q", bare, "main")
	return bare
}

// The program updates main of a repository on disk, with its hook's
// trailer in the message; a second run has nothing to change.
func TestPushesToMain(t *testing.T) {
	bare := bareRepository(t)
	args := []string{"-repository", "file://" + bare, "-policy", "apps:podinfo", "-image", "ghcr.io/stefanprodan/podinfo:6.5.0", "-cache", t.TempDir()}
	var out bytes.Buffer
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0") || !strings.Contains(out.String(), "pushed ") {
		t.Errorf("output:\n%s", out.String())
	}
	if got := gitCLI(t, bare, "show", "main:deploy/app.yaml"); !strings.Contains(got, "podinfo:6.5.0 # {\"$imagepolicy\": \"apps:podinfo\"}") {
		t.Errorf("main's manifest:\n%s", got)
	}
	if msg := gitCLI(t, bare, "log", "-1", "--format=%an%n%B", "main"); !strings.HasPrefix(msg, "embed-engine\n") || !strings.Contains(msg, "Changed-by: embed-engine") {
		t.Errorf("the commit's author and message:\n%s", msg)
	}
	out.Reset()
	if err := run(context.Background(), args, &out); err != nil || out.String() != "nothing to change\n" {
		t.Errorf("second run: %q, %v", out.String(), err)
	}
}

// With -review, the change goes to a head branch and a request of the
// program's own forge, kept in the directory; main does not move.
func TestProposesThroughItsOwnForge(t *testing.T) {
	bare := bareRepository(t)
	main := gitCLI(t, bare, "rev-parse", "main")
	reviews := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), []string{"-repository", "file://" + bare, "-policy", "apps:podinfo",
		"-image", "ghcr.io/stefanprodan/podinfo:6.5.0", "-review", reviews, "-cache", t.TempDir()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "review request 1 (opened)") {
		t.Errorf("output:\n%s", out.String())
	}
	if gitCLI(t, bare, "rev-parse", "main") != main {
		t.Error("main moved")
	}
	head := strings.TrimSpace(gitCLI(t, bare, "rev-parse", "embed-engine/apps-podinfo"))
	b, err := os.ReadFile(filepath.Join(reviews, "team", "fleet", "1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r forge.Request
	if err := json.Unmarshal(b, &r); err != nil || r.State != forge.Open || r.Head != "embed-engine/apps-podinfo" || r.Base != "main" || r.Title == "" {
		t.Errorf("the request %s: %+v, %v", b, r, err)
	}
	if got := gitCLI(t, bare, "show", head+":deploy/app.yaml"); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("the head branch's manifest:\n%s", got)
	}
}
