package forges

// GitLab cannot run here, so the adapter is tested at the HTTP level: each
// test plays recorded request/response exchanges, written from GitLab's
// public REST API documentation (https://docs.gitlab.com/api/merge_requests/,
// https://docs.gitlab.com/api/notes/, https://docs.gitlab.com/api/users/,
// and the rate-limit headers RateLimit-Remaining, RateLimit-Reset and
// Retry-After of https://docs.gitlab.com/security/rate_limits/), with the
// documented field names, trimmed to what the adapter reads. The replay
// server (replay_test.go) checks every request against the next expected
// one (method, escaped path, query, JSON body fields, PRIVATE-TOKEN) in
// order, and the clients are made by New, so the wiring the job uses (base
// URL, transport, no library retries) is what is tested.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const (
	glToken = "glpat-Zq8xT3stT0kenV4lue"
	// glMRs is the merge requests of group/sub/app: the nested path is one
	// escaped segment, as GitLab wants a project path in place of its ID.
	glMRs   = "/api/v4/projects/group%2Fsub%2Fapp/merge_requests"
	glUsers = "/api/v4/users"
	glSHA   = "1a0b36d0f1a5f4c3f2e1d9b8a7c6b5a4d3c2b1a0"
)

// glServer replays GitLab's answers (see replayer), checking the token
// and the query parameters and JSON body fields each request must have.
var glServer = replayer{authHeader: "PRIVATE-TOKEN", auth: glToken}.serve

func glNew(t *testing.T, srv *httptest.Server) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{
		Provider:         GitLab,
		APIURL:           srv.URL + "/",
		Repository:       "group/sub/app",
		Token:            glToken,
		HTTPClient:       srv.Client(),
		MaxRateLimitWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// glMR is a merge request as GitLab documents it (single and list
// responses share these fields), from the project's own branch.
func glMR(iid int, title string, draft bool) string {
	return fmt.Sprintf(`{"id": %d, "iid": %d, "project_id": 3, "title": %q,
		"description": "Bumps app to 1.2.4", "state": "opened",
		"target_branch": "main", "source_branch": "image-update/app",
		"source_project_id": 3, "target_project_id": 3,
		"draft": %t, "work_in_progress": %t, "sha": %q,
		"web_url": "https://gitlab.example.com/group/sub/app/-/merge_requests/%d"}`,
		1000+iid, iid, title, draft, draft, glSHA, iid)
}

func glUser(id int, name string) string {
	return fmt.Sprintf(`[{"id": %d, "username": %q, "name": %q, "state": "active",
		"web_url": "https://gitlab.example.com/%s"}]`, id, name, strings.ToUpper(name[:1])+name[1:], name)
}

func glWant(iid int, title string, draft bool) *forge.Request {
	return &forge.Request{
		Number: iid, URL: fmt.Sprintf("https://gitlab.example.com/group/sub/app/-/merge_requests/%d", iid),
		State: forge.Open, Title: title, Body: "Bumps app to 1.2.4", Head: "image-update/app", Base: "main",
		HeadCommit: glSHA, Draft: draft,
	}
}

func glErrorOf(t *testing.T, err error) *forge.Error {
	t.Helper()
	var e *forge.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *forge.Error", err, err)
	}
	if strings.Contains(err.Error(), glToken) {
		t.Errorf("the token shows in %q", err)
	}
	return e
}

