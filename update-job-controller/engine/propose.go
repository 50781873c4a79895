package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/refname"
	"toolkit.dev/image-toolkit/pkg/imagesource"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// CloseComment is left on an open request whose change the base already
// has, before it is closed.
const CloseComment = "The base branch already has these image updates; closing this request. (image-toolkit)"

// forgeClient is the API client of the plan's pull request.
func (r *run) forgeClient(ctx context.Context) (forge.Client, error) {
	pr := r.plan.Target.PullRequest
	ep, err := forge.Resolve(r.plan.Repository, forge.Provider(pr.Provider), pr.APIURL)
	if err != nil {
		return nil, invalidf("push.pullRequest: %v", err)
	}
	if err := r.credentials(ctx); err != nil {
		return nil, err
	}
	fresh, err := r.creds.Git.Fresh(ctx)
	if err != nil {
		return nil, retryable(KindAuthentication, err)
	}
	fa := ForgeAuthOf(fresh)
	if r.creds.Forge != nil {
		if fa, err = r.creds.Forge(ctx, fresh); err != nil {
			return nil, err
		}
	}
	if fa.Token == "" {
		return nil, invalidf("the pull request needs an API token")
	}
	// TLS trust and the proxy are the repository's, as the forge usually
	// serves both.
	hc, err := fresh.HTTPClient(ep.APIURL)
	if err != nil {
		return nil, terminal(KindInvalid, err)
	}
	provider := string(ep.Provider)
	opts := forge.Options{
		Provider:   ep.Provider,
		APIURL:     ep.APIURL,
		Repository: ep.Repository,
		Token:      fa.Token,
		Username:   fa.Username,
		HTTPClient: hc,
		OnResponse: func(_ string, status int) {
			if r.settings.Hooks.OnEvent != nil {
				r.settings.Hooks.OnEvent(Event{Kind: EventForgeResponse, Provider: provider, StatusCode: status})
			}
		},
	}
	fc, err := forge.New(opts)
	if err != nil {
		return nil, invalidf("push.pullRequest: %v", err)
	}
	r.forgeOpts = &opts
	return fc, nil
}

// sourceCommits gives each source change whose repository the request's
// forge serves (on the plan repository's host) the commits between its
// two revisions, read with the request's credentials: a team's images are
// mostly built from its own forge's repositories. Each compare is asked
// once; what fails is a warning, and the request goes out without it.
func (r *run) sourceCommits(ctx context.Context, res *setters.Result) {
	if r.forgeOpts == nil || res == nil {
		return
	}
	repo, err := git.ParseURL(r.plan.Repository)
	if err != nil {
		return
	}
	type listed struct {
		commits []meta.SourceCommit
		total   int
	}
	seen := map[string]*listed{}
	for i := range res.Files {
		for j := range res.Files[i].Objects {
			for _, c := range res.Files[i].Objects[j].Changes {
				s := c.Source
				if s == nil || s.PreviousRevision == "" || s.Revision == "" {
					continue
				}
				key := s.URL + "@" + s.PreviousRevision + ".." + s.Revision
				l, ok := seen[key]
				if !ok {
					l = &listed{}
					seen[key] = l
					if src, err := git.ParseURL(s.URL); err == nil && strings.EqualFold(src.Host, repo.Host) {
						l.commits, l.total = r.listCommits(ctx, s)
					}
				}
				s.Commits, s.TotalCommits = l.commits, l.total
			}
		}
	}
}

// listCommits reads the commits of one source change through the
// request's forge, as a client of the source repository.
func (r *run) listCommits(ctx context.Context, s *meta.ChangeSource) ([]meta.SourceCommit, int) {
	o := *r.forgeOpts
	ep, err := forge.Resolve(s.URL, o.Provider, o.APIURL)
	if err != nil {
		return nil, 0
	}
	o.Repository = ep.Repository
	c, err := forge.New(o)
	if err != nil {
		return nil, 0
	}
	lister, ok := c.(forge.CommitLister)
	if !ok {
		return nil, 0
	}
	commits, total, err := lister.Commits(ctx, s.PreviousRevision, s.Revision, meta.MaxSourceCommits)
	if err != nil {
		r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("listing the source commits of %s: %s", s.URL, r.creds.Git.Scrub(err.Error())))
		return nil, 0
	}
	out := make([]meta.SourceCommit, 0, len(commits))
	for _, cm := range commits {
		out = append(out, meta.SourceCommit{SHA: cm.SHA, Subject: imagesource.Subject(cm.Subject)})
	}
	return out, total
}

