package mirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

func TestMirrorFetchResolveCheckout(t *testing.T) {
	srv := testgit.New(t, testgit.Options{Username: "bot", Password: "pw"})
	work := srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n", "README.md": "x\n"})
	testgit.Git(t, work.Dir, "tag", "v1.0.0")
	second := work.Commit("second", map[string]string{"apps/app.yaml": "image: a:2\n"})
	testgit.Git(t, work.Dir, "tag", "v1.1.0")
	work.Push("main", "--tags")

	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := &git.Auth{Username: "bot", Password: "pw"}
	m, release, err := cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Fetch(ctx, auth); err != nil {
		t.Fatal(err)
	}
	first := srv.BytesOut.Load()

	tests := []struct {
		ref      writeback.Ref
		revision string
		content  string
	}{
		{writeback.Ref{Branch: "main"}, "main@sha1:" + second, "image: a:2\n"},
		{writeback.Ref{Tag: "v1.0.0"}, "v1.0.0@sha1:", "image: a:1\n"},
		{writeback.Ref{SemVer: "~1.0"}, "v1.0.0@sha1:", "image: a:1\n"},
		{writeback.Ref{SemVer: ">=1.0.0"}, "v1.1.0@sha1:" + second, "image: a:2\n"},
		{writeback.Ref{Branch: "main", Commit: second[:10]}, "main@sha1:" + second, "image: a:2\n"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.ref), func(t *testing.T) {
			id, rev, err := m.Resolve(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(rev, tt.revision) {
				t.Errorf("revision %q, want prefix %q", rev, tt.revision)
			}
			dir := filepath.Join(t.TempDir(), "work")
			if err := m.Checkout(id, dir); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "apps/app.yaml"))
			if err != nil || string(b) != tt.content {
				t.Errorf("apps/app.yaml = %q, %v", b, err)
			}
		})
	}
	if _, _, err := m.Resolve(writeback.Ref{Branch: "nope"}); err == nil {
		t.Error("a missing branch resolved")
	}
	release()

	// The next job fetches only what is new.
	third := work.Commit("third", map[string]string{"apps/other.yaml": "image: b:1\n"})
	work.Push()
	m, release, err = cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	before := srv.BytesOut.Load()
	if err := m.Fetch(ctx, auth); err != nil {
		t.Fatal(err)
	}
	if incremental := srv.BytesOut.Load() - before; incremental >= first {
		t.Errorf("second fetch sent %d bytes, the first %d", incremental, first)
	}
	if id, _, err := m.Resolve(writeback.Ref{Branch: "main"}); err != nil || id.String() != third {
		t.Errorf("main is %v after the fetch, want %s (%v)", id, third, err)
	}
}

func TestRefusedCredentialsFailOnce(t *testing.T) {
	basic := testgit.New(t, testgit.Options{Username: "bot", Password: "pw"})
	bearer := testgit.New(t, testgit.Options{TLS: true, BearerToken: "tok"})
	tests := []struct {
		name        string
		srv         *testgit.Server
		right, auth *git.Auth
	}{
		{"no credentials", basic, &git.Auth{Username: "bot", Password: "pw"}, nil},
		{"wrong password", basic, &git.Auth{Username: "bot", Password: "pw"}, &git.Auth{Username: "bot", Password: "wrong-secret"}},
		{"wrong bearer token", bearer, &git.Auth{BearerToken: "tok", CAPEM: bearer.CAPEM}, &git.Auth{BearerToken: "wrong-secret", CAPEM: bearer.CAPEM}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
			t.Cleanup(func() { _ = os.RemoveAll(tt.srv.BarePath("fleet")) })
			cache, _ := NewCache(t.TempDir())
			m, release, err := cache.Open(tt.srv.RepoURL("fleet"))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			check := func(op string, err error, requests int64) {
				t.Helper()
				if !errors.Is(err, git.ErrAuthentication) {
					t.Fatalf("%s: want git.ErrAuthentication, got %v", op, err)
				}
				if strings.Contains(err.Error(), "wrong-secret") {
					t.Errorf("%s: the error quotes the secret: %v", op, err)
				}
				// libgit2 asks for credentials again and again unless told
				// to stop.
				if requests > 4 {
					t.Errorf("%s: %d requests with refused credentials", op, requests)
				}
			}
			before := tt.srv.Requests()
			err = m.Fetch(context.Background(), tt.auth)
			check("fetch", err, tt.srv.Requests()-before)

			if err := m.Fetch(context.Background(), tt.right); err != nil {
				t.Fatal(err)
			}
			head, _, _ := m.Resolve(writeback.Ref{Branch: "main"})
			before = tt.srv.Requests()
			err = m.Push(context.Background(), tt.auth, head, []writeback.RefUpdate{{Dst: "refs/heads/copy"}})
			check("push", err, tt.srv.Requests()-before)
		})
	}
}

