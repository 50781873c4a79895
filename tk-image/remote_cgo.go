//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
	"toolkit.dev/image-toolkit/update-job-controller/forges"
)

// linkedLibraries is the libgit2 the engine links, for tk-image version
// (as the update-job-controller's --version says it).
var linkedLibraries = "\n" + mirror.LibGit2Version()

// runRemote runs the update against --repository with the write-back
// engine. --dry-run clones and updates, shows the changes, and vetoes the
// commit.
func (o *updateOptions) runRemote(cmd *cobra.Command) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	policies, err := o.readPolicies(stderr)
	if err != nil {
		return err
	}
	r := &o.remote
	// --pull-request opens requests on the built-in forges.
	forges.Register()
	plan, err := r.plan(policies)
	if err != nil {
		return err
	}
	if plan.Update.Files, err = o.jsonFiles(); err != nil {
		return err
	}
	if err := engine.Check(plan); err != nil {
		// The engine names the UpdateJob's field; here it is the flag.
		return usageError{errors.New(strings.Replace(err.Error(), "push.pullRequest: ", "--pull-request: ", 1))}
	}
	creds, err := r.credentials()
	if err != nil {
		return err
	}
	dir := r.mirrorDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tk-image-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	cache, err := mirror.NewCache(dir)
	if err != nil {
		return err
	}
	hooks := engine.Hooks{OnEvent: func(e engine.Event) {
		if e.Kind == engine.EventPushRetry {
			fmt.Fprintf(stderr, "tk-image: the branch moved during the push; updating again (round %d)\n", e.Round)
		}
	}}
	if o.dryRun {
		hooks.BeforeCommit = func(context.Context, *engine.Change) error { return engine.ErrVeto }
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := engine.New(engine.Settings{WorkDir: dir, Hooks: hooks}, creds, cache).Run(ctx, plan)
	if err != nil {
		return remoteError(err, plan)
	}
	return o.reportRemote(stdout, stderr, res, plan)
}

// credentials are what the flags name, read from files and the
// environment.
func (r *remoteFlags) credentials() (engine.Credentials, error) {
	auth, err := r.auth()
	if err != nil {
		return engine.Credentials{}, err
	}
	c := engine.Credentials{Git: auth}
	data, err := r.signingData()
	if err != nil {
		return c, err
	}
	if data != nil {
		if c.Signer, err = mirror.NewSigner(r.signingKeyType, data); err != nil {
			return c, usageError{err}
		}
	}
	if env := r.forgeTokenEnv; env != "" {
		c.Forge = func(context.Context, *git.Auth) (engine.ForgeAuth, error) {
			if t := os.Getenv(env); t != "" {
				return engine.ForgeAuth{Token: t}, nil
			}
			return engine.ForgeAuth{}, usageError{fmt.Errorf("environment variable %s (--forge-token-env) is empty or not set", env)}
		}
	}
	return c, nil
}

// remoteError is the one place the engine's failures become tk-image's:
// a plan that cannot work is a usage error (exit 2), the rest fail the
// run (exit 1) with what failed.
func remoteError(err error, plan writeback.Plan) error {
	if errors.Is(err, engine.ErrPathNotFound) {
		return usageError{fmt.Errorf("--path %q does not exist in the repository (branch %s): give a directory from the repository's root", plan.Path, branchName(plan.Checkout.Branch))}
	}
	var e *engine.Error
	if !errors.As(err, &e) {
		return err
	}
	if e.Kind == engine.KindInvalid {
		return usageError{err}
	}
	what := map[engine.Kind]string{
		engine.KindGit:            "git",
		engine.KindAuthentication: "authentication",
		engine.KindUpdate:         "updating the files",
		engine.KindPullRequest:    "pull request",
		engine.KindRateLimited:    "rate limited",
	}[e.Kind]
	if e.RetryAfter > 0 {
		return fmt.Errorf("%s: %w (try again in %s)", what, err, e.RetryAfter)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// reportRemote prints the changes, then what was pushed or proposed.
func (o *updateOptions) reportRemote(stdout, stderr io.Writer, res engine.Result, plan writeback.Plan) error {
	// Files from the repository's root, as the commit names them.
	res.Changes = res.Changes.In(path.Clean("/" + o.remote.path)[1:])
	if o.output == "json" {
		return json.NewEncoder(stdout).Encode(struct {
			CheckoutRevision string                  `json:"checkoutRevision"`
			Commit           string                  `json:"commit,omitempty"`
			PushedRefs       []string                `json:"pushedRefs,omitempty"`
			PullRequest      *meta.PullRequestStatus `json:"pullRequest,omitempty"`
			Changes          any                     `json:"changes,omitempty"`
			Problems         []string                `json:"problems,omitempty"`
			Warnings         []string                `json:"warnings,omitempty"`
		}{res.CheckoutRevision, res.Commit, res.PushedRefs, res.PullRequest, res.Changes, res.Problems, res.Warnings})
	}
	for _, p := range res.Problems {
		fmt.Fprintf(stderr, "tk-image: %s\n", p)
	}
	if res.Changes != nil {
		printText(stdout, res.Changes, o.dryRun)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "tk-image: %s\n", w)
	}
	switch {
	case res.PullRequest != nil:
		pr := plan.Target.PullRequest
		writePullRequest(stdout, res.PullRequest, plan.Repository, pr.Provider, pr.APIURL)
	case res.Commit != "":
		fmt.Fprintf(stdout, "pushed commit %s to %s (from %s)\n", shortCommit(res.Commit), joinRefs(res.PushedRefs), res.CheckoutRevision)
	}
	if len(res.Problems) > 0 {
		return reportedError{fmt.Errorf("%d problems", len(res.Problems))}
	}
	return nil
}

func joinRefs(refs []string) string {
	out := ""
	for i, r := range refs {
		if i > 0 {
			out += ", "
		}
		out += r
	}
	return out
}

// branchName names a checkout branch, the remote's default when empty.
func branchName(b string) string {
	if b == "" {
		return "the remote's default"
	}
	return b
}
