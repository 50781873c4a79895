package forges

// GitHub cannot run here, so the adapter is tested at the HTTP level: each
// test plays recorded request/response exchanges written from GitHub's
// public documentation — REST pulls (https://docs.github.com/en/rest/pulls/pulls),
// labels (/rest/issues/labels), assignees (/rest/issues/assignees), review
// requests (/rest/pulls/review-requests), issue comments
// (/rest/issues/comments), the GraphQL mutation enablePullRequestAutoMerge
// (https://docs.github.com/en/graphql/reference/mutations), and the rate-limit
// headers x-ratelimit-remaining, x-ratelimit-reset and retry-after
// (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api)
// — with the documented status codes and field names, bodies trimmed to
// what the adapter reads. The replay server (replay_test.go) checks every
// request against the next expected one (method, path, query, JSON body,
// Authorization) in order, and the clients are made by New, so the wiring
// the job uses (base URL, token, rate-limit transport) is what is tested.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	gh "github.com/google/go-github/v75/github"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const (
	ghToken  = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
	ghPulls  = "/repos/org/app/pulls"
	ghIssue  = "/repos/org/app/issues/42"
	ghSHA    = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
	ghNodeID = "PR_kwDOAbc12s5Zp0Qx"
)

// ghServer replays GitHub's answers (see replayer), checking the token
// and each request's exact query and JSON body.
var ghServer = replayer{authHeader: "Authorization", auth: "Bearer " + ghToken, exact: true}.serve

// ghClient is the Client New makes for org/app on srv, as the job does.
func ghClient(t *testing.T, srv *httptest.Server, apiPath string) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{
		Provider: GitHub, APIURL: srv.URL + apiPath, Repository: "org/app", Token: ghToken,
		HTTPClient: srv.Client(), MaxRateLimitWait: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ghPull is a pull request as the pulls API returns it (trimmed), with
// fields replaced by over.
func ghPull(over map[string]any) string {
	pr := map[string]any{
		"url":       "https://api.github.com/repos/org/app/pulls/42",
		"id":        1296269,
		"node_id":   ghNodeID,
		"html_url":  "https://github.com/org/app/pull/42",
		"number":    42,
		"state":     "open",
		"locked":    false,
		"title":     "Update images",
		"body":      "Updates app to 1.2.3",
		"draft":     false,
		"merged_at": nil,
		"user":      map[string]any{"login": "image-bot", "id": 1},
		"head":      map[string]any{"label": "org:image-updates", "ref": "image-updates", "sha": ghSHA},
		"base":      map[string]any{"label": "org:main", "ref": "main", "sha": "a5b4c3d2e1f0a5b4c3d2e1f0a5b4c3d2e1f0a5b4"},
	}
	for k, v := range over {
		pr[k] = v
	}
	b, _ := json.Marshal(pr)
	return string(b)
}

var ghFindQuery = url.Values{"state": {"open"}, "head": {"org:image-updates"}, "base": {"main"}}

// ghWant is the Request of ghPull(nil).
var ghWant = forge.Request{
	Number: 42, URL: "https://github.com/org/app/pull/42", State: forge.Open, Title: "Update images",
	Body: "Updates app to 1.2.3", Head: "image-updates", Base: "main", HeadCommit: ghSHA,
}

// ghNoToken fails the test when err's message holds the token.
func ghNoToken(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), ghToken) {
		t.Errorf("the token is in the error: %v", err)
	}
}