// propose keeps one request per head branch: the update was made on the
// base (commit; zero when the base already has the plan's values). The
// head branch is rebuilt as the base plus that one commit, force-pushed
// only when it holds something else, and the open request edited only when
// its text changed, so that an update costs one API call to find the
// request and at most one more to change it.
func (r *run) propose(ctx context.Context, base, commit mirror.Hash) (Result, error) {
	pr := r.plan.Target.PullRequest
	out := &r.res
	d := data(r.plan)
	head, err := headBranch(pr, d)
	if err != nil {
		return Result{}, terminal(KindInvalid, err)
	}
	open, err := r.findOpen(ctx, head)
	if err != nil {
		return Result{}, err
	}
	if commit.IsZero() {
		if open == nil {
			return *out, nil
		}
		if err := r.beforePush(ctx, Push{PullRequest: true}); err != nil {
			return Result{}, err
		}
		if err := r.forge.Close(ctx, open, CloseComment); err != nil {
			return Result{}, forgeFailure("closing the request", err)
		}
		out.PullRequest = requestStatus(open, head, meta.PullRequestClosed, meta.PullRequestClosedNow)
		return *out, nil
	}
	if rp, ok := r.forge.(forge.PushReviewer); ok {
		return r.proposeByPush(ctx, rp, open, head, base, commit)
	}

	if out.Changes != nil {
		r.sourceCommits(ctx, out.Changes)
		d.Changed = out.Changes.In(r.plan.Path).V2()
	}
	title, err := commitmsg.PullRequestTitle.Render(pr.TitleTemplate, d)
	if err != nil {
		return Result{}, terminal(KindInvalid, err)
	}
	body, err := commitmsg.PullRequestBody.Render(pr.BodyTemplate, d)
	if err != nil {
		return Result{}, terminal(KindInvalid, err)
	}

	headCommit, pushed, err := r.pushHead(ctx, head, base, commit)
	if err != nil {
		return Result{}, err
	}
	if out.PullRequest, err = r.keepRequest(ctx, open, head, title, body, pushed); err != nil {
		return Result{}, err
	}
	out.PullRequest.HeadCommit = headCommit
	out.Message = title
	return *out, nil
}

// review is the open review (nil: none) and the trailer of the commit
// for a forge that reviews pushed commits: the commit's message names its
// review, so the review is found before the commit is made.
type review struct {
	open    *forge.Request
	trailer string
}

// findReview finds the review a forge.PushReviewer's commit on base goes
// to. A new review's trailer is seeded with base and the plan's update,
// which differ for every new review of the stream.
func (r *run) findReview(ctx context.Context, base mirror.Hash) error {
	rp, ok := r.forge.(forge.PushReviewer)
	if !ok {
		return nil
	}
	pr := r.plan.Target.PullRequest
	head, err := headBranch(pr, data(r.plan))
	if err != nil {
		return terminal(KindInvalid, err)
	}
	open, err := r.forge.FindOpen(ctx, head, pr.Base)
	if err != nil {
		return forgeFailure("finding the open request", err)
	}
	update, err := json.Marshal(r.plan.Update)
	if err != nil {
		return terminal(KindInvalid, err)
	}
	sum := sha256.Sum256(update)
	r.review = &review{open: open, trailer: rp.Trailer(open, head, pr.Base, base.String()+":"+hex.EncodeToString(sum[:]))}
	return nil
}

