package forges

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	gh "github.com/google/go-github/v75/github"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// GitHub is github.com and GitHub Enterprise Server.
const GitHub forge.Provider = "github"

// GitHubForge is the registry entry of GitHub: github.com and GitHub Enterprise Server.
var GitHubForge = forge.Forge{
	Provider: GitHub,
	Hosts:    []string{"github.com"},
	Words:    []string{"github"},
	// Enterprise Server's API is under /api/v3/.
	APIURL: func(scheme, host, hostport string) string {
		if host == "github.com" {
			return "https://api.github.com/"
		}
		return scheme + "://" + hostport + "/api/v3/"
	},
	CommitPage:  "/commit/",
	ComparePage: func(from, to string) string { return "/compare/" + from + "..." + to },
	New:         newGitHub,
}

// gitHub keeps pull requests of one GitHub (or GitHub Enterprise Server)
// repository. REST goes through go-github; enabling auto-merge exists only
// in GitHub's GraphQL API, which is one mutation, so it is posted by hand
// with the same HTTP client rather than through another library.
type gitHub struct {
	api         *gh.Client
	hc          *http.Client
	graphQL     string
	owner, name string
	token       string
}

func newGitHub(opts forge.Options, hc *http.Client) (forge.Client, error) {
	base, err := gitHubBaseURL(opts.APIURL)
	if err != nil {
		return nil, err
	}
	api := gh.NewClient(hc).WithAuthToken(opts.Token)
	// BaseURL is set rather than WithEnterpriseURLs, which appends api/v3/
	// to any host not named api.*: Resolve already gives the full API
	// root (https://api.github.com/ or https://HOST/api/v3/), and an
	// explicit pullRequest.apiURL is taken as written.
	api.BaseURL = base
	owner, name, _ := strings.Cut(opts.Repository, "/")
	return &gitHub{
		api:     api,
		hc:      hc,
		graphQL: gitHubGraphQLURL(base),
		owner:   owner,
		name:    name,
		token:   opts.Token,
	}, nil
}

// gitHubBaseURL parses the REST API's root; go-github resolves paths
// against it, so it must end in a slash.
func gitHubBaseURL(apiURL string) (*url.URL, error) {
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("github: API URL %q is not an http(s) URL", apiURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// gitHubGraphQLURL is the GraphQL endpoint beside a REST root: GitHub.com
// serves it at https://api.github.com/graphql, Enterprise Server at
// https://HOST/api/graphql next to its REST API at /api/v3/.
func gitHubGraphQLURL(base *url.URL) string {
	u := *base
	u.RawQuery, u.Fragment = "", ""
	p := strings.TrimSuffix(u.Path, "/")
	if strings.HasSuffix(p, "/api/v3") {
		p = strings.TrimSuffix(p, "/v3")
	}
	u.Path = p + "/graphql"
	return u.String()
}

func (g *gitHub) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	// GitHub filters by head as owner:branch; one repository has at most
	// one open request per head and base, so the first page is plenty.
	opt := &gh.PullRequestListOptions{State: "open", Head: g.owner + ":" + head, Base: base}
	prs, resp, err := g.api.PullRequests.List(ctx, g.owner, g.name, opt)
	if err != nil {
		return nil, g.fail(fmt.Sprintf("finding the open pull request from %s into %s", head, base), resp, err)
	}
	if len(prs) == 0 {
		return nil, nil
	}
	return gitHubRequest(prs[0]), nil
}

func (g *gitHub) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	pr, resp, err := g.api.PullRequests.Create(ctx, g.owner, g.name, &gh.NewPullRequest{
		Title: gh.Ptr(req.Title),
		Head:  gh.Ptr(req.Head),
		Base:  gh.Ptr(req.Base),
		Body:  gh.Ptr(req.Body),
		Draft: gh.Ptr(req.Draft),
	})
	if err != nil {
		return nil, g.fail("creating the pull request", resp, err)
	}
	created := gitHubRequest(pr)
	// The extras are tried one by one even after one fails: the runner
	// reports what failed but does not retry (a retry must never open a
	// second request), so stopping early would drop the rest silently.
	errs := []error{
		g.addLabels(ctx, created.Number, req.Labels),
		g.addAssignees(ctx, created.Number, req.Assignees),
		g.requestReviewers(ctx, created.Number, req.Reviewers),
	}
	if req.AutoMerge != "" {
		errs = append(errs, g.enableAutoMerge(ctx, pr.GetNodeID(), req.AutoMerge))
	}
	return created, errors.Join(errs...)
}

func (g *gitHub) addLabels(ctx context.Context, number int, labels []string) error {
	if len(labels) == 0 {
		return nil
	}
	_, resp, err := g.api.Issues.AddLabelsToIssue(ctx, g.owner, g.name, number, labels)
	return g.fail("adding labels to the pull request", resp, err)
}

func (g *gitHub) addAssignees(ctx context.Context, number int, assignees []string) error {
	if len(assignees) == 0 {
		return nil
	}
	_, resp, err := g.api.Issues.AddAssignees(ctx, g.owner, g.name, number, assignees)
	return g.fail("assigning the pull request", resp, err)
}

