package explain

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
)

// The automation's branch head, listed from the git server as its
// controller lists it (pkg/gitsource, pkg/git), with the repository's
// credentials; what keeps it from being listed is said instead.

// branchHead resolves the automation's repository and checkout ref as its
// controller does (pkg/gitsource), and lists the branch head from the
// server with the repository's credentials, read from the automation's
// namespace. Any failure is recorded, not returned: the rest of the
// explanation stands.
func branchHead(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation, heads HeadLister) sourceFacts {
	f := sourceFacts{ObservedRevision: a.Status.ObservedSourceRevision, Describe: "none"}
	if u := a.Spec.Update; u != nil {
		f.UpdatePath = u.Path
	}
	// explain does not know the controller's --no-cross-namespace-refs; a
	// refusal shows in the automation's Ready condition.
	src, err := gitsource.Resolve(ctx, c, a, gitsource.Options{})
	// On a failure src still says where it was looked for.
	if src != nil {
		f.describeSource(a, src)
	}
	if err != nil {
		f.HeadError = err.Error()
		return f
	}
	if why := f.describeTargets(a, src); why != "" {
		f.HeadError = why
		return f
	}
	if why := notListed(src); why != "" {
		f.HeadError = why
		return f
	}
	f.listHead(ctx, c, a, src, heads)
	return f
}

// describeSource records where the automation reads and writes: the
// repository, ref and update path, and the Applications it writes for.
func (f *sourceFacts) describeSource(a *imagev1.ImageUpdateAutomation, src *gitsource.Source) {
	f.Describe = src.Describe
	f.URL, f.Ref = git.Redact(src.Repository.URL), gitsource.DescribeRef(src.Ref)
	if f.UpdatePath == "" {
		f.UpdatePath = src.Path
	}
	for _, app := range src.Applications {
		af := applicationFacts{Name: app.Name, Namespace: app.Namespace, Images: app.Images}
		for _, s := range app.Written {
			as := applicationSource{Index: s.Index, Path: s.Path, Type: s.Type}
			if u := a.Spec.Update; u != nil && u.Strategy == imagev1.UpdateStrategyArgoCD {
				as.OverrideFile = app.OverrideFile(app.ArgoNamespace, s)
			}
			af.Sources = append(af.Sources, as)
		}
		f.Applications = append(f.Applications, af)
	}
}

// describeTargets records the automation's targets as its status has
// them, and, for an automation written on several, why no one head is
// listed.
func (f *sourceFacts) describeTargets(a *imagev1.ImageUpdateAutomation, src *gitsource.Source) string {
	for _, t := range a.Status.Targets {
		tf := targetFacts{URL: git.Redact(t.URL), Branch: t.Branch, Applications: t.Applications, LastPushCommit: t.LastPushCommit}
		if c := t.Ready; c != nil {
			tf.Ready = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
		f.Targets = append(f.Targets, tf)
	}
	if len(src.Targets) == 0 {
		return ""
	}
	var names, paths []string
	for _, t := range src.Targets {
		names = append(names, git.Redact(t.Repository.URL)+" ("+orText(t.Ref.Branch, "HEAD")+")")
		paths = append(paths, orText(t.Path, "the root"))
	}
	f.URL = strings.Join(names, ", ")
	if u := a.Spec.Update; u == nil || u.Path == "" {
		f.UpdatePath = "per target: " + strings.Join(paths, ", ")
	}
	return fmt.Sprintf("not listed: the Applications are written on %d repositories or branches, each its own target with its own jobs and commits (status.targets)", len(src.Targets))
}

// notListed says why the head of src is not listed, "" when it is.
func notListed(src *gitsource.Source) string {
	if !gitsource.BranchOnly(src.Ref) && !src.DefaultBranch {
		return "not listed: the checkout ref is not just a branch, so the automation does not compare heads"
	}
	// tk-image registers no credentials provider, to keep the cloud SDKs
	// and the GitHub App client out of it: a provider's token would be
	// the controller's identity (its pod's, or a ServiceAccount's through
	// the controller's RBAC), which tk-image neither has nor should
	// borrow. The automation's Ready condition says how its controller
	// fared.
	if p := src.Repository.Provider; p != "" && p != git.ProviderGeneric {
		return fmt.Sprintf("not listed: provider %s: credentials are issued by the controllers; "+
			"tk-image does not read cloud or GitHub App identities (the automation's Ready condition says whether its controller can list the branch)", p)
	}
	return ""
}

// listHead lists the branch head with the repository's credentials,
// through heads when the caller shares the reads.
func (f *sourceFacts) listHead(ctx context.Context, c client.Client, a *imagev1.ImageUpdateAutomation, src *gitsource.Source, heads HeadLister) {
	auth, err := gitsource.Credentials(ctx, c, a, src)
	if err != nil {
		// The condition's wording says where the controller's jobs read
		// the Secrets; here pkg/git's error alone reads better.
		var ce *gitsource.CredentialsError
		if errors.As(err, &ce) {
			err = ce.Err
		}
		f.HeadError = "credentials: " + err.Error()
		return
	}
	if err := src.ReadDefaultBranch(ctx, auth); err != nil {
		f.HeadError = err.Error()
		return
	}
	f.Ref = gitsource.DescribeRef(src.Ref) + " (targetRevision HEAD)"
	if !src.DefaultBranch {
		f.Ref = gitsource.DescribeRef(src.Ref)
	}
	timeout := defaultHeadTimeout
	if t := src.Repository.Timeout; t != nil && t.Duration > 0 {
		timeout = min(timeout, t.Duration)
	}
	list := func(ctx context.Context) (string, error) {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		oid, err := git.Branch(lctx, src.Repository.URL, auth, src.Ref.Branch)
		if err != nil {
			return "", errors.New(auth.Scrub(err.Error()))
		}
		return git.FormatRevision(src.Ref.Branch, oid), nil
	}
	if heads == nil {
		f.Head, err = list(ctx)
	} else {
		f.Head, err = heads(ctx, a, src.Repository.URL, src.Ref.Branch, list)
	}
	if err != nil {
		f.HeadError = err.Error()
	}
}
