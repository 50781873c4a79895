package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// DefaultPushRetries bounds the fetch-update-push rounds after a
// non-fast-forward rejection.
const DefaultPushRetries = 5

// defaultTimeout bounds a network operation of a plan without Timeout.
const defaultTimeout = time.Minute

// Settings are how an Engine runs plans.
type Settings struct {
	// WorkDir holds the temporary work trees; empty is the system's
	// temporary directory. The mirror cache's file system keeps checkouts
	// cheap.
	WorkDir string
	// PushRetries bounds non-fast-forward retries; 0 is
	// DefaultPushRetries.
	PushRetries int
	// Hooks are the front end's callbacks; any may be nil.
	Hooks Hooks
	// FileURLs lets plans name a repository on this machine's disk
	// (file:///srv/git/fleet.git), fetched and pushed by git's own
	// upload-pack and receive-pack. For a program whose plans are its own
	// user's; the update-job-controller leaves it off, since an UpdateJob
	// must not read the controller's disk.
	FileURLs bool
}

// CredentialsStore gives a run what it authenticates with, per remote. A
// run asks it with the plan's repository URL before each fetch and each
// push (a long run's push may come long after its fetch: a store may
// rotate what it gives) and before it opens a forge's client, so that one
// Engine serves runs against repositories with different credentials. An
// error fails the run as KindAuthentication, retryable, unless it is an
// *Error of the store's own choosing (or wraps git.ErrInvalidCredentials:
// then terminal KindInvalid).
type CredentialsStore interface {
	Lookup(ctx context.Context, repository string) (Credentials, error)
}

// Credentials are what a run authenticates with. They are the simplest
// CredentialsStore: the same credentials for every repository.
type Credentials struct {
	// Git reaches the repository (HTTP basic or bearer, SSH key, TLS
	// roots, known_hosts, proxy); nil is anonymous.
	Git *git.Auth
	// Signer signs the commit; nil leaves it unsigned.
	Signer mirror.Signer
	// Forge gives what the forge's API of a plan's pull request is
	// reached with. It is called once per run of such a plan, before any
	// network call, with Git refreshed (a provider's token, such as a
	// GitHub App's, serves the forge's API too). Nil is ForgeAuthOf(fresh).
	Forge func(ctx context.Context, fresh *git.Auth) (ForgeAuth, error)
}

// ForgeAuth reaches a forge's API: a token, and the user it is the
// password of, for the forges that take a password by basic
// authentication (a Bitbucket app password); no user: a bearer token.
type ForgeAuth struct {
	Token, Username string
}

// ForgeAuthOf is the forge's credentials from the repository's: its
// bearer token, else its password with its user; none for nil.
func ForgeAuthOf(git *git.Auth) ForgeAuth {
	switch {
	case git == nil:
		return ForgeAuth{}
	case git.BearerToken != "":
		return ForgeAuth{Token: git.BearerToken}
	}
	return ForgeAuth{Token: git.Password, Username: git.Username}
}

// Lookup is c, whatever the repository.
func (c Credentials) Lookup(context.Context, string) (Credentials, error) { return c, nil }

// Hooks let a front end take part in a run. Their errors end the run and
// are returned as they are.
type Hooks struct {
	// BeforeCommit sees the change the run is about to commit. It may
	// edit the files (under Change.Dir) and Change.Files and
	// Change.Message, or veto the commit: ErrVeto ends the run with no
	// change, any other error fails it.
	BeforeCommit func(ctx context.Context, c *Change) error
	// BeforePush is called before each push (for every retry round) and
	// before a pull request is closed.
	BeforePush func(ctx context.Context, p Push) error
	// AfterPush is told of each push that landed.
	AfterPush func(ctx context.Context, p Push)
	// OnEvent is told what the run does, as it does it.
	OnEvent func(Event)
	// Container carries out the update of a plan with Update.Container:
	// checkout holds the whole tree under the plan's path (not only the
	// files with markers), and the hook fills the empty directory result
	// with what that tree should become. round counts the
	// non-fast-forward rounds of the run from 0.
	Container func(ctx context.Context, round int, checkout, result string) error
}

// ErrVeto is what BeforeCommit returns to leave the files as they are.
var ErrVeto = errors.New("the commit was vetoed")

// ErrPathNotFound is the error, wrapped, of a plan whose path the
// checkout does not have: a front end names it in its own words (the
// controller's spec.update.path, tk-image's --path).
var ErrPathNotFound = errors.New("the path to update does not exist in the repository")

