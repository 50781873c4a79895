package forges

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// Bitbucket is Bitbucket Cloud (bitbucket.org).
const Bitbucket forge.Provider = "bitbucket"

// BitbucketForge is the registry entry of Bitbucket Cloud, told by its one
// host; a self-hosted Bitbucket is Data Center (BitbucketServerForge).
var BitbucketForge = forge.Forge{
	Provider: Bitbucket,
	Hosts:    []string{"bitbucket.org"},
	APIURL: func(scheme, host, hostport string) string {
		if host == "bitbucket.org" {
			return "https://api.bitbucket.org/2.0/"
		}
		return scheme + "://" + hostport + "/2.0/"
	},
	CommitPage: "/commits/",
	// Bitbucket Cloud names the newer side first, the older after a CR.
	ComparePage: func(from, to string) string { return "/branches/compare/" + to + "%0D" + from },
	New:         newBitbucket,
}

// bitbucketForge keeps pull requests of one Bitbucket Cloud repository
// through its REST API 2.0 (developer.atlassian.com/cloud/bitbucket/rest).
// A token with a user (an app password, or an Atlassian API token with
// the account's email) is sent by basic authentication; one without, or
// with git's x-token-auth user (a workspace, project or repository access
// token), as a bearer token.
//
// Bitbucket Cloud's pull requests have no labels, no assignees and no
// auto-merge in the API: asking for them is refused (forge.ErrUnsupported)
// rather than dropped. Reviewers are account ids or {uuid}s, as the API
// takes them: it looks no one up by name.
type bitbucketForge struct {
	api                *rest
	workspace, repo    string
	pageSize, maxPages int
}

// bitbucketTokenUser is the user git names for an access token.
const bitbucketTokenUser = "x-token-auth"

const (
	bitbucketPageSize = 50
	bitbucketMaxPages = 10
)

func newBitbucket(opts forge.Options, hc *http.Client) (forge.Client, error) {
	api, err := newREST(Bitbucket, opts, hc, bitbucketMessage)
	if err != nil {
		return nil, err
	}
	// git takes an access token as the password of x-token-auth; the API
	// takes it as a bearer token.
	api.basic = opts.Username != "" && opts.Username != bitbucketTokenUser
	ws, repo, _ := strings.Cut(opts.Repository, "/")
	return &bitbucketForge{api: api, workspace: ws, repo: repo, pageSize: bitbucketPageSize, maxPages: bitbucketMaxPages}, nil
}

// bitbucketMessage reads Bitbucket Cloud's error shape,
// {"type": "error", "error": {"message": …, "detail": …}}.
func bitbucketMessage(body []byte) (string, error) {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Detail  any    `json:"detail"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		return "", fmt.Errorf("not Bitbucket's error: %v", err)
	}
	if d, ok := e.Error.Detail.(string); ok && d != "" {
		return e.Error.Message + ": " + d, nil
	}
	return e.Error.Message, nil
}

type bitbucketBranch struct {
	Branch struct {
		Name string `json:"name"`
	} `json:"branch"`
	Commit *struct {
		Hash string `json:"hash"`
	} `json:"commit,omitempty"`
}

type bitbucketPR struct {
	ID          int    `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Summary is the description as the 2.0 schema names it; its raw
	// text stands in when description is absent.
	Summary *struct {
		Raw string `json:"raw"`
	} `json:"summary"`
	// Reviewers come with a request read alone, not in lists.
	Reviewers []struct {
		UUID      string `json:"uuid"`
		AccountID string `json:"account_id"`
	} `json:"reviewers"`
	State       string          `json:"state"`
	Draft       bool            `json:"draft"`
	Source      bitbucketBranch `json:"source"`
	Destination bitbucketBranch `json:"destination"`
	Links       struct {
		HTML struct {
			Href string `json:"href"`
		} `json:"html"`
	} `json:"links"`
}

func (pr *bitbucketPR) request() *forge.Request {
	r := &forge.Request{Number: pr.ID, URL: pr.Links.HTML.Href, Title: pr.Title, Body: pr.Description,
		Head: pr.Source.Branch.Name, Base: pr.Destination.Branch.Name, Draft: pr.Draft, State: forge.Open}
	if r.Body == "" && pr.Summary != nil {
		r.Body = pr.Summary.Raw
	}
	switch pr.State {
	case "MERGED":
		r.State = forge.Merged
	case "DECLINED", "SUPERSEDED":
		r.State = forge.Closed
	}
	if pr.Source.Commit != nil {
		r.HeadCommit = pr.Source.Commit.Hash
	}
	return r
}

func (b *bitbucketForge) path(parts ...string) string {
	return "repositories/" + pathEscape(append([]string{b.workspace, b.repo, "pullrequests"}, parts...)...)
}

