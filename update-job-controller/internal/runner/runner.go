// Package runner carries out one attempt of an UpdateJob: fetch into the
// mirror, check out, run the image setters (or, in container mode, the
// caller's Container hook), commit and push, and on a non-fast-forward push
// start over from the new head. It knows nothing of controllers: the caller
// supplies credentials and hooks.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	git2go "github.com/libgit2/git2go/v34"
	"k8s.io/apimachinery/pkg/types"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/update-job-controller/internal/forge"
	"toolkit.dev/image-toolkit/update-job-controller/internal/gitops"
)

// Git operations, as observed.
const (
	OpClone = "clone"
	OpFetch = "fetch"
	OpPush  = "push"
)

// DefaultPushRetries bounds the fetch-reapply-push rounds after a
// non-fast-forward rejection.
const DefaultPushRetries = 5

// A failed attempt is a *conditions.Failure: its reason, and Stalled when
// the spec or its Secrets are at fault and retrying cannot help.
func terminal(reason string, err error) *conditions.Failure { return conditions.Stall(reason, err) }

func retryable(reason string, err error) *conditions.Failure { return conditions.Retry(reason, err) }

// gitError classifies a git failure.
func gitError(err error) *conditions.Failure {
	if errors.Is(err, git.ErrAuthentication) {
		return retryable(conditions.AuthenticationFailedReason, err)
	}
	return retryable(conditions.GitOperationFailedReason, err)
}

// Plan is what a job spec asks for, checked before any network call.
type Plan struct {
	Ref gitops.Ref
	// Branch is the push branch; empty when only a refspec is pushed.
	Branch string
	// Force is set when the push branch is not the checkout branch: it is
	// then rewritten to the checkout revision plus our commit, as Flux does.
	Force bool
	// Extra are the destinations of push.refspec.
	Extra    []gitops.PushRef
	Path     string
	Policies setters.Policies
	// PullRequest is set when the change is proposed as a pull request:
	// nothing is pushed to Branch then.
	PullRequest *PullRequestPlan
	// Discover is set when the job finds the images of the checkout.
	Discover *updatev1.DiscoverSpec
	// Container is set when a container updates the files instead of the
	// setters; the attempt then needs Input.Container.
	Container *updatev1.UpdateContainer
}

// PullRequestPlan is where a job proposes its change.
type PullRequestPlan struct {
	Spec *updatev1.PullRequestSpec
	// Base is the branch the request merges into.
	Base     string
	Endpoint *forge.Endpoint
}

// NewPlan validates a spec. Its errors are terminal (InvalidSpec).
func NewPlan(spec *updatev1.UpdateJobSpec) (*Plan, error) {
	fail := func(format string, args ...any) (*Plan, error) {
		return nil, terminal(conditions.InvalidSpecReason, fmt.Errorf(format, args...))
	}
	ref := spec.Checkout.Reference
	p := &Plan{
		Ref:      gitops.Ref{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Name: ref.Name, Commit: ref.Commit},
		Path:     path.Clean("/" + spec.Update.Path)[1:],
		Policies: setters.Policies{},
	}
	push := spec.Push
	if push == nil {
		push = &updatev1.PushSpec{}
	}
	if len(push.Options) > 0 {
		// libgit2 1.5 has no push options; ignoring them would silently
		// drop what a server hook relies on (e.g. merge requests).
		return fail("push.options are not supported: libgit2 1.5 cannot send git push options")
	}
	if push.PullRequest != nil {
		if push.Branch != "" || push.Refspec != "" {
			return fail("push.pullRequest pushes to its own head branch: push.branch and push.refspec cannot be set with it")
		}
		pr, err := newPullRequestPlan(spec, push.PullRequest)
		if err != nil {
			return fail("push.pullRequest: %v", err)
		}
		p.PullRequest = pr
	}
	switch {
	case p.PullRequest != nil:
	case push.Branch != "":
		p.Branch = push.Branch
		p.Force = push.Branch != ref.Branch
	case push.Refspec == "":
		p.Branch = ref.Branch
	}
	if p.PullRequest == nil && p.Branch == "" && push.Refspec == "" {
		return fail("nothing to push to: set checkout.ref.branch, push.branch or push.refspec")
	}
	if p.Branch != "" && !validRefName("refs/heads/"+p.Branch) {
		return fail("push branch %q is not a valid branch name", p.Branch)
	}
	if push.Refspec != "" {
		dst, force, err := parseRefspec(push.Refspec, ref.Branch)
		if err != nil {
			return fail("push.refspec %q: %v", push.Refspec, err)
		}
		if dst != "refs/heads/"+p.Branch {
			p.Extra = append(p.Extra, gitops.PushRef{Dst: dst, Force: force})
		}
	}
	if err := commitmsg.Validate(spec.Commit.MessageTemplate, spec.Commit.MessageTemplateValues); err != nil {
		return fail("%v", err)
	}
	for _, s := range spec.Update.Setters {
		if _, dup := p.Policies[s.Policy]; dup {
			return fail("setter %s is listed twice", s.Policy)
		}
		p.Policies[s.Policy] = setters.Image{Name: s.Name, Tag: s.Tag, Digest: s.Digest}
	}
	if c := spec.Update.Container; c != nil {
		if len(p.Policies) > 0 || spec.Update.Discover != nil {
			return fail("update.container runs instead of the setters: update.setters and update.discover cannot be set with it")
		}
		p.Container = c
		return p, nil
	}
	if d := spec.Update.Discover; d != nil {
		for _, pat := range append(slices.Clone(d.Include), d.Exclude...) {
			if _, err := path.Match(pat, ""); err != nil {
				return fail("update.discover: pattern %q: %v", pat, err)
			}
		}
		p.Discover = d
	} else if len(p.Policies) == 0 {
		return fail("update.setters is empty")
	}
	return p, nil
}