// FindOpen asks for the open pull request of owner:head into base, and
// returns nil when GitHub lists none, or the first one, mapped.
func TestGitHubFindOpen(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		want  *forge.Request
	}{
		{name: "none", reply: `[]`},
		{name: "one", reply: "[" + ghPull(nil) + "]", want: &ghWant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ghServer(t, replayCall{method: "GET", path: ghPulls, query: ghFindQuery, reply: tt.reply})
			got, err := ghClient(t, srv, "/").FindOpen(t.Context(), "image-updates", "main")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A pull request's state is open, closed, or merged when merged_at is set
// (GitHub's state of a merged request is closed); draft and the head's
// commit are read too.
func TestGitHubRequestState(t *testing.T) {
	tests := []struct {
		name string
		over map[string]any
		want forge.State
	}{
		{"open", nil, forge.Open},
		{"closed", map[string]any{"state": "closed"}, forge.Closed},
		{"merged", map[string]any{"state": "closed", "merged_at": "2025-01-02T03:04:05Z"}, forge.Merged},
		{"merged flag", map[string]any{"state": "closed", "merged": true}, forge.Merged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pr gh.PullRequest
			if err := json.Unmarshal([]byte(ghPull(tt.over)), &pr); err != nil {
				t.Fatal(err)
			}
			if got := gitHubRequest(&pr); got.State != tt.want || got.HeadCommit != ghSHA || got.Draft {
				t.Errorf("got %+v, want state %s", got, tt.want)
			}
		})
	}
	var pr gh.PullRequest
	if err := json.Unmarshal([]byte(ghPull(map[string]any{"draft": true})), &pr); err != nil {
		t.Fatal(err)
	}
	if !gitHubRequest(&pr).Draft {
		t.Error("draft not read")
	}
}

// ghCreateCalls are the calls of a Create with every extra, in order:
// the pull request, labels, assignees, reviewers (users and a team's
// slug), then auto-merge by squash over GraphQL with the request's node ID.
func ghCreateCalls(prefix string, labels replayCall) []replayCall {
	return []replayCall{
		{method: "POST", path: prefix + ghPulls,
			body:   `{"title":"Update images","head":"image-updates","base":"main","body":"Updates app to 1.2.3","draft":true}`,
			status: http.StatusCreated, reply: ghPull(map[string]any{"draft": true})},
		labels,
		{method: "POST", path: prefix + ghIssue + "/assignees", body: `{"assignees":["alice"]}`,
			status: http.StatusCreated, reply: `{"number":42,"assignees":[{"login":"alice","id":2}]}`},
		{method: "POST", path: prefix + ghPulls + "/42/requested_reviewers", body: `{"reviewers":["bob","carol"],"team_reviewers":["platform"]}`,
			status: http.StatusCreated, reply: ghPull(map[string]any{"draft": true, "requested_reviewers": []any{map[string]any{"login": "bob"}}})},
		{method: "POST", path: ghGraphQLPath(prefix), graphQL: map[string]any{"pullRequestId": ghNodeID, "mergeMethod": "SQUASH"},
			reply: `{"data":{"enablePullRequestAutoMerge":{"pullRequest":{"autoMergeRequest":{"enabledAt":"2025-01-02T03:04:05Z"}}}}}`},
	}
}

func ghGraphQLPath(prefix string) string {
	if prefix == "/api/v3" {
		return "/api/graphql"
	}
	return "/graphql"
}

var ghLabelsAdded = replayCall{method: "POST", path: ghIssue + "/labels", body: `["images","automated"]`,
	reply: `[{"id":208045946,"node_id":"MDU6TGFiZWwyMDgwNDU5NDY=","name":"images","color":"f29513","default":false},` +
		`{"id":208045947,"node_id":"MDU6TGFiZWwyMDgwNDU5NDc=","name":"automated","color":"a2eeef","default":false}]`}

var ghNewRequest = forge.NewRequest{
	Head: "image-updates", Base: "main", Title: "Update images", Body: "Updates app to 1.2.3", Draft: true,
	Labels: []string{"images", "automated"}, Assignees: []string{"alice"}, Reviewers: []string{"bob", "org/platform", "carol"},
	AutoMerge: forge.Squash,
}

// Create opens the pull request, then adds labels, assignees, reviewers
// (a team named org/slug goes in team_reviewers) and enables auto-merge,
// one call each in that order, and returns the opened request.
func TestGitHubCreate(t *testing.T) {
	srv := ghServer(t, ghCreateCalls("", ghLabelsAdded)...)
	got, err := ghClient(t, srv, "/").Create(t.Context(), ghNewRequest)
	if err != nil {
		t.Fatal(err)
	}
	want := ghWant
	want.Draft = true
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %+v, want %+v", *got, want)
	}
}

