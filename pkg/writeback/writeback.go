// Package writeback describes one write-back: which repository and
// revision to start from, what to change, how to commit it, and where the
// commit goes (Target). It is the one answer to "where does this push":
// the write-back engine (update-job-controller/engine) runs a Plan, and
// whoever needs to know where a job pushes without running it (events,
// the automation's short-circuit, tk-image) asks the same Plan.
//
// The package is plain data and pure Go on purpose: no cgo (the engine's
// libgit2 stays in the engine) and no Kubernetes types, so that a static
// binary and any front end, not only a controller, can import it; a test
// holds this with go list -deps. Turning an UpdateJob into a Plan is
// jobplan's job, the one place that knows both.
package writeback

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/git/refname"
)

// Plan is one write-back, checked by Validate before any network call.
type Plan struct {
	// Repository is the git URL: https://, http://, ssh:// or scp-like.
	Repository string
	// Timeout bounds each network operation (fetch, push); zero is a
	// minute.
	Timeout time.Duration
	// Checkout is the revision the change is made on.
	Checkout Ref
	// Path is the directory the update applies to, relative to the
	// repository's root and cleaned; empty is the root.
	Path string
	// Update is what changes the files.
	Update Update
	// Commit is how the change is committed.
	Commit Commit
	// Target is where the commit goes.
	Target Target
	// Resume is a commit an earlier run of this plan was about to push
	// to Target.Branch. When the branch already holds it, that push
	// landed: the run reports it and changes nothing again. A
	// controller whose runner can die between push and record sets it.
	Resume string
}

// Ref names the checkout revision: the first set of Commit, Name, SemVer,
// Tag and Branch wins, as in Flux's GitRepository.
type Ref struct {
	Branch, Tag, SemVer, Name, Commit string
}

// Update is what changes the files: the image setters with Images (and,
// with Discover, the images found in the files), or a Container.
type Update struct {
	// Images is the new image of each policy, by policy key
	// (namespace:name), for the setters' markers.
	Images map[string]meta.ImageRef
	// Discover finds the images of the files and sets those a policy of
	// Images names, markers or not.
	Discover *Discover
	// Container updates the files instead of the setters; the engine's
	// Container hook runs it.
	Container *Container
	// ArgoCD are Argo CD parameter override files the images of Images
	// are written into, beside the setters.
	ArgoCD []ArgoCDOverride
	// Charts are Argo CD Applications whose chart versions (the tags of
	// Images) are written into their manifests.
	Charts []Chart
	// Files are values set by a JSON Pointer in files that cannot carry a
	// marker; each Policy is a key of Images, with its field.
	Files []meta.FileUpdate
	// Holds, when set, leaves the marked values a person set over the
	// automation's (pkg/hold), but the released ones, and the result
	// lists them.
	Holds *Holds
	// Sources are what the images of Images say they were built from, by
	// the same keys (where they say): the changes, the commit and the
	// pull request name the source revisions each brings.
	Sources map[string]*meta.ImageSourceChange
	// Approvals are who approved the images of Images that a promotion
	// with approval Required chose, by the same keys: the commit gets an
	// Approved-by trailer per approver.
	Approvals map[string]*meta.Approval
	// Groups are the promotion groups of the images of Images, by the
	// same keys: with Holds, a held value of one member leaves the values
	// of the others as they are.
	Groups map[string]string
}

// Chart is an Argo CD Application whose chart sources' targetRevision is
// set to a policy's tag: Policy is the key of one of Images.
type Chart struct {
	Policy string
	meta.ArgoCDChart
}

// Holds is which holds a run overrides all the same.
type Holds struct {
	Released []HoldKey
}

// HoldKey names a hold: the file (from the repository's root), the
// marker and the commit that set the value.
type HoldKey struct {
	Path, Setter, Commit string
}

// ArgoCDOverride is one Argo CD parameter override file
// (.argocd-source-<app>.yaml, pkg/argocd) and the images it gets.
type ArgoCDOverride struct {
	// File is the file's path in the repository, under the plan's Path.
	File string
	// Type is how Argo CD renders the source: Kustomize or Helm.
	Type string
	// Images name policy keys of Update.Images and where the file holds
	// each.
	Images []ArgoCDImage
}

// ArgoCDImage is where an override file holds one policy's image. A
// Helm name a map path cannot spell (with HelmValuesObject) is
// pkg/argocd's to refuse: this package links no YAML.
type ArgoCDImage struct {
	Policy string
	meta.ArgoCDImageFields
}