// FindOpen asks for the project's opened merge requests from head into
// base, maps GitLab's fields, returns nil when there is none, skips a
// fork's request from a branch of the same name, and reads a title prefix
// as a draft on versions without the draft field.
func TestGitLabFindOpen(t *testing.T) {
	fork := `{"id": 2001, "iid": 9, "title": "Fork's change", "state": "opened",
		"target_branch": "main", "source_branch": "image-update/app",
		"source_project_id": 77, "target_project_id": 3, "sha": "ffff"}`
	oldDraft := `{"id": 1012, "iid": 12, "title": "Draft: Update app", "description": "Bumps app to 1.2.4",
		"state": "opened", "target_branch": "main", "source_branch": "image-update/app",
		"source_project_id": 3, "target_project_id": 3, "work_in_progress": true, "sha": "` + glSHA + `",
		"web_url": "https://gitlab.example.com/group/sub/app/-/merge_requests/12"}`
	tests := []struct {
		name  string
		reply string
		want  *forge.Request
	}{
		{"none", `[]`, nil},
		{"one", `[` + glMR(4, "Update app", false) + `]`, glWant(4, "Update app", false)},
		{"draft", `[` + glMR(5, "Draft: Update app", true) + `]`, glWant(5, "Draft: Update app", true)},
		{"fork skipped", `[` + fork + `,` + glMR(6, "Update app", false) + `]`, glWant(6, "Update app", false)},
		{"only a fork", `[` + fork + `]`, nil},
		{"draft by title", `[` + oldDraft + `]`, glWant(12, "Draft: Update app", true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := glServer(t, replayCall{
				method: "GET", path: glMRs,
				query: url.Values{"state": {"opened"}, "source_branch": {"image-update/app"}, "target_branch": {"main"}},
				reply: tt.reply,
			})
			got, err := glNew(t, srv).FindOpen(context.Background(), "image-update/app", "main")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Create resolves user names to IDs first (each name once), then opens the
// merge request with labels, assignees, reviewers, "Draft: " for a draft,
// remove_source_branch and squash for a squash auto-merge, and then sets
// it to merge when the pipeline succeeds, pinned to the head commit; a
// rebase auto-merge is a plain merge, and without auto-merge no merge call
// is made.
func TestGitLabCreate(t *testing.T) {
	created := glMR(7, "Update app", false)
	tests := []struct {
		name  string
		req   forge.NewRequest
		calls []replayCall
		want  *forge.Request
	}{{
		name: "plain",
		req:  forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app", Body: "Bumps app to 1.2.4"},
		calls: []replayCall{{
			method: "POST", path: glMRs, status: 201, reply: created,
			body: `{"source_branch": "image-update/app", "target_branch": "main", "title": "Update app",
				"description": "Bumps app to 1.2.4", "remove_source_branch": true}`,
			absent: []string{"labels", "assignee_ids", "reviewer_ids", "squash"},
		}},
		want: glWant(7, "Update app", false),
	}, {
		name: "everything, squash",
		req: forge.NewRequest{
			Head: "image-update/app", Base: "main", Title: "Update app", Body: "Bumps app to 1.2.4", Draft: true,
			Labels: []string{"dependencies", "image-update"}, Assignees: []string{"alice", "bob"},
			Reviewers: []string{"carol", "Alice"}, AutoMerge: forge.Squash,
		},
		calls: []replayCall{
			{method: "GET", path: glUsers, query: url.Values{"username": {"alice"}}, reply: glUser(11, "alice")},
			{method: "GET", path: glUsers, query: url.Values{"username": {"bob"}}, reply: glUser(12, "bob")},
			{method: "GET", path: glUsers, query: url.Values{"username": {"carol"}}, reply: glUser(13, "carol")},
			{
				method: "POST", path: glMRs, status: 201, reply: glMR(8, "Draft: Update app", true),
				body: `{"source_branch": "image-update/app", "target_branch": "main", "title": "Draft: Update app",
					"description": "Bumps app to 1.2.4", "labels": "dependencies,image-update",
					"assignee_ids": [11, 12], "reviewer_ids": [13, 11], "remove_source_branch": true, "squash": true}`,
			},
			{
				method: "PUT", path: glMRs + "/8/merge", reply: glMR(8, "Draft: Update app", true),
				body: `{"merge_when_pipeline_succeeds": true, "auto_merge": true, "squash": true, "sha": "` + glSHA + `"}`,
			},
		},
		want: glWant(8, "Draft: Update app", true),
	}, {
		name: "rebase merges",
		req:  forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app", Body: "Bumps app to 1.2.4", AutoMerge: forge.Rebase},
		calls: []replayCall{
			{method: "POST", path: glMRs, status: 201, reply: created, body: `{"title": "Update app"}`, absent: []string{"squash"}},
			{
				method: "PUT", path: glMRs + "/7/merge", reply: created,
				body: `{"merge_when_pipeline_succeeds": true}`, absent: []string{"squash"},
			},
		},
		want: glWant(7, "Update app", false),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := glServer(t, tt.calls...)
			got, err := glNew(t, srv).Create(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// An assignee or reviewer name GitLab does not know fails the call, naming
// it, before the merge request is created (the server would flag the POST).
func TestGitLabCreateUnknownUser(t *testing.T) {
	srv := glServer(t,
		replayCall{method: "GET", path: glUsers, query: url.Values{"username": {"alice"}}, reply: glUser(11, "alice")},
		replayCall{method: "GET", path: glUsers, query: url.Values{"username": {"mallory"}}, reply: `[]`},
	)
	got, err := glNew(t, srv).Create(context.Background(), forge.NewRequest{
		Head: "image-update/app", Base: "main", Title: "Update app",
		Assignees: []string{"alice"}, Reviewers: []string{"mallory"},
	})
	if got != nil {
		t.Errorf("got a request %+v", got)
	}
	glErrorOf(t, err)
	if !strings.Contains(err.Error(), `reviewer "mallory"`) {
		t.Errorf("err = %v, want it to name the reviewer mallory", err)
	}
}

// When GitLab will not set the new merge request to auto-merge (405 no
// pipeline, 406, 422 not mergeable), Create returns the request it made and
// an Error saying auto-merge could not be enabled and what GitLab said; any
// other failure of that call also returns the request.
func TestGitLabAutoMergeRefused(t *testing.T) {
	tests := []struct {
		status  int
		reply   string
		refused bool
		said    string
	}{
		{405, `{"message": "405 Method Not Allowed"}`, true, "405 Method Not Allowed"},
		{406, `{"message": "Branch cannot be merged"}`, true, "Branch cannot be merged"},
		{422, `{"message": "Merge request is not mergeable"}`, true, "Merge request is not mergeable"},
		{500, `{"message": "500 Internal Server forge.Error"}`, false, "500 Internal Server forge.Error"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			srv := glServer(t,
				replayCall{method: "POST", path: glMRs, status: 201, reply: glMR(7, "Update app", false)},
				replayCall{method: "PUT", path: glMRs + "/7/merge", status: tt.status, reply: tt.reply},
			)
			got, err := glNew(t, srv).Create(context.Background(), forge.NewRequest{
				Head: "image-update/app", Base: "main", Title: "Update app", AutoMerge: forge.Merge,
			})
			if !reflect.DeepEqual(got, glWant(7, "Update app", false)) {
				t.Errorf("got %+v, want the created request", got)
			}
			e := glErrorOf(t, err)
			if e.StatusCode != tt.status || !strings.Contains(e.Message, tt.said) {
				t.Errorf("err = %v, want %d saying %q", err, tt.status, tt.said)
			}
			if refused := strings.Contains(err.Error(), "auto-merge could not be enabled"); refused != tt.refused {
				t.Errorf("err = %v, want 'could not be enabled' %t", err, tt.refused)
			}
		})
	}
}

// Edit sets the title and description; a draft keeps its draft prefix (in
// its own style) when the new title lacks one, and a request a person took
// out of draft gets none back.
func TestGitLabEdit(t *testing.T) {
	tests := []struct {
		name    string
		current *forge.Request
		title   string
		sent    string
	}{
		{"draft kept", glWant(4, "Draft: Update app", true), "Update app to 1.2.5", "Draft: Update app to 1.2.5"},
		{"bracket style kept", glWant(4, "[Draft] Update app", true), "Update app to 1.2.5", "[Draft] Update app to 1.2.5"},
		{"draft flag only", glWant(4, "Update app", true), "Update app to 1.2.5", "Draft: Update app to 1.2.5"},
		{"already prefixed", glWant(4, "Draft: Update app", true), "(Draft) Update app to 1.2.5", "(Draft) Update app to 1.2.5"},
		{"undrafted by a person", glWant(4, "Update app", false), "Update app to 1.2.5", "Update app to 1.2.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := glServer(t, replayCall{
				method: "PUT", path: glMRs + "/4",
				body:  fmt.Sprintf(`{"title": %q, "description": "Bumps app to 1.2.5"}`, tt.sent),
				reply: glMR(4, tt.sent, false),
			})
			got, err := glNew(t, srv).Edit(context.Background(), tt.current, tt.title, "Bumps app to 1.2.5")
			if err != nil {
				t.Fatal(err)
			}
			if got.Title != tt.sent || got.Number != 4 {
				t.Errorf("got %+v", got)
			}
		})
	}
}

// Close posts the comment as a note, then closes the merge request with
// state_event=close; an empty comment posts no note.
func TestGitLabClose(t *testing.T) {
	note := `{"id": 302, "body": "Superseded by !8", "noteable_type": "MergeRequest", "noteable_iid": 4,
		"author": {"id": 1, "username": "image-bot"}, "system": false}`
	closed := strings.Replace(glMR(4, "Update app", false), `"state": "opened"`, `"state": "closed"`, 1)
	closeCall := replayCall{
		method: "PUT", path: glMRs + "/4", body: `{"state_event": "close"}`, absent: []string{"title", "description"}, reply: closed,
	}
	tests := []struct {
		name    string
		comment string
		calls   []replayCall
	}{
		{"with comment", "Superseded by !8", []replayCall{
			{method: "POST", path: glMRs + "/4/notes", status: 201, body: `{"body": "Superseded by !8"}`, reply: note},
			closeCall,
		}},
		{"without comment", "", []replayCall{closeCall}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := glServer(t, tt.calls...)
			if err := glNew(t, srv).Close(context.Background(), glWant(4, "Update app", false), tt.comment); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// GitLab's refusals become Errors that say what GitLab answered: 401 is
// Unauthorized, a 404 quotes GitLab's "404 Project Not Found" (which the
// library alone would drop), a validation failure lists its fields, a rate
// limit too far ahead is handed back with RetryAfter; the token never
// shows, even when the answer quotes it.
func TestGitLabErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header map[string]string
		reply  string
		check  func(*forge.Error) bool
		said   string
	}{
		{"401", 401, nil, `{"message": "401 Unauthorized"}`, (*forge.Error).Unauthorized, "401 Unauthorized"},
		{"404 project", 404, nil, `{"message": "404 Project Not Found"}`,
			func(e *forge.Error) bool { return e.StatusCode == 404 }, "404 Project Not Found"},
		{"403 quoting the token", 403, nil, `{"error": "insufficient_scope", "error_description": "The token ` + glToken + ` lacks the api scope."}`,
			func(e *forge.Error) bool { return e.StatusCode == 403 && !e.RateLimited() }, "insufficient_scope: The token xxxxx lacks the api scope."},
		{"400 validation", 400, nil, `{"message": {"source_branch": ["can't be blank"], "title": ["can't be blank"]}}`,
			func(e *forge.Error) bool { return e.StatusCode == 400 }, "source_branch can't be blank; title can't be blank"},
		{"429 far ahead", 429, map[string]string{"Retry-After": "3600", "RateLimit-Remaining": "0"}, `Retry later`,
			func(e *forge.Error) bool { return e.RateLimited() && e.RetryAfter > 30*time.Minute }, "429 Too Many Requests: Retry later"},
		{"502 from a proxy", 502, map[string]string{"Content-Type": "text/html"}, "<html>\n<head><title>502 Bad Gateway</title></head>\n</html>",
			func(e *forge.Error) bool { return e.StatusCode == 502 }, "502 Bad Gateway: an HTML page, not the API's JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := glServer(t, replayCall{method: "GET", path: glMRs, status: tt.status, header: tt.header, reply: tt.reply})
			start := time.Now()
			_, err := glNew(t, srv).FindOpen(context.Background(), "image-update/app", "main")
			e := glErrorOf(t, err)
			if !tt.check(e) || !strings.Contains(err.Error(), tt.said) {
				t.Errorf("err = %v (%+v), want it to say %q", err, e, tt.said)
			}
			if time.Since(start) > 3*time.Second {
				t.Errorf("took %s: a long rate-limit wait must be handed back, not waited", time.Since(start))
			}
		})
	}
}

// No answer at all (nothing listens) is an Error without a status, and a
// cancelled context is returned as such; neither shows the token.
func TestGitLabNoAnswer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	c := glNew(t, srv)
	srv.Close()
	_, err := c.FindOpen(context.Background(), "image-update/app", "main")
	if e := glErrorOf(t, err); e.StatusCode != 0 {
		t.Errorf("err = %v, want no status", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.FindOpen(ctx, "image-update/app", "main")
	if !errors.Is(err, context.Canceled) || strings.Contains(fmt.Sprint(err), glToken) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// A 429 with Retry-After: 1 is waited out and sent again by the transport
// of forge.go, once, request body and all (the library's own retries are
// off, so exactly two requests reach GitLab).
func TestGitLabRateLimitRetried(t *testing.T) {
	limited := replayCall{status: 429, header: map[string]string{
		"Retry-After": "1", "RateLimit-Remaining": "0", "RateLimit-Limit": "600",
		"RateLimit-Reset": fmt.Sprint(time.Now().Add(time.Second).Unix()),
	}, reply: `Retry later`}
	tests := []struct {
		name string
		call replayCall
		run  func(forge.Client) error
	}{{
		name: "find",
		call: replayCall{method: "GET", path: glMRs, query: url.Values{"state": {"opened"}}, reply: `[` + glMR(4, "Update app", false) + `]`},
		run: func(c forge.Client) error {
			got, err := c.FindOpen(context.Background(), "image-update/app", "main")
			if err == nil && (got == nil || got.Number != 4) {
				err = fmt.Errorf("found %+v", got)
			}
			return err
		},
	}, {
		name: "create",
		call: replayCall{method: "POST", path: glMRs, status: 201, body: `{"title": "Update app", "source_branch": "image-update/app"}`, reply: glMR(7, "Update app", false)},
		run: func(c forge.Client) error {
			_, err := c.Create(context.Background(), forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app"})
			return err
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := limited
			first.method, first.path, first.query, first.body = tt.call.method, tt.call.path, tt.call.query, tt.call.body
			srv := glServer(t, first, tt.call)
			start := time.Now()
			if err := tt.run(glNew(t, srv)); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Errorf("retried after %s, want the 1s GitLab asked for", d)
			}
		})
	}
}

// The project's full path is one escaped segment of the URL however deep
// its groups are (a dot escaped too, as the library does so that GitLab
// does not read it as a format suffix).
func TestGitLabProjectPathEscaped(t *testing.T) {
	tests := []struct{ repo, path string }{
		{"group/app", "/api/v4/projects/group%2Fapp/merge_requests"},
		{"group/sub/app", glMRs},
		{"a/b/c/my.app", "/api/v4/projects/a%2Fb%2Fc%2Fmy%2Eapp/merge_requests"},
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			srv := glServer(t, replayCall{method: "GET", path: tt.path, reply: `[]`})
			c, err := forge.New(forge.Options{Provider: GitLab, APIURL: srv.URL + "/", Repository: tt.repo, Token: glToken, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.FindOpen(context.Background(), "image-update/app", "main"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An instance served under a path (https://host/gitlab/) has its API under
// that path.
func TestGitLabAPIUnderPath(t *testing.T) {
	srv := glServer(t, replayCall{method: "GET", path: "/gitlab" + glMRs, reply: `[]`})
	c, err := forge.New(forge.Options{Provider: GitLab, APIURL: srv.URL + "/gitlab/", Repository: "group/sub/app", Token: glToken, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.FindOpen(context.Background(), "image-update/app", "main"); err != nil {
		t.Fatal(err)
	}
}

// Calls are not paced by the RateLimit-Limit GitLab sends with every
// answer (the library would space them out once it saw one); a limit is
// only waited out when GitLab says it is reached.
func TestGitLabNoPacing(t *testing.T) {
	limits := map[string]string{"RateLimit-Limit": "60", "RateLimit-Remaining": "57", "RateLimit-Observed": "3"}
	srv := glServer(t,
		replayCall{method: "GET", path: glMRs, header: limits, reply: `[` + glMR(4, "Update app", false) + `]`},
		replayCall{method: "POST", path: glMRs + "/4/notes", status: 201, header: limits, reply: `{"id": 302, "body": "Superseded"}`},
		replayCall{method: "PUT", path: glMRs + "/4", header: limits, reply: glMR(4, "Update app", false)},
	)
	c := glNew(t, srv)
	start := time.Now()
	mr, err := c.FindOpen(context.Background(), "image-update/app", "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(context.Background(), mr, "Superseded"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("three calls took %s: paced", d)
	}
}
