package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// The engine's request flow against a real Gitea, for what the end-to-end
// test (tests/pullrequest) does not reach: a job run again with the same
// inputs pushes nothing and leaves the request alone (action unchanged,
// one API call), and what fails after a request is opened (an unknown
// reviewer) is a warning on a job that still succeeds, never a retry that
// could open a second request.
func TestProposeAgainstGitea(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := testgitea.Start(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url, err := srv.CreateRepo(ctx, "fleet", map[string]string{"deploy/app.yaml": deployment})
	if err != nil {
		t.Fatal(err)
	}
	p := plan(url, func(p *writeback.Plan) {
		p.Path = "deploy"
		p.Target = writeback.Target{PullRequest: &writeback.PullRequest{Provider: "gitea", Base: "main", Reviewers: []string{"nobody-by-this-name"}}}
		p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "fleet"}
	})
	calls := 0
	e := New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{OnEvent: func(ev Event) {
		if ev.Kind == EventForgeResponse {
			calls++
		}
	}}}, Credentials{Git: &git.Auth{Username: srv.Admin, Password: srv.Token}}, newCache(t))

	out, err := e.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	pr := out.PullRequest
	if pr == nil || pr.Action != meta.PullRequestOpened || pr.HeadBranch != "image-toolkit/apps-fleet" || out.Commit == "" {
		t.Fatalf("first run: %+v, commit %q", pr, out.Commit)
	}
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "request #") {
		t.Errorf("warnings %q, want one about the reviewer", out.Warnings)
	}

	calls = 0
	again, err := e.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if again.PullRequest == nil || again.PullRequest.Action != meta.PullRequestUnchanged ||
		again.PullRequest.Number != pr.Number || again.Commit != "" || again.PullRequest.HeadCommit != out.Commit {
		t.Errorf("second run: %+v, commit %q (first pushed %s)", again.PullRequest, again.Commit, out.Commit)
	}
	if calls != 1 {
		t.Errorf("the second run made %d API calls, want 1 (find)", calls)
	}
	prs, err := srv.ListPulls(ctx, "fleet", "all")
	if err != nil || len(prs) != 1 {
		t.Errorf("requests %+v, %v; want exactly one", prs, err)
	}
}
