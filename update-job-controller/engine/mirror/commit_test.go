package mirror

import (
	"bytes"
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

// checkout fetches the fleet repository and checks main out into a new dir.
func checkout(t *testing.T, srv *testgit.Server) (*Mirror, func(), string, string) {
	t.Helper()
	cache, _ := NewCache(t.TempDir())
	m, release, head := fetched(t, cache, srv)
	dir := filepath.Join(t.TempDir(), "work")
	if err := m.Checkout(head, dir); err != nil {
		t.Fatal(err)
	}
	return m, release, head.String(), dir
}

// fetched opens the fleet repository's mirror in cache, fetches it and
// resolves main.
func fetched(t *testing.T, cache *Cache, srv *testgit.Server) (*Mirror, func(), Hash) {
	t.Helper()
	m, release, err := cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Fetch(context.Background(), nil); err != nil {
		release()
		t.Fatal(err)
	}
	head, _, err := m.Resolve(writeback.Ref{Branch: "main"})
	if err != nil {
		release()
		t.Fatal(err)
	}
	return m, release, head
}

// keepForGit writes commit's objects (what it adds to parent) into the
// mirror as a push that landed does (keep), for the git CLI to read them:
// a job's objects are in memory until then (inMemory).
func keepForGit(t *testing.T, m *Mirror, commit Hash, parent string) {
	t.Helper()
	var pack bytes.Buffer
	if err := m.pack(&pack, commit.oid(), git.Refs{"refs/heads/main": parent}); err != nil {
		t.Fatal(err)
	}
	if err := m.keep(pack.Bytes()); err != nil {
		t.Fatal(err)
	}
}

func info(msg string) CommitInfo {
	return CommitInfo{Author: Author{"bot", "bot@example.com"}, Message: msg}
}

func remoteFile(t *testing.T, srv *testgit.Server, branch, path string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	testgit.Git(t, "", "clone", "-q", "--branch", branch, srv.RepoURL("fleet"), dir)
	b, _ := os.ReadFile(filepath.Join(dir, path))
	return strings.TrimSpace(testgit.Git(t, dir, "log", "--format=%H %P %an <%ae> %s", "-1")), string(b)
}

func TestCommitAndPush(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n", "apps/keep.yaml": "k: v\n"})
	m, release, parent, dir := checkout(t, srv)
	defer release()

	if _, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("noop")); !errors.Is(err, ErrNoChange) {
		t.Fatalf("unchanged file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("Update images"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Push(ctx, nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		t.Fatal(err)
	}
	log, content := remoteFile(t, srv, "main", "apps/app.yaml")
	if log != commit.String()+" "+parent+" bot <bot@example.com> Update images" || content != "image: a:2\n" {
		t.Errorf("remote main: %q, %q", log, content)
	}

	// Another branch is force-pushed as checkout + our commit.
	if err := m.Push(ctx, nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/auto", Force: true}}); err != nil {
		t.Fatal(err)
	}
	if log, _ := remoteFile(t, srv, "auto", "apps/app.yaml"); !strings.HasPrefix(log, commit.String()) {
		t.Errorf("remote auto: %q", log)
	}
	// An author without a name commits under the email: git refuses an
	// empty name, and the API allows one.
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unnamed := CommitInfo{Author: Author{Email: "bot@example.com"}, Message: "Unnamed"}
	if commit, err = m.Commit(commit, dir, []string{"apps/app.yaml"}, unnamed); err != nil {
		t.Fatalf("commit by an author without a name: %v", err)
	}
	if err := m.Push(ctx, nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/unnamed", Force: true}}); err != nil {
		t.Fatal(err)
	}
	if log, _ := remoteFile(t, srv, "unnamed", "apps/app.yaml"); !strings.HasSuffix(log, " bot@example.com <bot@example.com> Unnamed") {
		t.Errorf("remote unnamed: %q", log)
	}
}

func TestPushSeveralRefs(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	work := srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	// The push branch exists with unrelated history: only Force replaces it.
	testgit.Git(t, work.Dir, "checkout", "-q", "--orphan", "auto")
	work.Commit("unrelated", map[string]string{"x.yaml": "x: 1\n"})
	work.Push("auto")
	m, release, parent, dir := checkout(t, srv)
	defer release()
	_ = os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644)
	commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("ours"))
	if err != nil {
		t.Fatal(err)
	}
	before := srv.Requests()
	refs := []writeback.RefUpdate{{Dst: "refs/heads/main"}, {Dst: "refs/heads/auto", Force: true}, {Dst: "refs/heads/new"}}
	if err := m.Push(context.Background(), nil, commit, refs); err != nil {
		t.Fatal(err)
	}
	// One push: the ref advertisement and one receive-pack request.
	if n := srv.Requests() - before; n != 2 {
		t.Errorf("%d requests for one push", n)
	}
	for _, r := range refs {
		if got := strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", r.Dst)); got != commit.String() {
			t.Errorf("%s is %s, want %s", r.Dst, got, commit)
		}
	}

	for _, bad := range []string{"main", "refs/heads/a..b", ""} {
		if err := m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: bad}}); err == nil {
			t.Errorf("pushed to %q", bad)
		}
	}
	if err := m.Push(context.Background(), nil, commit, nil); err == nil {
		t.Error("a push of no refs succeeded")
	}
}

