package forges

// The Gitea adapter is tested against a real Gitea (pkg/testgitea: the
// bin/gitea binary, one server for the test binary, a repository per
// test), so that what is asserted is what Gitea does: its WIP prefix, its
// answer to an auto-merge, its refusal of a bad token. The clients are made
// by New, so the wiring the job uses is what is tested.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
)

// TestMain registers the built-in forges, as the front ends do, and stops
// the Gitea the tests started, if any: it is started by the first Gitea
// test, so that running only the other forges' tests starts none.
func TestMain(m *testing.M) {
	Register()
	code := m.Run()
	giteaOnce.stop()
	os.Exit(code)
}

// giteaShared is the test binary's Gitea, started by the first test that
// needs it.
type giteaShared struct {
	sync.Mutex
	started bool
	srv     *testgitea.Server
	err     error
}

var giteaOnce giteaShared

func (o *giteaShared) stop() {
	o.Lock()
	defer o.Unlock()
	if o.srv != nil {
		if err := o.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping gitea:", err)
		}
	}
}

// giteaServer is the test binary's Gitea; the test is skipped only when
// the binary has not been built.
func giteaServer(t *testing.T) *testgitea.Server {
	t.Helper()
	giteaOnce.Lock()
	defer giteaOnce.Unlock()
	if !giteaOnce.started {
		giteaOnce.started = true
		ctx, cancel := context.WithTimeout(context.Background(), testgitea.StartTimeout)
		defer cancel()
		giteaOnce.srv, giteaOnce.err = testgitea.Start(ctx, "", "")
	}
	if errors.Is(giteaOnce.err, testgitea.ErrNoBinary) {
		t.Skipf("%v (the Gitea adapter is tested against a real Gitea)", giteaOnce.err)
	}
	if giteaOnce.err != nil {
		t.Fatal(giteaOnce.err)
	}
	return giteaOnce.srv
}

func giteaCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var giteaSeq atomic.Int64

// giteaUnique is a name unique in the server, readable in its logs.
func giteaUnique(t *testing.T, prefix string) string {
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	name = strings.TrimPrefix(name, "testgitea")
	if len(name) > 30 {
		name = name[:30]
	}
	return fmt.Sprintf("%s%s-%d", prefix, strings.Trim(name, "-"), giteaSeq.Add(1))
}

