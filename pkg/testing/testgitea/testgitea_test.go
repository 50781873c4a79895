//go:build unix

package testgitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// start runs a server for one test, skipping the test only when the gitea
// binary has not been built.
func start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, err := Start(ctx, t.TempDir(), "")
	if errors.Is(err, ErrNoBinary) {
		t.Skipf("%v (a real Gitea is needed)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestServerHostsRepositoriesAndPullRequests(t *testing.T) {
	// A started Gitea answers its API with the admin's token, serves a
	// repository made by CreateRepo to a plain anonymous git clone, and
	// opens, shows, lists and merges a pull request of a pushed branch.
	s := start(t)
	ctx := testContext(t)

	var me struct {
		Login   string `json:"login"`
		IsAdmin bool   `json:"is_admin"`
	}
	if err := s.Do(ctx, http.MethodGet, "user", nil, &me); err != nil {
		t.Fatal(err)
	}
	if me.Login != s.Admin || !me.IsAdmin {
		t.Fatalf("the token is of %+v, want the admin %s", me, s.Admin)
	}
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") || !strings.HasSuffix(s.URL, "/") {
		t.Errorf("URL = %q, want http://127.0.0.1:PORT/", s.URL)
	}

	cloneURL, err := s.CreateRepo(ctx, "fleet", map[string]string{"apps/app.yaml": "image: app:1.0.0\n"})
	if err != nil {
		t.Fatal(err)
	}
	if want := s.URL + s.Admin + "/fleet.git"; cloneURL != want {
		t.Errorf("clone URL = %q, want %q", cloneURL, want)
	}

	// A clone as anyone would make it: no credentials, no configuration.
	dir := t.TempDir()
	clone := exec.CommandContext(ctx, "git", "clone", "-q", cloneURL, dir)
	clone.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}
	if out, err := clone.CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "apps", "app.yaml"))
	if err != nil || string(got) != "image: app:1.0.0\n" {
		t.Fatalf("cloned apps/app.yaml = %q, %v", got, err)
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", dir, "branch", "--show-current").Output(); err != nil || strings.TrimSpace(string(out)) != "main" {
		t.Errorf("the clone's branch is %q (%v), want main", out, err)
	}

	sha, err := s.PushBranch(ctx, "fleet", "update/app", "main", map[string]string{"apps/app.yaml": "image: app:1.1.0\n"}, "Update app to 1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var opened Pull
	err = s.Do(ctx, http.MethodPost, "repos/"+s.FullName("fleet")+"/pulls", map[string]any{
		"head": "update/app", "base": "main", "title": "Update app to 1.1.0", "body": "By the test.",
	}, &opened)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := s.GetPull(ctx, "fleet", opened.Number)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Title != "Update app to 1.1.0" || pr.Body != "By the test." || pr.State != "open" ||
		pr.Head.Ref != "update/app" || pr.Head.SHA != sha || pr.Base.Ref != "main" || pr.Merged {
		t.Errorf("read back %+v, want the open request of update/app at %s into main", pr, sha)
	}
	if !strings.HasPrefix(pr.HTMLURL, s.URL+s.Admin+"/fleet/pulls/") {
		t.Errorf("html_url = %q, want it under the server's URL", pr.HTMLURL)
	}
	open, err := s.ListPulls(ctx, "fleet", "open")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].Number != opened.Number {
		t.Errorf("open pulls = %+v, want just #%d", open, opened.Number)
	}

	// Gitea tests mergeability in the background; a merge asked before
	// that is refused with 405 "Please try again later".
	if _, err := s.WaitPull(ctx, "fleet", opened.Number, func(p *Pull) bool { return p.Mergeable }); err != nil {
		t.Fatal(err)
	}
	if err := s.MergePull(ctx, "fleet", opened.Number, "merge"); err != nil {
		t.Fatal(err)
	}
	if pr, err = s.GetPull(ctx, "fleet", opened.Number); err != nil || !pr.Merged || pr.State != "closed" {
		t.Errorf("after MergePull: %+v, %v; want merged and closed", pr, err)
	}
}

func TestDoReturnsGiteasRefusal(t *testing.T) {
	// A refused call is an *APIError with the status and Gitea's own
	// message, so that tests can assert on what the forge said.
	s := start(t)
	ctx := testContext(t)

	err := s.Do(ctx, http.MethodGet, "repos/"+s.Admin+"/missing/pulls", nil, nil)
	var e *APIError
	if !errors.As(err, &e) || e.StatusCode != http.StatusNotFound || e.Message == "" {
		t.Fatalf("err = %v, want an APIError 404 with a message", err)
	}

	if _, err := s.CreateUser(ctx, "reviewer"); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateUser(ctx, "reviewer")
	if !errors.As(err, &e) || e.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(e.Message, "already exists") {
		t.Errorf("creating a user twice: %v, want 422 saying it already exists", err)
	}
}

func TestStopEndsTheServer(t *testing.T) {
	// Stop ends Gitea (its port stops answering) and removes its work
	// path, and a second Stop is harmless.
	s := start(t)
	ctx := testContext(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.ping(ctx); err == nil {
		t.Error("the API still answers after Stop")
	}
	if _, err := os.Stat(s.WorkPath); !os.IsNotExist(err) {
		t.Errorf("work path %s: %v, want it removed", s.WorkPath, err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStartQuotesGiteaOnFailure(t *testing.T) {
	// A gitea that cannot start makes Start fail with what gitea said,
	// and leaves nothing behind in dir.
	bin := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bin, "gitea"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'database is on fire' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "gitea", "gitea"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := Start(testContext(t), dir, bin)
	if err == nil || !strings.Contains(err.Error(), "database is on fire") || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("Start = %v, want the migrate step's failure quoting gitea", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Start left %d entries in dir", len(left))
	}
}

func TestStartWithoutBinaryIsErrNoBinary(t *testing.T) {
	// A bin directory without gitea is ErrNoBinary, which tests skip on,
	// with the command that builds it.
	_, err := Start(testContext(t), t.TempDir(), t.TempDir())
	if !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "make testenv") {
		t.Fatalf("Start = %v, want ErrNoBinary naming make testenv", err)
	}
}

// BenchmarkStart measures a start (migration, admin, web, token) and stop.
func BenchmarkStart(b *testing.B) {
	if _, err := Binary(""); err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		t0 := time.Now()
		s, err := Start(ctx, b.TempDir(), "")
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "start-ms")
		if err := s.Stop(); err != nil {
			b.Fatal(fmt.Errorf("stop: %w", err))
		}
	}
}