func newPullRequestPlan(spec *updatev1.UpdateJobSpec, pr *updatev1.PullRequestSpec) (*PullRequestPlan, error) {
	base := pr.Base
	if base == "" {
		base = spec.Checkout.Reference.Branch
	}
	if base == "" {
		return nil, errors.New("base is needed when the checkout ref is not a branch")
	}
	if !validRefName("refs/heads/" + base) {
		return nil, fmt.Errorf("base %q is not a valid branch name", base)
	}
	ep, err := forge.Resolve(spec.Repository.URL, forge.Provider(pr.Provider), pr.APIURL)
	if err != nil {
		return nil, err
	}
	values := spec.Commit.MessageTemplateValues
	for _, t := range []struct {
		tmpl commitmsg.Template
		text string
	}{
		{commitmsg.PullRequestBranch, pr.BranchTemplate},
		{commitmsg.PullRequestTitle, pr.TitleTemplate},
		{commitmsg.PullRequestBody, pr.BodyTemplate},
	} {
		if err := t.tmpl.Validate(t.text, values); err != nil {
			return nil, err
		}
	}
	return &PullRequestPlan{Spec: pr, Base: base, Endpoint: ep}, nil
}

// parseRefspec reads [+]SRC:DST. The commit exists only in the job, so the
// source must name it: HEAD, or the checkout branch (which, as in Flux's
// clone, is where the commit was made).
func parseRefspec(spec, checkoutBranch string) (string, bool, error) {
	force := strings.HasPrefix(spec, "+")
	src, dst, ok := strings.Cut(strings.TrimPrefix(spec, "+"), ":")
	if !ok || dst == "" {
		return "", false, errors.New("want [+]SOURCE:DESTINATION")
	}
	switch src {
	case "HEAD", "@":
	case checkoutBranch, "refs/heads/" + checkoutBranch:
		if checkoutBranch == "" {
			return "", false, errors.New("the source must be HEAD when no branch is checked out")
		}
	default:
		return "", false, fmt.Errorf("the source must be HEAD or the checkout branch, the only places the new commit is")
	}
	if !strings.HasPrefix(dst, "refs/") {
		dst = "refs/heads/" + dst
	}
	if !validRefName(dst) {
		return "", false, fmt.Errorf("%q is not a valid ref name", dst)
	}
	return dst, force, nil
}

func validRefName(name string) bool {
	ok, err := git2go.ReferenceNameIsValid(name)
	return err == nil && ok
}

