package forges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
)

// Gitea covers Forgejo (and so codeberg.org), whose API is Gitea's.
const Gitea forge.Provider = "gitea"

// GiteaForge is the registry entry of Gitea, and Forgejo (codeberg.org), whose API is Gitea's.
var GiteaForge = forge.Forge{
	Provider:    Gitea,
	Hosts:       []string{"codeberg.org"},
	Words:       []string{"gitea", "forgejo"},
	CommitPage:  "/commit/",
	ComparePage: func(from, to string) string { return "/compare/" + from + "..." + to },
	New:         newGitea,
}

// giteaForge keeps pull requests of one Gitea (or Forgejo) repository
// through code.gitea.io/sdk/gitea.
//
// The SDK keeps a single context on its client (SetContext) rather than
// taking one per call, so a client shared by concurrent calls would send
// each request under whichever context was set last. A client is cheap to
// make and, told not to ask the server's version, makes no request when
// made; so every call gets its own client, bound to the call's context.
type giteaForge struct {
	base        string       // the instance's root, without a trailing slash
	hc          *http.Client // keeps failed answers (forge.KeepAnswers)
	owner, name string
	token       string
	// pageSize and maxPullPages bound FindOpen's reading, mergeCheckWait
	// autoMerge's asking (fields, not constants, so that tests can page
	// with a few requests and give up in a second).
	pageSize, maxPullPages int
	mergeCheckWait         time.Duration
}

// Pages are of Gitea's default MAX_RESPONSE_ITEMS (a server set lower
// answers shorter pages, which the Link header still chains). FindOpen
// reads at most giteaMaxPullPages of open requests, Create at most
// giteaMaxLabelPages of labels.
const (
	giteaPageSize      = 50
	giteaMaxPullPages  = 10
	giteaMaxLabelPages = 20
)

func newGitea(opts forge.Options, hc *http.Client) (forge.Client, error) {
	base, err := giteaBaseURL(opts.APIURL)
	if err != nil {
		return nil, err
	}
	owner, name, _ := strings.Cut(opts.Repository, "/")
	g := &giteaForge{base: base, hc: forge.KeepAnswers(hc), owner: owner, name: name, token: opts.Token,
		pageSize: giteaPageSize, maxPullPages: giteaMaxPullPages, mergeCheckWait: giteaMergeCheckWait}
	// Made once here so that a bad option fails New, not the first call.
	if _, err := g.client(context.Background()); err != nil {
		return nil, fmt.Errorf("gitea: %w", err)
	}
	return g, nil
}

// giteaBaseURL is the instance's root, which the SDK wants without a
// trailing slash (it appends /api/v1 itself). An API URL written with
// /api/v1 (as Gitea's own pages show it) is taken back to the root.
func giteaBaseURL(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("gitea: API URL %s is not an http(s) URL", git.Redact(apiURL))
	}
	base := strings.TrimSuffix(apiURL, "/")
	base = strings.TrimSuffix(base, "/api/v1")
	return strings.TrimSuffix(base, "/"), nil
}

// client is an SDK client for one call, bound to ctx.
func (g *giteaForge) client(ctx context.Context) (*gitea.Client, error) {
	return gitea.NewClient(g.base,
		gitea.SetToken(g.token),
		gitea.SetHTTPClient(g.hc),
		gitea.SetContext(ctx),
		// "" skips the SDK's GET /api/v1/version, which it would otherwise
		// make on construction and before some calls to pick workarounds
		// for Gitea older than 1.14; the adapter needs none of those, and
		// Forgejo's version numbers would not compare as Gitea's anyway.
		gitea.SetGiteaVersion(""),
	)
}

