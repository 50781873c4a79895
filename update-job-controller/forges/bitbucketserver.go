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

	"toolkit.dev/image-toolkit/pkg/forge"
)

// BitbucketServer is Bitbucket Data Center (formerly Server), self-hosted.
const BitbucketServer forge.Provider = "bitbucketserver"

// BitbucketServerForge is the registry entry of Bitbucket Data Center,
// told by "bitbucket" in a host's name (bitbucket.org itself is Cloud's).
// Its git URLs are https://HOST/scm/KEY/slug.git and
// ssh://git@HOST:7999/KEY/slug.git; the API names the repository
// projects/KEY/repos/slug.
var BitbucketServerForge = forge.Forge{
	Provider: BitbucketServer,
	Words:    []string{"bitbucket"},
	APIURL: func(scheme, host, hostport string) string {
		return scheme + "://" + hostport + "/rest/api/1.0/"
	},
	Repository: bitbucketServerRepository,
	CommitPage: "/commits/",
	Web:        bitbucketServerWeb,
	New:        newBitbucketServer,
}

// bitbucketServerWeb is the repository's page: [CONTEXT/]scm/KEY/slug
// (https) and KEY/slug (ssh) are [CONTEXT/]projects/KEY/repos/slug, a
// personal ~USER/slug is users/USER/repos/slug.
func bitbucketServerWeb(host, path string) (string, string) {
	parts := strings.Split(path, "/")
	var context []string
	if i := slices.Index(parts, "scm"); i >= 0 {
		context, parts = parts[:i], parts[i+1:]
	}
	if len(parts) != 2 {
		return host, path
	}
	kind, key := "projects", parts[0]
	if user, ok := strings.CutPrefix(key, "~"); ok {
		kind, key = "users", user
	}
	return host, strings.Join(append(context, kind, key, "repos", parts[1]), "/")
}

// bitbucketServerRepository is KEY/slug of an https path (under any
// context path: …/scm/KEY/slug) or an ssh one (KEY/slug, ~USER/slug for a
// personal repository).
func bitbucketServerRepository(_, path string) (string, error) {
	parts := strings.Split(path, "/")
	if i := slices.Index(parts, "scm"); i >= 0 {
		parts = parts[i+1:]
	}
	if len(parts) != 2 {
		return "", fmt.Errorf("a Bitbucket Data Center repository is https://HOST/scm/KEY/SLUG or ssh://git@HOST:PORT/KEY/SLUG, not path %q", path)
	}
	return parts[0] + "/" + parts[1], nil
}

// bitbucketServerForge keeps pull requests of one Bitbucket Data Center
// repository through its REST API 1.0 (developer.atlassian.com/server/
// bitbucket/rest). An HTTP access token is a bearer token; a password or a
// token with its user goes by basic authentication.
//
// Every change to a request names the version it changes (the API's
// optimistic locking), so Edit and Close read the request first. Data
// Center has no labels or assignees on pull requests: asking for them is
// refused (forge.ErrUnsupported). Auto-merge (Data Center 8.15 and later,
// when the repository allows it) is asked for with the merge strategy's
// id. Reviewers are user names (slugs).
type bitbucketServerForge struct {
	api                *rest
	project, repo      string
	pageSize, maxPages int
}

func newBitbucketServer(opts forge.Options, hc *http.Client) (forge.Client, error) {
	api, err := newREST(BitbucketServer, opts, hc, bitbucketServerMessage)
	if err != nil {
		return nil, err
	}
	project, repo, _ := strings.Cut(opts.Repository, "/")
	return &bitbucketServerForge{api: api, project: project, repo: repo, pageSize: bitbucketPageSize, maxPages: bitbucketMaxPages}, nil
}

// bitbucketServerMessage reads Data Center's error shape,
// {"errors": [{"message": …}, …]}.
func bitbucketServerMessage(body []byte) (string, error) {
	var e struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &e); err != nil || len(e.Errors) == 0 {
		return "", fmt.Errorf("not Bitbucket's error: %v", err)
	}
	var msgs []string
	for _, m := range e.Errors {
		msgs = append(msgs, m.Message)
	}
	return strings.Join(msgs, "; "), nil
}