// Input is one attempt's job, credentials and hooks.
type Input struct {
	Spec *updatev1.UpdateJobSpec
	Plan *Plan
	Auth *git.Auth
	// Signer signs the commit; nil leaves it unsigned.
	Signer gitops.Signer
	// AutomationObject is the automation that created the job, if any.
	AutomationObject types.NamespacedName
	// WorkDir holds the temporary work trees; the same file system as the
	// cache keeps checkouts cheap.
	WorkDir string
	// BeforePush is called before every push; an error aborts the attempt,
	// e.g. because another runner took the job over.
	BeforePush func(ctx context.Context) error
	// Pushing is called with the commit just before it is pushed to the
	// branch (not for pull requests), after BeforePush; an error aborts the
	// attempt. The controller records the commit in the job, so that an
	// attempt that dies after the push still has its outcome found.
	Pushing func(ctx context.Context, commit string) error
	// PushingCommit is the commit an earlier attempt was about to push.
	// When the push branch already holds it, that attempt's push landed:
	// the job is done with that commit, and nothing is changed again.
	PushingCommit string
	// Observe is told how long each git operation took.
	Observe func(op string, d time.Duration)
	// OnPushRetry is called for each non-fast-forward retry.
	OnPushRetry func()
	// PushRetries bounds non-fast-forward retries; 0 means DefaultPushRetries.
	PushRetries int
	// Forge keeps the pull request of a Plan with PullRequest.
	Forge forge.Client
	// Job names the job, whose name is the head branch of a job no
	// automation made.
	Job types.NamespacedName
	// Container carries out the update of a Plan with Container: checkout
	// holds the whole tree under the update path (not only the files with
	// markers), and the hook fills the empty directory result with what
	// that tree should become. round counts the non-fast-forward rounds
	// of the attempt from 0. Its error is the attempt's, as returned.
	Container func(ctx context.Context, round int, checkout, result string) error
}

// Output is what an attempt did. Commit is empty when nothing changed.
type Output struct {
	CheckoutRevision string
	Commit           string
	Message          string
	PushedRefs       []string
	Result           *setters.Result
	// Problems are files the setters could not read or rewrite; the others
	// were still updated.
	Problems []string
	Retries  int
	// PullRequest is the request opened, updated, found up to date or
	// closed.
	PullRequest *updatev1.PullRequestStatus
	// Warnings are what failed on the request after the update was made
	// (labels, reviewers, auto-merge, an edit of its text).
	Warnings []string
	// Discovered is what discovery found, in the status's form.
	Discovered *Discovered
	// Files are what a container changed, relative to the update path
	// (container mode; the setters' changes are in Result).
	Files []updatev1.FileResult
}

// Discovered is what a job's discovery found, for status.result.
type Discovered struct {
	Images  []updatev1.DiscoveredImage
	Omitted int
	Skipped int
}

// Run carries out the job against the mirror of its repository.
func Run(ctx context.Context, cache *gitops.Cache, in Input) (*Output, error) {
	mirror, release, err := cache.Open(in.Spec.Repository.URL)
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, err)
	}
	defer release()

	maxRetries := in.PushRetries
	if maxRetries <= 0 {
		maxRetries = DefaultPushRetries
	}
	out := &Output{}
	for round := 0; ; round++ {
		oid, err := in.fetchAndResolve(ctx, mirror, out)
		if err != nil {
			return nil, err
		}
		if round == 0 && in.landed(mirror, out) {
			return out, nil
		}
		var commit *git2go.Oid
		if in.Plan.Container != nil {
			commit, err = in.updateByContainer(ctx, mirror, oid, round, out)
		} else {
			commit, err = in.update(mirror, oid, out)
		}
		if err != nil {
			return out, err
		}
		if in.Plan.PullRequest != nil {
			// The head branch is the job's own and force-pushed: no
			// race to retry.
			return in.propose(ctx, mirror, oid, commit, out)
		}
		if commit == nil {
			return out, nil
		}
		if err := in.beforePush(ctx); err != nil {
			return nil, err
		}
		if in.Pushing != nil {
			if err := in.Pushing(ctx, commit.String()); err != nil {
				return nil, err
			}
		}
		err = in.push(ctx, mirror, commit, out)
		if errors.Is(err, gitops.ErrNonFastForward) && round < maxRetries {
			// Someone pushed since our fetch: start again from their
			// commit, after a jittered pause so racing writers spread out.
			out.Retries++
			if in.OnPushRetry != nil {
				in.OnPushRetry()
			}
			pause := time.Duration(50+rand.IntN(200*(round+1))) * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, gitError(ctx.Err())
			case <-time.After(pause):
			}
			continue
		}
		if err != nil {
			var e *conditions.Failure
			if !errors.As(err, &e) && errors.Is(err, gitops.ErrNonFastForward) {
				err = gitError(fmt.Errorf("gave up after %d retries: %w", out.Retries, err))
			}
			return nil, err
		}
		return out, nil
	}
}