// call runs one SDK call with ctx and turns its failure into an Error that
// says what Gitea answered.
func (g *giteaForge) call(ctx context.Context, op string, fn func(*gitea.Client) (*gitea.Response, error)) error {
	return forge.CallKeepingAnswer(ctx, Gitea, op, g.token, giteaMessage, func(ctx context.Context) (*http.Response, error) {
		api, err := g.client(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := fn(api)
		if resp == nil {
			return nil, err
		}
		return resp.Response, err
	})
}

func (g *giteaForge) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	// Gitea's list has no head filter (1.26 added base_branch, which the
	// SDK does not send and Forgejo may not know), and its GET
	// /pulls/{base}/{head} answers an arbitrary request of that pair
	// whatever its state (an old closed one as readily as the open one).
	// So the open requests are listed, most recently updated first (the
	// job's own is updated by the job), and matched here.
	op := fmt.Sprintf("finding the open pull request from %s into %s", head, base)
	for page := 1; page <= g.maxPullPages; page++ {
		var prs []*gitea.PullRequest
		var next int
		err := g.call(ctx, op, func(api *gitea.Client) (*gitea.Response, error) {
			var resp *gitea.Response
			var err error
			prs, resp, err = api.ListRepoPullRequests(g.owner, g.name, gitea.ListPullRequestsOptions{
				ListOptions: gitea.ListOptions{Page: page, PageSize: g.pageSize},
				State:       gitea.StateOpen,
				Sort:        "recentupdate",
			})
			if resp != nil {
				next = resp.NextPage
			}
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		for _, pr := range prs {
			if giteaSameRepoPull(pr, head, base) {
				return giteaRequest(pr), nil
			}
		}
		if next == 0 || len(prs) == 0 {
			return nil, nil
		}
	}
	// Saying "none" here could open a second request; Gitea would refuse
	// it (one open request per head and base), but with a less clear
	// message than this.
	return nil, &forge.Error{Provider: Gitea, Op: op, Message: fmt.Sprintf(
		"read the first %d open pull requests without finding it, and there are more", g.maxPullPages*g.pageSize)}
}

// giteaSameRepoPull tells the request from head into base whose head is a
// branch of the repository itself: a fork's request from a branch of the
// same name is someone else's, not the job's.
func giteaSameRepoPull(pr *gitea.PullRequest, head, base string) bool {
	if pr == nil || pr.Head == nil || pr.Base == nil || pr.Head.Ref != head || pr.Base.Ref != base {
		return false
	}
	if pr.Head.RepoID != 0 && pr.Base.RepoID != 0 {
		return pr.Head.RepoID == pr.Base.RepoID
	}
	// A deleted fork's request has no head repository; it is not ours.
	return pr.Head.Repository != nil && pr.Base.Repository != nil && pr.Head.Repository.ID == pr.Base.Repository.ID
}

func (g *giteaForge) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	// Gitea silently drops label IDs it does not know, so names are
	// resolved first, and a misspelt one fails before anything exists.
	// Assignees need no such step: Gitea refuses (422) an unknown or
	// unassignable one before it creates the request.
	labels, err := g.labelIDs(ctx, req.Labels)
	if err != nil {
		return nil, err
	}
	opt := gitea.CreatePullRequestOption{
		Head:      req.Head,
		Base:      req.Base,
		Title:     giteaDraft.Create(req.Title, req.Draft),
		Body:      req.Body,
		Assignees: giteaUserNames(req.Assignees),
		Labels:    labels,
	}
	var pr *gitea.PullRequest
	err = g.call(ctx, "creating the pull request", func(api *gitea.Client) (resp *gitea.Response, err error) {
		pr, resp, err = api.CreatePullRequest(g.owner, g.name, opt)
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	created := giteaRequest(pr)
	// Reviewers are asked in a call of their own (Gitea 1.14 and every
	// Forgejo have it; the create call's reviewers field is recent). The
	// extras are tried even after one fails: the runner reports what
	// failed but never retries a create, so stopping early would drop the
	// rest silently.
	errs := []error{g.requestReviews(ctx, created.Number, req.Reviewers)}
	if req.AutoMerge != "" {
		errs = append(errs, g.autoMerge(ctx, created, req.AutoMerge))
	}
	return created, errors.Join(errs...)
}

// labelIDs resolves label names to IDs: the repository's labels, then
// (for names still unknown) its organization's, which Gitea also accepts
// on an organization's repositories.
func (g *giteaForge) labelIDs(ctx context.Context, names []string) ([]int64, error) {
	var wanted []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			wanted = append(wanted, n)
		}
	}
	if len(wanted) == 0 {
		return nil, nil
	}
	op := "looking up the labels " + strings.Join(wanted, ", ")
	repoLabels, err := g.listLabels(ctx, op, func(api *gitea.Client, lo gitea.ListOptions) ([]*gitea.Label, *gitea.Response, error) {
		return api.ListRepoLabels(g.owner, g.name, gitea.ListLabelsOptions{ListOptions: lo})
	})
	if err != nil {
		return nil, err
	}
	ids, missing := giteaMatchLabels(wanted, repoLabels)
	if len(missing) > 0 {
		orgLabels, err := g.listLabels(ctx, op, func(api *gitea.Client, lo gitea.ListOptions) ([]*gitea.Label, *gitea.Response, error) {
			return api.ListOrgLabels(g.owner, gitea.ListOrgLabelsOptions{ListOptions: lo})
		})
		var e *forge.Error
		// A user's repository has no organization: 404.
		if err != nil && !(errors.As(err, &e) && e.StatusCode == http.StatusNotFound) {
			return nil, err
		}
		ids, missing = giteaMatchLabels(wanted, append(repoLabels, orgLabels...))
	}
	if len(missing) > 0 {
		return nil, &forge.Error{Provider: Gitea, Op: op, Message: fmt.Sprintf("%s/%s has no label %s (labels must exist before a pull request can have them)",
			g.owner, g.name, giteaQuoteAll(missing))}
	}
	return ids, nil
}

func (g *giteaForge) listLabels(ctx context.Context, op string,
	list func(*gitea.Client, gitea.ListOptions) ([]*gitea.Label, *gitea.Response, error)) ([]*gitea.Label, error) {
	var all []*gitea.Label
	for page := 1; page <= giteaMaxLabelPages; page++ {
		var labels []*gitea.Label
		var next int
		err := g.call(ctx, op, func(api *gitea.Client) (*gitea.Response, error) {
			var resp *gitea.Response
			var err error
			labels, resp, err = list(api, gitea.ListOptions{Page: page, PageSize: g.pageSize})
			if resp != nil {
				next = resp.NextPage
			}
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, labels...)
		if next == 0 || len(labels) == 0 {
			break
		}
	}
	return all, nil
}

// giteaMatchLabels finds each name's ID, by its exact name or else by a name
// that differs only in case (Gitea's label names are case-sensitive, the
// names people write in a spec less so).
func giteaMatchLabels(names []string, labels []*gitea.Label) (ids []int64, missing []string) {
	for _, n := range names {
		var id int64
		for _, l := range labels {
			if l != nil && l.Name == n {
				id = l.ID
				break
			}
		}
		if id == 0 {
			for _, l := range labels {
				if l != nil && strings.EqualFold(l.Name, n) {
					id = l.ID
					break
				}
			}
		}
		if id == 0 {
			missing = append(missing, n)
			continue
		}
		ids = append(ids, id)
	}
	return ids, missing
}

func giteaQuoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func giteaUserNames(names []string) []string {
	var out []string
	for _, n := range names {
		if n = strings.TrimPrefix(strings.TrimSpace(n), "@"); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// requestReviews asks reviews of users, and of teams named org/team (as
// in CODEOWNERS; the API takes the team's name, the team being the
// repository's organization's).
func (g *giteaForge) requestReviews(ctx context.Context, number int, reviewers []string) error {
	var opt gitea.PullReviewRequestOptions
	for _, n := range giteaUserNames(reviewers) {
		if _, team, ok := strings.Cut(n, "/"); ok {
			opt.TeamReviewers = append(opt.TeamReviewers, team)
			continue
		}
		opt.Reviewers = append(opt.Reviewers, n)
	}
	if len(opt.Reviewers)+len(opt.TeamReviewers) == 0 {
		return nil
	}
	return g.call(ctx, fmt.Sprintf("requesting reviews of pull request #%d", number),
		func(api *gitea.Client) (*gitea.Response, error) {
			return api.CreateReviewRequests(g.owner, g.name, int64(number), opt)
		})
}

// How long autoMerge keeps asking while Gitea is still testing whether
// the new request merges cleanly.
const (
	giteaMergeCheckWait  = 15 * time.Second
	giteaMergeCheckFirst = 100 * time.Millisecond
	giteaMergeCheckMax   = 2 * time.Second
)

// autoMerge asks Gitea to merge the request once its checks succeed
// (merge_when_checks_succeed), pinned to the head commit the request was
// opened with.
//
// Gitea 1.26 schedules the merge (201) and merges from its queue as soon
// as the checks its branch protection requires have passed; a base branch
// that requires none is merged within moments, so the request returned
// open may be merged by the time the job looks again. Older versions merge
// at once (200) when nothing is pending; the request is then returned
// merged. A draft (WIP title) is refused: Gitea merges no draft.
//
// Gitea tests a new request's mergeability in the background, and until
// that is done it answers 405 "Please try again later"; that answer is
// asked again for a while. It is also Gitea's answer to a request that
// conflicts, which is why the asking is bounded.
func (g *giteaForge) autoMerge(ctx context.Context, pr *forge.Request, method forge.MergeMethod) error {
	opt := gitea.MergePullRequestOption{
		Style:                  giteaMergeStyle(method),
		HeadCommitId:           pr.HeadCommit,
		MergeWhenChecksSucceed: true,
	}
	op := fmt.Sprintf("enabling auto-merge of pull request #%d", pr.Number)
	deadline := time.Now().Add(g.mergeCheckWait)
	wait := giteaMergeCheckFirst
	for {
		var status int
		err := g.call(ctx, op, func(api *gitea.Client) (*gitea.Response, error) {
			ok, resp, err := api.MergePullRequest(g.owner, g.name, int64(pr.Number), opt)
			if err == nil && !ok && resp != nil {
				// The SDK reports a refused merge as false, not as an
				// error; call quotes the body the transport kept.
				err = fmt.Errorf("%s", resp.Status)
			}
			if resp != nil {
				status = resp.StatusCode
			}
			return resp, err
		})
		var e *forge.Error
		later := errors.As(err, &e) && e.StatusCode == http.StatusMethodNotAllowed &&
			strings.Contains(strings.ToLower(e.Message), "try again later")
		if later && time.Now().Add(wait).Before(deadline) {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return forge.NewError(Gitea, op, nil, ctx.Err(), g.token)
			case <-t.C:
			}
			wait = min(2*wait, giteaMergeCheckMax)
			continue
		}
		if later {
			e.Message += fmt.Sprintf(" (Gitea still did not find it mergeable after %s: it may conflict with %s)", g.mergeCheckWait, pr.Base)
		}
		if errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500 && e.StatusCode != http.StatusUnauthorized {
			// The request is open and fine; only the automation of its
			// merge is missing, which a person can still do.
			e.Op = fmt.Sprintf("auto-merge could not be enabled on pull request #%d (it stays open, to merge by hand)", pr.Number)
		}
		if err == nil && status == http.StatusOK {
			pr.State = forge.Merged
		}
		return err
	}
}

func giteaMergeStyle(m forge.MergeMethod) gitea.MergeStyle {
	switch m {
	case forge.Squash:
		return gitea.MergeStyleSquash
	case forge.Rebase:
		return gitea.MergeStyleRebase
	}
	return gitea.MergeStyleMerge
}

func (g *giteaForge) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	if current == nil {
		return nil, errors.New("gitea: editing a pull request: no pull request given")
	}
	// An empty title is Gitea's "leave the title be"; a prefix alone would
	// replace it.
	if strings.TrimSpace(title) != "" {
		title = giteaDraft.Edit(current, title)
	}
	opt := gitea.EditPullRequestOption{Title: title, Body: &body}
	var pr *gitea.PullRequest
	err := g.call(ctx, fmt.Sprintf("editing pull request #%d", current.Number),
		func(api *gitea.Client) (resp *gitea.Response, err error) {
			pr, resp, err = api.EditPullRequest(g.owner, g.name, int64(current.Number), opt)
			return resp, err
		})
	if err != nil {
		return nil, err
	}
	return giteaRequest(pr), nil
}

func (g *giteaForge) Close(ctx context.Context, current *forge.Request, comment string) error {
	if current == nil {
		return errors.New("gitea: closing a pull request: no pull request given")
	}
	number := int64(current.Number)
	if strings.TrimSpace(comment) != "" {
		err := g.call(ctx, fmt.Sprintf("commenting on pull request #%d", current.Number),
			func(api *gitea.Client) (*gitea.Response, error) {
				_, resp, err := api.CreateIssueComment(g.owner, g.name, number, gitea.CreateIssueCommentOption{Body: comment})
				return resp, err
			})
		if err != nil {
			return err
		}
	}
	closed := gitea.StateClosed
	return g.call(ctx, fmt.Sprintf("closing pull request #%d", current.Number),
		func(api *gitea.Client) (*gitea.Response, error) {
			_, resp, err := api.EditPullRequest(g.owner, g.name, number, gitea.EditPullRequestOption{State: &closed})
			return resp, err
		})
}

// giteaRequest maps a pull request. Gitea's state is open or closed, a
// merged one being closed with merged set. Draft is Gitea's draft field
// (from the instance's configured WIP prefixes) or the default prefixes,
// for versions without the field.
func giteaRequest(pr *gitea.PullRequest) *forge.Request {
	if pr == nil {
		return nil
	}
	r := &forge.Request{
		Number: int(pr.Index),
		URL:    pr.HTMLURL,
		State:  forge.Open,
		Title:  pr.Title,
		Body:   pr.Body,
		Draft:  pr.Draft || giteaDraft.Prefix(pr.Title) != "",
	}
	switch {
	case pr.HasMerged || pr.Merged != nil:
		r.State = forge.Merged
	case pr.State == gitea.StateClosed:
		r.State = forge.Closed
	}
	if pr.Head != nil {
		r.Head, r.HeadCommit = pr.Head.Ref, pr.Head.Sha
	}
	if pr.Base != nil {
		r.Base = pr.Base.Ref
	}
	return r
}

// Gitea marks a draft by its title: [repository.pull-request]
// WORK_IN_PROGRESS_PREFIXES, by default these, in any case.
var giteaDraft = forge.DraftPrefixes{Known: []string{"WIP:", "[WIP]"}, Add: "WIP: "}

// giteaMessage is what a Gitea error body in JSON says: {"message": ...,
// "errors": [...]} (the errors add the detail to a generic message, e.g. a
// 404's "The target couldn't be found." and which target).
func giteaMessage(body []byte) (string, error) {
	var v struct {
		Message string `json:"message"`
		Errors  []any  `json:"errors"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	parts := []string{strings.TrimSpace(v.Message)}
	for _, e := range v.Errors {
		if s := strings.TrimSpace(fmt.Sprint(e)); s != "" && !strings.Contains(parts[0], s) {
			parts = append(parts, s)
		}
	}
	return strings.Trim(strings.Join(parts, ": "), ": "), nil
}

// Commits compares two revisions (GET /repos/{owner}/{repo}/compare/
// {from}...{to}, Gitea 1.22 and later).
func (g *giteaForge) Commits(ctx context.Context, from, to string, limit int) ([]forge.Commit, int, error) {
	var cmp *gitea.Compare
	err := g.call(ctx, fmt.Sprintf("comparing %s...%s", from, to), func(api *gitea.Client) (resp *gitea.Response, err error) {
		cmp, resp, err = api.CompareCommits(g.owner, g.name, from, to)
		return resp, err
	})
	if err != nil {
		return nil, 0, err
	}
	var out []forge.Commit
	for _, c := range cmp.Commits {
		if c == nil || c.CommitMeta == nil || len(out) >= limit {
			continue
		}
		msg := ""
		if c.RepoCommit != nil {
			msg = c.RepoCommit.Message
		}
		out = append(out, forge.Commit{SHA: c.SHA, Subject: subject(msg)})
	}
	return out, max(cmp.TotalCommits, len(cmp.Commits)), nil
}

// subject is a commit message's first line.
func subject(message string) string {
	s, _, _ := strings.Cut(strings.TrimSpace(message), "\n")
	return strings.TrimSpace(s)
}
