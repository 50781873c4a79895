// Package jobplan turns an UpdateJob into the writeback.Plan it asks for.
// It is the one place that knows both the API's UpdateJobSpec and the
// plan, so that the update-job-controller (which runs the plan), and the
// events and the automation (which only ask where a job pushes) read a
// job the same way. Its errors name the spec's fields and are
// writeback.ErrInvalid: the spec cannot work, and retrying does not help.
//
// It checks what needs no forge and no template engine; the engine's Check
// does the rest (the forge and the templates), so that this package stays
// light enough for every controller's events to import.
package jobplan

import (
	"path"
	"strings"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git/refname"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// FromJob is the plan of a job. It takes the job, not only its spec: a
// pull request's default head branch is named after the job, and the
// commit's templates see the automation that owns it.
func FromJob(job *updatev1.UpdateJob) (writeback.Plan, error) {
	spec := &job.Spec
	fail := func(format string, args ...any) (writeback.Plan, error) {
		return writeback.Plan{}, writeback.Invalidf(format, args...)
	}
	ref := spec.Checkout.Reference
	p := writeback.Plan{
		Repository: spec.Repository.URL,
		Checkout:   writeback.Ref{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Name: ref.Name, Commit: ref.Commit},
		Path:       path.Clean("/" + spec.Update.Path)[1:],
		Commit: writeback.Commit{
			AuthorName:      spec.Commit.Author.Name,
			AuthorEmail:     spec.Commit.Author.Email,
			MessageTemplate: spec.Commit.MessageTemplate,
			Values:          spec.Commit.MessageTemplateValues,
			Automation:      automationOf(job),
		},
		Resume: job.Status.PushingCommit,
	}
	if t := spec.Repository.Timeout; t != nil && t.Duration > 0 {
		p.Timeout = t.Duration
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
	t := &p.Target
	if push.PullRequest != nil {
		if push.Branch != "" || push.Refspec != "" {
			return fail("push.pullRequest pushes to its own head branch: push.branch and push.refspec cannot be set with it")
		}
		pr, err := pullRequest(job, push.PullRequest)
		if err != nil {
			return fail("push.pullRequest: %v", err)
		}
		t.PullRequest = pr
	} else {
		bt, err := PushTarget(ref, push)
		if err != nil {
			return writeback.Plan{}, err
		}
		*t = bt
	}
	if t.PullRequest == nil && t.Branch == "" && len(t.Extra) == 0 {
		return fail("nothing to push to: set checkout.ref.branch, push.branch or push.refspec")
	}
	if t.Branch != "" && !refname.Branch(t.Branch) {
		return fail("push branch %q is not a valid branch name", t.Branch)
	}
	if err := update(spec, &p.Update); err != nil {
		return writeback.Plan{}, err
	}
	return p, p.Validate()
}

// PushTarget is where a push spec that is not a pull request sends the
// commit of a checkout of ref (writeback.PushTarget, the refspec parsed):
// the one rule behind FromJob and the automation's questions about a job
// it has not made yet (is the checkout branch all the job changes?).
func PushTarget(ref updatev1.GitRepositoryRef, push *updatev1.PushSpec) (writeback.Target, error) {
	if push == nil {
		push = &updatev1.PushSpec{}
	}
	var dst *writeback.RefUpdate
	if push.Refspec != "" {
		d, err := writeback.ParseRefspec(push.Refspec, ref.Branch)
		if err != nil {
			return writeback.Target{}, writeback.Invalidf("push.refspec %q: %v", push.Refspec, err)
		}
		dst = &d
	}
	return writeback.PushTarget(ref.Branch, push.Branch, dst), nil
}

func update(spec *updatev1.UpdateJobSpec, u *writeback.Update) error {
	u.Images = map[string]meta.ImageRef{}
	for _, s := range spec.Update.Setters {
		if _, dup := u.Images[s.Policy]; dup {
			return writeback.Invalidf("setter %s is listed twice", s.Policy)
		}
		u.Images[s.Policy] = s.ImageRef
		if s.Source != nil {
			if u.Sources == nil {
				u.Sources = map[string]*meta.ImageSourceChange{}
			}
			u.Sources[s.Policy] = s.Source
		}
		if s.Approval != nil {
			if u.Approvals == nil {
				u.Approvals = map[string]*meta.Approval{}
			}
			u.Approvals[s.Policy] = s.Approval
		}
		if s.Group != "" {
			if u.Groups == nil {
				u.Groups = map[string]string{}
			}
			u.Groups[s.Policy] = s.Group
		}
	}
	if c := spec.Update.Container; c != nil {
		if len(u.Images) > 0 || spec.Update.Discover != nil || len(spec.Update.ArgoCD) > 0 {
			return writeback.Invalidf("update.container runs instead of the setters: update.setters, update.discover and update.argoCD cannot be set with it")
		}
		u.Images, u.Container = nil, &writeback.Container{Image: c.Image}
		return nil
	}
	if h := spec.Update.Holds; h != nil {
		u.Holds = &writeback.Holds{}
		for _, k := range h.Released {
			u.Holds.Released = append(u.Holds.Released, writeback.HoldKey{Path: k.Path, Setter: k.Setter, Commit: k.Commit})
		}
	}
	if d := spec.Update.Discover; d != nil {
		for _, pat := range append(append([]string{}, d.Include...), d.Exclude...) {
			if _, err := path.Match(pat, ""); err != nil {
				return writeback.Invalidf("update.discover: pattern %q: %v", pat, err)
			}
		}
		u.Discover = &writeback.Discover{Include: d.Include, Exclude: d.Exclude, WriteMarkers: d.WriteMarkers}
	} else if len(u.Images) == 0 {
		return writeback.Invalidf("update.setters is empty")
	}
	u.Files = spec.Update.Files
	for _, c := range spec.Update.Charts {
		u.Charts = append(u.Charts, writeback.Chart{Policy: c.Policy, ArgoCDChart: c.ArgoCDChart})
	}
	for _, o := range spec.Update.ArgoCD {
		w := writeback.ArgoCDOverride{File: o.File, Type: o.Type}
		for _, img := range o.Images {
			w.Images = append(w.Images, writeback.ArgoCDImage{Policy: img.Policy, ArgoCDImageFields: img.ArgoCDImageFields})
		}
		u.ArgoCD = append(u.ArgoCD, w)
	}
	return nil
}

func pullRequest(job *updatev1.UpdateJob, pr *updatev1.PullRequestSpec) (*writeback.PullRequest, error) {
	base := pr.Base
	if base == "" {
		base = job.Spec.Checkout.Reference.Branch
	}
	if base == "" {
		return nil, writeback.Invalidf("base is needed when the checkout ref is not a branch")
	}
	if !refname.Branch(base) {
		return nil, writeback.Invalidf("base %q is not a valid branch name", base)
	}
	out := &writeback.PullRequest{
		Provider: string(pr.Provider), APIURL: pr.APIURL, Base: base,
		HeadTemplate: pr.BranchTemplate, TitleTemplate: pr.TitleTemplate, BodyTemplate: pr.BodyTemplate,
		Draft: pr.Draft, Labels: pr.Labels, Reviewers: pr.Reviewers, Assignees: pr.Assignees,
		AutoMerge: string(pr.AutoMerge),
	}
	// A job no automation made, with no template, proposes from a branch
	// of its own.
	if pr.BranchTemplate == "" && automationOf(job).Name == "" {
		out.Head = "image-toolkit/" + job.Namespace + "-" + job.Name
	}
	return out, nil
}

// automationOf is the ImageUpdateAutomation that controls the job, if any.
func automationOf(job *updatev1.UpdateJob) writeback.Object {
	for _, o := range job.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == imagev1.ImageUpdateAutomationKind &&
			strings.HasPrefix(o.APIVersion, imagev1.GroupVersion.Group+"/") {
			return writeback.Object{Namespace: job.Namespace, Name: o.Name}
		}
	}
	return writeback.Object{}
}
