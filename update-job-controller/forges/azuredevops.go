package forges

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// AzureDevOps is Azure DevOps Services (dev.azure.com, and the older
// ORG.visualstudio.com) and Azure DevOps Server.
const AzureDevOps forge.Provider = "azuredevops"

// AzureDevOpsForge is the registry entry of Azure DevOps. Its git URLs are
// https://dev.azure.com/ORG/PROJECT/_git/REPO,
// git@ssh.dev.azure.com:v3/ORG/PROJECT/REPO and
// https://ORG.visualstudio.com/PROJECT/_git/REPO; the repository is
// ORG/PROJECT/REPO (an Azure DevOps Server's COLLECTION/PROJECT/REPO).
var AzureDevOpsForge = forge.Forge{
	Provider: AzureDevOps,
	Hosts:    []string{"dev.azure.com", "ssh.dev.azure.com"},
	Words:    []string{"visualstudio.com"},
	APIURL: func(scheme, host, hostport string) string {
		if host == "ssh.dev.azure.com" || host == "dev.azure.com" || strings.HasSuffix(host, ".visualstudio.com") {
			return "https://dev.azure.com/"
		}
		return scheme + "://" + hostport + "/"
	},
	Subgroups:  true,
	Repository: azureDevOpsRepository,
	CommitPage: "/commit/",
	// GC marks a commit (GB a branch) in branchCompare's versions.
	ComparePage: func(from, to string) string { return "/branchCompare?baseVersion=GC" + from + "&targetVersion=GC" + to },
	Web:         azureDevOpsWeb,
	New:         newAzureDevOps,
}

// azureDevOpsWeb is the repository's page: an https git URL's own, and
// for an SSH URL of dev.azure.com (v3/ORG/PROJECT/REPO), the https one.
func azureDevOpsWeb(host, path string) (string, string) {
	if parts := strings.Split(path, "/"); host == "ssh.dev.azure.com" && len(parts) == 4 && parts[0] == "v3" {
		return "dev.azure.com", parts[1] + "/" + parts[2] + "/_git/" + parts[3]
	}
	return host, path
}

// azureDevOpsRepository is ORG/PROJECT/REPO of a git URL's path. A
// repository named as its project may leave the project out
// (ORG/_git/REPO); an ORG.visualstudio.com host names the organization.
func azureDevOpsRepository(host, path string) (string, error) {
	parts := strings.Split(path, "/")
	if org, ok := strings.CutSuffix(host, ".visualstudio.com"); ok {
		parts = append([]string{org}, parts...)
		if len(parts) > 1 && strings.EqualFold(parts[1], "DefaultCollection") {
			parts = slices.Delete(parts, 1, 2)
		}
	}
	switch i := slices.Index(parts, "_git"); {
	case host == "ssh.dev.azure.com" && len(parts) == 4 && parts[0] == "v3":
		parts = parts[1:]
	case i == 1 && len(parts) == 3:
		parts = []string{parts[0], parts[2], parts[2]}
	case i == 2 && len(parts) == 4:
		parts = slices.Delete(parts, 2, 3)
	default:
		return "", fmt.Errorf("an Azure DevOps repository is https://dev.azure.com/ORGANIZATION/PROJECT/_git/REPOSITORY or git@ssh.dev.azure.com:v3/ORGANIZATION/PROJECT/REPOSITORY, not path %q (for Azure DevOps Server under a path, set pullRequest.apiURL to the URL before the collection)", path)
	}
	return strings.Join(parts, "/"), nil
}

// azureDevOpsForge keeps pull requests of one Azure DevOps repository
// through its REST API 7.1 (learn.microsoft.com/rest/api/azure/devops/git/
// pull-requests). A personal access token goes by basic authentication
// (with the Secret's username, which Azure DevOps ignores, or none); an
// Entra ID token (a JWT) is a bearer token.
//
// Auto-merge is Azure DevOps' auto-complete, set by the request's creator
// with the merge strategy; labels are the request's tags; reviewers are
// identity ids (GUIDs), as the API takes them. A request has no
// assignees: asking for them is refused (forge.ErrUnsupported). A
// description is at most 4,000 characters: a longer body is cut, saying so.
type azureDevOpsForge struct {
	api                *rest
	org, project, repo string
}

