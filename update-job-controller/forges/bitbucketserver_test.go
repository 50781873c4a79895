package forges

// Bitbucket Data Center cannot run here, so the adapter is tested at the
// HTTP level against exchanges written from Atlassian's public REST API
// documentation for Data Center (developer.atlassian.com/server/bitbucket/
// rest/, "Pull requests": list with state, direction and at, paged by
// start/limit with isLastPage and nextPageStart; create with fromRef and
// toRef, reviewers by user name, draft; PUT with the version to edit;
// comments with text; decline and merge with the version, merge taking
// autoMerge and strategyId; the {"errors": [{"message": …}]} error shape;
// HTTP access tokens as bearer tokens), trimmed to the fields the adapter
// reads. The replay server (replay_test.go) checks each request in order.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const (
	bbsToken = "BBDC-NzQ3MzE1NjU4OTk6Q3stT0kenV4lue"
	bbsPRs   = "/rest/api/1.0/projects/OPS/repos/fleet/pull-requests"
)

func bbsNew(t *testing.T, srv *httptest.Server) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{Provider: BitbucketServer, APIURL: srv.URL + "/rest/api/1.0/", Repository: "OPS/fleet",
		Token: bbsToken, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bbsPR(id, version int, state, title string) string {
	return fmt.Sprintf(`{"id": %d, "version": %d, "title": %q, "description": "Bumps app to 1.2.4",
		"state": %q, "open": %t, "closed": %t, "draft": false,
		"reviewers": [{"user": {"name": "jdoe", "slug": "jdoe"}, "role": "REVIEWER", "approved": false, "status": "UNAPPROVED"}],
		"fromRef": {"id": "refs/heads/image-update/app", "displayId": "image-update/app", "latestCommit": %q,
			"repository": {"slug": "fleet", "project": {"key": "OPS"}}},
		"toRef": {"id": "refs/heads/main", "displayId": "main", "latestCommit": "0f1e2d3c",
			"repository": {"slug": "fleet", "project": {"key": "OPS"}}},
		"links": {"self": [{"href": "https://bitbucket.example.com/projects/OPS/repos/fleet/pull-requests/%d"}]}}`,
		id, version, title, state, state == "OPEN", state != "OPEN", bbSHA, id)
}

// One update stream's life on Bitbucket Data Center: none is open; one is
// opened with a reviewer and asked to merge itself with the squash
// strategy at its version; found among the branch's outgoing requests on
// the second page; edited and declined at the versions the server has.
func TestBitbucketServerKeepsOneRequestPerStream(t *testing.T) {
	list := func(start string) url.Values {
		return url.Values{"state": {"OPEN"}, "direction": {"OUTGOING"}, "at": {"refs/heads/image-update/app"}, "limit": {"50"}, "start": {start}}
	}
	ref := func(branch string) string {
		return `{"id": "refs/heads/` + branch + `", "repository": {"slug": "fleet", "project": {"key": "OPS"}}}`
	}
	other := strings.ReplaceAll(bbsPR(2, 0, "OPEN", "x"), `"refs/heads/main"`, `"refs/heads/release"`)
	srv := replayer{authHeader: "Authorization", auth: "Bearer " + bbsToken, exact: true}.serve(t,
		replayCall{method: "GET", path: bbsPRs, query: list("0"), reply: `{"values": [], "isLastPage": true, "start": 0}`},
		replayCall{method: "POST", path: bbsPRs,
			body: `{"title": "Update app", "description": "Bumps app to 1.2.4", "fromRef": ` + ref("image-update/app") +
				`, "toRef": ` + ref("main") + `, "reviewers": [{"user": {"name": "jdoe"}}]}`,
			status: http.StatusCreated, reply: bbsPR(7, 0, "OPEN", "Update app")},
		replayCall{method: "POST", path: bbsPRs + "/7/merge", query: url.Values{"version": {"0"}},
			body: `{"autoMerge": true, "strategyId": "squash", "version": 0}`, reply: `{"autoMerge": true}`},
		replayCall{method: "GET", path: bbsPRs, query: list("0"),
			reply: `{"values": [` + other + `], "isLastPage": false, "nextPageStart": 1}`},
		replayCall{method: "GET", path: bbsPRs, query: list("1"), reply: `{"values": [` + bbsPR(7, 1, "OPEN", "Update app") + `], "isLastPage": true}`},
		replayCall{method: "GET", path: bbsPRs + "/7", reply: bbsPR(7, 1, "OPEN", "Update app")},
		// An update replaces the reviewers: the request's go back.
		replayCall{method: "PUT", path: bbsPRs + "/7", body: `{"version": 1, "title": "Update app to 1.2.5", "description": "Bumps app to 1.2.4",
				"reviewers": [{"user": {"name": "jdoe"}}]}`,
			reply: bbsPR(7, 2, "OPEN", "Update app to 1.2.5")},
		replayCall{method: "POST", path: bbsPRs + "/7/comments", body: `{"text": "main has the change"}`, status: http.StatusCreated, reply: `{"id": 11}`},
		replayCall{method: "GET", path: bbsPRs + "/7", reply: bbsPR(7, 2, "OPEN", "Update app to 1.2.5")},
		replayCall{method: "POST", path: bbsPRs + "/7/decline", query: url.Values{"version": {"2"}}, body: `{"version": 2}`,
			reply: bbsPR(7, 3, "DECLINED", "Update app to 1.2.5")},
	)
	want := &forge.Request{Number: 7, URL: "https://bitbucket.example.com/projects/OPS/repos/fleet/pull-requests/7", State: forge.Open,
		Title: "Update app", Body: "Bumps app to 1.2.4", Head: "image-update/app", Base: "main", HeadCommit: bbSHA}
	playStream(t, bbsNew(t, srv), forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app",
		Body: "Bumps app to 1.2.4", Reviewers: []string{"jdoe"}, AutoMerge: forge.Squash}, want)
}