func TestPushRejectedByTheServerNamesTheRef(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	// The update hook runs once per ref: it refuses one and lets the other
	// through.
	hook := filepath.Join(srv.BarePath("fleet"), "hooks", "update")
	script := "#!/bin/sh\n[ \"$1\" = refs/heads/protected ] && { echo protected >&2; exit 1; }\nexit 0\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m, release, parent, dir := checkout(t, srv)
	defer release()
	_ = os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644)
	commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("ours"))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}, {Dst: "refs/heads/protected"}})
	if err == nil || errors.Is(err, ErrNonFastForward) || !strings.Contains(err.Error(), "refs/heads/protected: ") {
		t.Fatalf("want an error naming refs/heads/protected, got %v", err)
	}
	t.Log(err)
	if got := strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main")); got != commit.String() {
		t.Errorf("main is %s, want %s", got, commit)
	}
}

func TestPushRejectsNonFastForward(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	work := srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	m, release, parent, dir := checkout(t, srv)
	defer release()

	// Someone else pushes between our fetch and our push.
	theirs := work.Commit("theirs", map[string]string{"other.yaml": "x: 1\n"})
	work.Push()

	_ = os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644)
	commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("ours"))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}, {Dst: "refs/heads/auto", Force: true}})
	if !errors.Is(err, ErrNonFastForward) {
		t.Fatalf("want ErrNonFastForward, got %v", err)
	}
	if log, _ := remoteFile(t, srv, "main", "other.yaml"); !strings.HasPrefix(log, theirs) {
		t.Errorf("their commit was lost: remote main is %q", log)
	}
	// Nothing was pushed, not even the forced ref.
	if out := testgit.Git(t, srv.BarePath("fleet"), "branch", "--list", "auto"); out != "" {
		t.Errorf("auto was pushed: %q", out)
	}

	// Once the mirror has their commit, a push on top of it goes through.
	if err := m.Fetch(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ours, err := m.Commit(mustOid(t, theirs), dir, []string{"apps/app.yaml"}, info("ours again"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Push(context.Background(), nil, ours, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		t.Fatal(err)
	}
	if log, _ := remoteFile(t, srv, "main", "other.yaml"); !strings.HasPrefix(log, ours.String()+" "+theirs) {
		t.Errorf("remote main is %q, want ours on theirs", log)
	}
}

func TestCommitRefusesPathsOutsideTheWorkTree(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	m, release, parent, dir := checkout(t, srv)
	defer release()
	if _, err := m.Commit(mustOid(t, parent), dir, []string{"../escape.yaml"}, info("x")); err == nil {
		t.Error("committed a path outside the work tree")
	}
}

// TestPushRefusedByHookSaysWhy proves that a push a server hook refuses
// (a protected branch) fails with the hook's own words, which reach the
// server's client only as sideband messages; tests/faults
// TestGitServerFaults found them missing from the job's condition.
func TestPushRefusedByHookSaysWhy(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	hook := filepath.Join(srv.BarePath("fleet"), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'protected branch: main needs a review' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, release, parent, dir := checkout(t, srv)
	defer release()
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, info("Update images"))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}})
	if err == nil || !strings.Contains(err.Error(), "declined") || !strings.Contains(err.Error(), "protected branch: main needs a review") {
		t.Fatalf("err = %v, want the refusal with the hook's message", err)
	}
}