type bitbucketServerRef struct {
	ID           string `json:"id"`
	DisplayID    string `json:"displayId,omitempty"`
	LatestCommit string `json:"latestCommit,omitempty"`
	Repository   *struct {
		Slug    string `json:"slug"`
		Project struct {
			Key string `json:"key"`
		} `json:"project"`
	} `json:"repository,omitempty"`
}

type bitbucketServerPR struct {
	ID      int `json:"id"`
	Version int `json:"version"`
	// Reviewers are sent back by an edit, which replaces them.
	Reviewers   []bitbucketServerReviewer `json:"reviewers"`
	Title       string                    `json:"title"`
	Description string                    `json:"description"`
	State       string                    `json:"state"`
	Draft       bool                      `json:"draft"`
	FromRef     bitbucketServerRef        `json:"fromRef"`
	ToRef       bitbucketServerRef        `json:"toRef"`
	Links       struct {
		Self []struct {
			Href string `json:"href"`
		} `json:"self"`
	} `json:"links"`
}

type bitbucketServerReviewer struct {
	User struct {
		Name string `json:"name"`
	} `json:"user"`
}

func (pr *bitbucketServerPR) request() *forge.Request {
	r := &forge.Request{Number: pr.ID, Title: pr.Title, Body: pr.Description, State: forge.Open, Draft: pr.Draft,
		Head: strings.TrimPrefix(pr.FromRef.ID, "refs/heads/"), Base: strings.TrimPrefix(pr.ToRef.ID, "refs/heads/"),
		HeadCommit: pr.FromRef.LatestCommit}
	if len(pr.Links.Self) > 0 {
		r.URL = pr.Links.Self[0].Href
	}
	switch pr.State {
	case "MERGED":
		r.State = forge.Merged
	case "DECLINED":
		r.State = forge.Closed
	}
	return r
}

func (b *bitbucketServerForge) path(parts ...string) string {
	return "projects/" + pathEscape(append([]string{b.project, "repos", b.repo, "pull-requests"}, parts...)...)
}

// ref is a branch of this repository, as a request's fromRef and toRef.
func (b *bitbucketServerForge) ref(branch string) bitbucketServerRef {
	r := bitbucketServerRef{ID: "refs/heads/" + branch}
	r.Repository = &struct {
		Slug    string `json:"slug"`
		Project struct {
			Key string `json:"key"`
		} `json:"project"`
	}{Slug: b.repo}
	r.Repository.Project.Key = b.project
	return r
}

func (b *bitbucketServerForge) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	op := fmt.Sprintf("finding the open pull request from %s into %s", head, base)
	// direction=OUTGOING with at= lists the requests from that branch.
	q := url.Values{"state": {"OPEN"}, "direction": {"OUTGOING"}, "at": {"refs/heads/" + head}, "limit": {strconv.Itoa(b.pageSize)}}
	start := 0
	for range b.maxPages {
		q.Set("start", strconv.Itoa(start))
		var page struct {
			Values        []bitbucketServerPR `json:"values"`
			IsLastPage    bool                `json:"isLastPage"`
			NextPageStart int                 `json:"nextPageStart"`
		}
		if err := b.api.call(ctx, op, http.MethodGet, b.path(), q, nil, &page); err != nil {
			return nil, err
		}
		for i := range page.Values {
			if r := page.Values[i].request(); r.Head == head && r.Base == base && r.State == forge.Open {
				return r, nil
			}
		}
		if page.IsLastPage || page.NextPageStart <= start {
			return nil, nil
		}
		start = page.NextPageStart
	}
	return nil, &forge.Error{Provider: BitbucketServer, Op: op, Message: fmt.Sprintf("more than %d pages of open pull requests", b.maxPages)}
}

// strategies are Data Center's merge strategy ids for forge's methods.
var bitbucketServerStrategies = map[forge.MergeMethod]string{forge.Merge: "no-ff", forge.Squash: "squash", forge.Rebase: "rebase-no-ff"}