func newAzureDevOps(opts forge.Options, hc *http.Client) (forge.Client, error) {
	api, err := newREST(AzureDevOps, opts, hc, azureDevOpsMessage)
	if err != nil {
		return nil, err
	}
	// A personal access token is a password by basic authentication,
	// with any user or none; an Entra ID token (a JWT) is a bearer token.
	api.basic = !isJWT(opts.Token)
	parts := strings.Split(opts.Repository, "/")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%s: repository %q is not ORGANIZATION/PROJECT/REPOSITORY", AzureDevOps, opts.Repository)
	}
	return &azureDevOpsForge{api: api, org: parts[0], project: parts[1], repo: parts[2]}, nil
}

// isJWT tells a JSON Web Token (Entra ID's access tokens) from a personal
// access token, which has no dots.
func isJWT(token string) bool {
	return strings.HasPrefix(token, "eyJ") && strings.Count(token, ".") == 2
}

// azureDevOpsMessage reads Azure DevOps' error shape, {"message": …,
// "typeKey": …}.
func azureDevOpsMessage(body []byte) (string, error) {
	var e struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
		return "", fmt.Errorf("not Azure DevOps' error: %v", err)
	}
	return e.Message, nil
}

const azureDevOpsAPIVersion = "7.1"

type azureDevOpsPR struct {
	ID                    int    `json:"pullRequestId"`
	Status                string `json:"status"`
	Title                 string `json:"title"`
	Description           string `json:"description"`
	SourceRefName         string `json:"sourceRefName"`
	TargetRefName         string `json:"targetRefName"`
	IsDraft               bool   `json:"isDraft"`
	LastMergeSourceCommit *struct {
		CommitID string `json:"commitId"`
	} `json:"lastMergeSourceCommit"`
	CreatedBy struct {
		ID string `json:"id"`
	} `json:"createdBy"`
}

func (a *azureDevOpsForge) request(pr *azureDevOpsPR) *forge.Request {
	r := &forge.Request{Number: pr.ID, Title: pr.Title, Body: pr.Description, Draft: pr.IsDraft, State: forge.Open,
		Head: strings.TrimPrefix(pr.SourceRefName, "refs/heads/"), Base: strings.TrimPrefix(pr.TargetRefName, "refs/heads/"),
		URL: a.api.root + pathEscape(a.org, a.project, "_git", a.repo, "pullrequest", strconv.Itoa(pr.ID))}
	switch pr.Status {
	case "completed":
		r.State = forge.Merged
	case "abandoned":
		r.State = forge.Closed
	}
	if pr.LastMergeSourceCommit != nil {
		r.HeadCommit = pr.LastMergeSourceCommit.CommitID
	}
	return r
}

func (a *azureDevOpsForge) path(parts ...string) string {
	return pathEscape(append([]string{a.org, a.project, "_apis", "git", "repositories", a.repo, "pullrequests"}, parts...)...)
}

func version(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set("api-version", azureDevOpsAPIVersion)
	return q
}

func (a *azureDevOpsForge) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	// The search criteria name both branches: at most one request of a
	// pair is active.
	q := version(url.Values{
		"searchCriteria.sourceRefName": {"refs/heads/" + head},
		"searchCriteria.targetRefName": {"refs/heads/" + base},
		"searchCriteria.status":        {"active"},
	})
	var list struct {
		Value []azureDevOpsPR `json:"value"`
	}
	if err := a.api.call(ctx, fmt.Sprintf("finding the open pull request from %s into %s", head, base), http.MethodGet, a.path(), q, nil, &list); err != nil {
		return nil, err
	}
	for i := range list.Value {
		if r := a.request(&list.Value[i]); r.Head == head && r.Base == base && r.State == forge.Open {
			return r, nil
		}
	}
	return nil, nil
}

