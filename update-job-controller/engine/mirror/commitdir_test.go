package mirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// CommitDir commits what a program left under the update path: additions,
// modifications, deletions and mode changes, reported per file; the rest
// of the repository is untouched, and an unchanged directory is no change.
func TestCommitDir(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{
		"apps/app.yaml": "image: a:1\n", "apps/gone.yaml": "x\n", "apps/run.sh": "echo\n",
		"apps/sub/keep.yaml": "k\n", "README.md": "outside\n", "appsx/other.yaml": "y\n",
	})
	m, release, parent, _ := checkout(t, srv)
	defer release()

	dir := filepath.Join(t.TempDir(), "apps")
	if err := m.Checkout(mustOid(t, parent), filepath.Join(filepath.Dir(dir)), "apps"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.CommitDir(mustOid(t, parent), "apps", dir, info("noop")); !errors.Is(err, ErrNoChange) {
		t.Fatalf("unchanged directory: %v", err)
	}
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("app.yaml", "image: a:2\n", 0o644)
	write("new.yaml", "new\n", 0o644)
	if err := os.Remove(filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/keep.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	commit, changes, err := m.CommitDir(mustOid(t, parent), "/apps/", dir, info("container"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s", c.Operation, c.Path))
	}
	want := "modified apps/app.yaml, deleted apps/gone.yaml, added apps/link.yaml, added apps/new.yaml, mode apps/run.sh"
	if strings.Join(got, ", ") != want {
		t.Errorf("changes:\n got %s\nwant %s", strings.Join(got, ", "), want)
	}
	keepForGit(t, m, commit, parent)
	tree := testgit.Git(t, m.Path, "ls-tree", "-r", commit.String())
	for _, line := range []string{"100755 blob", "120000 blob"} {
		if !strings.Contains(tree, line) {
			t.Errorf("tree lacks a %q entry:\n%s", line, tree)
		}
	}
	for _, kept := range []string{"README.md", "appsx/other.yaml", "apps/sub/keep.yaml"} {
		if !strings.Contains(tree, "\t"+kept+"\n") {
			t.Errorf("%s is missing from the commit:\n%s", kept, tree)
		}
	}
	if strings.Contains(tree, "gone.yaml") {
		t.Errorf("the deleted file is still there:\n%s", tree)
	}
}

// While a mirror yields, another job opens, fetches and releases it; the
// yielding job then commits on what it had resolved.
func TestMirrorYield(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	cache, _ := NewCache(t.TempDir())
	m, release, err := cache.Open(srv.RepoURL("fleet"))
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
	clone.Commit("more", map[string]string{"apps/other.yaml": "x\n"})
	clone.Push()
	opened := make(chan error, 1)
	err = m.Yield(func() error {
		go func() {
			other, rel, err := cache.Open(srv.RepoURL("fleet"))
			if err == nil {
				err = other.Fetch(context.Background(), nil)
				rel()
			}
			opened <- err
		}()
		select {
		case err := <-opened:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("another job could not open the mirror while it yielded")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte("image: a:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.CommitDir(head, "apps", dir, info("after yielding")); err != nil {
		t.Fatal(err)
	}
}
