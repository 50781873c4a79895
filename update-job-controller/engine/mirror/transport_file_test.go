package mirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// A repository on this machine's disk (file://) is fetched and pushed by
// the same conversation as a remote one, run by git's own upload-pack and
// receive-pack: the push lands, a push from an old head is a
// non-fast-forward, and the receiving repository's hooks run.
func TestFileURLsFetchAndPush(t *testing.T) {
	repos := testgit.Repos{Root: t.TempDir()}
	repos.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	url := "file://" + repos.BarePath("fleet")
	cache, _ := NewCache(t.TempDir())
	m, release, err := cache.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := m.Fetch(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	head, _, err := m.Resolve(writeback.Ref{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "work")
	if err := m.Checkout(head, dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	commit, err := m.Commit(head, dir, []string{"apps/app.yaml"}, info("update"))
	if err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(repos.BarePath("fleet"), "hooks", "post-receive")
	ran := filepath.Join(t.TempDir(), "ran")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(testgit.Git(t, repos.BarePath("fleet"), "rev-parse", "refs/heads/main")); got != commit.String() {
		t.Errorf("main at %s, want the pushed %s", got, commit)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("the repository's post-receive hook did not run: %v", err)
	}
	// Another commit on the old head cannot move main without a force.
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stale, err := m.Commit(head, dir, []string{"apps/app.yaml"}, info("stale"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Push(context.Background(), nil, stale, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); !errors.Is(err, ErrNonFastForward) {
		t.Errorf("a push from the old head: %v, want ErrNonFastForward", err)
	}
}

// What is not a file:// URL of an absolute local path is refused before
// any process starts, as credentials that cannot work.
func TestFileURLsMustNameALocalAbsolutePath(t *testing.T) {
	for _, url := range []string{"file://relative/fleet.git", "file://otherhost/srv/fleet.git", "file:///srv/fleet.git?x=1"} {
		cache, _ := NewCache(t.TempDir())
		m, release, err := cache.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		err = m.Fetch(context.Background(), nil)
		release()
		if !errors.Is(err, git.ErrInvalidCredentials) || !strings.Contains(err.Error(), "absolute path on this machine") {
			t.Errorf("%s: %v", url, err)
		}
	}
}