// landed reports whether an earlier attempt's push (PushingCommit) is on
// the push branch, as just fetched, and fills out with it. Only a push to a
// branch qualifies: a pull request's head branch is the job's own and
// rewritten by every attempt.
func (in *Input) landed(mirror *gitops.Mirror, out *Output) bool {
	if in.PushingCommit == "" || in.Plan.PullRequest != nil || in.Plan.Branch == "" {
		return false
	}
	dst := "refs/heads/" + in.Plan.Branch
	msg, ok := mirror.Holds(dst, in.PushingCommit)
	if !ok {
		return false
	}
	out.Commit, out.Message, out.PushedRefs = in.PushingCommit, msg, []string{dst}
	for _, r := range in.Plan.Extra {
		out.PushedRefs = append(out.PushedRefs, r.Dst)
	}
	return true
}

func (in *Input) timeout() time.Duration {
	if t := in.Spec.Repository.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return time.Minute
}

func (in *Input) observe(op string, start time.Time) {
	if in.Observe != nil {
		in.Observe(op, time.Since(start))
	}
}

func (in *Input) fetchAndResolve(ctx context.Context, mirror *gitops.Mirror, out *Output) (*git2go.Oid, error) {
	op := OpFetch
	if mirror.Empty() {
		op = OpClone
	}
	fctx, cancel := context.WithTimeout(ctx, in.timeout())
	start := time.Now()
	err := mirror.Fetch(fctx, in.Auth)
	cancel()
	in.observe(op, start)
	if err != nil {
		return nil, gitError(err)
	}
	oid, rev, err := mirror.Resolve(in.Plan.Ref)
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, err)
	}
	out.CheckoutRevision = rev
	return oid, nil
}

