package runner

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/tests/testkit/testgitea"
	"toolkit.dev/image-toolkit/update-job-controller/internal/forge"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
)

// The runner's request flow against a real Gitea, for what the end-to-end
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
	s := spec(url, func(s *updatev1.UpdateJobSpec) {
		s.Update.Path = "deploy"
		s.Push = &updatev1.PushSpec{PullRequest: &updatev1.PullRequestSpec{Provider: "gitea", Reviewers: []string{"nobody-by-this-name"}}}
	})
	plan, err := NewPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := gitops.NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	fc, err := forge.New(forge.Options{
		Provider: forge.Gitea, APIURL: plan.PullRequest.Endpoint.APIURL, Repository: plan.PullRequest.Endpoint.Repository,
		Token: srv.Token, HTTPClient: http.DefaultClient, OnResponse: func(string, int) { calls++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{
		Spec: s, Plan: plan, WorkDir: t.TempDir(), Forge: fc,
		Auth:             &git.Auth{Username: srv.Admin, Password: srv.Token},
		AutomationObject: types.NamespacedName{Namespace: "apps", Name: "fleet"},
	}

	out, err := Run(ctx, cache, in)
	if err != nil {
		t.Fatal(err)
	}
	pr := out.PullRequest
	if pr == nil || pr.Action != updatev1.PullRequestOpened || pr.HeadBranch != "image-toolkit/apps-fleet" || out.Commit == "" {
		t.Fatalf("first run: %+v, commit %q", pr, out.Commit)
	}
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "request #") {
		t.Errorf("warnings %q, want one about the reviewer", out.Warnings)
	}

	calls = 0
	again, err := Run(ctx, cache, in)
	if err != nil {
		t.Fatal(err)
	}
	if again.PullRequest == nil || again.PullRequest.Action != updatev1.PullRequestUnchanged ||
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