func TestFetchHonoursContext(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	cache, _ := NewCache(t.TempDir())
	m, release, _ := cache.Open(srv.RepoURL("fleet"))
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Fetch(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("fetch with a cancelled context: %v", err)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	cache, _ := NewCache(dir)
	m, release, _ := cache.Open("https://example.com/old.git")
	old := time.Now().Add(-48 * time.Hour)
	release()
	_ = os.Chtimes(m.Path, old, old)
	busy, releaseBusy, _ := cache.Open("https://example.com/busy.git")
	_ = os.Chtimes(busy.Path, old, old)
	if err := cache.Prune(24 * time.Hour); err != nil {
		t.Fatal(err)
	}
	releaseBusy()
	if _, err := os.Stat(m.Path); !os.IsNotExist(err) {
		t.Error("an unused old mirror survived")
	}
	if _, err := os.Stat(busy.Path); err != nil {
		t.Error("a mirror in use was pruned")
	}
}

func mustOid(t *testing.T, s string) Hash {
	t.Helper()
	id, err := ParseHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSparseCheckout(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{
		"README.md":                   "x\n",
		"clusters/prod/app.yaml":      "image: a:1\n",
		"clusters/prod/db/db.yaml":    "image: d:1\n",
		"clusters/prod-eu/app.yaml":   "image: a:1\n",
		"clusters/staging/app.yaml":   "image: a:1\n",
		"clusters/[abc]/glob.yaml":    "image: g:1\n",
		"clusters/a/not-a-match.yaml": "image: n:1\n",
	})
	m, release, head, _ := checkout(t, srv)
	defer release()

	tests := []struct {
		paths   []string
		want    []string
		wantErr bool
	}{
		{paths: []string{"./clusters/prod/"}, want: []string{"clusters/prod/app.yaml", "clusters/prod/db/db.yaml"}},
		{paths: []string{"/clusters/prod"}, want: []string{"clusters/prod/app.yaml", "clusters/prod/db/db.yaml"}},
		{paths: []string{"clusters/staging", "README.md"}, want: []string{"README.md", "clusters/staging/app.yaml"}},
		// Paths are literal, not globs.
		{paths: []string{"clusters/[abc]"}, want: []string{"clusters/[abc]/glob.yaml"}},
		{paths: []string{"clusters/none"}, want: nil},
		{paths: []string{"."}, want: []string{"README.md", "clusters/[abc]/glob.yaml", "clusters/a/not-a-match.yaml",
			"clusters/prod-eu/app.yaml", "clusters/prod/app.yaml", "clusters/prod/db/db.yaml", "clusters/staging/app.yaml"}},
		{paths: []string{"../outside"}, wantErr: true},
		{paths: []string{"clusters/../../outside"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.paths, ","), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "work")
			err := m.Checkout(mustOid(t, head), dir, tt.paths...)
			if tt.wantErr {
				if err == nil {
					t.Error("checked out a path outside the repository")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					got = append(got, filepath.ToSlash(rel))
				}
				return err
			})
			sort.Strings(got)
			sort.Strings(tt.want)
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("files %q, want %q", got, tt.want)
			}
		})
	}
}

