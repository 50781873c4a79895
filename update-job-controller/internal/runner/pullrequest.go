package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git2go "github.com/libgit2/git2go/v34"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/update-job-controller/internal/forge"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
)

// CloseComment is left on an open request whose change the base already
// has, before it is closed.
const CloseComment = "The base branch already has these image updates; closing this request. (image-toolkit)"

// propose keeps one request per head branch: the update was made on the
// base (commit; nil when the base already has the policies' values). The
// head branch is rebuilt as the base plus that one commit, force-pushed
// only when it holds something else, and the open request edited only when
// its text changed, so that an update costs one API call to find the
// request and at most one more to change it.
func (in *Input) propose(ctx context.Context, mirror *gitops.Mirror, base, commit *git2go.Oid, out *Output) (*Output, error) {
	pr := in.Plan.PullRequest
	if in.Forge == nil {
		return nil, terminal(conditions.InvalidSpecReason, errors.New("no forge client for push.pullRequest"))
	}
	data := commitmsg.Data{AutomationObject: in.AutomationObject, Values: in.Spec.Commit.MessageTemplateValues}
	head, err := in.headBranch(data)
	if err != nil {
		return nil, terminal(conditions.InvalidSpecReason, err)
	}
	open, err := in.Forge.FindOpen(ctx, head, pr.Base)
	if err != nil {
		return nil, forgeFailure("finding the open request", err)
	}

	if commit == nil {
		if open == nil {
			return out, nil
		}
		if err := in.beforePush(ctx); err != nil {
			return nil, err
		}
		if err := in.Forge.Close(ctx, open, CloseComment); err != nil {
			return nil, forgeFailure("closing the request", err)
		}
		out.PullRequest = requestStatus(open, head, updatev1.PullRequestClosed, updatev1.PullRequestClosedNow)
		return out, nil
	}

	if out.Result != nil {
		data.Changed = out.Result.V2()
	}
	title, err := commitmsg.PullRequestTitle.Render(pr.Spec.TitleTemplate, data)
	if err != nil {
		return nil, terminal(conditions.InvalidSpecReason, err)
	}
	body, err := commitmsg.PullRequestBody.Render(pr.Spec.BodyTemplate, data)
	if err != nil {
		return nil, terminal(conditions.InvalidSpecReason, err)
	}

	pushed := false
	headCommit, upToDate := mirror.Proposes(head, base, commit)
	if !upToDate {
		if err := in.beforePush(ctx); err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, in.timeout())
		start := time.Now()
		err := mirror.Push(pctx, in.Auth, commit, []gitops.PushRef{{Dst: "refs/heads/" + head, Force: true}})
		cancel()
		in.observe(OpPush, start)
		if err != nil {
			return nil, gitError(err)
		}
		pushed = true
		headCommit = commit.String()
		out.Commit = headCommit
		out.PushedRefs = []string{"refs/heads/" + head}
	}

	switch {
	case open == nil:
		created, err := in.Forge.Create(ctx, forge.NewRequest{
			Head: head, Base: pr.Base, Title: title, Body: body, Draft: pr.Spec.Draft,
			Labels: pr.Spec.Labels, Reviewers: pr.Spec.Reviewers, Assignees: pr.Spec.Assignees,
			AutoMerge: forge.MergeMethod(pr.Spec.AutoMerge),
		})
		if created == nil {
			return nil, forgeFailure("opening the request", err)
		}
		if err != nil {
			// The request exists: what failed after it (labels,
			// reviewers, auto-merge) is reported, not retried, so that a
			// retry never opens a second request.
			out.Warnings = append(out.Warnings, fmt.Sprintf("request #%d: %s", created.Number, in.Auth.Scrub(err.Error())))
		}
		out.PullRequest = requestStatus(created, head, stateOf(created), updatev1.PullRequestOpened)
	case sameText(open.Title, title) && sameText(open.Body, body):
		action := updatev1.PullRequestUnchanged
		if pushed {
			action = updatev1.PullRequestUpdated
		}
		out.PullRequest = requestStatus(open, head, updatev1.PullRequestOpen, action)
	default:
		edited, err := in.Forge.Edit(ctx, open, title, body)
		if err != nil {
			if !pushed {
				return nil, forgeFailure("editing the request", err)
			}
			// The new commit is on the request already; its text is
			// edited again by the next update.
			out.Warnings = append(out.Warnings, fmt.Sprintf("request #%d: %s", open.Number, in.Auth.Scrub(err.Error())))
			edited = open
		}
		out.PullRequest = requestStatus(edited, head, stateOf(edited), updatev1.PullRequestUpdated)
	}
	out.PullRequest.HeadCommit = headCommit
	out.Message = title
	return out, nil
}

// headBranch renders the head branch: the template, else the automation's
// stream, else the job's own.
func (in *Input) headBranch(data commitmsg.Data) (string, error) {
	pr := in.Plan.PullRequest
	var head string
	if pr.Spec.BranchTemplate == "" && data.AutomationObject.Name == "" {
		head = fmt.Sprintf("image-toolkit/%s-%s", in.Job.Namespace, in.Job.Name)
	} else {
		data.Changed = setters.ResultV2{}
		h, err := commitmsg.PullRequestBranch.Render(pr.Spec.BranchTemplate, data)
		if err != nil {
			return "", fmt.Errorf("push.pullRequest.branchTemplate: %w", err)
		}
		head = h
	}
	switch {
	case !validRefName("refs/heads/" + head):
		return "", fmt.Errorf("push.pullRequest.branchTemplate rendered %q, which is not a valid branch name", head)
	case head == pr.Base:
		return "", fmt.Errorf("the head branch %q is the base branch: a request needs a branch of its own", head)
	}
	return head, nil
}

func (in *Input) beforePush(ctx context.Context) error {
	if in.BeforePush != nil {
		return in.BeforePush(ctx)
	}
	return nil
}

// sameText compares request texts as forges store them: some turn \r\n
// into \n or trim trailing space.
func sameText(a, b string) bool {
	norm := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")) }
	return norm(a) == norm(b)
}

// stateOf is the state the forge reported: a request auto-merged at once
// (a forge without required checks) is merged already.
func stateOf(r *forge.Request) updatev1.PullRequestState {
	switch r.State {
	case forge.Merged:
		return updatev1.PullRequestMerged
	case forge.Closed:
		return updatev1.PullRequestClosed
	}
	return updatev1.PullRequestOpen
}

func requestStatus(r *forge.Request, head string, state updatev1.PullRequestState, action updatev1.PullRequestAction) *updatev1.PullRequestStatus {
	return &updatev1.PullRequestStatus{URL: r.URL, Number: r.Number, State: state, HeadBranch: head, HeadCommit: r.HeadCommit, Action: action}
}

// forgeFailure classifies a forge's refusal: a refused token is
// AuthenticationFailed, a rate limit is retried after its reset, anything
// else is PullRequestFailed with what the forge said. All are retried: a
// Secret or a permission may be fixed meanwhile.
func forgeFailure(op string, err error) *conditions.Failure {
	var fe *forge.Error
	if !errors.As(err, &fe) {
		return retryable(updatev1.PullRequestFailedReason, fmt.Errorf("%s: %w", op, err))
	}
	switch {
	case fe.Unauthorized():
		return retryable(conditions.AuthenticationFailedReason, fmt.Errorf("%s: %w", op, err))
	case fe.RateLimited():
		return retryable(updatev1.RateLimitedReason, fmt.Errorf("%s: %w", op, err)).After(fe.RetryAfter)
	}
	return retryable(updatev1.PullRequestFailedReason, fmt.Errorf("%s: %w", op, err))
}
