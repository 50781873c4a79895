package forges

// Bitbucket Cloud cannot run here, so the adapter is tested at the HTTP
// level against exchanges written from Atlassian's public REST API 2.0
// documentation (developer.atlassian.com/cloud/bitbucket/rest/api-group-
// pullrequests/: list with state and the q filter language, paged by
// page/pagelen with a "next" link; create with source, destination,
// reviewers by account_id or uuid, draft; PUT to edit; POST comments with
// content.raw; POST decline; the {"type": "error", "error": {...}} error
// shape; basic authentication with an app password or API token, bearer
// with an access token; 429 with Retry-After), trimmed to the fields the
// adapter reads. The replay server (replay_test.go) checks each request in
// order: method, escaped path, query, JSON body and Authorization.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const (
	bbToken = "ATBBq7Zk3stT0kenV4lue"
	bbPRs   = "/2.0/repositories/acme/fleet/pullrequests"
	bbSHA   = "9c3e2f1a0b36d0f1a5f4c3f2e1d9b8a7c6b5a4d3"
)

func bbNew(t *testing.T, srv *httptest.Server, username string) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{Provider: Bitbucket, APIURL: srv.URL + "/2.0/", Repository: "acme/fleet",
		Token: bbToken, Username: username, HTTPClient: srv.Client(), MaxRateLimitWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// bbPR is a pull request as the API documents it.
func bbPR(id int, state, title string) string {
	return fmt.Sprintf(`{"type": "pullrequest", "id": %d, "title": %q, "description": "Bumps app to 1.2.4",
		"state": %q, "draft": false,
		"source": {"branch": {"name": "image-update/app"}, "commit": {"hash": %q}, "repository": {"full_name": "acme/fleet"}},
		"destination": {"branch": {"name": "main"}, "commit": {"hash": "0f1e2d3c4b5a"}},
		"links": {"html": {"href": "https://bitbucket.org/acme/fleet/pull-requests/%d"}}}`, id, title, state, bbSHA, id)
}

func bbWant(id int, title string) *forge.Request {
	return &forge.Request{Number: id, URL: fmt.Sprintf("https://bitbucket.org/acme/fleet/pull-requests/%d", id),
		State: forge.Open, Title: title, Body: "Bumps app to 1.2.4", Head: "image-update/app", Base: "main", HeadCommit: bbSHA}
}

// One update stream's life on Bitbucket Cloud: no open request is found,
// one is opened with its reviewers (an account id and a {uuid}), found
// again on a later page, edited in place keeping its reviewers, then
// commented on and declined.
// An app password goes with its user by basic authentication.
func TestBitbucketKeepsOneRequestPerStream(t *testing.T) {
	filter := `source.branch.name = "image-update/app" AND destination.branch.name = "main"`
	list := url.Values{"state": {"OPEN"}, "q": {filter}, "pagelen": {"50"}, "page": {"1"}}
	page2 := url.Values{"state": {"OPEN"}, "q": {filter}, "pagelen": {"50"}, "page": {"2"}}
	srv := replayer{authHeader: "Authorization", auth: basicAuth("deploy-bot", bbToken), exact: true}.serve(t,
		replayCall{method: "GET", path: bbPRs, query: list, reply: `{"values": [], "pagelen": 50, "page": 1}`},
		replayCall{method: "POST", path: bbPRs,
			body: `{"title": "Update app", "description": "Bumps app to 1.2.4",
				"source": {"branch": {"name": "image-update/app"}}, "destination": {"branch": {"name": "main"}},
				"reviewers": [{"account_id": "557058:3f2a"}, {"uuid": "{b1e2c3d4-0000-4a5b-9c8d-1e2f3a4b5c6d}"}]}`,
			status: http.StatusCreated, reply: bbPR(7, "OPEN", "Update app")},
		replayCall{method: "GET", path: bbPRs, query: list,
			reply: `{"values": [` + strings.Replace(bbPR(3, "OPEN", "x"), `"name": "main"`, `"name": "release"`, 1) + `], "next": "https://api.bitbucket.org/2.0/repositories/acme/fleet/pullrequests?page=2"}`},
		replayCall{method: "GET", path: bbPRs, query: page2, reply: `{"values": [` + bbPR(7, "OPEN", "Update app") + `]}`},
		// An update replaces the reviewers, and lists leave them out: the
		// request is read alone, and its reviewers sent back.
		replayCall{method: "GET", path: bbPRs + "/7", reply: strings.Replace(bbPR(7, "OPEN", "Update app"), `"state"`,
			`"reviewers": [{"type": "user", "account_id": "557058:3f2a", "uuid": "{9c0d7e6f-1111-4a5b-9c8d-1e2f3a4b5c6d}"}, {"type": "user", "uuid": "{b1e2c3d4-0000-4a5b-9c8d-1e2f3a4b5c6d}"}], "state"`, 1)},
		replayCall{method: "PUT", path: bbPRs + "/7", body: `{"title": "Update app to 1.2.5", "description": "Bumps app to 1.2.4",
				"reviewers": [{"uuid": "{9c0d7e6f-1111-4a5b-9c8d-1e2f3a4b5c6d}"}, {"uuid": "{b1e2c3d4-0000-4a5b-9c8d-1e2f3a4b5c6d}"}]}`,
			reply: bbPR(7, "OPEN", "Update app to 1.2.5")},
		replayCall{method: "POST", path: bbPRs + "/7/comments", body: `{"content": {"raw": "main has the change"}}`,
			status: http.StatusCreated, reply: `{"id": 1}`},
		replayCall{method: "POST", path: bbPRs + "/7/decline", reply: bbPR(7, "DECLINED", "Update app to 1.2.5")},
	)
	playStream(t, bbNew(t, srv, "deploy-bot"), forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app",
		Body: "Bumps app to 1.2.4", Reviewers: []string{"557058:3f2a", "{b1e2c3d4-0000-4a5b-9c8d-1e2f3a4b5c6d}"}}, bbWant(7, "Update app"))
}