// The work tree keeps executables and symbolic links as git has them; a
// link pointing out of the repository is written as a link, never
// followed.
func TestCheckoutModesAndLinks(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n", "run.sh": "#!/bin/sh\n"})
	if err := os.Chmod(filepath.Join(clone.Dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"apps/current.yaml": "app.yaml", "apps/escape": "/etc"} {
		if err := os.Symlink(target, filepath.Join(clone.Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	testgit.Git(t, clone.Dir, "add", "-A")
	testgit.Git(t, clone.Dir, "commit", "-q", "-m", "modes")
	clone.Push()
	_, release, _, dir := checkout(t, srv)
	defer release()
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh: %v %v, want executable", fi, err)
	}
	for name, target := range map[string]string{"apps/current.yaml": "app.yaml", "apps/escape": "/etc"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want a link to %q", name, got, err, target)
		}
	}
}

// TestOpenDropsPushRefsAndHolds proves two things tests/faults'
// TestKillUpdateJobController relies on: a push ref a killed runner left in
// the mirror is gone when the mirror is next opened, and Holds tells a
// commit on a branch (the head or an ancestor) from one that is not.
func TestOpenDropsPushRefsAndHolds(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	work := srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	first := strings.TrimSpace(testgit.Git(t, work.Dir, "rev-parse", "HEAD"))
	second := work.Commit("second", map[string]string{"a.yaml": "a: 2\n"})
	work.Push("main")
	testgit.Git(t, work.Dir, "checkout", "-q", "-b", "side", first)
	other := work.Commit("elsewhere", map[string]string{"a.yaml": "a: 3\n"})
	work.Push("side")

	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, release, err := cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Fetch(context.Background(), &git.Auth{}); err != nil {
		t.Fatal(err)
	}
	// What a kill -9 during Push leaves behind.
	if _, err := m.repo.References.Create(pushRefPrefix+second, mustOid(t, second).oid(), true, "test"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		commit string
		want   bool
	}{{second, true}, {first, true}, {other, false}, {"not-a-commit", false}} {
		if _, got := m.Holds("refs/heads/main", tt.commit); got != tt.want {
			t.Errorf("Holds(main, %s) = %v, want %v", tt.commit, got, tt.want)
		}
	}
	release()

	m, release, err = cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := m.repo.References.Lookup(pushRefPrefix + second); err == nil {
		t.Error("the push ref left by a killed runner survived Open")
	}
}

// A filter's answers are kept with the Cache: a later checkout (another
// job, the mirror opened again) reads no blob again and writes the same
// files. A changed file is a new blob, asked again.
func TestFilterAnswersAreKeptPerBlob(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "fleet", map[string]string{
		"apps/a.yaml": "image: a:1 # marker\n", "apps/b.yaml": "image: b:1\n", "apps/c.yaml": "image: c:1\n"})
	cache, _ := NewCache(t.TempDir())
	var asked []string
	filter := Filter{Name: "markers", Keep: func(b []byte) bool {
		asked = append(asked, string(b))
		return strings.Contains(string(b), "marker")
	}}
	checkoutOnce := func() []string {
		t.Helper()
		m, release, head := fetched(t, cache, srv)
		defer release()
		dir := filepath.Join(t.TempDir(), "work")
		asked = nil
		if err := m.CheckoutFiltered(head, dir, filter, "apps"); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "apps"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if got := checkoutOnce(); len(got) != 1 || got[0] != "a.yaml" || len(asked) != 3 {
		t.Fatalf("first checkout wrote %v, asked %d times; want a.yaml, 3", got, len(asked))
	}
	if got := checkoutOnce(); len(got) != 1 || got[0] != "a.yaml" || len(asked) != 0 {
		t.Fatalf("second checkout wrote %v, asked %q; want a.yaml, nothing asked again", got, asked)
	}
	if err := os.WriteFile(filepath.Join(clone.Dir, "apps/b.yaml"), []byte("image: b:2 # marker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testgit.Git(t, clone.Dir, "commit", "-qam", "b gets a marker")
	clone.Push()
	if got := checkoutOnce(); len(got) != 2 || len(asked) != 1 {
		t.Fatalf("after b changed: wrote %v, asked %q; want a.yaml and b.yaml, b's new blob asked", got, asked)
	}
}