// giteaRepo makes a repository with a main branch and a head branch
// update/app one commit ahead, and returns its full name and that commit.
func giteaRepo(t *testing.T, srv *testgitea.Server, owner string) (repo, headSHA string) {
	t.Helper()
	ctx := giteaCtx(t)
	name := giteaUnique(t, "")
	if owner != "" {
		name = owner + "/" + name
	}
	if _, err := srv.CreateRepo(ctx, name, map[string]string{"apps/app.yaml": "image: app:1.0.0\n"}); err != nil {
		t.Fatal(err)
	}
	sha, err := srv.PushBranch(ctx, name, "update/app", "main", map[string]string{"apps/app.yaml": "image: app:1.1.0\n"}, "Update app to 1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	return srv.FullName(name), sha
}

// giteaUser makes a user with write access to repo.
func giteaUser(t *testing.T, srv *testgitea.Server, repo string) string {
	t.Helper()
	ctx := giteaCtx(t)
	name := giteaUnique(t, "u-")
	if _, err := srv.CreateUser(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddCollaborator(ctx, repo, name, "write"); err != nil {
		t.Fatal(err)
	}
	return name
}

func giteaClient(t *testing.T, srv *testgitea.Server, repo, token string) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{Provider: Gitea, APIURL: srv.URL, Repository: repo, Token: token, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// giteaSetup is how most tests start: the test binary's Gitea, a context
// for the test, a repository of its own (see giteaRepo) and a client of it
// with the admin's token.
func giteaSetup(t *testing.T) (*testgitea.Server, context.Context, string, forge.Client) {
	t.Helper()
	srv := giteaServer(t)
	repo, _ := giteaRepo(t, srv, "")
	return srv, giteaCtx(t), repo, giteaClient(t, srv, repo, srv.Token)
}

func giteaErrorOf(t *testing.T, err error) *forge.Error {
	t.Helper()
	var e *forge.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want a *forge.Error", err, err)
	}
	if e.Provider != Gitea {
		t.Errorf("provider = %q, want gitea", e.Provider)
	}
	return e
}

func giteaNewRequest(title string) forge.NewRequest {
	return forge.NewRequest{Head: "update/app", Base: "main", Title: title, Body: "Updates app.\n\n- app: 1.0.0 → 1.1.0"}
}

func TestGiteaFindOpenNone(t *testing.T) {
	// FindOpen finds nothing in a repository without requests, nor when
	// the only requests are from another head, into another base, or
	// closed.
	srv, ctx, repo, c := giteaSetup(t)

	if got, err := c.FindOpen(ctx, "update/app", "main"); err != nil || got != nil {
		t.Fatalf("FindOpen in an empty repository = %+v, %v; want nil, nil", got, err)
	}

	if _, err := srv.PushBranch(ctx, repo, "other", "main", map[string]string{"other.txt": "x\n"}, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.PushBranch(ctx, repo, "release", "main", nil, "release"); err != nil {
		t.Fatal(err)
	}
	var closed testgitea.Pull
	for _, p := range []map[string]any{
		{"head": "other", "base": "main", "title": "another head"},
		{"head": "update/app", "base": "release", "title": "another base"},
		{"head": "update/app", "base": "main", "title": "closed"},
	} {
		if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/pulls", p, &closed); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Do(ctx, http.MethodPatch, fmt.Sprintf("repos/%s/pulls/%d", repo, closed.Number), map[string]any{"state": "closed"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FindOpen(ctx, "update/app", "main"); err != nil || got != nil {
		t.Fatalf("FindOpen = %+v, %v; want nil, nil", got, err)
	}
}

func TestGiteaCreateThenFind(t *testing.T) {
	// Create opens a draft (a WIP: title, which is how Gitea marks one)
	// with its labels resolved from names, its assignee and a review
	// request, and FindOpen then finds that same request.
	srv := giteaServer(t)
	ctx := giteaCtx(t)
	repo, sha := giteaRepo(t, srv, "")
	assignee := giteaUser(t, srv, repo)
	reviewer := giteaUser(t, srv, repo)
	for _, l := range []string{"dependencies", "automated", "unrelated"} {
		if _, err := srv.CreateLabel(ctx, repo, l, "#00aabb"); err != nil {
			t.Fatal(err)
		}
	}
	c := giteaClient(t, srv, repo, srv.Token)

	req := giteaNewRequest("Update app to 1.1.0")
	req.Draft = true
	req.Labels = []string{"dependencies", "Automated"} // case is forgiven
	req.Assignees = []string{"@" + assignee}
	req.Reviewers = []string{reviewer}
	created, err := c.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := forge.Request{
		Number: created.Number, URL: fmt.Sprintf("%s%s/pulls/%d", srv.URL, repo, created.Number),
		State: forge.Open, Title: "WIP: Update app to 1.1.0", Body: req.Body,
		Head: "update/app", Base: "main", HeadCommit: sha, Draft: true,
	}
	if *created != want {
		t.Errorf("Create returned\n%+v\nwant\n%+v", *created, want)
	}

	pr, err := srv.GetPull(ctx, repo, created.Number)
	if err != nil {
		t.Fatal(err)
	}
	var labels, assignees, reviewers []string
	for _, l := range pr.Labels {
		labels = append(labels, l.Name)
	}
	for _, u := range pr.Assignees {
		assignees = append(assignees, u.Login)
	}
	for _, u := range pr.RequestedReviewers {
		reviewers = append(reviewers, u.Login)
	}
	if !pr.Draft || strings.Join(labels, ",") != "automated,dependencies" ||
		strings.Join(assignees, ",") != assignee || strings.Join(reviewers, ",") != reviewer {
		t.Errorf("Gitea shows draft %t, labels %v, assignees %v, reviewers %v; want a draft labelled automated,dependencies, assigned to %s, review asked of %s",
			pr.Draft, labels, assignees, reviewers, assignee, reviewer)
	}

	found, err := c.FindOpen(ctx, "update/app", "main")
	if err != nil {
		t.Fatal(err)
	}
	if found == nil || *found != want {
		t.Errorf("FindOpen = %+v, want %+v", found, want)
	}
}

func TestGiteaCreatePlain(t *testing.T) {
	// A request that is no draft has its title as written and no extras;
	// a title already marked WIP by the template is not marked twice.
	for _, tt := range []struct {
		title string
		draft bool
	}{{"Update app", false}, {"[WIP] Update app", true}} {
		_, ctx, _, c := giteaSetup(t)
		req := giteaNewRequest(tt.title)
		req.Draft = tt.draft
		created, err := c.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if created.Title != tt.title || created.Draft != tt.draft || created.State != forge.Open {
			t.Errorf("created %+v, want an open request titled %q, draft %t", created, tt.title, tt.draft)
		}
	}
}

func TestGiteaEditKeepsWIP(t *testing.T) {
	// Edit sets the title and body; a draft keeps its WIP prefix (the one
	// it had) when the new title lacks one, an empty title leaves the
	// title as it is, and a request that is no draft gets none.
	srv, ctx, repo, c := giteaSetup(t)
	req := giteaNewRequest("[wip] Update app to 1.1.0")
	req.Draft = true
	created, err := c.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	edited, err := c.Edit(ctx, created, "Update app to 1.2.0", "New body.")
	if err != nil {
		t.Fatal(err)
	}
	if edited.Title != "[wip] Update app to 1.2.0" || edited.Body != "New body." || !edited.Draft || edited.Number != created.Number {
		t.Errorf("edited draft = %+v, want [wip] Update app to 1.2.0, the new body, still a draft", edited)
	}
	pr, err := srv.GetPull(ctx, repo, created.Number)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Title != edited.Title || pr.Body != "New body." || !pr.Draft {
		t.Errorf("Gitea shows %q / %q (draft %t)", pr.Title, pr.Body, pr.Draft)
	}
	if kept, err := c.Edit(ctx, edited, "", "New body."); err != nil || kept.Title != edited.Title {
		t.Errorf("edit with an empty title = %+v, %v; want the title %q kept", kept, err, edited.Title)
	}

	// A person took it out of draft: the job's edit leaves it so.
	if err := srv.Do(ctx, http.MethodPatch, fmt.Sprintf("repos/%s/pulls/%d", repo, created.Number), map[string]any{"title": "Update app to 1.2.0"}, nil); err != nil {
		t.Fatal(err)
	}
	current, err := c.FindOpen(ctx, "update/app", "main")
	if err != nil || current == nil || current.Draft {
		t.Fatalf("FindOpen after un-drafting = %+v, %v; want the request, no draft", current, err)
	}
	edited, err = c.Edit(ctx, current, "Update app to 1.3.0", "")
	if err != nil {
		t.Fatal(err)
	}
	if edited.Title != "Update app to 1.3.0" || edited.Draft || edited.Body != "" {
		t.Errorf("edited = %+v, want Update app to 1.3.0 with an empty body, no draft", edited)
	}
}

func TestGiteaCloseWithComment(t *testing.T) {
	// Close comments on the request, then closes it; FindOpen no longer
	// finds it. An empty comment closes without commenting.
	srv, ctx, repo, c := giteaSetup(t)
	created, err := c.Create(ctx, giteaNewRequest("Update app"))
	if err != nil {
		t.Fatal(err)
	}
	const comment = "Superseded: the policy no longer selects a newer app."
	if err := c.Close(ctx, created, comment); err != nil {
		t.Fatal(err)
	}
	pr, err := srv.GetPull(ctx, repo, created.Number)
	if err != nil {
		t.Fatal(err)
	}
	if pr.State != "closed" || pr.Merged {
		t.Errorf("state %q merged %t, want closed and not merged", pr.State, pr.Merged)
	}
	comments, err := srv.Comments(ctx, repo, created.Number)
	if err != nil {
		t.Fatal(err)
	}
	if len(comments) != 1 || comments[0].Body != comment || comments[0].User.Login != srv.Admin {
		t.Errorf("comments = %+v, want the one closing comment by %s", comments, srv.Admin)
	}
	if got, err := c.FindOpen(ctx, "update/app", "main"); err != nil || got != nil {
		t.Errorf("FindOpen after Close = %+v, %v; want nil", got, err)
	}

	// Reopened by hand, closed again without a comment.
	if err := srv.Do(ctx, http.MethodPatch, fmt.Sprintf("repos/%s/pulls/%d", repo, created.Number), map[string]any{"state": "open"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, created, "  "); err != nil {
		t.Fatal(err)
	}
	if comments, err = srv.Comments(ctx, repo, created.Number); err != nil || len(comments) != 1 {
		t.Errorf("comments after a Close without comment: %d, %v; want still 1", len(comments), err)
	}
	if pr, err = srv.GetPull(ctx, repo, created.Number); err != nil || pr.State != "closed" {
		t.Errorf("after the second Close: %+v, %v; want closed", pr, err)
	}
}

func TestGiteaBadToken(t *testing.T) {
	// A token Gitea does not know is an Error that is Unauthorized, and
	// the token appears nowhere in it.
	srv, ctx, repo, _ := giteaSetup(t)
	const bad = "0123456789abcdef0123456789abcdef01234567"
	_, err := giteaClient(t, srv, repo, bad).FindOpen(ctx, "update/app", "main")
	e := giteaErrorOf(t, err)
	if !e.Unauthorized() {
		t.Errorf("err = %v, want 401", err)
	}
	if strings.Contains(err.Error(), bad) {
		t.Errorf("the token leaked into %q", err)
	}
	t.Logf("Gitea's answer to a bad token: %v", err)
}

func TestGiteaMissingRepository(t *testing.T) {
	// A repository that does not exist is a 404 Error that quotes what
	// Gitea said and what was being done.
	srv := giteaServer(t)
	ctx := giteaCtx(t)
	_, err := giteaClient(t, srv, srv.Admin+"/no-such-repo", srv.Token).FindOpen(ctx, "update/app", "main")
	e := giteaErrorOf(t, err)
	if e.StatusCode != http.StatusNotFound || e.Message == "" || !strings.Contains(e.Op, "finding the open pull request from update/app into main") {
		t.Errorf("err = %v, want a 404 with Gitea's message while finding the request", err)
	}
	if strings.Contains(e.Message, "unknown API error") || strings.Contains(e.Message, "\n") {
		t.Errorf("message %q is the SDK's wrapping, not Gitea's words", e.Message)
	}
	t.Logf("Gitea's answer to a missing repository: %v", err)

	// Of an owner that does not exist, Gitea says which.
	_, err = giteaClient(t, srv, "no-such-owner/app", srv.Token).FindOpen(ctx, "update/app", "main")
	if e := giteaErrorOf(t, err); e.StatusCode != http.StatusNotFound || !strings.Contains(e.Message, "no-such-owner") {
		t.Errorf("err = %v, want a 404 naming no-such-owner", err)
	}
	t.Logf("Gitea's answer to a missing owner: %v", err)
}

func TestGiteaUnknownNames(t *testing.T) {
	// A name Gitea does not know fails Create with an Error naming it: a
	// label before any request exists (labels are resolved first, as Gitea
	// would drop an unknown one silently), an assignee too (Gitea refuses
	// it, 422, before it creates the request), and a reviewer after the
	// request exists, which is returned with the error, as the interface
	// says.
	for _, tt := range []struct {
		name   string
		names  forge.NewRequest // the labels, assignees and reviewers asked for
		opened bool             // the request exists after the refusal
		ok     func(e *forge.Error, got *forge.Request) bool
	}{
		{"label", forge.NewRequest{Labels: []string{"dependencies", "no-such-label"}}, false, func(e *forge.Error, _ *forge.Request) bool {
			return strings.Contains(e.Error(), `"no-such-label"`) && !strings.Contains(e.Error(), `"dependencies"`)
		}},
		{"assignee", forge.NewRequest{Assignees: []string{"nobody-at-all"}}, false, func(e *forge.Error, _ *forge.Request) bool {
			return e.StatusCode == http.StatusUnprocessableEntity && strings.Contains(e.Message, "nobody-at-all")
		}},
		{"reviewer", forge.NewRequest{Reviewers: []string{"nobody-at-all"}}, true, func(e *forge.Error, got *forge.Request) bool {
			return strings.Contains(e.Op, fmt.Sprintf("requesting reviews of pull request #%d", got.Number)) && e.StatusCode/100 == 4
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, ctx, repo, c := giteaSetup(t)
			if _, err := srv.CreateLabel(ctx, repo, "dependencies", "#00aabb"); err != nil {
				t.Fatal(err)
			}
			req := giteaNewRequest("Update app")
			req.Labels, req.Assignees, req.Reviewers = tt.names.Labels, tt.names.Assignees, tt.names.Reviewers
			got, err := c.Create(ctx, req)
			if opened := got != nil && got.Number != 0 && got.State == forge.Open; (got != nil) != tt.opened || opened != tt.opened {
				t.Fatalf("Create returned %+v, want the open request: %t", got, tt.opened)
			}
			if e := giteaErrorOf(t, err); !tt.ok(e, got) {
				t.Errorf("err = %v, want Gitea's refusal naming the %s", err, tt.name)
			}
			if prs, err := srv.ListPulls(ctx, repo, "all"); err != nil || (len(prs) == 1) != tt.opened || len(prs) > 1 {
				t.Errorf("requests after the refusal: %d, %v; want the open one: %t", len(prs), err, tt.opened)
			}
			t.Logf("Gitea's answer to an unknown %s: %v", tt.name, err)
		})
	}
}

func TestGiteaOrganizationLabels(t *testing.T) {
	// In an organization's repository, a label defined by the
	// organization (not the repository) is found and applied.
	srv := giteaServer(t)
	ctx := giteaCtx(t)
	org := giteaUnique(t, "org-")
	if err := srv.CreateOrg(ctx, org); err != nil {
		t.Fatal(err)
	}
	var label testgitea.Label
	if err := srv.Do(ctx, http.MethodPost, "orgs/"+org+"/labels", map[string]any{"name": "fleet-wide", "color": "#112233"}, &label); err != nil {
		t.Fatal(err)
	}
	repo, _ := giteaRepo(t, srv, org)
	req := giteaNewRequest("Update app")
	req.Labels = []string{"fleet-wide"}
	created, err := giteaClient(t, srv, repo, srv.Token).Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := srv.GetPull(ctx, repo, created.Number)
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Labels) != 1 || pr.Labels[0].ID != label.ID {
		t.Errorf("labels = %+v, want the organization's fleet-wide (%d)", pr.Labels, label.ID)
	}
}

func TestGiteaFindOpenIgnoresForks(t *testing.T) {
	// A fork's request from a branch of the same name into the same base
	// is not the job's: FindOpen skips it and finds the repository's own.
	srv, ctx, repo, c := giteaSetup(t)
	org := giteaUnique(t, "fork-")
	if err := srv.CreateOrg(ctx, org); err != nil {
		t.Fatal(err)
	}
	var fork struct {
		FullName string `json:"full_name"`
	}
	if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/forks", map[string]any{"organization": org}, &fork); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.PushBranch(ctx, fork.FullName, "update/app", "main", map[string]string{"apps/app.yaml": "image: app:9.9.9\n"}, "fork's update"); err != nil {
		t.Fatal(err)
	}
	var forkPR testgitea.Pull
	if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/pulls", map[string]any{
		"head": org + ":update/app", "base": "main", "title": "from a fork",
	}, &forkPR); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FindOpen(ctx, "update/app", "main"); err != nil || got != nil {
		t.Fatalf("FindOpen with only the fork's request = %+v, %v; want nil", got, err)
	}
	own, err := c.Create(ctx, giteaNewRequest("Update app"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.FindOpen(ctx, "update/app", "main")
	if err != nil || got == nil || got.Number != own.Number {
		t.Errorf("FindOpen = %+v, %v; want #%d (not the fork's #%d)", got, err, own.Number, forkPR.Number)
	}
}

func TestGiteaFindOpenPages(t *testing.T) {
	// FindOpen follows Gitea's pages: the job's request, updated longest
	// ago, is found behind a page of others; and when the pages it may
	// read run out first, it says so rather than report none (which
	// would open a second request).
	srv, ctx, repo, c := giteaSetup(t)
	own, err := c.Create(ctx, giteaNewRequest("Update app"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		branch := fmt.Sprintf("other-%d", i)
		if _, err := srv.PushBranch(ctx, repo, branch, "main", map[string]string{branch + ".txt": "x\n"}, branch); err != nil {
			t.Fatal(err)
		}
		if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/pulls", map[string]any{"head": branch, "base": "main", "title": branch}, nil); err != nil {
			t.Fatal(err)
		}
	}
	g, ok := c.(*giteaForge)
	if !ok {
		t.Fatalf("New returned a %T", c)
	}
	g.pageSize = 2 // the job's request is on the second page of two
	got, err := g.FindOpen(ctx, "update/app", "main")
	if err != nil || got == nil || got.Number != own.Number {
		t.Errorf("FindOpen = %+v, %v; want #%d from the second page", got, err, own.Number)
	}

	g.maxPullPages = 1
	got, err = g.FindOpen(ctx, "update/app", "main")
	if got != nil || err == nil || !strings.Contains(err.Error(), "read the first 2 open pull requests without finding it") {
		t.Errorf("FindOpen with one page allowed = %+v, %v; want an error saying it gave up", got, err)
	}
	if got, err := g.FindOpen(ctx, "other-2", "main"); err != nil || got == nil || got.Title != "other-2" {
		t.Errorf("FindOpen of the most recent request with one page allowed = %+v, %v", got, err)
	}
}

func TestGiteaAutoMergeWithoutChecks(t *testing.T) {
	// Auto-merge on a base that requires no checks: Gitea 1.26 schedules
	// it and merges from its queue within moments, with the asked method.
	srv, ctx, repo, c := giteaSetup(t)
	req := giteaNewRequest("Update app")
	req.AutoMerge = forge.Squash
	created, err := c.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Logf("Create returned the request %s", created.State)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pr, err := srv.WaitPull(wctx, repo, created.Number, func(p *testgitea.Pull) bool { return p.Merged })
	if err != nil {
		t.Fatalf("not merged: %v", err)
	}
	// A squash makes one commit on main whose parent is main's old head:
	// the head commit is not on main.
	var commit struct {
		Parents []struct {
			SHA string `json:"sha"`
		} `json:"parents"`
	}
	if err := srv.Do(ctx, http.MethodGet, "repos/"+repo+"/git/commits/"+pr.MergeCommitSHA, nil, &commit); err != nil {
		t.Fatal(err)
	}
	if len(commit.Parents) != 1 || pr.MergeCommitSHA == created.HeadCommit {
		t.Errorf("merge commit %s has %d parents, want a squash (one parent, not the head %s)", pr.MergeCommitSHA, len(commit.Parents), created.HeadCommit)
	}
}

func TestGiteaAutoMergeWaitsForChecks(t *testing.T) {
	// Auto-merge on a base whose protection requires a check: the request
	// stays open until the check succeeds on its head, then Gitea merges
	// it by itself.
	srv, ctx, repo, c := giteaSetup(t)
	if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/branch_protections", map[string]any{
		"rule_name": "main", "enable_status_check": true, "status_check_contexts": []string{"ci"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	req := giteaNewRequest("Update app")
	req.AutoMerge = forge.Merge
	created, err := c.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.State != forge.Open {
		t.Fatalf("created %s, want open until the check passes", created.State)
	}
	time.Sleep(time.Second) // time for a wrong merge to happen
	if pr, err := srv.GetPull(ctx, repo, created.Number); err != nil || pr.Merged {
		t.Fatalf("before the check: %+v, %v; want still open", pr, err)
	}
	if err := srv.Do(ctx, http.MethodPost, "repos/"+repo+"/statuses/"+created.HeadCommit,
		map[string]any{"state": "success", "context": "ci"}, nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := srv.WaitPull(wctx, repo, created.Number, func(p *testgitea.Pull) bool { return p.Merged }); err != nil {
		t.Fatalf("not merged after the check passed: %v", err)
	}
}

func TestGiteaAutoMergeDraftRefused(t *testing.T) {
	// Gitea merges no draft, so auto-merge of a draft is refused: Create
	// returns the open request with an Error that says it stays open.
	_, ctx, _, c := giteaSetup(t)
	req := giteaNewRequest("Update app")
	req.Draft = true
	req.AutoMerge = forge.Rebase
	created, err := c.Create(ctx, req)
	if created == nil || created.State != forge.Open || !created.Draft {
		t.Fatalf("Create returned %+v, want the open draft", created)
	}
	e := giteaErrorOf(t, err)
	if e.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(e.Op, "stays open") {
		t.Errorf("err = %v, want 405 saying the request stays open", err)
	}
	t.Logf("Gitea's answer to auto-merging a draft: %v", err)
}

func TestGiteaAutoMergeConflictGivesUp(t *testing.T) {
	// A request that conflicts with its base gets Gitea's "Please try
	// again later", as a request still being tested does; Create asks
	// again for a bounded while, then returns the open request with an
	// Error that says it stays open.
	srv, ctx, repo, c := giteaSetup(t)
	if _, err := srv.PushBranch(ctx, repo, "main", "main", map[string]string{"apps/app.yaml": "image: app:2.0.0\n"}, "Someone else's change"); err != nil {
		t.Fatal(err)
	}
	var merges atomic.Int64
	c, err := forge.New(forge.Options{Provider: Gitea, APIURL: srv.URL, Repository: repo, Token: srv.Token, HTTPClient: http.DefaultClient,
		OnResponse: func(method string, status int) {
			if method == http.MethodPost && status == http.StatusMethodNotAllowed {
				merges.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	g, ok := c.(*giteaForge)
	if !ok {
		t.Fatalf("New returned a %T", c)
	}
	g.mergeCheckWait = time.Second
	req := giteaNewRequest("Update app")
	req.AutoMerge = forge.Merge
	start := time.Now()
	created, err := g.Create(ctx, req)
	if created == nil || created.State != forge.Open {
		t.Fatalf("Create returned %+v, want the open request", created)
	}
	e := giteaErrorOf(t, err)
	if e.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(e.Op, "stays open") || !strings.Contains(e.Message, "try again later") {
		t.Errorf("err = %v, want 405 Please try again later, saying the request stays open", err)
	}
	if n, took := merges.Load(), time.Since(start); n < 3 || took > 10*time.Second {
		t.Errorf("asked %d times in %s, want a few times within about a second", n, took)
	}
	t.Logf("Gitea's answer to auto-merging a conflicting request: %v (asked %d times)", err, merges.Load())
}

func TestGiteaContextCanceled(t *testing.T) {
	// Every call honours its context: a canceled one makes no call, and
	// one canceled while Gitea has not answered ends the call at once.
	srv, ctx, repo, c := giteaSetup(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.FindOpen(canceled, "update/app", "main"); !errors.Is(err, context.Canceled) {
		t.Errorf("FindOpen with a canceled context = %v, want context.Canceled", err)
	}
	if _, err := c.Create(canceled, giteaNewRequest("Update app")); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a canceled context = %v, want context.Canceled", err)
	}
	if prs, err := srv.ListPulls(ctx, repo, "all"); err != nil || len(prs) != 0 {
		t.Errorf("requests after a canceled Create: %d, %v; want none", len(prs), err)
	}

	// A server that never answers (Gitea cannot be made to hang).
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hung.Close()
	defer close(release)
	hc, err := forge.New(forge.Options{Provider: Gitea, APIURL: hung.URL, Repository: "o/r", Token: "t", HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = hc.FindOpen(short, "update/app", "main")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("FindOpen against a hung server = %v after %s, want DeadlineExceeded soon after 200ms", err, time.Since(start))
	}
}

func TestGiteaNewMakesNoCall(t *testing.T) {
	// New makes no request (the SDK's version probe is off), and an API
	// URL written with /api/v1 reaches the same API.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/repos/o/r/pulls" {
			t.Errorf("request to %s", r.URL.Path)
		}
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	for _, api := range []string{srv.URL, srv.URL + "/", srv.URL + "/api/v1", srv.URL + "/api/v1/"} {
		c, err := forge.New(forge.Options{Provider: Gitea, APIURL: api, Repository: "o/r", Token: "t", HTTPClient: http.DefaultClient})
		if err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 0 {
			t.Fatalf("New(%s) made %d requests", api, n)
		}
		if got, err := c.FindOpen(context.Background(), "h", "b"); err != nil || got != nil {
			t.Errorf("FindOpen via %s = %+v, %v", api, got, err)
		}
		calls.Store(0)
	}
	if _, err := forge.New(forge.Options{Provider: Gitea, APIURL: "ftp://x", Repository: "o/r", Token: "t"}); err == nil {
		t.Error("New with an ftp URL succeeded")
	}
}

func TestGiteaMessage(t *testing.T) {
	// What Gitea says is quoted from its error bodies: the message with
	// the detail of errors[], a plain text body, and only the fact of an
	// HTML page.
	for body, want := range map[string]string{
		`{"message":"The target couldn't be found.","url":"x","errors":["user does not exist"]}`: "The target couldn't be found.: user does not exist",
		`{"message":"token is required","url":"x"}`:                                              "token is required",
		`{"message":"","errors":["a","b"]}`:                                                      "a: b",
		"Retry later\n":                                                                          "Retry later",
		"<html>Bad gateway</html>":                                                               "an HTML page, not the API's JSON",
		"":                                                                                       "",
	} {
		if got := forge.AnswerMessage([]byte(body), giteaMessage); got != want {
			t.Errorf("giteaMessage(%q) = %q, want %q", body, got, want)
		}
	}
}

func TestGiteaWIPTitles(t *testing.T) {
	// Draft titles: Gitea's default prefixes in any case are drafts; a new
	// draft gets "WIP: "; an edit keeps the prefix the draft had and adds
	// none to a request that is no draft.
	for title, draft := range map[string]bool{
		"WIP: x": true, "wip:x": true, "[WIP] x": true, "[wip]x": true,
		"Draft: x": false, "WIP x": false, "x WIP:": false, "": false,
	} {
		if got := giteaDraft.Prefix(title) != ""; got != draft {
			t.Errorf("%q is a draft: %t, want %t", title, got, draft)
		}
	}
	for _, c := range []struct {
		title string
		draft bool
		want  string
	}{
		{"x", false, "x"}, {"x", true, "WIP: x"}, {"[WIP] x", true, "[WIP] x"}, {"wip: x", true, "wip: x"},
	} {
		if got := giteaDraft.Create(c.title, c.draft); got != c.want {
			t.Errorf("create(%q, %t) = %q, want %q", c.title, c.draft, got, c.want)
		}
	}
	for _, c := range []struct {
		current forge.Request
		title   string
		want    string
	}{
		{forge.Request{Title: "WIP: old", Draft: true}, "new", "WIP: new"},
		{forge.Request{Title: "[WIP]old", Draft: true}, "new", "[WIP] new"},
		{forge.Request{Title: "WIP: old", Draft: true}, "[WIP] new", "[WIP] new"},
		{forge.Request{Title: "old", Draft: true}, "new", "WIP: new"}, // a draft by Gitea's own prefixes
		{forge.Request{Title: "old"}, "new", "new"},
	} {
		if got := giteaDraft.Edit(&c.current, c.title); got != c.want {
			t.Errorf("edit(%q, %q) = %q, want %q", c.current.Title, c.title, got, c.want)
		}
	}
}