// Change is a commit about to be made.
type Change struct {
	// Dir is the checkout's directory of the plan's path. In a setters'
	// run it holds only the files that may have markers or images.
	Dir string
	// Files are the changed files, relative to the repository's root;
	// nil in container mode, whose commit is the whole result tree.
	Files []string
	// Message is the commit message.
	Message string
}

// Push is a push about to be made or made.
type Push struct {
	// Commit is the commit pushed; empty when a pull request is closed.
	Commit string
	// Base is the revision the commit was made on (its parent), e.g.
	// main@sha1:<hash>: with Commit, it lets the automations of the
	// branch tell a head their own jobs moved from one a person moved.
	Base string
	// Refs are the refs it sets.
	Refs []string
	// PullRequest is set for a pull request's head branch (or closing):
	// that branch is the run's own and rewritten by every run.
	PullRequest bool
	// Plans are, in a RunGroup, the indexes of the plans whose changes
	// the commit carries.
	Plans []int
}

// EventKind says what an Event reports.
type EventKind string

const (
	// EventGit: a git network operation (Op) ended after Duration.
	EventGit EventKind = "Git"
	// EventPushRetry: a push was rejected as non-fast-forward and the run
	// starts again from the new head (Round is the new round).
	EventPushRetry EventKind = "PushRetry"
	// EventForgeResponse: the forge (Provider) answered a call with
	// StatusCode.
	EventForgeResponse EventKind = "ForgeResponse"
)

// Git operations, as EventGit reports them.
const (
	OpClone = "clone"
	OpFetch = "fetch"
	OpPush  = "push"
)

// Event is something a run did, for metrics and logs.
type Event struct {
	Kind       EventKind
	Op         string
	Duration   time.Duration
	Round      int
	Provider   string
	StatusCode int
}

// Engine runs write-back plans.
type Engine struct {
	settings Settings
	store    CredentialsStore
	cache    *mirror.Cache
}

// New is an engine that keeps its mirrors in cache and asks store for
// each run's credentials (a Credentials value for one set; nil is
// anonymous).
func New(settings Settings, store CredentialsStore, cache *mirror.Cache) *Engine {
	if settings.PushRetries <= 0 {
		settings.PushRetries = DefaultPushRetries
	}
	if store == nil {
		store = Credentials{}
	}
	return &Engine{settings: settings, store: store, cache: cache}
}

// run is one Run: the plan, its mirror and what it found so far.
type run struct {
	*Engine
	plan   writeback.Plan
	mirror *mirror.Mirror
	// creds are the store's answer for the plan's repository, asked
	// again before each fetch and push (credentials).
	creds Credentials
	// pushPlans are the indexes of a group's plans whose changes the
	// commit carries (RunGroup).
	pushPlans []int
	forge     forge.Client
	// forgeOpts are forge's options, for clients of the source
	// repositories the same forge serves (sourceCommits).
	forgeOpts *forge.Options
	// review is the open review found before the commit, on a forge that
	// reviews pushed commits (findReview).
	review *review
	res    Result
	// workDirs are the run's checkouts, removed when it ends.
	workDirs []string
}

// Run carries out the plan. Result says what was done, also when err is
// not nil (as far as the run got; empty if it did not get to the checkout).
func (e *Engine) Run(ctx context.Context, plan writeback.Plan) (Result, error) {
	r := &run{Engine: e, plan: plan}
	if err := e.Check(plan); err != nil {
		return Result{}, err
	}
	if plan.Target.PullRequest != nil {
		fc, err := r.forgeClient(ctx)
		if err != nil {
			return Result{}, err
		}
		r.forge = fc
	}
	m, release, err := e.cache.Open(plan.Repository)
	if err != nil {
		return Result{}, retryable(KindGit, err)
	}
	defer release()
	defer r.removeWorkDirs()
	r.mirror = m
	return r.rounds(ctx)
}

// workDir makes a directory for one round's checkout under the WorkDir.
// It is removed when the run ends (removeWorkDirs), after the push, not
// between the commit and the push: removing a hundred files and their
// directories is disk work the push need not wait for.
func (r *run) workDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp(r.settings.WorkDir, prefix)
	if err != nil {
		return "", retryable(KindGit, err)
	}
	r.workDirs = append(r.workDirs, dir)
	return dir, nil
}

func (r *run) removeWorkDirs() {
	for _, dir := range r.workDirs {
		_ = os.RemoveAll(dir)
	}
	r.workDirs = nil
}