// update checks out oid, runs the setters and commits. A nil commit means
// no change.
func (in *Input) update(mirror *gitops.Mirror, oid *git2go.Oid, out *Output) (*git2go.Oid, error) {
	out.Commit, out.Message, out.PushedRefs = "", "", nil
	tmp, err := os.MkdirTemp(in.WorkDir, "checkout-")
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, err)
	}
	defer os.RemoveAll(tmp)

	var paths []string
	if in.Plan.Path != "" {
		paths = []string{in.Plan.Path}
	}
	// Only files that may hold markers (or, with discovery, images) are
	// written: the others are left alone, and creating thousands of files
	// would dominate the job.
	keep := setters.MayHaveMarkers
	if in.Plan.Discover != nil {
		keep = func(b []byte) bool { return setters.MayHaveMarkers(b) || discover.MayHaveImages(b) }
	}
	if err := mirror.CheckoutFiltered(oid, tmp, keep, paths...); err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, fmt.Errorf("checking out %s: %w", out.CheckoutRevision, err))
	}
	dir, err := securePath(tmp, in.Plan.Path)
	if err != nil {
		return nil, terminal(updatev1.UpdateFailedReason, err)
	}
	var sites map[string][]setters.Site
	out.Discovered = nil
	if d := in.Plan.Discover; d != nil {
		if sites, out.Discovered, err = discoverSites(dir, d, in.Plan.Policies); err != nil {
			return nil, retryable(updatev1.UpdateFailedReason, fmt.Errorf("discovering the images of %s: %w", in.Plan.Path, err))
		}
	}
	res, err := setters.UpdateDir(dir, in.Plan.Policies, setters.Options{Sites: sites})
	if err != nil {
		return nil, retryable(updatev1.UpdateFailedReason, fmt.Errorf("updating %s: %w", in.Plan.Path, err))
	}
	out.Result = res
	out.Problems = nil
	for _, p := range res.Problems {
		// Links to files without markers dangle in the filtered checkout.
		if !errors.Is(p.Err, fs.ErrNotExist) {
			out.Problems = append(out.Problems, path.Join(in.Plan.Path, p.Error()))
		}
	}
	if len(res.Files) == 0 {
		return nil, nil
	}
	changed := make([]string, 0, len(res.Files))
	for _, f := range res.Files {
		changed = append(changed, path.Join(in.Plan.Path, f.Path))
	}
	if d := in.Plan.Discover; d != nil && d.WriteMarkers {
		// Positions moved with the new values: discover again, and mark
		// what a setter applies to, as tk-image discover --write-markers.
		again, _, err := discoverSites(dir, d, in.Plan.Policies)
		if err != nil {
			return nil, retryable(updatev1.UpdateFailedReason, fmt.Errorf("discovering the images of %s: %w", in.Plan.Path, err))
		}
		written, _, err := discover.WriteMarkers(dir, again)
		if err != nil {
			return nil, retryable(updatev1.UpdateFailedReason, fmt.Errorf("writing markers: %w", err))
		}
		for _, f := range written {
			if p := path.Join(in.Plan.Path, f); !slices.Contains(changed, p) {
				changed = append(changed, p)
			}
		}
	}
	msg, err := commitmsg.Render(in.Spec.Commit.MessageTemplate, commitmsg.Data{
		AutomationObject: in.AutomationObject,
		Changed:          res.V2(),
		Values:           in.Spec.Commit.MessageTemplateValues,
	})
	if err != nil {
		return nil, terminal(conditions.InvalidSpecReason, err)
	}
	author := in.Spec.Commit.Author
	commit, err := mirror.Commit(oid, tmp, changed, gitops.CommitInfo{
		Author:  gitops.Author{Name: author.Name, Email: author.Email},
		Message: msg,
		Signer:  in.Signer,
	})
	if errors.Is(err, gitops.ErrNoChange) {
		return nil, nil
	}
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, fmt.Errorf("committing: %w", err))
	}
	out.Message = msg
	return commit, nil
}

// updateByContainer checks out the tree under the update path, has the
// Container hook make the new tree and commits the difference. The git side
// (fetch, commit, signing, push, retries) is the setters' own: only this
// step differs.
func (in *Input) updateByContainer(ctx context.Context, mirror *gitops.Mirror, oid *git2go.Oid, round int, out *Output) (*git2go.Oid, error) {
	out.Commit, out.Message, out.PushedRefs, out.Files = "", "", nil, nil
	if in.Container == nil {
		return nil, terminal(conditions.InvalidSpecReason, errors.New("update.container is set but this runner cannot run containers"))
	}
	tmp, err := os.MkdirTemp(in.WorkDir, "container-")
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, err)
	}
	defer os.RemoveAll(tmp)
	checkout, result := filepath.Join(tmp, "checkout"), filepath.Join(tmp, "result")
	if err := os.Mkdir(result, 0o700); err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, err)
	}
	var paths []string
	if in.Plan.Path != "" {
		paths = []string{in.Plan.Path}
	}
	if err := mirror.Checkout(oid, checkout, paths...); err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, fmt.Errorf("checking out %s: %w", out.CheckoutRevision, err))
	}
	dir, err := securePath(checkout, in.Plan.Path)
	if err != nil {
		return nil, terminal(updatev1.UpdateFailedReason, err)
	}
	// The container needs only its checkout: other jobs of the repository
	// use the mirror meanwhile.
	err = mirror.Yield(func() error { return in.Container(ctx, round, dir, result) })
	if err != nil {
		return nil, err
	}
	msg, err := in.containerMessage()
	if err != nil {
		return nil, terminal(conditions.InvalidSpecReason, err)
	}
	author := in.Spec.Commit.Author
	commit, changes, err := mirror.CommitDir(oid, in.Plan.Path, result, gitops.CommitInfo{
		Author:  gitops.Author{Name: author.Name, Email: author.Email},
		Message: msg,
		Signer:  in.Signer,
	})
	if errors.Is(err, gitops.ErrNoChange) {
		return nil, nil
	}
	if err != nil {
		return nil, retryable(conditions.GitOperationFailedReason, fmt.Errorf("committing: %w", err))
	}
	for _, c := range changes {
		rel := strings.TrimPrefix(strings.TrimPrefix(c.Path, in.Plan.Path), "/")
		out.Files = append(out.Files, updatev1.FileResult{Path: rel, Operation: updatev1.FileOperation(c.Operation)})
	}
	out.Message = msg
	return commit, nil
}

