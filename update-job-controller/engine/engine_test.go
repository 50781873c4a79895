package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

const deployment = `apiVersion: apps/v1
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

// plan is a job's plan: set apps:podinfo to 6.5.0 on main, as bot.
func plan(url string, mutate func(*writeback.Plan)) writeback.Plan {
	p := writeback.Plan{
		Repository: url,
		Checkout:   writeback.Ref{Branch: "main"},
		Update: writeback.Update{Images: map[string]meta.ImageRef{
			"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"},
		}},
		Commit: writeback.Commit{AuthorName: "bot", AuthorEmail: "bot@example.com"},
		Target: writeback.Target{Branch: "main"},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func newCache(t testing.TB) *mirror.Cache {
	t.Helper()
	cache, err := mirror.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

// Check refuses what the forge or the templates cannot do, before any
// network call, as the runner's NewPlan did: terminal KindInvalid errors.
func TestCheck(t *testing.T) {
	pr := func(p writeback.PullRequest) func(*writeback.Plan) {
		return func(pl *writeback.Plan) { pl.Target = writeback.Target{PullRequest: &p} }
	}
	tests := []struct {
		name   string
		mutate func(*writeback.Plan)
		err    string
	}{
		{name: "a branch", mutate: nil},
		{name: "a pull request", mutate: pr(writeback.PullRequest{Provider: "gitea", Base: "main"})},
		{name: "bad template", mutate: func(p *writeback.Plan) { p.Commit.MessageTemplate = "{{ .Nope }}" }, err: "template"},
		{name: "bad push branch", mutate: func(p *writeback.Plan) { p.Target.Branch = "a..b" }, err: "not a valid branch name"},
		{name: "pull request on an unknown forge", mutate: pr(writeback.PullRequest{Base: "main"}), err: "cannot tell which forge example.com is"},
		{name: "pull request with a bad title template", mutate: pr(writeback.PullRequest{Provider: "gitea", Base: "main", TitleTemplate: "{{ .Nope }}"}),
			err: ".Nope, which does not exist"},
		{name: "pull request with a two-line title", mutate: pr(writeback.PullRequest{Provider: "gitea", Base: "main", TitleTemplate: "a\nb"}),
			err: "more than one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(plan("http://example.com/org/r.git", tt.mutate))
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *Error
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.As(err, &e) || !e.Terminal || e.Kind != KindInvalid {
				t.Fatalf("err = %v, want a terminal KindInvalid error with %q", err, tt.err)
			}
		})
	}
}

func runJob(t *testing.T, srv *testgit.Server, repo string, beforePush func(context.Context) error) (Result, error) {
	t.Helper()
	work := t.TempDir()
	var observed []string
	e := New(Settings{WorkDir: work, Hooks: Hooks{
		BeforePush: func(ctx context.Context, _ Push) error {
			if beforePush == nil {
				return nil
			}
			return beforePush(ctx)
		},
		OnEvent: func(ev Event) {
			if ev.Kind == EventGit {
				observed = append(observed, ev.Op)
			}
		},
	}}, Credentials{}, newCache(t))
	out, err := e.Run(context.Background(), plan(srv.RepoURL(repo), func(p *writeback.Plan) { p.Path = "deploy" }))
	if left, _ := os.ReadDir(work); len(left) > 0 {
		t.Errorf("work trees left behind: %v", left)
	}
	if len(observed) == 0 || observed[0] != OpClone {
		t.Errorf("observed git operations %v, want a clone first", observed)
	}
	return out, err
}

// The checkout is removed once the run ends, not between its commit and
// its push, where removing a hundred files put 10 ms before every push.
func TestRunRemovesItsCheckoutAfterThePush(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": deployment})
	work := t.TempDir()
	atPush := -1
	e := New(Settings{WorkDir: work, Hooks: Hooks{BeforePush: func(context.Context, Push) error {
		left, err := os.ReadDir(work)
		atPush = len(left)
		return err
	}}}, Credentials{}, newCache(t))
	out, err := e.Run(context.Background(), plan(srv.RepoURL("fleet"), func(p *writeback.Plan) { p.Path = "deploy" }))
	if err != nil || out.Commit == "" {
		t.Fatalf("run: commit %q, err %v", out.Commit, err)
	}
	if atPush != 1 {
		t.Errorf("%d checkouts in the work directory at the push, want the run's one", atPush)
	}
	if left, _ := os.ReadDir(work); len(left) > 0 {
		t.Errorf("work trees left behind: %v", left)
	}
}

// Someone pushes between our fetch and our push: the job fetches again,
// re-applies the update on their commit and pushes once; both commits end
// up on the branch.
func TestRunRetriesNonFastForward(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "race", map[string]string{"deploy/app.yaml": deployment, "README.md": "a\n"})
	pushes := 0
	out, err := runJob(t, srv, "race", func(context.Context) error {
		pushes++
		if pushes == 1 {
			clone.Commit("someone else", map[string]string{"README.md": "b\n"})
			clone.Push()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Retries != 1 || pushes != 2 || out.Commit == "" {
		t.Fatalf("retries %d, pushes %d, commit %q", out.Retries, pushes, out.Commit)
	}
	log := testgit.Git(t, srv.BarePath("race"), "log", "--format=%H %ae %s", "main")
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], out.Commit+" bot@example.com") ||
		!strings.Contains(lines[1], "someone else") {
		t.Errorf("main:\n%s", log)
	}
	if !strings.HasSuffix(out.CheckoutRevision, strings.Fields(lines[1])[0]) {
		t.Errorf("checkoutRevision %s is not the other writer's commit", out.CheckoutRevision)
	}
}

// When the other writer already made our change, the retry finds nothing
// to do: no commit of ours at all.
func TestRunNonFastForwardBecomesNoChange(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "same", map[string]string{"deploy/app.yaml": deployment})
	out, err := runJob(t, srv, "same", func(context.Context) error {
		clone.Commit("same change", map[string]string{
			"deploy/app.yaml": strings.Replace(deployment, "6.4.0", "6.5.0", 1)})
		clone.Push()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Commit != "" || out.Retries != 1 || len(out.PushedRefs) != 0 {
		t.Errorf("output %+v, want no commit after one retry", out)
	}
	if log := testgit.Git(t, srv.BarePath("same"), "log", "--format=%ae", "main"); strings.Contains(log, "bot@") {
		t.Errorf("a commit of ours reached main:\n%s", log)
	}
}

// A runner that cannot push (e.g. lost its claim) pushes nothing.
func TestRunBeforePushAborts(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "abort", map[string]string{"deploy/app.yaml": deployment})
	before := testgit.Git(t, srv.BarePath("abort"), "rev-parse", "main")
	lost := errors.New("claim lost")
	if _, err := runJob(t, srv, "abort", func(context.Context) error { return lost }); !errors.Is(err, lost) {
		t.Fatalf("err = %v", err)
	}
	if after := testgit.Git(t, srv.BarePath("abort"), "rev-parse", "main"); after != before {
		t.Error("main moved")
	}
}

// A symbolic link in the repository cannot take the update outside the
// checkout.
func TestSecurePath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"apps", "apps/prod"} {
		if err := os.Mkdir(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, root+"/escape"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("apps/prod", root+"/prod"); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, err string }{
		{"", ""}, {"apps/prod", ""}, {"prod", ""},
		{"escape", "leaves the repository"},
		{"missing", "does not exist"},
	}
	for _, tt := range tests {
		_, err := securePath(root, tt.path)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("securePath(%q) = %v, want %q", tt.path, err, tt.err)
		}
	}
}

// An attempt whose push landed but whose runner died before recording it
// (tests/faults TestKillUpdateJobController, after-push) leaves the commit
// it was pushing (Plan.Resume); the next run reports that commit, pushes
// nothing and calls no hook. A Resume commit that never reached the
// branch is ignored.
func TestRunFindsAnEarlierAttemptsPush(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "landed", map[string]string{"deploy/app.yaml": deployment})
	var pushing string
	e := New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{
		BeforePush: func(_ context.Context, p Push) error { pushing = p.Commit; return nil },
	}}, Credentials{}, newCache(t))
	attempt := func(previous string) Result {
		t.Helper()
		out, err := e.Run(context.Background(), plan(srv.RepoURL("landed"), func(p *writeback.Plan) {
			p.Path, p.Resume = "deploy", previous
		}))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := attempt("0123456789012345678901234567890123456789") // unknown: a normal run
	if first.Commit == "" || pushing != first.Commit {
		t.Fatalf("first attempt: commit %q, BeforePush saw %q", first.Commit, pushing)
	}
	pushing = ""
	again := attempt(first.Commit)
	if again.Commit != first.Commit || pushing != "" || len(again.PushedRefs) != 1 || again.PushedRefs[0] != "refs/heads/main" {
		t.Errorf("second attempt: %+v (BeforePush saw %q), want the first attempt's commit on refs/heads/main and no push", again, pushing)
	}
	if n := strings.Count(testgit.Git(t, srv.BarePath("landed"), "log", "--format=%ae", "main"), "bot@"); n != 1 {
		t.Errorf("%d commits of ours on main, want 1", n)
	}
}