func (g *gitHub) requestReviewers(ctx context.Context, number int, reviewers []string) error {
	if len(reviewers) == 0 {
		return nil
	}
	_, resp, err := g.api.PullRequests.RequestReviewers(ctx, g.owner, g.name, number, gitHubReviewers(reviewers))
	return g.fail("requesting reviews of the pull request", resp, err)
}

// gitHubReviewers splits reviewers into users and teams: a team is named
// org/team-slug, as GitHub writes it in CODEOWNERS, and the API takes the
// slug alone (the team is the repository owner's).
func gitHubReviewers(names []string) gh.ReviewersRequest {
	var r gh.ReviewersRequest
	for _, n := range names {
		if _, team, ok := strings.Cut(n, "/"); ok {
			r.TeamReviewers = append(r.TeamReviewers, team)
			continue
		}
		r.Reviewers = append(r.Reviewers, n)
	}
	return r
}

func (g *gitHub) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	pr, resp, err := g.api.PullRequests.Edit(ctx, g.owner, g.name, current.Number,
		&gh.PullRequest{Title: gh.Ptr(title), Body: gh.Ptr(body)})
	if err != nil {
		return nil, g.fail(fmt.Sprintf("editing pull request #%d", current.Number), resp, err)
	}
	return gitHubRequest(pr), nil
}

func (g *gitHub) Close(ctx context.Context, current *forge.Request, comment string) error {
	if comment != "" {
		_, resp, err := g.api.Issues.CreateComment(ctx, g.owner, g.name, current.Number, &gh.IssueComment{Body: gh.Ptr(comment)})
		if err != nil {
			return g.fail(fmt.Sprintf("commenting on pull request #%d", current.Number), resp, err)
		}
	}
	_, resp, err := g.api.PullRequests.Edit(ctx, g.owner, g.name, current.Number, &gh.PullRequest{State: gh.Ptr("closed")})
	return g.fail(fmt.Sprintf("closing pull request #%d", current.Number), resp, err)
}

// gitHubRequest maps a pull request; GitHub's state is open or closed
// only, a merged one being closed with merged_at set.
func gitHubRequest(pr *gh.PullRequest) *forge.Request {
	state := forge.Open
	switch {
	case pr.MergedAt != nil || pr.GetMerged():
		state = forge.Merged
	case pr.GetState() == "closed":
		state = forge.Closed
	}
	return &forge.Request{
		Number:     pr.GetNumber(),
		URL:        pr.GetHTMLURL(),
		State:      state,
		Title:      pr.GetTitle(),
		Body:       pr.GetBody(),
		Head:       pr.GetHead().GetRef(),
		Base:       pr.GetBase().GetRef(),
		HeadCommit: pr.GetHead().GetSHA(),
		Draft:      pr.GetDraft(),
	}
}

// fail turns go-github's error into an Error (nil stays nil).
func (g *gitHub) fail(op string, resp *gh.Response, err error) error {
	if err == nil {
		return nil
	}
	var hr *http.Response
	if resp != nil {
		hr = resp.Response
	}
	out := forge.NewError(GitHub, op, hr, gitHubMessage(err), g.token)
	var fe *forge.Error
	if errors.As(out, &fe) {
		gitHubRateLimit(fe, err, time.Now())
	}
	return out
}

// gitHubMessage keeps what GitHub said without go-github's framing (the
// full URL with its query, an empty error list): the method and path
// locate the call, then come GitHub's message and each detail it gave.
func gitHubMessage(err error) error {
	var (
		refused   *gh.ErrorResponse
		primary   *gh.RateLimitError
		secondary *gh.AbuseRateLimitError
		resp      *http.Response
		msg       string
	)
	switch {
	case errors.As(err, &refused):
		resp, msg = refused.Response, refused.Message
		if details := gitHubDetails(refused.Errors); details != "" {
			msg += ": " + details
		}
	case errors.As(err, &primary):
		resp, msg = primary.Response, primary.Message
	case errors.As(err, &secondary):
		resp, msg = secondary.Response, secondary.Message
	default:
		return err
	}
	if msg == "" && resp != nil {
		msg = http.StatusText(resp.StatusCode)
	}
	if resp != nil && resp.Request != nil && resp.Request.URL != nil {
		msg = resp.Request.Method + " " + resp.Request.URL.Path + ": " + msg
	}
	return errors.New(msg)
}

// gitHubDetails lists a refusal's errors, e.g. "A pull request already
// exists for org:branch." of a 422.
func gitHubDetails(errs []gh.Error) string {
	var details []string
	for _, d := range errs {
		switch {
		case d.Message != "":
			details = append(details, d.Message)
		case d.Code != "":
			details = append(details, strings.Join(strings.Fields(d.Resource+" "+d.Field+" "+d.Code), " "))
		}
	}
	return strings.Join(details, "; ")
}