// findOpen is the open request of head, as findReview found it when it
// did.
func (r *run) findOpen(ctx context.Context, head string) (*forge.Request, error) {
	if r.review != nil {
		return r.review.open, nil
	}
	open, err := r.forge.FindOpen(ctx, head, r.plan.Target.PullRequest.Base)
	if err != nil {
		return nil, forgeFailure("finding the open request", err)
	}
	return open, nil
}

// proposeByPush keeps the stream's review on a forge that reviews pushed
// commits (Gerrit): the commit, whose message carries the stream's
// trailer, goes to the forge's review ref, which opens the review or adds
// a patch set to it; unless the open review's current commit is this
// commit made again (the same parent, tree and message: samePatchSet),
// which would only add an empty patch set.
func (r *run) proposeByPush(ctx context.Context, rp forge.PushReviewer, open *forge.Request, head string, base, commit mirror.Hash) (Result, error) {
	pr := r.plan.Target.PullRequest
	out := &r.res
	if open != nil && r.samePatchSet(open, base, commit) {
		out.PullRequest = requestStatus(open, head, meta.PullRequestOpen, meta.PullRequestUnchanged)
		return *out, nil
	}
	ref, err := rp.ReviewRef(forge.NewRequest{Head: head, Base: pr.Base, Draft: pr.Draft,
		Labels: pr.Labels, Reviewers: pr.Reviewers, Assignees: pr.Assignees, AutoMerge: forge.MergeMethod(pr.AutoMerge)})
	if err != nil {
		return Result{}, forgeFailure("pushing for review", err)
	}
	p := Push{Commit: commit.String(), Refs: []string{ref}, PullRequest: true}
	if err := r.credentials(ctx); err != nil {
		return Result{}, err
	}
	if err := r.beforePush(ctx, p); err != nil {
		return Result{}, err
	}
	// The review ref is the forge's, never a branch: there is nothing of
	// ours to fast-forward from.
	if err := r.pushRefs(ctx, commit, []writeback.RefUpdate{{Dst: ref, Force: true}}); err != nil {
		return Result{}, gitError(err)
	}
	r.afterPush(ctx, p)
	r.res.Commit, r.res.PushedRefs = p.Commit, p.Refs
	action := meta.PullRequestOpened
	if open != nil {
		action = meta.PullRequestUpdated
	}
	// The push made the review: finding it only gives its number and page.
	found, err := r.forge.FindOpen(ctx, head, pr.Base)
	if err == nil && found == nil {
		err = fmt.Errorf("the forge took the push but lists no open review of it yet")
	}
	if err != nil {
		r.res.Warnings = append(r.res.Warnings, r.creds.Git.Scrub(err.Error()))
		if found = open; found == nil {
			found = &forge.Request{}
		}
	}
	out.PullRequest = requestStatus(found, head, meta.PullRequestOpen, action)
	out.PullRequest.HeadCommit = commit.String()
	return *out, nil
}

// samePatchSet reports whether the open review's current commit is commit
// made again: on base, by the same people at the same times, with the
// same tree and message. A signed commit is never found the same (the
// forge does not give the signature), so it gets a new patch set.
func (r *run) samePatchSet(open *forge.Request, base, commit mirror.Hash) bool {
	pc := open.Pushed
	if pc == nil || pc.Parent != base.String() || open.HeadCommit == "" {
		return false
	}
	again, err := r.mirror.Remade(commit, pc.Author, pc.Committer)
	return err == nil && again.String() == open.HeadCommit
}