// containerMessage is the commit message of a container's change: the
// spec's template (whose .Changed is empty: a container's changes are
// files, not values), else one naming the image.
func (in *Input) containerMessage() (string, error) {
	if in.Spec.Commit.MessageTemplate != "" {
		return commitmsg.Render(in.Spec.Commit.MessageTemplate, commitmsg.Data{
			AutomationObject: in.AutomationObject,
			Values:           in.Spec.Commit.MessageTemplateValues,
		})
	}
	where := in.Plan.Path
	if where == "" {
		where = "the repository"
	}
	return fmt.Sprintf("Update %s with %s\n", where, in.Plan.Container.Image), nil
}

// securePath joins the update path to the checkout and refuses a result
// that leaves it through a symbolic link.
func securePath(root, rel string) (string, error) {
	base, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("update.path %q does not exist in the repository", rel)
	}
	if err != nil {
		return "", fmt.Errorf("update.path %q: %w", rel, err)
	}
	if r, err := filepath.Rel(base, dir); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("update.path %q leaves the repository", rel)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("update.path %q is not a directory", rel)
	}
	return dir, nil
}

// raced reports whether the push branch moved away from the commit the job
// started from, i.e. someone else pushed meanwhile.
func (in *Input) raced(ctx context.Context, mirror *gitops.Mirror, out *Output) bool {
	fctx, cancel := context.WithTimeout(ctx, in.timeout())
	defer cancel()
	if err := mirror.Fetch(fctx, in.Auth); err != nil {
		return false
	}
	now, _, err := mirror.Resolve(gitops.Ref{Branch: in.Plan.Branch})
	_, started, _ := git.ParseRevision(out.CheckoutRevision)
	return err == nil && started != now.String()
}

// push sends the commit to the push branch, then to the refspec's
// destination. They are separate pushes so a rejected branch push, which is
// retried from a new head, never leaves the refspec pointing at a commit
// that was abandoned.
func (in *Input) push(ctx context.Context, mirror *gitops.Mirror, commit *git2go.Oid, out *Output) error {
	out.Commit = commit.String()
	out.PushedRefs = nil
	groups := [][]gitops.PushRef{}
	if in.Plan.Branch != "" {
		groups = append(groups, []gitops.PushRef{{Dst: "refs/heads/" + in.Plan.Branch, Force: in.Plan.Force}})
	}
	if len(in.Plan.Extra) > 0 {
		groups = append(groups, in.Plan.Extra)
	}
	for i, refs := range groups {
		pctx, cancel := context.WithTimeout(ctx, in.timeout())
		start := time.Now()
		err := mirror.Push(pctx, in.Auth, commit, refs)
		cancel()
		in.observe(OpPush, start)
		if err != nil {
			if i == 0 && !errors.Is(err, git.ErrAuthentication) && !in.Plan.Force &&
				!errors.Is(err, gitops.ErrNonFastForward) && in.raced(ctx, mirror, out) {
				// The server's ref update lost a race with another push
				// ("failed to update ref"): that is a non-fast-forward too.
				err = fmt.Errorf("%w: %w", gitops.ErrNonFastForward, err)
			}
			if i == 0 && errors.Is(err, gitops.ErrNonFastForward) {
				return err
			}
			return gitError(err)
		}
		for _, r := range refs {
			out.PushedRefs = append(out.PushedRefs, r.Dst)
		}
	}
	return nil
}

