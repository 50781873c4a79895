package forges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	gitlab "gitlab.com/gitlab-org/api/client-go"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
)

// GitLab is gitlab.com and self-managed GitLab.
const GitLab forge.Provider = "gitlab"

// GitLabForge is the registry entry of GitLab: gitlab.com and self-managed GitLab.
var GitLabForge = forge.Forge{
	Provider:    GitLab,
	Hosts:       []string{"gitlab.com"},
	Words:       []string{"gitlab"},
	Subgroups:   true,
	CommitPage:  "/-/commit/",
	ComparePage: func(from, to string) string { return "/-/compare/" + from + "..." + to },
	New:         newGitLab,
}

// gitLab keeps merge requests of one GitLab project. The project is named
// by its full path (group/subgroup/project), which the API takes in place
// of the numeric ID, so no call is spent looking the ID up.
type gitLab struct {
	api     *gitlab.Client
	project string
	token   string
}

func newGitLab(opts forge.Options, hc *http.Client) (forge.Client, error) {
	base, err := gitLabBaseURL(opts.APIURL)
	if err != nil {
		return nil, err
	}
	api, err := gitlab.NewClient(opts.Token,
		gitlab.WithBaseURL(base),
		gitlab.WithHTTPClient(forge.KeepAnswers(hc)),
		// The transport of forge.go is the one place rate limits are
		// waited out, the same way for every forge; the library's own
		// retries (of 429s and 5xx, up to five) would repeat what the
		// transport chose to hand back, and they resend a POST answered
		// 5xx, which a proxy can answer after GitLab made the request.
		gitlab.WithoutRetries(),
		// The library would also pace calls by the RateLimit-Limit of the
		// first response; a job makes a handful of calls, and a limit that
		// is reached is the transport's to wait out.
		gitlab.WithCustomLimiter(gitLabNoPacing{}),
	)
	if err != nil {
		return nil, fmt.Errorf("gitlab: %w", err)
	}
	return &gitLab{api: api, project: opts.Repository, token: opts.Token}, nil
}

// gitLabBaseURL is the REST API's root under the instance's URL (which
// may itself be under a path, https://host/gitlab/).
func gitLabBaseURL(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("gitlab: API URL %s is not an http(s) URL", git.Redact(apiURL))
	}
	return strings.TrimSuffix(apiURL, "/") + "/api/v4", nil
}

// gitLabNoPacing is a limiter that never waits.
type gitLabNoPacing struct{}

func (gitLabNoPacing) Wait(context.Context) error { return nil }

func (g *gitLab) FindOpen(ctx context.Context, head, base string) (*forge.Request, error) {
	opt := &gitlab.ListProjectMergeRequestsOptions{
		// GitLab allows one open merge request per source and target
		// branch of a project, so one page is plenty even with forks'.
		ListOptions:  gitlab.ListOptions{PerPage: 100},
		State:        gitlab.Ptr("opened"),
		SourceBranch: gitlab.Ptr(head),
		TargetBranch: gitlab.Ptr(base),
	}
	var mrs []*gitlab.BasicMergeRequest
	err := g.call(ctx, fmt.Sprintf("finding the open merge request from %s into %s", head, base),
		func(o gitlab.RequestOptionFunc) (resp *gitlab.Response, err error) {
			mrs, resp, err = g.api.MergeRequests.ListProjectMergeRequests(g.project, opt, o)
			return resp, err
		})
	if err != nil {
		return nil, err
	}
	for _, mr := range mrs {
		// A fork's merge request from a branch of the same name targets
		// this project too; it is someone else's, not the job's.
		if mr != nil && (mr.SourceProjectID == 0 || mr.SourceProjectID == mr.TargetProjectID) {
			return gitLabRequest(mr, false), nil
		}
	}
	return nil, nil
}

func (g *gitLab) Create(ctx context.Context, req forge.NewRequest) (*forge.Request, error) {
	// Names are resolved before anything is created, so that a misspelt
	// name leaves no merge request behind.
	ids := map[string]int64{}
	assignees, err := g.userIDs(ctx, "assignee", req.Assignees, ids)
	if err != nil {
		return nil, err
	}
	reviewers, err := g.userIDs(ctx, "reviewer", req.Reviewers, ids)
	if err != nil {
		return nil, err
	}
	opt := &gitlab.CreateMergeRequestOptions{
		Title:              gitlab.Ptr(gitLabDraft.Create(req.Title, req.Draft)),
		Description:        gitlab.Ptr(req.Body),
		SourceBranch:       gitlab.Ptr(req.Head),
		TargetBranch:       gitlab.Ptr(req.Base),
		RemoveSourceBranch: gitlab.Ptr(true),
	}
	if len(req.Labels) > 0 {
		opt.Labels = gitlab.Ptr(gitlab.LabelOptions(req.Labels))
	}
	if len(assignees) > 0 {
		opt.AssigneeIDs = &assignees
	}
	if len(reviewers) > 0 {
		opt.ReviewerIDs = &reviewers
	}
	if req.AutoMerge == forge.Squash {
		opt.Squash = gitlab.Ptr(true)
	}
	var mr *gitlab.MergeRequest
	err = g.call(ctx, "creating the merge request", func(o gitlab.RequestOptionFunc) (resp *gitlab.Response, err error) {
		mr, resp, err = g.api.MergeRequests.CreateMergeRequest(g.project, opt, o)
		return resp, err
	})
	if err != nil {
		return nil, err
	}
	created := gitLabMergeRequest(mr)
	if req.AutoMerge == "" {
		return created, nil
	}
	return created, g.autoMerge(ctx, created, req.AutoMerge)
}