// rounds fetches, updates and pushes until the push lands, nothing
// changes, or the retries are spent.
func (r *run) rounds(ctx context.Context) (Result, error) {
	for round := 0; ; round++ {
		oid, err := r.fetchAndResolve(ctx)
		if err != nil {
			return Result{}, err
		}
		if round == 0 && r.landed() {
			return r.res, nil
		}
		if err := r.findReview(ctx, oid); err != nil {
			return Result{}, err
		}
		var commit mirror.Hash
		if r.plan.Update.Container != nil {
			commit, err = r.updateByContainer(ctx, oid, round)
		} else {
			commit, err = r.update(ctx, oid)
		}
		if err != nil {
			return r.res, err
		}
		if r.plan.Target.PullRequest != nil {
			// The head branch is the run's own and force-pushed: no
			// race to retry.
			return r.propose(ctx, oid, commit)
		}
		if commit.IsZero() {
			return r.res, nil
		}
		err = r.push(ctx, commit)
		if errors.Is(err, mirror.ErrNonFastForward) && round < r.settings.PushRetries {
			if err := r.retryAfterRace(ctx, round); err != nil {
				return Result{}, err
			}
			continue
		}
		if e := (*Error)(nil); !errors.As(err, &e) && errors.Is(err, mirror.ErrNonFastForward) {
			err = gitError(fmt.Errorf("gave up after %d retries: %w", r.res.Retries, err))
		}
		if err != nil {
			return Result{}, err
		}
		return r.res, nil
	}
}

// retryAfterRace counts a push that lost a race (someone pushed since our
// fetch) and pauses before the run starts again from their commit, a
// jittered while so that racing writers spread out.
func (r *run) retryAfterRace(ctx context.Context, round int) error {
	r.res.Retries++
	r.event(Event{Kind: EventPushRetry, Round: round + 1})
	pause := time.Duration(50+rand.IntN(200*(round+1))) * time.Millisecond
	select {
	case <-ctx.Done():
		return gitError(ctx.Err())
	case <-time.After(pause):
		return nil
	}
}

func (r *run) timeout() time.Duration {
	if r.plan.Timeout > 0 {
		return r.plan.Timeout
	}
	return defaultTimeout
}

func (r *run) event(e Event) {
	if r.settings.Hooks.OnEvent != nil {
		r.settings.Hooks.OnEvent(e)
	}
}

func (r *run) observe(op string, start time.Time) {
	r.event(Event{Kind: EventGit, Op: op, Duration: time.Since(start)})
}

func (r *run) beforePush(ctx context.Context, p Push) error {
	if r.settings.Hooks.BeforePush != nil {
		return r.settings.Hooks.BeforePush(ctx, p)
	}
	return nil
}

func (r *run) afterPush(ctx context.Context, p Push) {
	if r.settings.Hooks.AfterPush != nil {
		r.settings.Hooks.AfterPush(ctx, p)
	}
}

func (r *run) fetchAndResolve(ctx context.Context) (mirror.Hash, error) {
	op := OpFetch
	if r.mirror.Empty() {
		op = OpClone
	}
	if err := r.credentials(ctx); err != nil {
		return mirror.Hash{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, r.timeout())
	start := time.Now()
	err := r.mirror.Fetch(fctx, r.creds.Git)
	cancel()
	r.observe(op, start)
	if err != nil {
		return mirror.Hash{}, gitError(err)
	}
	oid, rev, err := r.mirror.Resolve(r.plan.Checkout)
	if err != nil {
		return mirror.Hash{}, retryable(KindGit, err)
	}
	r.res.CheckoutRevision = rev
	return oid, nil
}

// credentials asks the store for the plan's repository's credentials.
func (r *run) credentials(ctx context.Context) error {
	c, err := r.store.Lookup(ctx, r.plan.Repository)
	var e *Error
	switch {
	case err == nil:
		r.creds = c
		return nil
	case errors.As(err, &e):
		return err
	case errors.Is(err, git.ErrInvalidCredentials):
		return terminal(KindInvalid, fmt.Errorf("credentials of %s: %w", git.Redact(r.plan.Repository), err))
	}
	return retryable(KindAuthentication, fmt.Errorf("credentials of %s: %w", git.Redact(r.plan.Repository), err))
}

// landed reports whether an earlier run's push (Plan.Resume) is on the
// push branch, as just fetched, and records it. Only a push to a branch
// qualifies: a pull request's head branch is the run's own and rewritten
// by every run.
func (r *run) landed() bool {
	t := r.plan.Target
	if r.plan.Resume == "" || t.PullRequest != nil || t.Branch == "" {
		return false
	}
	msg, ok := r.mirror.Holds("refs/heads/"+t.Branch, r.plan.Resume)
	if !ok {
		return false
	}
	r.res.Commit, r.res.Message, r.res.PushedRefs = r.plan.Resume, msg, t.Refs()
	return true
}