// Create without extras is the one call, and draft false is sent as such.
func TestGitHubCreatePlain(t *testing.T) {
	srv := ghServer(t, replayCall{method: "POST", path: ghPulls,
		body:   `{"title":"Update images","head":"image-updates","base":"main","body":"","draft":false}`,
		status: http.StatusCreated, reply: ghPull(nil)})
	got, err := ghClient(t, srv, "/").Create(t.Context(), forge.NewRequest{Head: "image-updates", Base: "main", Title: "Update images"})
	if err != nil || got.Number != 42 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// When adding labels fails after the pull request exists, Create returns
// the request and the labels' error, and still makes the other calls (the
// runner does not retry them).
func TestGitHubCreateLabelsRefused(t *testing.T) {
	refused := replayCall{method: "POST", path: ghIssue + "/labels", body: `["images","automated"]`, status: http.StatusForbidden,
		reply: `{"message":"Resource not accessible by personal access token","documentation_url":"https://docs.github.com/rest/issues/labels#add-labels-to-an-issue","status":"403"}`}
	srv := ghServer(t, ghCreateCalls("", refused)...)
	got, err := ghClient(t, srv, "/").Create(t.Context(), ghNewRequest)
	if got == nil || got.Number != 42 || got.URL != ghWant.URL {
		t.Fatalf("request = %+v, want #42", got)
	}
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusForbidden || fe.Op != "adding labels to the pull request" ||
		!strings.Contains(err.Error(), "Resource not accessible by personal access token") {
		t.Errorf("err = %v", err)
	}
	ghNoToken(t, err)
}

// A GraphQL answer with errors (200, as GraphQL answers) fails auto-merge
// with GitHub's first message and the usual cause, after the request
// exists.
func TestGitHubAutoMergeRefused(t *testing.T) {
	srv := ghServer(t,
		replayCall{method: "POST", path: ghPulls,
			body:   `{"title":"Update images","head":"image-updates","base":"main","body":"Updates app to 1.2.3","draft":false}`,
			status: http.StatusCreated, reply: ghPull(nil)},
		replayCall{method: "POST", path: "/graphql", graphQL: map[string]any{"pullRequestId": ghNodeID, "mergeMethod": "REBASE"},
			reply: `{"data":{"enablePullRequestAutoMerge":null},"errors":[{"type":"UNPROCESSABLE","path":["enablePullRequestAutoMerge"],` +
				`"locations":[{"line":2,"column":3}],"message":"Auto merge is not allowed for this repository"},` +
				`{"type":"UNPROCESSABLE","message":"second"}]}`},
	)
	got, err := ghClient(t, srv, "/").Create(t.Context(), forge.NewRequest{Head: "image-updates", Base: "main",
		Title: "Update images", Body: "Updates app to 1.2.3", AutoMerge: forge.Rebase})
	if got == nil || got.Number != 42 {
		t.Fatalf("request = %+v", got)
	}
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.Op != "enabling auto-merge" || fe.StatusCode != 0 ||
		!strings.Contains(fe.Message, "Auto merge is not allowed for this repository") ||
		!strings.Contains(fe.Message, `"Allow auto-merge" is off in the repository's settings`) ||
		strings.Contains(fe.Message, "second") {
		t.Errorf("err = %v", err)
	}
}

// A GraphQL endpoint that refuses the token (401, REST-style body) is an
// Unauthorized Error naming what GitHub said.
func TestGitHubAutoMergeUnauthorized(t *testing.T) {
	srv := ghServer(t,
		replayCall{method: "POST", path: ghPulls,
			body:   `{"title":"t","head":"image-updates","base":"main","body":"","draft":false}`,
			status: http.StatusCreated, reply: ghPull(nil)},
		replayCall{method: "POST", path: "/graphql", graphQL: map[string]any{"pullRequestId": ghNodeID, "mergeMethod": "MERGE"},
			status: http.StatusUnauthorized, reply: `{"message":"Bad credentials","documentation_url":"https://docs.github.com/graphql"}`},
	)
	got, err := ghClient(t, srv, "/").Create(t.Context(), forge.NewRequest{Head: "image-updates", Base: "main", Title: "t", AutoMerge: forge.Merge})
	var fe *forge.Error
	if got == nil || !errors.As(err, &fe) || !fe.Unauthorized() || !strings.Contains(err.Error(), "Bad credentials") {
		t.Errorf("got %+v, err = %v", got, err)
	}
}

// An unknown merge method fails auto-merge without a call.
func TestGitHubAutoMergeUnknownMethod(t *testing.T) {
	srv := ghServer(t, replayCall{method: "POST", path: ghPulls,
		body:   `{"title":"t","head":"image-updates","base":"main","body":"","draft":false}`,
		status: http.StatusCreated, reply: ghPull(nil)})
	got, err := ghClient(t, srv, "/").Create(t.Context(), forge.NewRequest{Head: "image-updates", Base: "main", Title: "t", AutoMerge: "fast-forward"})
	if got == nil || err == nil || !strings.Contains(err.Error(), `unknown merge method "fast-forward"`) {
		t.Errorf("got %+v, err = %v", got, err)
	}
}

// Edit sends the title and body alone (not the base or state) and returns
// the request as GitHub answers it.
func TestGitHubEdit(t *testing.T) {
	srv := ghServer(t, replayCall{method: "PATCH", path: ghPulls + "/42", body: `{"title":"Update images (2)","body":""}`,
		reply: ghPull(map[string]any{"title": "Update images (2)", "body": nil})})
	got, err := ghClient(t, srv, "/").Edit(t.Context(), &ghWant, "Update images (2)", "")
	if err != nil {
		t.Fatal(err)
	}
	want := ghWant
	want.Title, want.Body = "Update images (2)", ""
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %+v, want %+v", *got, want)
	}
}