func (b *bitbucketServerForge) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	switch {
	case len(req.Labels) > 0:
		return nil, unsupported(BitbucketServer, "Bitbucket Data Center pull requests have no labels: ask for no labels (an automation's spec.git.push.pullRequest.labels, tk-image's --pr-label)")
	case len(req.Assignees) > 0:
		return nil, unsupported(BitbucketServer, "Bitbucket Data Center pull requests have no assignees (pullRequest.assignees, --pr-assignee): ask reviewers instead (pullRequest.reviewers, --pr-reviewer)")
	}
	strategy, ok := bitbucketServerStrategies[req.AutoMerge]
	if req.AutoMerge != "" && !ok {
		return nil, unsupported(BitbucketServer, "no Bitbucket Data Center merge strategy for %q", req.AutoMerge)
	}
	type user struct {
		User struct {
			Name string `json:"name"`
		} `json:"user"`
	}
	body := struct {
		Title       string             `json:"title"`
		Description string             `json:"description"`
		FromRef     bitbucketServerRef `json:"fromRef"`
		ToRef       bitbucketServerRef `json:"toRef"`
		Draft       bool               `json:"draft,omitempty"`
		Reviewers   []user             `json:"reviewers,omitempty"`
	}{Title: req.Title, Description: req.Body, FromRef: b.ref(req.Head), ToRef: b.ref(req.Base), Draft: req.Draft}
	for _, r := range req.Reviewers {
		var u user
		u.User.Name = r
		body.Reviewers = append(body.Reviewers, u)
	}
	var pr bitbucketServerPR
	if err := b.api.call(ctx, "creating the pull request", http.MethodPost, b.path(), nil, body, &pr); err != nil {
		return nil, err
	}
	created := pr.request()
	if req.AutoMerge == "" {
		return created, nil
	}
	in := map[string]any{"autoMerge": true, "strategyId": strategy, "version": pr.Version}
	q := url.Values{"version": {strconv.Itoa(pr.Version)}}
	if err := b.api.call(ctx, fmt.Sprintf("asking pull request #%d to merge itself", pr.ID), http.MethodPost,
		b.path(strconv.Itoa(pr.ID), "merge"), q, in, nil); err != nil {
		return created, err
	}
	return created, nil
}

// read is the request as the server has it now, with its version.
func (b *bitbucketServerForge) read(ctx context.Context, number int) (*bitbucketServerPR, error) {
	var pr bitbucketServerPR
	err := b.api.call(ctx, fmt.Sprintf("reading pull request #%d", number), http.MethodGet, b.path(strconv.Itoa(number)), nil, nil, &pr)
	return &pr, err
}

func (b *bitbucketServerForge) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	now, err := b.read(ctx, current.Number)
	if err != nil {
		return nil, err
	}
	// An update replaces the reviewers with those it lists: the ones the
	// request has go back.
	reviewers := []bitbucketServerReviewer{}
	for _, r := range now.Reviewers {
		reviewers = append(reviewers, bitbucketServerReviewer{User: r.User})
	}
	var pr bitbucketServerPR
	in := map[string]any{"version": now.Version, "title": title, "description": body, "reviewers": reviewers}
	if err := b.api.call(ctx, fmt.Sprintf("editing pull request #%d", current.Number), http.MethodPut,
		b.path(strconv.Itoa(current.Number)), nil, in, &pr); err != nil {
		return nil, err
	}
	return pr.request(), nil
}

func (b *bitbucketServerForge) Close(ctx context.Context, current *forge.Request, comment string) error {
	id := strconv.Itoa(current.Number)
	if err := b.api.call(ctx, fmt.Sprintf("commenting on pull request #%d", current.Number), http.MethodPost,
		b.path(id, "comments"), nil, map[string]string{"text": comment}, nil); err != nil {
		return err
	}
	// The comment raised the version: read it after.
	now, err := b.read(ctx, current.Number)
	if err != nil {
		return err
	}
	q := url.Values{"version": {strconv.Itoa(now.Version)}}
	return b.api.call(ctx, fmt.Sprintf("declining pull request #%d", current.Number), http.MethodPost,
		b.path(id, "decline"), q, map[string]int{"version": now.Version}, nil)
}