// Discover selects the discovered images to update.
type Discover struct {
	// Include and Exclude are path.Match patterns on image names.
	Include, Exclude []string
	// WriteMarkers adds a setter marker to each place it updates.
	WriteMarkers bool
}

// Container is a container-mode update; only the image is the plan's
// business, the front end's hook knows the rest.
type Container struct {
	Image string
}

// Commit is how the change is committed.
type Commit struct {
	AuthorName, AuthorEmail string
	// MessageTemplate is a commitmsg template; empty is the default.
	MessageTemplate string
	// Values are the templates' .Values.
	Values map[string]string
	// Automation names what the update is made for (namespace and name),
	// the templates' .AutomationObject; empty when nothing is.
	Automation Object
}

// Object names an object that templates can mention.
type Object struct {
	Namespace, Name string
}

// Target is where the commit goes: Branch, then the Extra refs, or a pull
// request (and then nothing else).
type Target struct {
	// Branch is the push branch; empty when only Extra is pushed.
	Branch string
	// Force rewrites Branch to the checkout plus the commit: set when the
	// push branch is not the checkout branch, as Flux does.
	Force bool
	// Extra are more refs the commit is pushed to (a refspec's
	// destination), each pushed after Branch.
	Extra []RefUpdate
	// PullRequest proposes the change instead: the commit goes to the
	// request's head branch, force-pushed, and nothing else is pushed.
	PullRequest *PullRequest
}

// RefUpdate is one ref a push sets.
type RefUpdate struct {
	// Dst is the full ref name, refs/...
	Dst   string
	Force bool
}

// PullRequest is where a change is proposed.
type PullRequest struct {
	// Provider is the forge (a pkg/forge registered name); empty is told from
	// the host. APIURL is the forge's API; empty is derived from the
	// repository URL.
	Provider, APIURL string
	// Base is the branch the request merges into.
	Base string
	// Head is the branch the request merges from. When empty, the engine
	// renders HeadTemplate (commitmsg.PullRequestBranch, whose default
	// names the automation's stream), since a template may use the
	// commit's values.
	Head, HeadTemplate string
	// TitleTemplate and BodyTemplate are commitmsg templates; empty are
	// the defaults.
	TitleTemplate, BodyTemplate  string
	Draft                        bool
	Labels, Reviewers, Assignees []string
	// AutoMerge is the merge method to enable auto-merge with (merge,
	// squash, rebase); empty leaves it off.
	AutoMerge string
}

// GroupKey says which plans can share one commit: those with the same
// key fetch the same repository, check out the same revision, push to the
// same refs and commit as the same author, so one checkout, one commit and
// one push can carry all their changes (the engine's RunGroup). What each
// keeps its own (path, images, discovery, message template, Resume) is not
// in the key. A pull request proposes on a branch of its own, and a
// container's commit is its whole tree: neither shares, and their key is
// empty.
func (p *Plan) GroupKey() string {
	t := p.Target
	if t.PullRequest != nil || p.Update.Container != nil {
		return ""
	}
	var b strings.Builder
	for _, s := range []string{p.Repository, p.Timeout.String(),
		p.Checkout.Branch, p.Checkout.Tag, p.Checkout.SemVer, p.Checkout.Name, p.Checkout.Commit,
		t.Branch, fmt.Sprint(t.Force), p.Commit.AuthorName, p.Commit.AuthorEmail} {
		fmt.Fprintf(&b, "%q ", s)
	}
	for _, e := range t.Extra {
		fmt.Fprintf(&b, "%q %t ", e.Dst, e.Force)
	}
	return b.String()
}

// Refs are the refs a run of the plan sets, in push order: the branch,
// then Extra; for a pull request its head branch when known.
func (t Target) Refs() []string {
	var refs []string
	switch {
	case t.PullRequest != nil:
		if t.PullRequest.Head != "" {
			refs = append(refs, "refs/heads/"+t.PullRequest.Head)
		}
		return refs
	case t.Branch != "":
		refs = append(refs, "refs/heads/"+t.Branch)
	}
	for _, e := range t.Extra {
		refs = append(refs, e.Dst)
	}
	return refs
}

// String says where the commit goes, for messages: "main", "auto and
// refs/for/main", "a pull request into main".
func (t Target) String() string {
	if pr := t.PullRequest; pr != nil {
		return "a pull request into " + pr.Base
	}
	var names []string
	if t.Branch != "" {
		names = append(names, t.Branch)
	}
	for _, e := range t.Extra {
		names = append(names, e.Dst)
	}
	return strings.Join(names, " and ")
}