// Close comments on the request, then sets its state to closed; without a
// comment it only closes.
func TestGitHubClose(t *testing.T) {
	closeCall := replayCall{method: "PATCH", path: ghPulls + "/42", body: `{"state":"closed"}`, reply: ghPull(map[string]any{"state": "closed"})}
	tests := []struct {
		name    string
		comment string
		calls   []replayCall
	}{
		{name: "with comment", comment: "Already on main.", calls: []replayCall{
			{method: "POST", path: ghIssue + "/comments", body: `{"body":"Already on main."}`, status: http.StatusCreated,
				reply: `{"id":1,"node_id":"MDEyOklzc3VlQ29tbWVudDE=","html_url":"https://github.com/org/app/pull/42#issuecomment-1","body":"Already on main."}`},
			closeCall,
		}},
		{name: "without comment", calls: []replayCall{closeCall}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ghServer(t, tt.calls...)
			if err := ghClient(t, srv, "/").Close(t.Context(), &ghWant, tt.comment); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A failed comment stops Close before it closes the request.
func TestGitHubCloseCommentRefused(t *testing.T) {
	srv := ghServer(t, replayCall{method: "POST", path: ghIssue + "/comments", body: `{"body":"c"}`, status: http.StatusNotFound,
		reply: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest/issues/comments#create-an-issue-comment","status":"404"}`})
	err := ghClient(t, srv, "/").Close(t.Context(), &ghWant, "c")
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusNotFound || fe.Op != "commenting on pull request #42" {
		t.Errorf("err = %v", err)
	}
}

// GitHub's refusals become Errors that say what GitHub said and what was
// being done: a refused token is Unauthorized, a 404 names the path and
// GitHub's message, a 422 lists its details, and the token never shows,
// not even when GitHub's message repeats it.
func TestGitHubErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		reply  string
		want   []string
		check  func(*forge.Error) bool
	}{
		{name: "401", status: http.StatusUnauthorized,
			reply: `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`,
			want:  []string{"github: creating the pull request: 401 Unauthorized", "Bad credentials"},
			check: (*forge.Error).Unauthorized},
		{name: "404", status: http.StatusNotFound,
			reply: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest/pulls/pulls#create-a-pull-request","status":"404"}`,
			want:  []string{"404 Not Found: POST /repos/org/app/pulls: Not Found", "does not exist"},
			check: func(e *forge.Error) bool { return e.StatusCode == 404 && !e.Unauthorized() && !e.RateLimited() }},
		{name: "422", status: http.StatusUnprocessableEntity,
			reply: `{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for org:image-updates."}],` +
				`"documentation_url":"https://docs.github.com/rest/pulls/pulls#create-a-pull-request","status":"422"}`,
			want:  []string{"Validation Failed: A pull request already exists for org:image-updates."},
			check: func(e *forge.Error) bool { return e.StatusCode == 422 }},
		{name: "422 by code", status: http.StatusUnprocessableEntity,
			reply: `{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"base","code":"invalid"}]}`,
			want:  []string{"Validation Failed: PullRequest base invalid"},
			check: func(e *forge.Error) bool { return e.StatusCode == 422 }},
		{name: "token echoed", status: http.StatusBadRequest,
			reply: `{"message":"Problems parsing token ` + ghToken + `"}`,
			want:  []string{"Problems parsing token xxxxx"},
			check: func(e *forge.Error) bool { return e.StatusCode == 400 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ghServer(t, replayCall{method: "POST", path: ghPulls,
				body:   `{"title":"t","head":"image-updates","base":"main","body":"","draft":false}`,
				status: tt.status, reply: tt.reply})
			got, err := ghClient(t, srv, "/").Create(t.Context(), forge.NewRequest{Head: "image-updates", Base: "main", Title: "t"})
			var fe *forge.Error
			if got != nil || !errors.As(err, &fe) || !tt.check(fe) {
				t.Fatalf("got %+v, err = %#v", got, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want %q", err, w)
				}
			}
			ghNoToken(t, err)
		})
	}
}

// ghRateLimited is GitHub's answer to a request over the primary rate
// limit: 403 with x-ratelimit-remaining 0 and the reset in Unix seconds.
func ghRateLimited(c replayCall, reset time.Time) replayCall {
	c.status = http.StatusForbidden
	c.header = map[string]string{
		"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-used": "5000",
		"x-ratelimit-reset": strconv.FormatInt(reset.Unix(), 10), "x-ratelimit-resource": "core",
	}
	c.reply = `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`
	return c
}

// A 403 of an exhausted limit whose reset is a second ahead is waited out
// by the transport and sent again, body and all, and the call succeeds.
func TestGitHubRateLimitRetried(t *testing.T) {
	edit := replayCall{method: "PATCH", path: ghPulls + "/42", body: `{"title":"Update images","body":"b"}`,
		header: map[string]string{"x-ratelimit-remaining": "4999", "x-ratelimit-reset": strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)},
		reply:  ghPull(map[string]any{"body": "b"})}
	srv := ghServer(t, ghRateLimited(edit, time.Now().Add(time.Second)), edit)
	got, err := ghClient(t, srv, "/").Edit(t.Context(), &ghWant, "Update images", "b")
	if err != nil || got.Body != "b" {
		t.Fatalf("got %+v, err = %v", got, err)
	}
}

// A reset far ahead is not waited for: the call fails at once with a
// rate-limited 403 Error whose RetryAfter is the time to the reset. The
// next call is refused by go-github itself, without a request (it
// remembers the exhausted limit), and is the same kind of Error.
func TestGitHubRateLimitFarAhead(t *testing.T) {
	reset := time.Now().Add(time.Hour)
	srv := ghServer(t, ghRateLimited(replayCall{method: "GET", path: ghPulls, query: ghFindQuery}, reset))
	c := ghClient(t, srv, "/")
	for i := range 2 {
		start := time.Now()
		got, err := c.FindOpen(t.Context(), "image-updates", "main")
		var fe *forge.Error
		if got != nil || !errors.As(err, &fe) || !fe.RateLimited() || fe.StatusCode != http.StatusForbidden ||
			fe.RetryAfter < 58*time.Minute || fe.RetryAfter > time.Hour || time.Since(start) > 2*time.Second {
			t.Fatalf("call %d: got %+v, err = %v", i+1, got, err)
		}
		if !strings.Contains(err.Error(), "rate limited: retry in") {
			t.Errorf("call %d: err = %v", i+1, err)
		}
		ghNoToken(t, err)
	}
}

// A secondary rate limit (403 with retry-after and the secondary limit's
// documentation URL, or 429) is an Error with that wait and status.
func TestGitHubSecondaryRateLimit(t *testing.T) {
	tests := []struct {
		name   string
		status int
		wait   time.Duration
	}{
		{"403", http.StatusForbidden, 2 * time.Minute},
		{"429", http.StatusTooManyRequests, 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ghServer(t, replayCall{method: "GET", path: ghPulls, query: ghFindQuery, status: tt.status,
				header: map[string]string{"retry-after": strconv.Itoa(int(tt.wait.Seconds()))},
				reply: `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",` +
					`"documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`})
			_, err := ghClient(t, srv, "/").FindOpen(t.Context(), "image-updates", "main")
			var fe *forge.Error
			if !errors.As(err, &fe) || fe.StatusCode != tt.status || fe.RetryAfter != tt.wait ||
				!strings.Contains(fe.Message, "secondary rate limit") {
				t.Errorf("err = %#v", err)
			}
		})
	}
}

// go-github's rate-limit errors, which it also makes up without a request
// (a 403 with no headers), become Errors with the wait they carry — the
// primary limit's reset, the secondary limit's Retry-After, else the
// minute GitHub asks for — and status 403, or 429 when GitHub said so.
func TestGitHubRateLimitMapping(t *testing.T) {
	now := time.Now()
	resp := func(status int) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{}, Request: &http.Request{Method: "GET", URL: &url.URL{Path: ghPulls}}}
	}
	ptr := func(d time.Duration) *time.Duration { return &d }
	tests := []struct {
		name       string
		err        error
		start      forge.Error
		wantStatus int
		wantWait   time.Duration
	}{
		{name: "primary", err: &gh.RateLimitError{Rate: gh.Rate{Reset: gh.Timestamp{Time: now.Add(10 * time.Minute)}}, Response: resp(403)},
			start: forge.Error{StatusCode: 403}, wantStatus: 403, wantWait: 10 * time.Minute},
		{name: "primary, reset passed", err: &gh.RateLimitError{Rate: gh.Rate{Reset: gh.Timestamp{Time: now.Add(-time.Minute)}}, Response: resp(403)},
			start: forge.Error{StatusCode: 403}, wantStatus: 403, wantWait: time.Second},
		{name: "primary, no response", err: &gh.RateLimitError{Rate: gh.Rate{Reset: gh.Timestamp{Time: now.Add(time.Minute)}}},
			wantStatus: 403, wantWait: time.Minute},
		{name: "secondary with retry-after", err: &gh.AbuseRateLimitError{RetryAfter: ptr(30 * time.Second), Response: resp(403)},
			start: forge.Error{StatusCode: 403}, wantStatus: 403, wantWait: 30 * time.Second},
		{name: "secondary without", err: &gh.AbuseRateLimitError{Response: resp(403)},
			start: forge.Error{StatusCode: 403}, wantStatus: 403, wantWait: time.Minute},
		{name: "secondary 429", err: &gh.AbuseRateLimitError{RetryAfter: ptr(5 * time.Second), Response: resp(429)},
			start: forge.Error{StatusCode: 429}, wantStatus: 429, wantWait: 5 * time.Second},
		{name: "headers say longer", err: &gh.AbuseRateLimitError{RetryAfter: ptr(5 * time.Second), Response: resp(403)},
			start: forge.Error{StatusCode: 403, RetryAfter: time.Minute}, wantStatus: 403, wantWait: time.Minute},
		{name: "wrapped", err: fmt.Errorf("x: %w", &gh.AbuseRateLimitError{Response: resp(403)}),
			start: forge.Error{StatusCode: 403}, wantStatus: 403, wantWait: time.Minute},
		{name: "not a rate limit", err: &gh.ErrorResponse{Message: "Not Found", Response: resp(404)},
			start: forge.Error{StatusCode: 404}, wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := tt.start
			gitHubRateLimit(&fe, tt.err, now)
			if fe.StatusCode != tt.wantStatus || fe.RetryAfter.Round(time.Second) != tt.wantWait {
				t.Errorf("status %d, wait %s; want %d, %s", fe.StatusCode, fe.RetryAfter, tt.wantStatus, tt.wantWait)
			}
		})
	}
}

