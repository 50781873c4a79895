package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/testgit"
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
	auth := &Auth{Username: "bot", Password: "pw"}
	m, release, err := cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Fetch(ctx, auth); err != nil {
		t.Fatal(err)
	}
	first := srv.BytesOut.Load()

	tests := []struct {
		ref      Ref
		revision string
		content  string
	}{
		{Ref{Branch: "main"}, "main@sha1:" + second, "image: a:2\n"},
		{Ref{Tag: "v1.0.0"}, "v1.0.0@sha1:", "image: a:1\n"},
		{Ref{SemVer: "~1.0"}, "v1.0.0@sha1:", "image: a:1\n"},
		{Ref{SemVer: ">=1.0.0"}, "v1.1.0@sha1:" + second, "image: a:2\n"},
		{Ref{Branch: "main", Commit: second[:10]}, "main@sha1:" + second, "image: a:2\n"},
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
	if _, _, err := m.Resolve(Ref{Branch: "nope"}); err == nil {
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
	if id, _, err := m.Resolve(Ref{Branch: "main"}); err != nil || id.String() != third {
		t.Errorf("main is %v after the fetch, want %s (%v)", id, third, err)
	}
}

func TestFetchWrongPasswordFailsOnce(t *testing.T) {
	srv := testgit.New(t, testgit.Options{Username: "bot", Password: "pw"})
	srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	cache, _ := NewCache(t.TempDir())
	for _, auth := range []*Auth{nil, {Username: "bot", Password: "wrong-secret"}} {
		m, release, err := cache.Open(srv.RepoURL("fleet"))
		if err != nil {
			t.Fatal(err)
		}
		before := srv.Requests()
		err = m.Fetch(context.Background(), auth)
		release()
		if !errors.Is(err, ErrAuthentication) {
			t.Fatalf("want ErrAuthentication, got %v", err)
		}
		if strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("error leaks the password: %v", err)
		}
		// libgit2 retries refused credentials forever unless told to stop.
		if n := srv.Requests() - before; n > 4 {
			t.Errorf("%d requests for one fetch with refused credentials", n)
		}
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

func mustOid(t *testing.T, s string) *git2go.Oid {
	t.Helper()
	id, err := git2go.NewOid(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
