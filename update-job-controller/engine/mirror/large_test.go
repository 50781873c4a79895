package mirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// A filtered checkout reads each blob once per filter: the next commit's
// checkout, with one file changed, reads that file alone, and still
// writes every file the filter keeps. What a job reads grows with what
// changed, not with the repository.
func TestFilteredCheckoutReadsOnlyWhatChanged(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	files := map[string]string{}
	for i := range 200 {
		// Each file its own blob: equal contents are one blob.
		body := fmt.Sprintf("kind: ConfigMap\nmetadata: {name: f-%03d}\n", i)
		if i%20 == 0 {
			body += "image: a:1 # {\"$imagepolicy\": \"ns:a\"}\n"
		}
		files[fmt.Sprintf("apps/team-%d/f-%03d.yaml", i%10, i)] = body
	}
	clone := srv.CreateRepo(t, "fleet", files)
	m, release, head, _ := checkout(t, srv)
	defer release()

	var reads atomic.Int64
	f := Filter{Name: "test", Keep: func(b []byte) bool { reads.Add(1); return strings.Contains(string(b), "$imagepolicy") }}
	written := func(commit string) []string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "work")
		if err := m.CheckoutFiltered(mustOid(t, commit), dir, f, "apps"); err != nil {
			t.Fatal(err)
		}
		var out []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				out = append(out, filepath.ToSlash(rel))
			}
			return err
		})
		return out
	}
	if got := written(head); len(got) != 10 || reads.Load() != 200 {
		t.Fatalf("first checkout: %d files written, %d blobs read; want 10 and 200", len(got), reads.Load())
	}
	reads.Store(0)
	next := clone.Commit("one more marker", map[string]string{"apps/team-3/f-003.yaml": "image: b:1 # {\"$imagepolicy\": \"ns:b\"}\n"})
	clone.Push()
	if err := m.Fetch(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if id, _, err := m.Resolve(writeback.Ref{Branch: "main"}); err != nil || id.String() != next {
		t.Fatalf("resolved %v, %v; want %s", id, err, next)
	}
	if got := written(next); len(got) != 11 || reads.Load() != 1 {
		t.Errorf("next checkout: %d files written, %d blobs read; want 11 and 1 (the changed file)", len(got), reads.Load())
	}
	// Without a name nothing is cached: a filter's verdicts are its own.
	reads.Store(0)
	f.Name = ""
	written(next)
	if reads.Load() != 200 {
		t.Errorf("an unnamed filter read %d blobs, want 200", reads.Load())
	}
}

// A commit writes the changed files, new files in new directories among
// them, into the parent's tree as git would: the tree git computes from
// the same work tree is the same tree. A file where the repository has a
// directory, or a path through a file, is refused.
func TestCommitWritesOnlyTheChangedPaths(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "fleet", map[string]string{
		"apps/a/app.yaml": "image: a:1\n", "apps/b/app.yaml": "image: b:1\n", "README.md": "x\n", "tool.sh": "#!/bin/sh\n",
	})
	testgit.Git(t, clone.Dir, "update-index", "--chmod=+x", "tool.sh")
	testgit.Git(t, clone.Dir, "commit", "-q", "-m", "exec")
	clone.Push()
	m, release, parent, dir := checkout(t, srv)
	defer release()
	write := func(p, body string) { t.Helper(); writeFile(t, dir, p, body) }
	write("apps/a/app.yaml", "image: a:2\n")
	write("apps/c/d/.argocd-source-c.yaml", "kustomize: {}\n")
	write("tool.sh", "#!/bin/sh\necho\n")
	id, err := m.Commit(mustOid(t, parent), dir, []string{"apps/a/app.yaml", "apps/c/d/.argocd-source-c.yaml", "tool.sh"}, info("change"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.repo.LookupCommit(id.oid())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	// git's own tree of the same files.
	for p, body := range map[string]string{"apps/a/app.yaml": "image: a:2\n", "apps/c/d/.argocd-source-c.yaml": "kustomize: {}\n", "tool.sh": "#!/bin/sh\necho\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(clone.Dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clone.Dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The executable keeps its mode in the commit, as in git's index.
	if err := os.Chmod(filepath.Join(clone.Dir, "tool.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	testgit.Git(t, clone.Dir, "add", "-A")
	want := strings.TrimSpace(testgit.Git(t, clone.Dir, "write-tree"))
	if got := c.TreeId().String(); got != want {
		t.Errorf("tree %s, git's %s:\n%s", got, want, testgit.Git(t, clone.Dir, "ls-tree", "-r", want))
	}

	for _, tt := range []struct{ path, want string }{
		{"apps/a", "is a directory"},
		{"README.md/x.yaml", "is a file"},
	} {
		write2 := filepath.Join(dir, tt.path)
		_ = os.RemoveAll(write2)
		_ = os.Remove(filepath.Dir(write2)) // README.md, to put a directory there
		if err := os.MkdirAll(filepath.Dir(write2), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(write2, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := m.Commit(mustOid(t, parent), dir, []string{tt.path}, info("bad"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.path, err, tt.want)
		}
	}
}

// A push sends what the commit adds to its parent, found along the
// changed paths: the objects git itself lists as new (rev-list --objects
// commit ^parent). A commit whose parent the server lacks is sent with
// its parent; a ref set to a commit the server has sends no objects.
func TestPushSendsWhatTheCommitAdds(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{
		"apps/a/app.yaml": "image: a:1\n", "apps/b/app.yaml": "image: b:1\n", "README.md": "x\n",
	})
	m, release, parent, dir := checkout(t, srv)
	defer release()
	write := func(p, body string) { t.Helper(); writeFile(t, dir, p, body) }
	write("apps/a/app.yaml", "image: a:2\n")
	write("apps/c/d/new.yaml", "image: c:1\n")
	first, err := m.Commit(mustOid(t, parent), dir, []string{"apps/a/app.yaml", "apps/c/d/new.yaml"}, info("first"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.repo.LookupCommit(first.oid())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	p, err := m.repo.LookupCommit(mustOid(t, parent).oid())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	objs, err := m.newObjects(c.TreeId(), p.TreeId())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.String())
	}
	keepForGit(t, m, first, parent)
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(testgit.Git(t, "", "--git-dir", m.Path, "rev-list", "--objects", first.String(), "^"+parent)), "\n") {
		if id, _, _ := strings.Cut(l, " "); id != first.String() {
			want = append(want, id)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	// apps/a/app.yaml and apps/c/d/new.yaml; the root, apps, apps/a,
	// apps/c and apps/c/d trees.
	if !slices.Equal(got, want) || len(got) != 7 {
		t.Errorf("new objects %v, git lists %v", got, want)
	}

	write("apps/b/app.yaml", "image: b:2\n")
	second, err := m.Commit(first, dir, []string{"apps/b/app.yaml"}, info("second"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Push(ctx, nil, second, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		t.Fatalf("pushing a commit whose parent the server lacks: %v", err)
	}
	if err := m.Push(ctx, nil, second, []writeback.RefUpdate{{Dst: "refs/heads/copy"}}); err != nil {
		t.Fatalf("pushing a commit the server has: %v", err)
	}
	for _, branch := range []string{"main", "copy"} {
		log, content := remoteFile(t, srv, branch, "apps/c/d/new.yaml")
		if !strings.HasPrefix(log, second.String()+" "+first.String()) || content != "image: c:1\n" {
			t.Errorf("remote %s: %q, %q", branch, log, content)
		}
	}
}

// writeFile writes body to dir/p, making its directories.
func writeFile(t *testing.T, dir, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