// On GitHub Enterprise Server the REST calls go under /api/v3/ and
// auto-merge to /api/graphql, with the instance's web URLs.
func TestGitHubEnterprise(t *testing.T) {
	calls := ghCreateCalls("/api/v3", replayCall{})
	calls = append(calls[:1], calls[2:]...) // no labels
	calls[0].reply = ghPull(map[string]any{"draft": true, "html_url": "https://github.example.com/org/app/pull/42"})
	calls = append([]replayCall{{method: "GET", path: "/api/v3" + ghPulls, query: ghFindQuery, reply: `[]`}}, calls...)
	srv := ghServer(t, calls...)
	c := ghClient(t, srv, "/api/v3/")
	if got, err := c.FindOpen(t.Context(), "image-updates", "main"); got != nil || err != nil {
		t.Fatalf("got %+v, err = %v", got, err)
	}
	req := ghNewRequest
	req.Labels = nil
	got, err := c.Create(t.Context(), req)
	if err != nil || got.URL != "https://github.example.com/org/app/pull/42" {
		t.Fatalf("got %+v, err = %v", got, err)
	}
}

// The GraphQL endpoint sits beside the REST API: /graphql on api.github.com
// (and GHE.com's api. hosts), /api/graphql on Enterprise Server.
func TestGitHubGraphQLURL(t *testing.T) {
	tests := map[string]string{
		"https://api.github.com/":                "https://api.github.com/graphql",
		"https://github.example.com/api/v3/":     "https://github.example.com/api/graphql",
		"https://github.example.com/api/v3":      "https://github.example.com/api/graphql",
		"https://api.acme.ghe.com/":              "https://api.acme.ghe.com/graphql",
		"http://127.0.0.1:8080/":                 "http://127.0.0.1:8080/graphql",
		"https://git.example.com/github/api/v3/": "https://git.example.com/github/api/graphql",
	}
	for api, want := range tests {
		base, err := gitHubBaseURL(api)
		if err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		if got := gitHubGraphQLURL(base); got != want {
			t.Errorf("%s: %s, want %s", api, got, want)
		}
	}
}

// An API URL that is not http(s) is refused when the client is made.
func TestGitHubBadAPIURL(t *testing.T) {
	_, err := forge.New(forge.Options{Provider: GitHub, APIURL: "ftp://github.example.com/", Repository: "org/app", Token: ghToken})
	if err == nil || !strings.Contains(err.Error(), "is not an http(s) URL") {
		t.Errorf("err = %v", err)
	}
}