// Labels and assignees are refused before anything is opened; a stale
// version's refusal (409) quotes every message Data Center gave.
func TestBitbucketServerSaysWhatItCannot(t *testing.T) {
	srv := replayer{authHeader: "Authorization", auth: "Bearer " + bbsToken}.serve(t,
		replayCall{method: "GET", path: bbsPRs + "/7", reply: bbsPR(7, 4, "OPEN", "t")},
		replayCall{method: "PUT", path: bbsPRs + "/7", status: http.StatusConflict,
			reply: `{"errors": [{"context": null, "message": "You are attempting to modify a pull request based on out-of-date information.", "exceptionName": "com.atlassian.bitbucket.pull.PullRequestOutOfDateException"}]}`},
	)
	c := bbsNew(t, srv)
	ctx := context.Background()
	for _, req := range []forge.NewRequest{{Labels: []string{"images"}}, {Assignees: []string{"me"}}} {
		if _, err := c.Create(ctx, req); !errors.Is(err, forge.ErrUnsupported) {
			t.Errorf("Create(%+v): %v, want ErrUnsupported", req, err)
		}
	}
	_, err := c.Edit(ctx, &forge.Request{Number: 7}, "t", "b")
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "out-of-date information") {
		t.Errorf("Edit: %v", err)
	}
}

// The git URLs Data Center serves name the API's project and repository:
// /scm/KEY/slug under any context path over https, KEY/slug over ssh.
func TestBitbucketServerReadsItsGitURLs(t *testing.T) {
	for _, tt := range []struct{ url, api, repo, err string }{
		{url: "https://bitbucket.example.com/scm/OPS/fleet.git", api: "https://bitbucket.example.com/rest/api/1.0/", repo: "OPS/fleet"},
		{url: "ssh://git@bitbucket.example.com:7999/ops/fleet.git", api: "https://bitbucket.example.com/rest/api/1.0/", repo: "ops/fleet"},
		{url: "https://git.example.com/bitbucket/scm/OPS/fleet.git", api: "https://git.example.com/bitbucket/rest/api/1.0/", repo: "OPS/fleet"},
		{url: "https://bitbucket.example.com/projects/OPS/repos/fleet", err: "is https://HOST/scm/KEY/SLUG"},
	} {
		provider := forge.Provider("")
		apiURL := ""
		if strings.Contains(tt.url, "git.example.com/bitbucket") {
			provider, apiURL = BitbucketServer, tt.api
		}
		ep, err := forge.Resolve(tt.url, provider, apiURL)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %+v, %v; want %q", tt.url, ep, err, tt.err)
			}
		case err != nil || *ep != (forge.Endpoint{Provider: BitbucketServer, APIURL: tt.api, Repository: tt.repo}):
			t.Errorf("%s: %+v, %v", tt.url, ep, err)
		}
	}
}
