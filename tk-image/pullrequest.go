package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
)

// The values the API takes for a forge and a merge method. They are checked
// here, not left to the API server, because --export never reaches it and a
// misspelt forge would otherwise only show when the first job fails.
var (
	forgeProviders = providerNames()
	mergeMethods   = []string{"merge", "squash", "rebase"}
)

// pullRequestFlags describe push.pullRequest: proposing the change as a
// pull request instead of pushing it to the branch.
type pullRequestFlags struct {
	enabled                                     bool
	provider, apiURL, secret, base              string
	branchTemplate, titleTemplate, bodyTemplate string
	labels, reviewers, assignees                []string
	draft                                       bool
	autoMerge                                   string
	// fs tells which --pr-* flags were given: any of them asks for a
	// request, even one given its zero value (--pr-draft=false).
	fs *pflag.FlagSet
}

// prFlagPrefix starts the name of every flag that implies --pull-request.
const prFlagPrefix = "pr-"

func (p *pullRequestFlags) add(fl *pflag.FlagSet) {
	p.fs = fl
	fl.BoolVar(&p.enabled, "pull-request", false, "propose the change as a pull (merge) request instead of pushing it to the branch (any --pr-* flag implies it)")
	fl.StringVar(&p.provider, "pr-provider", "", "the forge's API: "+strings.Join(forgeProviders, ", ")+" (default: told from the repository host)")
	fl.StringVar(&p.apiURL, "pr-api-url", "", "the forge API's base URL, e.g. https://github.example.com/api/v3/ (default: derived from the repository URL)")
	fl.StringVar(&p.secret, "pr-secret", "", "Secret whose key token holds the forge API token (default: the git Secret's bearerToken, else its password)")
	fl.StringVar(&p.base, "pr-base", "", "branch the request merges into (default: the checkout branch)")
	fl.StringVar(&p.branchTemplate, "pr-branch-template", "", "head branch template (Go text/template); @FILE reads it from a file (default: image-toolkit/NAMESPACE-NAME)")
	fl.StringVar(&p.titleTemplate, "pr-title-template", "", "title template (Go text/template); @FILE reads it from a file (default: names the images and tags)")
	fl.StringVar(&p.bodyTemplate, "pr-body-template", "", "description template (Go text/template, Markdown); @FILE reads it from a file (default: a table of the changes)")
	fl.StringArrayVar(&p.labels, "pr-label", nil, "a label to put on a new request (repeatable)")
	fl.StringArrayVar(&p.reviewers, "pr-reviewer", nil, "a user asked to review a new request; ORG/TEAM on GitHub (repeatable)")
	fl.StringArrayVar(&p.assignees, "pr-assignee", nil, "a user a new request is assigned to (repeatable)")
	fl.BoolVar(&p.draft, "pr-draft", false, "open requests as drafts")
	fl.StringVar(&p.autoMerge, "pr-auto-merge", "", "merge a new request once its checks pass, by this method: "+strings.Join(mergeMethods, ", "))
}

// complete registers the completions of the flags that take a fixed value.
func (p *pullRequestFlags) complete(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("pr-provider", cobra.FixedCompletions(forgeProviders, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("pr-auto-merge", cobra.FixedCompletions(mergeMethods, cobra.ShellCompDirectiveNoFileComp))
}

// askedBy names the flag that asks for a pull request, "" when none does:
// errors then say which flag brought the request in.
func (p *pullRequestFlags) askedBy() string {
	if p.enabled {
		return "--pull-request"
	}
	by := ""
	if p.fs != nil {
		p.fs.Visit(func(f *pflag.Flag) {
			if by == "" && strings.HasPrefix(f.Name, prFlagPrefix) {
				by = "--" + f.Name + " (which implies --pull-request)"
			}
		})
	}
	return by
}

// spec builds push.pullRequest; nil when no flag asks for one.
func (p *pullRequestFlags) spec() (*updatev1.PullRequestSpec, error) {
	if p.askedBy() == "" {
		return nil, nil
	}
	if err := oneOf("--pr-provider", p.provider, forgeProviders); err != nil {
		return nil, err
	}
	if err := oneOf("--pr-auto-merge", p.autoMerge, mergeMethods); err != nil {
		return nil, err
	}
	s := &updatev1.PullRequestSpec{
		Provider:  updatev1.ForgeProvider(p.provider),
		APIURL:    p.apiURL,
		SecretRef: localRef(p.secret),
		Base:      p.base,
		Labels:    p.labels,
		Reviewers: p.reviewers,
		Assignees: p.assignees,
		Draft:     p.draft,
		AutoMerge: updatev1.MergeMethod(p.autoMerge),
	}
	var err error
	if s.BranchTemplate, err = readTemplate("--pr-branch-template", p.branchTemplate); err != nil {
		return nil, err
	}
	if s.TitleTemplate, err = readTemplate("--pr-title-template", p.titleTemplate); err != nil {
		return nil, err
	}
	if s.BodyTemplate, err = readTemplate("--pr-body-template", p.bodyTemplate); err != nil {
		return nil, err
	}
	return s, nil
}

// oneOf checks that an optional flag's value is one of allowed.
func oneOf(flag, value string, allowed []string) error {
	if value == "" || slices.Contains(allowed, value) {
		return nil
	}
	return usageError{fmt.Errorf("%s must be one of %s, got %q", flag, strings.Join(allowed, ", "), value)}
}

// writePullRequest says what a finished job did to its pull request, in one
// line: the action, the address, and the head branch and commit, in the
// words of the forge of repository (Gerrit's change and topic: it has no
// head branch).
func writePullRequest(out io.Writer, pr *meta.PullRequestStatus, repository, provider, apiURL string) {
	what, where := "pull request", "branch "+pr.HeadBranch
	if ep, err := forge.Resolve(repository, forge.Provider(provider), apiURL); err == nil && ep.Provider == "gerrit" {
		what, where = "change", "topic "+pr.HeadBranch
	}
	if pr.HeadCommit != "" {
		where += ", commit " + shortCommit(pr.HeadCommit)
	}
	fmt.Fprintf(out, "%s #%d %s: %s (%s)\n", what, pr.Number, pullRequestAction(pr.Action), pr.URL, where)
}

// pullRequestAction words what a job did to its request.
func pullRequestAction(a meta.PullRequestAction) string {
	switch a {
	case meta.PullRequestOpened:
		return "opened"
	case meta.PullRequestUpdated:
		return "updated"
	case meta.PullRequestUnchanged:
		return "unchanged, it already proposes these values"
	case meta.PullRequestClosedNow:
		return "closed, the base branch already has these values"
	}
	// An action newer than this build: the API's word is still the truth.
	return string(a)
}

// shortCommit abbreviates a commit id as git and the controllers' messages
// do.
func shortCommit(oid string) string { return oid[:min(len(oid), 7)] }

// providerNames are the API's forge providers as flag values.
func providerNames() []string {
	var out []string
	for _, p := range updatev1.ForgeProviders {
		out = append(out, string(p))
	}
	return out
}