// userIDs resolves user names to IDs, which is what GitLab takes for
// assignees and reviewers. known saves a second look-up of a name that is
// both an assignee and a reviewer.
func (g *gitLab) userIDs(ctx context.Context, role string, names []string, known map[string]int64) ([]int64, error) {
	var ids []int64
	for _, name := range names {
		name = strings.TrimPrefix(strings.TrimSpace(name), "@")
		if name == "" {
			continue
		}
		id, ok := known[strings.ToLower(name)]
		if !ok {
			var err error
			if id, err = g.userID(ctx, role, name); err != nil {
				return nil, err
			}
			known[strings.ToLower(name)] = id
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (g *gitLab) userID(ctx context.Context, role, name string) (int64, error) {
	op := fmt.Sprintf("looking up the %s %q", role, name)
	var users []*gitlab.User
	err := g.call(ctx, op, func(o gitlab.RequestOptionFunc) (resp *gitlab.Response, err error) {
		users, resp, err = g.api.Users.ListUsers(&gitlab.ListUsersOptions{Username: gitlab.Ptr(name)}, o)
		return resp, err
	})
	if err != nil {
		return 0, err
	}
	// The name is compared, not trusted to the filter: an instance that
	// ignored it would answer with a page of other users.
	for _, u := range users {
		if u != nil && strings.EqualFold(u.Username, name) {
			return u.ID, nil
		}
	}
	return 0, &forge.Error{Provider: GitLab, Op: op, Message: "GitLab has no user of that name"}
}

// autoMerge asks GitLab to merge the request when its pipeline succeeds
// (auto-merge). GitLab has no rebase merge per request (rebasing is the
// project's merge method, fast-forward), so Rebase is a plain Merge here.
// The head commit is sent so that only the commit the job pushed is
// merged. Projects should require pipelines to succeed: without that
// setting, GitLab merges at once a request whose pipeline has not been
// created yet.
func (g *gitLab) autoMerge(ctx context.Context, mr *forge.Request, method forge.MergeMethod) error {
	opt := &gitlab.AcceptMergeRequestOptions{
		// merge_when_pipeline_succeeds is what every GitLab version
		// knows; auto_merge is its name since 17.11, sent too so that
		// the call outlives the old name. Either is enough.
		MergeWhenPipelineSucceeds: gitlab.Ptr(true),
		AutoMerge:                 gitlab.Ptr(true),
	}
	if method == forge.Squash {
		opt.Squash = gitlab.Ptr(true)
	}
	if mr.HeadCommit != "" {
		opt.SHA = gitlab.Ptr(mr.HeadCommit)
	}
	op := fmt.Sprintf("enabling auto-merge of merge request !%d", mr.Number)
	err := g.call(ctx, op, func(o gitlab.RequestOptionFunc) (*gitlab.Response, error) {
		_, resp, err := g.api.MergeRequests.AcceptMergeRequest(g.project, int64(mr.Number), opt, o)
		return resp, err
	})
	var e *forge.Error
	if errors.As(err, &e) && gitLabRefusedMerge(e.StatusCode) {
		// The request is open and fine; only the automation of its
		// merge is missing, which a person can still do.
		e.Op = fmt.Sprintf("auto-merge could not be enabled on merge request !%d (it stays open, to merge by hand)", mr.Number)
	}
	return err
}

// gitLabRefusedMerge tells the answers of a merge request GitLab will not
// set to merge: 405 (draft, closed, no pipeline, checks pending), 406
// (conflicts, on older versions), 409 (the head moved on), 422 (not
// mergeable).
func gitLabRefusedMerge(status int) bool {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusConflict, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

func (g *gitLab) Edit(ctx context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	if current == nil {
		return nil, errors.New("gitlab: editing a merge request: no merge request given")
	}
	opt := &gitlab.UpdateMergeRequestOptions{
		Title:       gitlab.Ptr(gitLabDraft.Edit(current, title)),
		Description: gitlab.Ptr(body),
	}
	var mr *gitlab.MergeRequest
	err := g.call(ctx, fmt.Sprintf("editing merge request !%d", current.Number),
		func(o gitlab.RequestOptionFunc) (resp *gitlab.Response, err error) {
			mr, resp, err = g.api.MergeRequests.UpdateMergeRequest(g.project, int64(current.Number), opt, o)
			return resp, err
		})
	if err != nil {
		return nil, err
	}
	return gitLabMergeRequest(mr), nil
}

func (g *gitLab) Close(ctx context.Context, current *forge.Request, comment string) error {
	if current == nil {
		return errors.New("gitlab: closing a merge request: no merge request given")
	}
	iid := int64(current.Number)
	if strings.TrimSpace(comment) != "" {
		err := g.call(ctx, fmt.Sprintf("commenting on merge request !%d", current.Number),
			func(o gitlab.RequestOptionFunc) (*gitlab.Response, error) {
				_, resp, err := g.api.Notes.CreateMergeRequestNote(g.project, iid,
					&gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr(comment)}, o)
				return resp, err
			})
		if err != nil {
			return err
		}
	}
	return g.call(ctx, fmt.Sprintf("closing merge request !%d", current.Number),
		func(o gitlab.RequestOptionFunc) (*gitlab.Response, error) {
			_, resp, err := g.api.MergeRequests.UpdateMergeRequest(g.project, iid,
				&gitlab.UpdateMergeRequestOptions{StateEvent: gitlab.Ptr("close")}, o)
			return resp, err
		})
}

// call runs one library call with ctx and turns its failure into an
// Error that says what GitLab answered.
func (g *gitLab) call(ctx context.Context, op string, fn func(gitlab.RequestOptionFunc) (*gitlab.Response, error)) error {
	return forge.CallKeepingAnswer(ctx, GitLab, op, g.token, gitLabMessage, func(ctx context.Context) (*http.Response, error) {
		resp, err := fn(gitlab.WithContext(ctx))
		if resp == nil {
			return nil, err
		}
		return resp.Response, err
	})
}

// gitLabMessage is what a GitLab error body in JSON says: {"message": "404
// Project Not Found"}, {"message": {"title": ["can't be blank"]}},
// {"message": ["..."]} or OAuth's {"error": ..., "error_description":
// ...}.
func gitLabMessage(body []byte) (string, error) {
	var v struct {
		Message          any    `json:"message"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", err
	}
	if msg := flattenGitLabMessage(v.Message); msg != "" {
		return msg, nil
	}
	if v.ErrorDescription != "" {
		return strings.TrimSpace(v.Error + ": " + v.ErrorDescription), nil
	}
	return v.Error, nil
}

func flattenGitLabMessage(m any) string {
	switch m := m.(type) {
	case nil:
		return ""
	case string:
		return m
	case []any:
		parts := make([]string, 0, len(m))
		for _, v := range m {
			if s := flattenGitLabMessage(v); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "; ")
	case map[string]any:
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+" "+flattenGitLabMessage(m[k]))
		}
		return strings.Join(parts, "; ")
	}
	return fmt.Sprint(m)
}

func gitLabMergeRequest(mr *gitlab.MergeRequest) *forge.Request {
	if mr == nil {
		return nil
	}
	return gitLabRequest(&mr.BasicMergeRequest, mr.WorkInProgress)
}

// gitLabRequest maps a merge request. Draft is the draft field, the
// work_in_progress field of older versions, or the title's prefix, which
// is what GitLab itself goes by.
func gitLabRequest(mr *gitlab.BasicMergeRequest, wip bool) *forge.Request {
	return &forge.Request{
		Number:     int(mr.IID),
		URL:        mr.WebURL,
		State:      gitLabState(mr.State),
		Title:      mr.Title,
		Body:       mr.Description,
		Head:       mr.SourceBranch,
		Base:       mr.TargetBranch,
		HeadCommit: mr.SHA,
		Draft:      mr.Draft || wip || gitLabDraft.Prefix(mr.Title) != "",
	}
}

func gitLabState(s string) forge.State {
	switch s {
	case "opened", "locked": // locked: being merged, still open
		return forge.Open
	case "closed":
		return forge.Closed
	case "merged":
		return forge.Merged
	}
	return forge.State(s)
}

// GitLab marks a draft by its title: these prefixes, in any case.
var gitLabDraft = forge.DraftPrefixes{Known: []string{"draft:", "[draft]", "(draft)", "draft -"}, Add: "Draft: "}

// Commits compares two revisions (GET /projects/:id/repository/compare
// with from and to).
func (g *gitLab) Commits(ctx context.Context, from, to string, limit int) ([]forge.Commit, int, error) {
	var cmp *gitlab.Compare
	err := g.call(ctx, fmt.Sprintf("comparing %s...%s", from, to), func(o gitlab.RequestOptionFunc) (resp *gitlab.Response, err error) {
		cmp, resp, err = g.api.Repositories.Compare(g.project, &gitlab.CompareOptions{From: gitlab.Ptr(from), To: gitlab.Ptr(to)}, o)
		return resp, err
	})
	if err != nil {
		return nil, 0, err
	}
	var out []forge.Commit
	for _, c := range cmp.Commits {
		if c != nil && len(out) < limit {
			out = append(out, forge.Commit{SHA: c.ID, Subject: subject(c.Title)})
		}
	}
	return out, len(cmp.Commits), nil
}
