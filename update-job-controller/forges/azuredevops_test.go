package forges

// Azure DevOps cannot run here, so the adapter is tested at the HTTP level
// against exchanges written from Microsoft's public REST API 7.1
// documentation (learn.microsoft.com/rest/api/azure/devops/git/: "Pull
// Requests - Get Pull Requests" with searchCriteria.sourceRefName,
// targetRefName and status; "Create" with reviewers by id, labels, isDraft;
// "Update" for the title, description, status abandoned, and
// autoCompleteSetBy with completionOptions.mergeStrategy; "Pull Request
// Threads - Create"; the {"message": …, "typeKey": …} error shape; a PAT by
// basic authentication, an Entra ID token as a bearer; the sign-in page
// with 203 for a token it does not accept), trimmed to the fields the
// adapter reads. The replay server (replay_test.go) checks each request in
// order.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"toolkit.dev/image-toolkit/pkg/forge"
)

const (
	azToken = "7kq3stpat0ken4zure5valuex2mplezzzzzzzzzzzzzzzzzzzzzz"
	azPRs   = "/acme/platform/_apis/git/repositories/fleet/pullrequests"
	azUser  = "d6245f20-2af8-44f4-9451-8107cb2767db"
)

func azNew(t *testing.T, srv *httptest.Server, token string) forge.Client {
	t.Helper()
	c, err := forge.New(forge.Options{Provider: AzureDevOps, APIURL: srv.URL + "/", Repository: "acme/platform/fleet",
		Token: token, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func azPR(id int, status, title string) string {
	return fmt.Sprintf(`{"pullRequestId": %d, "status": %q, "title": %q, "description": "Bumps app to 1.2.4",
		"sourceRefName": "refs/heads/image-update/app", "targetRefName": "refs/heads/main", "isDraft": false,
		"lastMergeSourceCommit": {"commitId": %q}, "createdBy": {"id": %q, "displayName": "deploy-bot"},
		"repository": {"id": "3411ebc1-d5aa-464f-9615-0b527bc66719", "name": "fleet"}}`, id, status, title, bbSHA, azUser)
}

// One update stream's life on Azure DevOps: none is active; one is opened
// with a reviewer and a tag and set to auto-complete by its creator with
// the squash strategy; found again, edited, then commented on in a closed
// thread and abandoned. A PAT goes by basic authentication.
func TestAzureDevOpsKeepsOneRequestPerStream(t *testing.T) {
	search := url.Values{"searchCriteria.sourceRefName": {"refs/heads/image-update/app"}, "searchCriteria.targetRefName": {"refs/heads/main"},
		"searchCriteria.status": {"active"}, "api-version": {"7.1"}}
	v := url.Values{"api-version": {"7.1"}}
	srv := replayer{authHeader: "Authorization", auth: basicAuth("", azToken), exact: true}.serve(t,
		replayCall{method: "GET", path: azPRs, query: search, reply: `{"value": [], "count": 0}`},
		replayCall{method: "POST", path: azPRs, query: v,
			body: `{"sourceRefName": "refs/heads/image-update/app", "targetRefName": "refs/heads/main", "title": "Update app",
				"description": "Bumps app to 1.2.4", "reviewers": [{"id": "` + azUser + `"}], "labels": [{"name": "images"}]}`,
			status: http.StatusCreated, reply: azPR(7, "active", "Update app")},
		replayCall{method: "PATCH", path: azPRs + "/7", query: v,
			body: `{"autoCompleteSetBy": {"id": "` + azUser + `"}, "completionOptions": {"mergeStrategy": "squash"}}`, reply: azPR(7, "active", "Update app")},
		replayCall{method: "GET", path: azPRs, query: search, reply: `{"value": [` + azPR(7, "active", "Update app") + `], "count": 1}`},
		replayCall{method: "PATCH", path: azPRs + "/7", query: v, body: `{"title": "Update app to 1.2.5", "description": "Bumps app to 1.2.4"}`,
			reply: azPR(7, "active", "Update app to 1.2.5")},
		replayCall{method: "POST", path: azPRs + "/7/threads", query: v,
			body: `{"comments": [{"parentCommentId": 0, "content": "main has the change", "commentType": "text"}], "status": "closed"}`, reply: `{"id": 12}`},
		replayCall{method: "PATCH", path: azPRs + "/7", query: v, body: `{"status": "abandoned"}`, reply: azPR(7, "abandoned", "Update app to 1.2.5")},
	)
	want := &forge.Request{Number: 7, URL: srv.URL + "/acme/platform/_git/fleet/pullrequest/7", State: forge.Open, Title: "Update app",
		Body: "Bumps app to 1.2.4", Head: "image-update/app", Base: "main", HeadCommit: bbSHA}
	playStream(t, azNew(t, srv, azToken), forge.NewRequest{Head: "image-update/app", Base: "main", Title: "Update app", Body: "Bumps app to 1.2.4",
		Reviewers: []string{azUser}, Labels: []string{"images"}, AutoMerge: forge.Squash}, want)
}

// An Entra ID token is a bearer token; the sign-in page Azure DevOps
// answers a token it does not accept with is a refused token, not a
// success; a refusal quotes its message; assignees are refused before
// anything is opened; a description over 4,000 characters is cut, saying so.
func TestAzureDevOpsSaysWhatItAnswered(t *testing.T) {
	jwt := "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiI0OTliODRhYyJ9.c2lnbmF0dXJl"
	srv := replayer{authHeader: "Authorization", auth: "Bearer " + jwt}.serve(t,
		replayCall{method: "GET", path: azPRs, status: http.StatusNonAuthoritativeInfo, reply: `<html><body>Sign In</body></html>`},
		replayCall{method: "POST", path: azPRs, status: http.StatusConflict,
			reply: `{"$id": "1", "innerException": null, "message": "TF401179: An active pull request for the source and target branch already exists.", "typeKey": "GitPullRequestExistsException"}`},
	)
	c := azNew(t, srv, jwt)
	ctx := context.Background()
	_, err := c.FindOpen(ctx, "h", "main")
	var fe *forge.Error
	if !errors.As(err, &fe) || !fe.Unauthorized() || !strings.Contains(err.Error(), "sign-in page") {
		t.Errorf("FindOpen: %v", err)
	}
	_, err = c.Create(ctx, forge.NewRequest{Head: "h", Base: "main", Title: "t", Body: strings.Repeat("ü", 5000)})
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "TF401179") {
		t.Errorf("Create: %v", err)
	}
	if _, err := c.Create(ctx, forge.NewRequest{Assignees: []string{"me"}}); !errors.Is(err, forge.ErrUnsupported) {
		t.Errorf("Create with assignees: %v", err)
	}
	if d := description(strings.Repeat("ü", 5000)); utf8.RuneCountInString(d) != maxDescription || !strings.HasSuffix(d, "(cut at Azure DevOps' 4,000 characters)") {
		t.Errorf("description of 5,000 characters: %d characters, ending %q", utf8.RuneCountInString(d), d[len(d)-40:])
	}
}

// Every git URL form Azure DevOps serves names its organization, project
// and repository, and its API is dev.azure.com's (an Azure DevOps Server's
// own host).
func TestAzureDevOpsReadsItsGitURLs(t *testing.T) {
	for _, tt := range []struct{ url, provider, api, wantAPI, repo, err string }{
		{url: "https://dev.azure.com/acme/platform/_git/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/platform/fleet"},
		{url: "https://acme@dev.azure.com/acme/platform/_git/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/platform/fleet"},
		{url: "git@ssh.dev.azure.com:v3/acme/platform/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/platform/fleet"},
		{url: "https://acme.visualstudio.com/platform/_git/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/platform/fleet"},
		{url: "https://acme.visualstudio.com/DefaultCollection/platform/_git/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/platform/fleet"},
		{url: "https://dev.azure.com/acme/_git/fleet", wantAPI: "https://dev.azure.com/", repo: "acme/fleet/fleet"},
		{url: "https://tfs.example.com/tfs/Main/platform/_git/fleet", provider: "azuredevops", api: "https://tfs.example.com/tfs/",
			wantAPI: "https://tfs.example.com/tfs/", repo: "Main/platform/fleet"},
		{url: "https://dev.azure.com/acme/platform/fleet", err: "is https://dev.azure.com/ORGANIZATION/PROJECT/_git/REPOSITORY"},
	} {
		ep, err := forge.Resolve(tt.url, forge.Provider(tt.provider), tt.api)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %+v, %v; want %q", tt.url, ep, err, tt.err)
			}
		case err != nil || *ep != (forge.Endpoint{Provider: AzureDevOps, APIURL: tt.wantAPI, Repository: tt.repo}):
			t.Errorf("%s: %+v, %v", tt.url, ep, err)
		}
	}
}