// What Bitbucket Cloud's pull requests do not have is refused before
// anything is opened, as a refusal the engine does not retry; an access
// token (no user, or git's x-token-auth) is a bearer token.
func TestBitbucketRefusesWhatItHasNot(t *testing.T) {
	srv := replayer{authHeader: "Authorization", auth: "Bearer " + bbToken}.serve(t,
		replayCall{method: "GET", path: bbPRs, reply: `{"values": []}`})
	c := bbNew(t, srv, "")
	// git's user for an access token does not make it a password.
	if got, err := bbNew(t, srv, "x-token-auth").FindOpen(context.Background(), "h", "main"); err != nil || got != nil {
		t.Errorf("FindOpen with an access token as x-token-auth's password: %+v, %v", got, err)
	}
	for _, req := range []forge.NewRequest{
		{Labels: []string{"images"}}, {Assignees: []string{"me"}}, {AutoMerge: forge.Squash},
	} {
		req.Head, req.Base, req.Title = "h", "main", "t"
		if got, err := c.Create(context.Background(), req); got != nil || !errors.Is(err, forge.ErrUnsupported) {
			t.Errorf("Create(%+v) = %+v, %v; want ErrUnsupported", req, got, err)
		}
	}
}

// A refusal quotes Bitbucket's own words and never the token; a refused
// token is Unauthorized; a rate limit longer than the wait allowed comes
// back with its Retry-After.
func TestBitbucketSaysWhatItAnswered(t *testing.T) {
	srv := replayer{authHeader: "Authorization", auth: "Bearer " + bbToken}.serve(t,
		replayCall{method: "POST", path: bbPRs, status: http.StatusBadRequest,
			reply: `{"type": "error", "error": {"message": "There are no changes to be pulled", "detail": "source and destination are the same"}}`},
		replayCall{method: "GET", path: bbPRs, status: http.StatusUnauthorized,
			reply: `{"type": "error", "error": {"message": "Token is invalid, expired, or not supported for this endpoint."}}`},
		replayCall{method: "GET", path: bbPRs, status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "120"},
			reply: `{"type": "error", "error": {"message": "Rate limit for this resource has been exceeded"}}`},
	)
	c := bbNew(t, srv, "")
	ctx := context.Background()
	_, err := c.Create(ctx, forge.NewRequest{Head: "h", Base: "main", Title: "t"})
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.StatusCode != 400 || !strings.Contains(err.Error(), "There are no changes to be pulled: source and destination are the same") {
		t.Errorf("Create: %v", err)
	}
	_, err = c.FindOpen(ctx, "h", "main")
	if !errors.As(err, &fe) || !fe.Unauthorized() || strings.Contains(err.Error(), bbToken) || !strings.Contains(err.Error(), "Token is invalid") {
		t.Errorf("FindOpen, refused: %v", err)
	}
	_, err = c.FindOpen(ctx, "h", "main")
	if !errors.As(err, &fe) || !fe.RateLimited() || fe.RetryAfter != 2*time.Minute {
		t.Errorf("FindOpen, rate limited: %v", err)
	}
}

// The 2.0 schema names the description summary.raw: a request that comes
// without description still has its body, so an unchanged body is not
// edited at every update.
func TestBitbucketReadsTheSummaryAsTheBody(t *testing.T) {
	var pr bitbucketPR
	if err := json.Unmarshal([]byte(`{"id": 7, "title": "t", "summary": {"raw": "Bumps app", "markup": "markdown"}, "state": "OPEN"}`), &pr); err != nil {
		t.Fatal(err)
	}
	if r := pr.request(); r.Body != "Bumps app" {
		t.Errorf("body %q", r.Body)
	}
}