// gitHubRateLimit completes an Error from go-github's rate-limit errors.
// go-github remembers an exhausted limit and then refuses calls itself,
// with a made-up 403 that has no headers, so the wait must come from the
// error: the primary limit's reset, or the secondary limit's Retry-After.
func gitHubRateLimit(fe *forge.Error, err error, now time.Time) {
	var primary *gh.RateLimitError
	var secondary *gh.AbuseRateLimitError
	var wait time.Duration
	var resp *http.Response
	switch {
	case errors.As(err, &primary):
		wait, resp = primary.Rate.Reset.Sub(now), primary.Response
	case errors.As(err, &secondary):
		// GitHub asks to wait at least a minute when a secondary limit
		// comes without Retry-After.
		wait, resp = time.Minute, secondary.Response
		if secondary.RetryAfter != nil {
			wait = *secondary.RetryAfter
		}
	default:
		return
	}
	fe.RetryAfter = max(fe.RetryAfter, wait, time.Second)
	// GitHub answers an exceeded limit with 403 or 429; go-github's own
	// refusal stands for a 403.
	if fe.StatusCode != http.StatusTooManyRequests && (resp == nil || resp.StatusCode != http.StatusTooManyRequests) {
		fe.StatusCode = http.StatusForbidden
	} else {
		fe.StatusCode = http.StatusTooManyRequests
	}
}

// gitHubMergeMethods are GraphQL's PullRequestMergeMethod values.
var gitHubMergeMethods = map[forge.MergeMethod]string{forge.Merge: "MERGE", forge.Squash: "SQUASH", forge.Rebase: "REBASE"}

const gitHubAutoMergeMutation = `mutation($pullRequestId: ID!, $mergeMethod: PullRequestMergeMethod!) {
  enablePullRequestAutoMerge(input: {pullRequestId: $pullRequestId, mergeMethod: $mergeMethod}) {
    pullRequest { autoMergeRequest { enabledAt } }
  }
}`

type gitHubGraphQLAnswer struct {
	Message string `json:"message"` // REST-style refusal (401, 403)
	Errors  []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"errors"`
}

// enableAutoMerge asks GitHub to merge the request once its requirements
// are met.
func (g *gitHub) enableAutoMerge(ctx context.Context, nodeID string, method forge.MergeMethod) error {
	const op = "enabling auto-merge"
	gqlMethod, ok := gitHubMergeMethods[method]
	if !ok {
		return forge.NewError(GitHub, op, nil, fmt.Errorf("unknown merge method %q: want merge, squash or rebase", method), g.token)
	}
	payload, err := json.Marshal(map[string]any{
		"query":     gitHubAutoMergeMutation,
		"variables": map[string]string{"pullRequestId": nodeID, "mergeMethod": gqlMethod},
	})
	if err != nil {
		return forge.NewError(GitHub, op, nil, err, g.token)
	}
	resp, answer, err := g.postGraphQL(ctx, payload)
	switch {
	case err != nil:
		return forge.NewError(GitHub, op, nil, err, g.token)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		msg := answer.Message
		if msg == "" {
			msg = resp.Status
		}
		return forge.NewError(GitHub, op, resp, errors.New(msg), g.token)
	case len(answer.Errors) > 0:
		// GraphQL refuses with 200 and a list of errors. The response
		// itself is not passed on: its 200 would read as a success.
		return forge.NewError(GitHub, op, nil, fmt.Errorf("%s (usually \"Allow auto-merge\" is off in the repository's settings, "+
			"or the request could be merged at once: the base branch requires no checks or reviews)",
			answer.Errors[0].Message), g.token)
	}
	return nil
}

// postGraphQL sends a GraphQL request through the client every REST call
// uses (TLS, proxy, rate limits, timeout) and reads its answer.
func (g *gitHub) postGraphQL(ctx context.Context, payload []byte) (*http.Response, *gitHubGraphQLAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.graphQL, bytes.NewReader(payload))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := g.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	answer := &gitHubGraphQLAnswer{}
	if err := json.Unmarshal(data, answer); err != nil && resp.StatusCode/100 == 2 {
		return nil, nil, fmt.Errorf("GitHub's GraphQL answer is not JSON: %w", err)
	}
	return resp, answer, nil
}

// Commits compares two revisions (GET /repos/{owner}/{repo}/compare/
// {from}...{to}: up to 250 commits, oldest first, on the first page).
func (g *gitHub) Commits(ctx context.Context, from, to string, limit int) ([]forge.Commit, int, error) {
	cmp, resp, err := g.api.Repositories.CompareCommits(ctx, g.owner, g.name, from, to, &gh.ListOptions{PerPage: min(limit, 100)})
	if err != nil {
		return nil, 0, g.fail(fmt.Sprintf("comparing %s...%s", from, to), resp, err)
	}
	var out []forge.Commit
	for _, c := range cmp.Commits {
		if len(out) < limit {
			out = append(out, forge.Commit{SHA: c.GetSHA(), Subject: subject(c.GetCommit().GetMessage())})
		}
	}
	return out, max(cmp.GetTotalCommits(), len(cmp.Commits)), nil
}
