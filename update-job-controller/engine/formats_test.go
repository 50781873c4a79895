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

const (
	dockerfile = "FROM golang:1.26 AS build\nRUN go build -o /app .\n# {\"$imagepolicy\": \"apps:base\"}\nFROM ghcr.io/acme/base:1.0.0\nCOPY --from=build /app /app\n"
	dotenv     = "PORT=8080\nAPP_IMAGE=ghcr.io/acme/app:1.0.0 # {\"$imagepolicy\": \"apps:app\"}\n"
)

// A Dockerfile's FROM and a .env value are committed and pushed like
// YAML's, with their changes in the result; a person's rollback of the
// Dockerfile's image is then held, as a YAML value's is, while the .env
// value goes on updating.
func TestRunUpdatesDockerfilesAndDotenvFiles(t *testing.T) {
	run, read, clone := formatsRepo(t, map[string]string{"app/Dockerfile": dockerfile, "app/.env": dotenv}, nil)
	res := run(map[string]string{"apps:base": "1.1.0", "apps:app": "1.1.0"})
	if res.Commit == "" || len(res.Changes.Files) != 2 {
		t.Fatalf("first run: commit %q, files %+v", res.Commit, res.Changes.Files)
	}
	if got, want := read("Dockerfile"), strings.Replace(dockerfile, "base:1.0.0", "base:1.1.0", 1); got != want {
		t.Errorf("Dockerfile:\n%s\nwant:\n%s", got, want)
	}
	if got := read(".env"); got != strings.Replace(dotenv, "app:1.0.0", "app:1.1.0", 1) {
		t.Errorf(".env:\n%s", got)
	}
	for _, f := range res.Changes.Files {
		if len(f.Objects) != 1 || len(f.Objects[0].Changes) != 1 || (f.Objects[0].Kind != "Dockerfile" && f.Objects[0].Kind != "dotenv") {
			t.Errorf("result of %s: %+v", f.Path, f.Objects)
		}
	}

	rolled := strings.Replace(read("Dockerfile"), "base:1.1.0", "base:1.0.0", 1)
	hand := clone.Commit("roll the base image back", map[string]string{"app/Dockerfile": rolled})
	clone.Push()
	res = run(map[string]string{"apps:base": "1.1.0", "apps:app": "1.2.0"})
	if len(res.Holds) != 1 || res.Holds[0].Path != "app/Dockerfile" || res.Holds[0].Commit != hand || res.Holds[0].Line != 4 ||
		res.Holds[0].Value != "ghcr.io/acme/base:1.0.0" {
		t.Fatalf("holds %+v, want the Dockerfile's rollback at line 4", res.Holds)
	}
	if got := read("Dockerfile"); got != rolled {
		t.Errorf("the held Dockerfile was rewritten:\n%s", got)
	}
	if got := read(".env"); !strings.Contains(got, "ghcr.io/acme/app:1.2.0") {
		t.Errorf(".env not updated beside the hold:\n%s", got)
	}
}

const taskDefinition = `{
  "family": "app",
  "containerDefinitions": [
    {"name": "app", "image": "ghcr.io/acme/app:1.0.0", "essential": true}
  ]
}
`

// One commit changes a Dockerfile's FROM (by its marker) and an ECS task
// definition's image (named by update.files, as JSON has no comments);
// the JSON file is checked out though it holds no marker, and a person's
// rollback of its image is then held as a marked value's is.
func TestRunUpdatesADockerfileAndATaskDefinitionInOneCommit(t *testing.T) {
	files := []meta.FileUpdate{{Path: "task.json", Pointer: "/containerDefinitions/0/image", Policy: "apps:app"}}
	run, read, clone := formatsRepo(t, map[string]string{"app/Dockerfile": dockerfile, "app/task.json": taskDefinition}, files)
	res := run(map[string]string{"apps:base": "1.1.0", "apps:app": "1.1.0"})
	if res.Commit == "" || len(res.Changes.Files) != 2 || len(res.Problems) != 0 {
		t.Fatalf("commit %q, files %+v, problems %v", res.Commit, res.Changes.Files, res.Problems)
	}
	if got := read("task.json"); got != strings.Replace(taskDefinition, "app:1.0.0", "app:1.1.0", 1) {
		t.Errorf("task.json:\n%s", got)
	}
	if got := read("Dockerfile"); !strings.Contains(got, "FROM ghcr.io/acme/base:1.1.0\n") {
		t.Errorf("Dockerfile:\n%s", got)
	}
	if files := testgit.Git(t, clone.Dir, "show", "--name-only", "--format=", res.Commit); files != "app/Dockerfile\napp/task.json\n" {
		t.Errorf("commit %s changed %q, want the Dockerfile and the task definition", res.Commit, files)
	}

	rolled := strings.Replace(read("task.json"), "app:1.1.0", "app:1.0.0", 1)
	hand := clone.Commit("roll the task's image back", map[string]string{"app/task.json": rolled})
	clone.Push()
	res = run(map[string]string{"apps:base": "1.2.0", "apps:app": "1.2.0"})
	if len(res.Holds) != 1 || res.Holds[0].Path != "app/task.json" || res.Holds[0].Commit != hand || res.Holds[0].Line != 4 {
		t.Fatalf("holds %+v, want the task definition's rollback", res.Holds)
	}
	if got := read("task.json"); got != rolled {
		t.Errorf("the held task definition was rewritten:\n%s", got)
	}
	if got := read("Dockerfile"); !strings.Contains(got, "FROM ghcr.io/acme/base:1.2.0\n") {
		t.Errorf("the Dockerfile was not updated beside the hold:\n%s", got)
	}
}

// formatsRepo is a repository of files under app/ on a real git server,
// a run of a plan with holds that gives ghcr.io/acme/<name> its tag for
// each apps:<name> (and sets files), and a reader of app/'s files as the
// server has them.
func formatsRepo(t *testing.T, files map[string]string, named []meta.FileUpdate) (func(map[string]string) Result, func(string) string, *testgit.Clone) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "formats", files)
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	run := func(tags map[string]string) Result {
		t.Helper()
		res, err := e.Run(context.Background(), plan(srv.RepoURL("formats"), func(p *writeback.Plan) {
			p.Path = "app"
			p.Update.Images = map[string]meta.ImageRef{}
			for key, tag := range tags {
				p.Update.Images[key] = meta.ImageRef{Name: "ghcr.io/acme/" + strings.TrimPrefix(key, "apps:"), Tag: tag}
			}
			p.Update.Files = named
			p.Update.Holds = &writeback.Holds{}
		}))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	read := func(name string) string {
		t.Helper()
		testgit.Git(t, clone.Dir, "pull", "-q", "origin", "main")
		b, err := os.ReadFile(filepath.Join(clone.Dir, "app", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return run, read, clone
}
