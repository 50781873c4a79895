package runner

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
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

func spec(url string, mutate func(*updatev1.UpdateJobSpec)) *updatev1.UpdateJobSpec {
	s := &updatev1.UpdateJobSpec{
		Repository: updatev1.GitRepositorySpec{URL: url},
		Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
		Update: updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{
			{Policy: "apps:podinfo", Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"},
		}},
		Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func TestNewPlan(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*updatev1.UpdateJobSpec)
		want   Plan // Branch, Force, Extra, Path are compared
		err    string
	}{
		{name: "defaults to the checkout branch", want: Plan{Branch: "main"}},
		{name: "other push branch is forced", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "auto"}
		}, want: Plan{Branch: "auto", Force: true}},
		{name: "same push branch is not forced", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main"}
		}, want: Plan{Branch: "main"}},
		{name: "refspec only", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "+HEAD:refs/for/main"}
		}, want: Plan{Extra: []gitops.PushRef{{Dst: "refs/for/main", Force: true}}}},
		{name: "refspec from the checkout branch, short destination", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main", Refspec: "main:auto"}
		}, want: Plan{Branch: "main", Extra: []gitops.PushRef{{Dst: "refs/heads/auto"}}}},
		{name: "refspec to the push branch is pushed once", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "main", Refspec: "HEAD:refs/heads/main"}
		}, want: Plan{Branch: "main"}},
		{name: "path is cleaned", mutate: func(s *updatev1.UpdateJobSpec) { s.Update.Path = "./apps//prod/" },
			want: Plan{Branch: "main", Path: "apps/prod"}},
		{name: "root path", mutate: func(s *updatev1.UpdateJobSpec) { s.Update.Path = "./" },
			want: Plan{Branch: "main"}},
		{name: "push options", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Options: map[string]string{"merge_request.create": ""}}
		}, err: "push.options are not supported"},
		{name: "refspec without destination", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "HEAD"}
		}, err: "want [+]SOURCE:DESTINATION"},
		{name: "refspec from elsewhere", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Refspec: "refs/heads/dev:refs/heads/x"}
		}, err: "the source must be HEAD or the checkout branch"},
		{name: "bad push branch", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "a..b"}
		}, err: "not a valid branch name"},
		{name: "bad template", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Commit.MessageTemplate = "{{ .Nope }}"
		}, err: "template"},
		{name: "tag without push target", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1"}
		}, err: "nothing to push to"},
	}
	pr := func(p updatev1.PullRequestSpec) func(s *updatev1.UpdateJobSpec) {
		return func(s *updatev1.UpdateJobSpec) { s.Push = &updatev1.PushSpec{PullRequest: &p} }
	}
	tests = append(tests, []struct {
		name   string
		mutate func(*updatev1.UpdateJobSpec)
		want   Plan
		err    string
	}{
		{name: "pull request pushes no branch", mutate: pr(updatev1.PullRequestSpec{Provider: "gitea"}), want: Plan{}},
		{name: "pull request with a push branch", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Push = &updatev1.PushSpec{Branch: "x", PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		}, err: "cannot be set with it"},
		{name: "pull request on an unknown forge", mutate: pr(updatev1.PullRequestSpec{}), err: "cannot tell which forge example.com is"},
		{name: "pull request from a tag without base", mutate: func(s *updatev1.UpdateJobSpec) {
			s.Checkout.Reference = updatev1.GitRepositoryRef{Tag: "v1"}
			s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea"}}
		}, err: "base is needed"},
		{name: "pull request with a bad base", mutate: pr(updatev1.PullRequestSpec{Provider: "gitea", Base: "a..b"}), err: "not a valid branch name"},
		{name: "pull request with a bad title template", mutate: pr(updatev1.PullRequestSpec{Provider: "gitea", TitleTemplate: "{{ .Nope }}"}),
			err: ".Nope, which does not exist"},
		{name: "pull request with a two-line title", mutate: pr(updatev1.PullRequestSpec{Provider: "gitea", TitleTemplate: "a\nb"}),
			err: "more than one line"},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlan(spec("http://example.com/org/r.git", tt.mutate))
			if tt.err != "" {
				var e *conditions.Failure
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.As(err, &e) ||
					!e.Stalled || e.Reason != conditions.InvalidSpecReason {
					t.Fatalf("err = %v, want a terminal InvalidSpec error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Branch != tt.want.Branch || p.Force != tt.want.Force || p.Path != tt.want.Path ||
				len(p.Extra) != len(tt.want.Extra) || (len(p.Extra) > 0 && p.Extra[0] != tt.want.Extra[0]) {
				t.Errorf("plan = %+v, want %+v", p, tt.want)
			}
		})
	}
}

func run(t *testing.T, srv *testgit.Server, repo string, beforePush func(context.Context) error) (*Output, error) {
	t.Helper()
	s := spec(srv.RepoURL(repo), func(s *updatev1.UpdateJobSpec) { s.Update.Path = "deploy" })
	plan, err := NewPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := gitops.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	var observed []string
	out, err := Run(context.Background(), cache, Input{
		Spec: s, Plan: plan, WorkDir: work, BeforePush: beforePush,
		Observe: func(op string, _ time.Duration) { observed = append(observed, op) },
	})
	if left, _ := os.ReadDir(work); len(left) > 0 {
		t.Errorf("work trees left behind: %v", left)
	}
	if len(observed) == 0 || observed[0] != OpClone {
		t.Errorf("observed git operations %v, want a clone first", observed)
	}
	return out, err
}

// Someone pushes between our fetch and our push: the job fetches again,
// re-applies the update on their commit and pushes once; both commits end
// up on the branch.
func TestRunRetriesNonFastForward(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "race", map[string]string{"deploy/app.yaml": deployment, "README.md": "a\n"})
	pushes := 0
	out, err := run(t, srv, "race", func(context.Context) error {
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
	out, err := run(t, srv, "same", func(context.Context) error {
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
	if _, err := run(t, srv, "abort", func(context.Context) error { return lost }); !errors.Is(err, lost) {
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
// (tests/faults TestKillUpdateJobController, after-push) leaves
// PushingCommit; the next attempt reports that commit, pushes nothing and
// calls no hook. A PushingCommit that never reached the branch is ignored.
func TestRunFindsAnEarlierAttemptsPush(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "landed", map[string]string{"deploy/app.yaml": deployment})
	var pushing string
	s := spec(srv.RepoURL("landed"), func(s *updatev1.UpdateJobSpec) { s.Update.Path = "deploy" })
	plan, err := NewPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := gitops.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	attempt := func(previous string) *Output {
		t.Helper()
		out, err := Run(context.Background(), cache, Input{Spec: s, Plan: plan, WorkDir: t.TempDir(), PushingCommit: previous,
			Pushing: func(_ context.Context, c string) error { pushing = c; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := attempt("0123456789012345678901234567890123456789") // unknown: a normal run
	if first.Commit == "" || pushing != first.Commit {
		t.Fatalf("first attempt: commit %q, Pushing saw %q", first.Commit, pushing)
	}
	pushing = ""
	again := attempt(first.Commit)
	if again.Commit != first.Commit || pushing != "" || len(again.PushedRefs) != 1 || again.PushedRefs[0] != "refs/heads/main" {
		t.Errorf("second attempt: %+v (Pushing saw %q), want the first attempt's commit on refs/heads/main and no push", again, pushing)
	}
	if n := strings.Count(testgit.Git(t, srv.BarePath("landed"), "log", "--format=%ae", "main"), "bot@"); n != 1 {
		t.Errorf("%d commits of ours on main, want 1", n)
	}
}