// strategies are Azure DevOps' merge strategies for forge's methods.
var azureDevOpsStrategies = map[forge.MergeMethod]string{forge.Merge: "noFastForward", forge.Squash: "squash", forge.Rebase: "rebase"}

// maxDescription is the longest description Azure DevOps takes.
const maxDescription = 4000

func description(body string) string {
	if utf8.RuneCountInString(body) <= maxDescription {
		return body
	}
	const cut = "\n\n… (cut at Azure DevOps' 4,000 characters)"
	runes := []rune(body)
	return string(runes[:maxDescription-utf8.RuneCountInString(cut)]) + cut
}

func (a *azureDevOpsForge) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	if len(req.Assignees) > 0 {
		return nil, unsupported(AzureDevOps, "Azure DevOps pull requests have no assignees (pullRequest.assignees, --pr-assignee): ask reviewers instead (pullRequest.reviewers, --pr-reviewer)")
	}
	strategy, ok := azureDevOpsStrategies[req.AutoMerge]
	if req.AutoMerge != "" && !ok {
		return nil, unsupported(AzureDevOps, "no Azure DevOps merge strategy for %q", req.AutoMerge)
	}
	type id struct {
		ID string `json:"id"`
	}
	type label struct {
		Name string `json:"name"`
	}
	body := struct {
		SourceRefName string  `json:"sourceRefName"`
		TargetRefName string  `json:"targetRefName"`
		Title         string  `json:"title"`
		Description   string  `json:"description"`
		IsDraft       bool    `json:"isDraft,omitempty"`
		Reviewers     []id    `json:"reviewers,omitempty"`
		Labels        []label `json:"labels,omitempty"`
	}{SourceRefName: "refs/heads/" + req.Head, TargetRefName: "refs/heads/" + req.Base, Title: req.Title,
		Description: description(req.Body), IsDraft: req.Draft}
	for _, r := range req.Reviewers {
		body.Reviewers = append(body.Reviewers, id{r})
	}
	for _, l := range req.Labels {
		body.Labels = append(body.Labels, label{l})
	}
	var pr azureDevOpsPR
	if err := a.api.call(ctx, "creating the pull request", http.MethodPost, a.path(), version(nil), body, &pr); err != nil {
		return nil, err
	}
	created := a.request(&pr)
	if req.AutoMerge == "" {
		return created, nil
	}
	in := map[string]any{
		"autoCompleteSetBy": id{pr.CreatedBy.ID},
		"completionOptions": map[string]any{"mergeStrategy": strategy},
	}
	if err := a.api.call(ctx, fmt.Sprintf("setting pull request #%d to complete itself", pr.ID), http.MethodPatch,
		a.path(strconv.Itoa(pr.ID)), version(nil), in, nil); err != nil {
		return created, err
	}
	return created, nil
}

func (a *azureDevOpsForge) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	var pr azureDevOpsPR
	in := map[string]string{"title": title, "description": description(body)}
	if err := a.api.call(ctx, fmt.Sprintf("editing pull request #%d", current.Number), http.MethodPatch,
		a.path(strconv.Itoa(current.Number)), version(nil), in, &pr); err != nil {
		return nil, err
	}
	return a.request(&pr), nil
}

func (a *azureDevOpsForge) Close(ctx context.Context, current *forge.Request, comment string) error {
	id := strconv.Itoa(current.Number)
	thread := map[string]any{
		"comments": []map[string]any{{"parentCommentId": 0, "content": comment, "commentType": "text"}},
		"status":   "closed",
	}
	if err := a.api.call(ctx, fmt.Sprintf("commenting on pull request #%d", current.Number), http.MethodPost,
		a.path(id, "threads"), version(nil), thread, nil); err != nil {
		return err
	}
	return a.api.call(ctx, fmt.Sprintf("abandoning pull request #%d", current.Number), http.MethodPatch,
		a.path(id), version(nil), map[string]string{"status": "abandoned"}, nil)
}