// keepRequest opens the request, or edits the open one when its text
// changed; what fails after the request exists is a warning.
func (r *run) keepRequest(ctx context.Context, open *forge.Request, head, title, body string, pushed bool) (*meta.PullRequestStatus, error) {
	pr := r.plan.Target.PullRequest
	var req *meta.PullRequestStatus
	switch {
	case open == nil:
		created, err := r.forge.Create(ctx, forge.NewRequest{
			Head: head, Base: pr.Base, Title: title, Body: body, Draft: pr.Draft,
			Labels: pr.Labels, Reviewers: pr.Reviewers, Assignees: pr.Assignees,
			AutoMerge: forge.MergeMethod(pr.AutoMerge),
		})
		if created == nil {
			return nil, forgeFailure("opening the request", err)
		}
		if err != nil {
			// The request exists: what failed after it (labels,
			// reviewers, auto-merge) is reported, not retried, so that a
			// retry never opens a second request.
			r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("request #%d: %s", created.Number, r.creds.Git.Scrub(err.Error())))
		}
		req = requestStatus(created, head, stateOf(created), meta.PullRequestOpened)
	case sameText(open.Title, title) && sameText(open.Body, body):
		action := meta.PullRequestUnchanged
		if pushed {
			action = meta.PullRequestUpdated
		}
		req = requestStatus(open, head, meta.PullRequestOpen, action)
	default:
		edited, err := r.forge.Edit(ctx, open, title, body)
		if err != nil {
			if !pushed {
				return nil, forgeFailure("editing the request", err)
			}
			// The new commit is on the request already; its text is
			// edited again by the next update.
			r.res.Warnings = append(r.res.Warnings, fmt.Sprintf("request #%d: %s", open.Number, r.creds.Git.Scrub(err.Error())))
			edited = open
		}
		req = requestStatus(edited, head, stateOf(edited), meta.PullRequestUpdated)
	}
	return req, nil
}

// pushHead makes the head branch the base plus commit, pushing only when
// it holds something else. It returns the head's commit and whether it
// pushed.
func (r *run) pushHead(ctx context.Context, head string, base, commit mirror.Hash) (string, bool, error) {
	headCommit, upToDate := r.mirror.Proposes(head, base, commit)
	if upToDate {
		return headCommit, false, nil
	}
	p := Push{Commit: commit.String(), Refs: []string{"refs/heads/" + head}, PullRequest: true}
	if err := r.credentials(ctx); err != nil {
		return "", false, err
	}
	if err := r.beforePush(ctx, p); err != nil {
		return "", false, err
	}
	if err := r.pushRefs(ctx, commit, []writeback.RefUpdate{{Dst: p.Refs[0], Force: true}}); err != nil {
		return "", false, gitError(err)
	}
	r.afterPush(ctx, p)
	r.res.Commit, r.res.PushedRefs = p.Commit, p.Refs
	return p.Commit, true, nil
}

// headBranch is the plan's head branch, else its template rendered (the
// default names the automation's stream).
func headBranch(pr *writeback.PullRequest, d commitmsg.Data) (string, error) {
	head := pr.Head
	if head == "" {
		d.Changed = setters.ResultV2{}
		h, err := commitmsg.PullRequestBranch.Render(pr.HeadTemplate, d)
		if err != nil {
			return "", fmt.Errorf("push.pullRequest.branchTemplate: %w", err)
		}
		head = h
	}
	switch {
	case !refname.Branch(head):
		return "", fmt.Errorf("push.pullRequest.branchTemplate rendered %q, which is not a valid branch name", head)
	case head == pr.Base:
		return "", fmt.Errorf("the head branch %q is the base branch: a request needs a branch of its own", head)
	}
	return head, nil
}

// sameText compares request texts as forges store them: some turn \r\n
// into \n or trim trailing space.
func sameText(a, b string) bool {
	norm := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")) }
	return norm(a) == norm(b)
}

// stateOf is the state the forge reported: a request auto-merged at once
// (a forge without required checks) is merged already.
func stateOf(r *forge.Request) meta.PullRequestState {
	switch r.State {
	case forge.Merged:
		return meta.PullRequestMerged
	case forge.Closed:
		return meta.PullRequestClosed
	}
	return meta.PullRequestOpen
}

func requestStatus(r *forge.Request, head string, state meta.PullRequestState, action meta.PullRequestAction) *meta.PullRequestStatus {
	return &meta.PullRequestStatus{URL: r.URL, Number: r.Number, State: state, HeadBranch: head, HeadCommit: r.HeadCommit, Action: action}
}