// ErrInvalid is what the errors of Validate and ParseRefspec are (by
// errors.Is): the plan cannot work whatever the server says. Their text is
// only what is wrong, so front ends can put their own words around it.
var ErrInvalid = errors.New("invalid write-back plan")

type invalidError string

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalidf is an error that is ErrInvalid, for front ends that check their
// own input before making a Plan.
func Invalidf(format string, args ...any) error { return invalidError(fmt.Sprintf(format, args...)) }

func invalid(format string, args ...any) error { return Invalidf(format, args...) }

// LocalRepository says why a repository address is not a remote the
// engine fetches (a file:// URL, another scheme, a path); "" when it is
// one: http://, https://, ssh:// or git's user@host:path.
func LocalRepository(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		switch s := strings.ToLower(raw[:i]); s {
		case "http", "https", "ssh":
			return ""
		case "file":
			return "is a local repository (file://)"
		default:
			return "has the scheme " + s
		}
	}
	host, _, ok := strings.Cut(raw, ":")
	// A one-letter host is a Windows drive (C:\fleet), as git reads it.
	if !ok || strings.ContainsAny(host, "/\\") || len(host) < 2 || host == ".." {
		return "is a local path"
	}
	return ""
}

// Validate checks what the engine relies on: a remote repository,
// somewhere to push, valid ref names, a clean relative path, and one kind
// of update.
func (p *Plan) Validate() error { return p.validate(false) }

// ValidateAllowingFileURLs is Validate for a front end whose plans are its
// own user's, run on that user's machine (a program embedding the engine
// with Settings.FileURLs): a file:// repository is allowed too. A front
// end whose plans come from objects others write (an UpdateJob) uses
// Validate, since a local repository would be read from the disk of
// whoever runs it.
func (p *Plan) ValidateAllowingFileURLs() error { return p.validate(true) }

func (p *Plan) validate(fileURLs bool) error {
	t := p.Target
	local := LocalRepository(p.Repository)
	if fileURLs && strings.HasPrefix(strings.ToLower(p.Repository), "file://") {
		local = ""
	}
	switch {
	case p.Repository == "":
		return invalid("no repository")
	case local != "":
		return invalid("repository %q %s: the engine fetches over https, http or ssh, and a local one would be read from the disk of whoever runs it", p.Repository, local)
	case p.Path != path.Clean("/" + p.Path)[1:]:
		return invalid("path %q is not clean and relative", p.Path)
	case t.PullRequest != nil && (t.Branch != "" || len(t.Extra) > 0):
		return invalid("a pull request pushes to its own head branch: no push branch or extra refs can be set with it")
	case t.PullRequest == nil && t.Branch == "" && len(t.Extra) == 0:
		return invalid("nothing to push to")
	case t.Branch != "" && !refname.Branch(t.Branch):
		return invalid("push branch %q is not a valid branch name", t.Branch)
	}
	for _, e := range t.Extra {
		if !strings.HasPrefix(e.Dst, "refs/") || !refname.Valid(e.Dst) {
			return invalid("%q is not a valid ref name", e.Dst)
		}
	}
	if pr := t.PullRequest; pr != nil {
		if !refname.Branch(pr.Base) {
			return invalid("pull request base %q is not a valid branch name", pr.Base)
		}
		if pr.Head != "" && !refname.Branch(pr.Head) {
			return invalid("pull request head %q is not a valid branch name", pr.Head)
		}
	}
	u := p.Update
	switch {
	case u.Container != nil && (len(u.Images) > 0 || u.Discover != nil):
		return invalid("a container runs instead of the setters: no images or discovery can be set with it")
	case u.Container == nil && u.Discover == nil && len(u.Images) == 0:
		return invalid("no image to set")
	}
	// An invalid reference would be written into the files as it is
	// ({127.0.0.1 5000/acme/web:9} became newTag: 5000/acme/web:9).
	for _, policy := range slices.Sorted(maps.Keys(u.Images)) {
		if err := u.Images[policy].CheckTagAndDigest(); err != nil {
			return invalid("the image of %s: %v", policy, err)
		}
	}
	if d := u.Discover; d != nil {
		for _, pat := range append(append([]string{}, d.Include...), d.Exclude...) {
			if _, err := path.Match(pat, ""); err != nil {
				return invalid("discover pattern %q: %v", pat, err)
			}
		}
	}
	return p.validateArgoCD()
}