func (b *bitbucketForge) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	op := fmt.Sprintf("finding the open pull request from %s into %s", head, base)
	// The query language filters by branch; the match is checked again
	// here all the same.
	q := url.Values{
		"state":   {"OPEN"},
		"q":       {fmt.Sprintf("source.branch.name = %s AND destination.branch.name = %s", strconv.Quote(head), strconv.Quote(base))},
		"pagelen": {strconv.Itoa(b.pageSize)},
	}
	for page := 1; page <= b.maxPages; page++ {
		q.Set("page", strconv.Itoa(page))
		var list struct {
			Values []bitbucketPR `json:"values"`
			Next   string        `json:"next"`
		}
		if err := b.api.call(ctx, op, http.MethodGet, b.path(), q, nil, &list); err != nil {
			return nil, err
		}
		for i := range list.Values {
			if pr := &list.Values[i]; pr.Source.Branch.Name == head && pr.Destination.Branch.Name == base && pr.State == "OPEN" {
				return pr.request(), nil
			}
		}
		if list.Next == "" {
			return nil, nil
		}
	}
	return nil, &forge.Error{Provider: Bitbucket, Op: op, Message: fmt.Sprintf("more than %d pages of open pull requests", b.maxPages)}
}

func (b *bitbucketForge) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	switch {
	case len(req.Labels) > 0:
		return nil, unsupported(Bitbucket, "Bitbucket Cloud pull requests have no labels: ask for no labels (an automation's spec.git.push.pullRequest.labels, tk-image's --pr-label)")
	case len(req.Assignees) > 0:
		return nil, unsupported(Bitbucket, "Bitbucket Cloud pull requests have no assignees (pullRequest.assignees, --pr-assignee): ask reviewers instead (pullRequest.reviewers, --pr-reviewer)")
	case req.AutoMerge != "":
		return nil, unsupported(Bitbucket, "Bitbucket Cloud's API cannot set a pull request to merge itself: ask for no auto-merge (pullRequest.autoMerge, --pr-auto-merge)")
	}
	type ref struct {
		Branch struct {
			Name string `json:"name"`
		} `json:"branch"`
	}
	body := struct {
		Title       string           `json:"title"`
		Description string           `json:"description"`
		Source      ref              `json:"source"`
		Destination ref              `json:"destination"`
		Draft       bool             `json:"draft,omitempty"`
		Reviewers   []map[string]any `json:"reviewers,omitempty"`
	}{Title: req.Title, Description: req.Body, Draft: req.Draft}
	body.Source.Branch.Name, body.Destination.Branch.Name = req.Head, req.Base
	for _, r := range req.Reviewers {
		if strings.HasPrefix(r, "{") {
			body.Reviewers = append(body.Reviewers, map[string]any{"uuid": r})
		} else {
			body.Reviewers = append(body.Reviewers, map[string]any{"account_id": r})
		}
	}
	var pr bitbucketPR
	if err := b.api.call(ctx, "creating the pull request", http.MethodPost, b.path(), nil, body, &pr); err != nil {
		return nil, err
	}
	return pr.request(), nil
}

// Edit sets the title and description. An update replaces the request's
// reviewers with those it names (none: all removed), and lists leave them
// out, so the request is read first and its reviewers sent back.
func (b *bitbucketForge) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	id := strconv.Itoa(current.Number)
	var now bitbucketPR
	if err := b.api.call(ctx, fmt.Sprintf("reading pull request #%d", current.Number), http.MethodGet, b.path(id), nil, nil, &now); err != nil {
		return nil, err
	}
	reviewers := []map[string]string{}
	for _, r := range now.Reviewers {
		if r.UUID != "" {
			reviewers = append(reviewers, map[string]string{"uuid": r.UUID})
		} else if r.AccountID != "" {
			reviewers = append(reviewers, map[string]string{"account_id": r.AccountID})
		}
	}
	var pr bitbucketPR
	in := map[string]any{"title": title, "description": body, "reviewers": reviewers}
	if err := b.api.call(ctx, fmt.Sprintf("editing pull request #%d", current.Number), http.MethodPut,
		b.path(id), nil, in, &pr); err != nil {
		return nil, err
	}
	return pr.request(), nil
}

func (b *bitbucketForge) Close(ctx context.Context, current *forge.Request, comment string) error {
	id := strconv.Itoa(current.Number)
	in := map[string]any{"content": map[string]string{"raw": comment}}
	if err := b.api.call(ctx, fmt.Sprintf("commenting on pull request #%d", current.Number), http.MethodPost,
		b.path(id, "comments"), nil, in, nil); err != nil {
		return err
	}
	return b.api.call(ctx, fmt.Sprintf("declining pull request #%d", current.Number), http.MethodPost,
		b.path(id, "decline"), nil, nil, nil)
}
