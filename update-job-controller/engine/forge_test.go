package engine

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// notebook is an embedder's own forge: it keeps its requests in memory,
// as a program with an in-house review tool would keep them in its own
// system.
type notebook struct {
	mu              sync.Mutex
	token, username string
	requests        []forge.Request
}

func (n *notebook) FindOpen(_ context.Context, head, base string) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.requests {
		if r := n.requests[i]; r.Head == head && r.Base == base && r.State == forge.Open {
			return &r, nil
		}
	}
	return nil, nil
}

func (n *notebook) Create(_ context.Context, req forge.NewRequest) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := forge.Request{Number: len(n.requests) + 1, State: forge.Open, Title: req.Title, Body: req.Body, Head: req.Head, Base: req.Base}
	r.URL = "https://review.example/requests/" + strconv.Itoa(r.Number)
	n.requests = append(n.requests, r)
	return &r, nil
}

func (n *notebook) Edit(_ context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := &n.requests[current.Number-1]
	r.Title, r.Body = title, body
	out := *r
	return &out, nil
}

func (n *notebook) Close(_ context.Context, current *forge.Request, _ string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.requests[current.Number-1].State = forge.Closed
	return nil
}

// A forge that a program embedding the engine registers is one entry: the
// engine checks a plan naming it, pushes the head branch and keeps the
// request through it, with the token from the credentials, as it does
// with the built-in forges (a password with its user, for the forges that
// take it by basic authentication).
func TestAnEmbeddersForgeKeepsTheRequest(t *testing.T) {
	book := &notebook{}
	forge.Register(forge.Forge{Provider: "notebook", Hosts: []string{"review.example"},
		New: func(opts forge.Options, _ *http.Client) (forge.Client, error) {
			book.token, book.username = opts.Token, opts.Username
			return book, nil
		}})
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "team/fleet", map[string]string{"deploy/app.yaml": deployment})
	p := plan(srv.RepoURL("team/fleet"), func(p *writeback.Plan) {
		p.Path = "deploy"
		p.Target = writeback.Target{PullRequest: &writeback.PullRequest{Provider: "notebook", Base: "main"}}
		p.Commit.Automation = writeback.Object{Namespace: "apps", Name: "fleet"}
	})
	if err := Check(p); err != nil {
		t.Fatalf("Check of a plan naming the registered forge: %v", err)
	}
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{Git: &git.Auth{Username: "deploy-bot", Password: "review-token"}}, newCache(t))
	out, err := e.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if pr := out.PullRequest; pr == nil || pr.Action != meta.PullRequestOpened || pr.Number != 1 || pr.HeadBranch != "image-toolkit/apps-fleet" {
		t.Fatalf("pull request %+v, want #1 opened from image-toolkit/apps-fleet", out.PullRequest)
	}
	if book.token != "review-token" || book.username != "deploy-bot" || len(book.requests) != 1 || book.requests[0].Base != "main" {
		t.Errorf("the forge got token %q of user %q and requests %+v", book.token, book.username, book.requests)
	}
	if head := strings.TrimSpace(testgit.Git(t, srv.BarePath("team/fleet"), "rev-parse", "refs/heads/image-toolkit/apps-fleet")); head != out.Commit {
		t.Errorf("head branch at %s, want the run's commit %s", head, out.Commit)
	}
	again, err := e.Run(context.Background(), p)
	if err != nil || again.PullRequest == nil || again.PullRequest.Action != meta.PullRequestUnchanged || len(book.requests) != 1 {
		t.Errorf("second run: %+v, %v; requests %d, want the one request unchanged", again.PullRequest, err, len(book.requests))
	}
}