// validateArgoCD checks the override files: each a clean path under the
// plan's path with an override file's name, written once, of a type with
// image overrides, whose images name policies of the plan.
func (p *Plan) validateArgoCD() error {
	u := p.Update
	if (len(u.ArgoCD) > 0 || len(u.Charts) > 0) && u.Container != nil {
		return invalid("a container runs instead of the setters: no Argo CD override files or chart versions can be written with it")
	}
	for _, c := range u.Charts {
		if _, ok := u.Images[c.Policy]; !ok || c.Application == "" {
			return invalid("chart of Application %q names policy %s, which the plan has no image for", c.Application, c.Policy)
		}
	}
	seen := map[string]bool{}
	for _, o := range u.ArgoCD {
		name := path.Base(o.File)
		switch {
		case o.File != path.Clean("/" + o.File)[1:] || o.File == "":
			return invalid("override file %q is not a clean relative path", o.File)
		case p.Path != "" && !strings.HasPrefix(o.File, p.Path+"/"):
			return invalid("override file %q is not under the update path %q", o.File, p.Path)
		case !strings.HasPrefix(name, ".argocd-source-") || !strings.HasSuffix(name, ".yaml"):
			return invalid("%q is not an Argo CD override file (.argocd-source-<app>.yaml)", o.File)
		case seen[o.File]:
			return invalid("override file %q is listed twice", o.File)
		case o.Type != "Kustomize" && o.Type != "Helm":
			return invalid("override file %q: type %q has no image overrides (Kustomize or Helm)", o.File, o.Type)
		case len(o.Images) == 0:
			return invalid("override file %q: no images", o.File)
		}
		seen[o.File] = true
		// Two images written to one Helm parameter would set it back and
		// forth; the first policy's default names leave none for another.
		params := map[string]string{}
		for _, img := range o.Images {
			if _, ok := u.Images[img.Policy]; !ok {
				return invalid("override file %q names policy %s, which the plan has no image for", o.File, img.Policy)
			}
			if o.Type != "Helm" {
				continue
			}
			names := []string{img.HelmImageSpec}
			if img.HelmImageSpec == "" {
				names = []string{cmp.Or(img.HelmImageName, meta.DefaultHelmImageName), cmp.Or(img.HelmImageTag, meta.DefaultHelmImageTag)}
			}
			for _, n := range names {
				if other, ok := params[n]; ok {
					return invalid("override file %q: policies %s and %s both set Helm parameter %s; name each one's parameters", o.File, other, img.Policy, n)
				}
				params[n] = img.Policy
			}
		}
	}
	return nil
}

// PushTarget is where a push goes, as Flux's push spec says it: to branch,
// forced when it is not the checkout branch (it is then rewritten to the
// checkout plus the commit); to the checkout branch when neither branch
// nor a refspec is given; and to the refspec's destination (from
// ParseRefspec) unless that is the branch itself.
func PushTarget(checkoutBranch, branch string, refspec *RefUpdate) Target {
	var t Target
	switch {
	case branch != "":
		t.Branch, t.Force = branch, branch != checkoutBranch
	case refspec == nil:
		t.Branch = checkoutBranch
	}
	if refspec != nil && refspec.Dst != "refs/heads/"+t.Branch {
		t.Extra = append(t.Extra, *refspec)
	}
	return t
}

// ParseRefspec reads a push refspec, [+]SRC:DST, into the ref it sets. The
// commit exists only in the run, so the source must name it: HEAD, or the
// checkout branch (which, as in Flux's clone, is where the commit was
// made). A short destination is a branch.
func ParseRefspec(spec, checkoutBranch string) (RefUpdate, error) {
	force := strings.HasPrefix(spec, "+")
	src, dst, ok := strings.Cut(strings.TrimPrefix(spec, "+"), ":")
	if !ok || dst == "" {
		return RefUpdate{}, invalid("want [+]SOURCE:DESTINATION")
	}
	switch src {
	case "HEAD", "@":
	case checkoutBranch, "refs/heads/" + checkoutBranch:
		if checkoutBranch == "" {
			return RefUpdate{}, invalid("the source must be HEAD when no branch is checked out")
		}
	default:
		return RefUpdate{}, invalid("the source must be HEAD or the checkout branch, the only places the new commit is")
	}
	if !strings.HasPrefix(dst, "refs/") {
		dst = "refs/heads/" + dst
	}
	if !refname.Valid(dst) {
		return RefUpdate{}, invalid("%q is not a valid ref name", dst)
	}
	return RefUpdate{Dst: dst, Force: force}, nil
}