// APIResult is the setters' result in the UpdateJob status form; the
// runner is the one place that knows both. The markers are summed up per
// policy within the status's bounds (exact counts, lists cut), against the
// job's policies: those no marker names, and markers naming none of them.
func APIResult(r *setters.Result, policies setters.Policies) *updatev1.UpdateResult {
	out := &updatev1.UpdateResult{}
	out.Markers, out.OmittedMarkerPolicies, out.UnmarkedPolicies = markerSummary(r.Markers, policies)
	for _, f := range r.Files {
		fr := updatev1.FileResult{Path: f.Path}
		for _, o := range f.Objects {
			or := updatev1.ObjectResult{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
			for _, c := range o.Changes {
				or.Changes = append(or.Changes, updatev1.Change{OldValue: c.OldValue, NewValue: c.NewValue, Setter: c.Setter})
			}
			fr.Objects = append(fr.Objects, or)
		}
		out.Files = append(out.Files, fr)
	}
	return out
}

// markerSummary groups markers by policy: policies without a setter first
// (the ones a reader is looking for), then by name, at most
// MaxMarkerPolicies entries of MaxMarkerFiles files each; it also returns
// how many entries were cut, and the policies no marker names, sorted.
func markerSummary(markers []setters.MarkerSite, policies setters.Policies) ([]updatev1.PolicyMarkers, int, []string) {
	byPolicy := map[string]*updatev1.PolicyMarkers{}
	var entries []*updatev1.PolicyMarkers
	for _, m := range markers {
		e, ok := byPolicy[m.Marker.Policy]
		if !ok {
			_, known := policies[m.Marker.Policy]
			e = &updatev1.PolicyMarkers{Policy: m.Marker.Policy, Unknown: !known}
			byPolicy[m.Marker.Policy] = e
			entries = append(entries, e)
		}
		e.Count++
		// Markers come in path order: a new file is a new last path.
		if n := len(e.Files); n < updatev1.MaxMarkerFiles && (n == 0 || e.Files[n-1] != m.Path) {
			e.Files = append(e.Files, m.Path)
		}
	}
	slices.SortFunc(entries, func(a, b *updatev1.PolicyMarkers) int {
		if a.Unknown != b.Unknown {
			if a.Unknown {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Policy, b.Policy)
	})
	omitted := max(len(entries)-updatev1.MaxMarkerPolicies, 0)
	entries = entries[:len(entries)-omitted]
	var list []updatev1.PolicyMarkers
	for _, e := range entries {
		list = append(list, *e)
	}
	var unmarked []string
	for key := range policies {
		if _, ok := byPolicy[key]; !ok {
			unmarked = append(unmarked, key)
		}
	}
	slices.Sort(unmarked)
	return list, omitted, unmarked
}

// discoverSites finds the images under dir that the spec includes, and
// marks each location of an image a policy names (by canonical image
// name) with that policy. It also sums up what it found for the status:
// images by name, at most MaxDiscovered, each with up to MaxMarkerFiles
// files.
func discoverSites(dir string, d *updatev1.DiscoverSpec, policies setters.Policies) (map[string][]setters.Site, *Discovered, error) {
	res, err := discover.Dir(dir)
	if err != nil {
		return nil, nil, err
	}
	images := discover.Filter(res.Images, d.Include, d.Exclude)
	// Several policies may name one image; the first by policy name wins,
	// so the choice does not depend on map order.
	byImage := map[string]string{}
	keys := slices.Sorted(maps.Keys(policies))
	for _, k := range keys {
		n := imagename.Normalize(policies[k].Name)
		if _, ok := byImage[n]; !ok {
			byImage[n] = k
		}
	}
	filtered := &discover.Result{Images: images}
	sites := filtered.Sites(func(img discover.Image) string { return byImage[img.Name] })
	sum := &Discovered{Skipped: len(res.Skipped)}
	for _, img := range images {
		if len(sum.Images) == updatev1.MaxDiscovered {
			sum.Omitted++
			continue
		}
		di := updatev1.DiscoveredImage{Name: img.Name, Tag: img.Tag, Digest: img.Digest, Locations: len(img.Locations), Policy: byImage[img.Name]}
		for _, l := range img.Locations {
			if di.PolicyAnnotation == "" {
				di.PolicyAnnotation = l.Policy
			}
			if n := len(di.Files); n < updatev1.MaxMarkerFiles && (n == 0 || di.Files[n-1] != l.File) {
				di.Files = append(di.Files, l.File)
			}
		}
		sum.Images = append(sum.Images, di)
	}
	return sites, sum, nil
}
