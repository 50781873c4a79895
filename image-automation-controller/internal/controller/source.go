package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/gitsource"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/selection"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
)

// validateSpec checks what the spec alone decides, before anything is read:
// the update strategy, the policy selector and the templates.
func validateSpec(obj *imagev1.ImageUpdateAutomation) (labels.Selector, error) {
	if u := obj.Spec.Update; u != nil && u.Strategy != imagev1.UpdateStrategySetters && u.Strategy != imagev1.UpdateStrategyArgoCD {
		return nil, conditions.Stallf(imagev1.UnsupportedUpdateStrategyReason,
			"update strategy %q is not supported: the strategies are Setters and ArgoCD", u.Strategy)
	}
	sel, err := selection.Selector(obj)
	if err != nil {
		return nil, conditions.Stallf(imagev1.InvalidPolicySelectorReason, "invalid spec.policySelector: %s", err)
	}
	c := obj.Spec.GitSpec.Commit
	if err := commitmsg.Validate(c.MessageTemplate, c.MessageTemplateValues); err != nil {
		return nil, conditions.Stallf(imagev1.InvalidMessageTemplateReason, "spec.git.commit.messageTemplate: %s", err)
	}
	if p := obj.Spec.GitSpec.Push; p != nil && p.PullRequest != nil {
		for _, t := range []struct {
			field string
			tmpl  commitmsg.Template
			text  string
		}{
			{"branchTemplate", commitmsg.PullRequestBranch, p.PullRequest.BranchTemplate},
			{"titleTemplate", commitmsg.PullRequestTitle, p.PullRequest.TitleTemplate},
			{"bodyTemplate", commitmsg.PullRequestBody, p.PullRequest.BodyTemplate},
		} {
			if err := t.tmpl.Validate(t.text, c.MessageTemplateValues); err != nil {
				return nil, conditions.Stallf(imagev1.InvalidMessageTemplateReason, "spec.git.push.pullRequest.%s: %s", t.field, err)
			}
		}
	}
	return sel, nil
}

// source is where the automation's jobs read and write, and how the
// controller reaches it to read the branch head.
type source struct {
	gitsource.Source
	remote *git.Auth
	// targets are the source's, when its Applications are written on
	// more than one repository or branch (targets.go).
	targets []*source
}

// resolveSource resolves the repository and checkout ref (pkg/gitsource,
// which tk-image explain shares) and the credentials. A problem with the
// spec, the source or its Secrets is a *conditions.Failure (Stalled, or
// retried soon when something is missing); any other error is transient.
func (r *ImageUpdateAutomationReconciler) resolveSource(ctx context.Context, obj *imagev1.ImageUpdateAutomation) (*source, error) {
	// A GitRepository, unstructured, is read from the API server;
	// Applications from their cache (applications.go).
	src, err := gitsource.Resolve(ctx, r.reader(), obj, gitsource.Options{NoCrossNamespaceRefs: r.NoCrossNamespaceRefs, ArgoCDNamespace: r.ArgoCDNamespace})
	if err != nil {
		return nil, err
	}
	if err := checkArgoCD(obj, src); err != nil {
		return nil, err
	}
	if len(src.Targets) > 0 {
		targets, err := r.resolveTargets(ctx, obj, src)
		if err != nil {
			return nil, err
		}
		return &source{Source: *src, targets: targets}, nil
	}
	// Secrets are read past the cache, so the controller needs no
	// cluster-wide list and watch of them.
	auth, err := gitsource.Credentials(ctx, r.APIReader, obj, src)
	if err != nil {
		return nil, err
	}
	if err := src.ReadDefaultBranch(ctx, auth); err != nil {
		return nil, err
	}
	return &source{Source: *src, remote: auth}, nil
}

// canShortCircuit reports whether the branch head tells all that changed in
// git: the job checks out a branch and pushes back to it, and nothing else.
// With another push branch or a refspec, drift there is invisible (as in
// Flux), so every interval makes a job. A pull request is made of the
// checkout branch head and the policies alone (its head branch is rebuilt
// from them), so it short-circuits too: an open request that is up to date
// makes no job, and a request closed unmerged is not proposed again until
// the base or a policy changes.
func canShortCircuit(ref updatev1.GitRepositoryRef, push *updatev1.PushSpec) bool {
	if !gitsource.BranchOnly(ref) {
		return false
	}
	if push != nil && push.PullRequest != nil {
		return push.Branch == "" && push.Refspec == ""
	}
	t, err := jobplan.PushTarget(ref, push)
	return err == nil && t.Branch == ref.Branch && !t.Force && len(t.Extra) == 0
}
