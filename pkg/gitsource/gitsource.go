// Package gitsource resolves where an ImageUpdateAutomation reads and
// writes: the repository (spec.git.repository, or the object of one of
// SourceKinds that spec.sourceRef names: a Flux GitRepository, an Argo CD
// Application; or the Applications spec.applicationSelector selects), the
// ref its jobs check out, and the credentials to reach it (for Argo CD
// Applications, Argo CD's own repository Secrets).
//
// The automation controller acts on the answer and tk-image explain
// reports it; both call this package, so that what explain says is what
// the controller does. It knows nothing of controllers: it takes a
// client.Reader (a manager's client, or a CLI's) and the automation.
// Source objects are read as unstructured, so that Flux's (or another
// tool's) types are not a dependency. Problems with the automation's spec,
// its source or its Secrets are *Error values (errors.go): facts about the
// automation, each a Problem in this package's terms with one table of
// what it means for the automation's conditions, which the controller
// records as they are (conditions.Classify) and explain prints; any other
// error (an API read failing) is transient.
package gitsource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/gitsecret"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
)

// GitRepositoryGVK is Flux's GitRepository at the version read when
// spec.sourceRef.apiVersion is not set.
var GitRepositoryGVK = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}

// DefaultTimeout bounds git operations when the repository sets no
// timeout, as Flux's default does.
const DefaultTimeout = 60 * time.Second

// defaultFluxBranch is what Flux checks out of a GitRepository without a
// ref.
const defaultFluxBranch = "master"

// Options are the controller's flags that change the answer.
type Options struct {
	// NoCrossNamespaceRefs refuses a sourceRef to another namespace
	// (--no-cross-namespace-refs).
	NoCrossNamespaceRefs bool
	// ArgoCDNamespace is the namespace Argo CD runs in: an Application
	// elsewhere gets override files named namespace_name. argocd when
	// empty.
	ArgoCDNamespace string
}

// DefaultArgoCDNamespace is where Argo CD runs unless told otherwise.
const DefaultArgoCDNamespace = "argocd"

// Source is where an automation's UpdateJobs read and write.
type Source struct {
	// Repository is what a job's spec.repository gets; its Timeout is
	// always set.
	Repository updatev1.GitRepositorySpec
	// Ref is the ref the jobs check out: spec.git.checkout's, else the
	// GitRepository's (master when it sets none, as in Flux).
	Ref updatev1.GitRepositoryRef
	// Describe names the source in messages, e.g. "spec.git.repository"
	// or "GitRepository ns/name".
	Describe string
	// Path is the directory the source names in the repository (an
	// Application's path), the jobs' update path unless spec.update.path
	// is set; "" is the root.
	Path string
	// Applications are the Argo CD Applications of spec.sourceRef (one) or
	// spec.applicationSelector, whose sources the jobs write.
	Applications []*Application
	// DefaultBranch is set when the Applications' targetRevision is HEAD
	// and spec.git.checkout names no branch: Ref is the repository's
	// default branch, which ReadDefaultBranch asks the server for.
	DefaultBranch bool
	// Targets are set when the Applications are written on more than one
	// repository or branch: each is a Source of its own, with the
	// Applications (and their sources) it holds, and gets its own jobs and
	// commits. The Source itself then has no repository or ref.
	Targets []*Source
}

// ReadDefaultBranch sets Ref to the repository's default branch when the
// source is one (DefaultBranch), as git clone and Argo CD check out HEAD.
// A failure is retried: the server may answer next time.
func (s *Source) ReadDefaultBranch(ctx context.Context, auth *git.Auth) error {
	if !s.DefaultBranch || s.Ref.Branch != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.Repository.Timeout.Duration)
	defer cancel()
	branch, err := git.DefaultBranch(ctx, s.Repository.URL, auth)
	if err != nil {
		// The message is scrubbed of the credentials; the problem is
		// read from err itself.
		return problemf(gitProblem(err), "reading the default branch (targetRevision HEAD) of %s: %s", s.Describe, auth.Scrub(err.Error()))
	}
	s.Ref = updatev1.GitRepositoryRef{Branch: branch}
	return nil
}

// Resolve reads the automation's repository from spec.git.repository or
// the Flux GitRepository of spec.sourceRef, and its checkout ref
// (spec.git.checkout wins over the GitRepository's), and checks that a job
// could check it out and push. A problem with the spec or the source is a
// *Error: Stalled, or retried when the GitRepository is
// missing (it may yet be created). c reads the GitRepository.
//
// On a failure the Source is still returned when the spec names one, with
// what was resolved before the problem (at least Describe), so that a
// report can say where it looked; it is nil only when the spec names no
// source. A caller that acts on the Source must check the error first.
func Resolve(ctx context.Context, c client.Reader, obj *imagev1.ImageUpdateAutomation, opts Options) (*Source, error) {
	src := &Source{}
	if obj.Spec.ApplicationSelector != nil {
		if err := readApplications(ctx, c, obj, src); err != nil {
			return src, err
		}
	} else if ref := obj.Spec.SourceRef; ref != nil {
		if err := readSourceRef(ctx, c, obj, ref, opts, src); err != nil {
			return src, err
		}
	} else {
		// The CRD refuses both cases; an older CRD may not.
		if obj.Spec.GitSpec.Repository == nil {
			return nil, problemf(InvalidSpec, "set spec.sourceRef or spec.git.repository")
		}
		src.Describe = "spec.git.repository"
		if obj.Spec.GitSpec.Checkout == nil {
			return src, problemf(InvalidSpec, "spec.git.checkout is required with spec.git.repository")
		}
		src.Repository = *obj.Spec.GitSpec.Repository.DeepCopy()
		if err := checkURL(src.Repository.URL, src.Describe); err != nil {
			return src, err
		}
	}
	for _, a := range src.Applications {
		a.ArgoNamespace = cmp.Or(opts.ArgoCDNamespace, DefaultArgoCDNamespace)
	}
	if len(src.Targets) > 0 {
		if obj.Spec.GitSpec.Checkout != nil {
			return src, problemf(InvalidSpec,
				"spec.git.checkout names one ref, but %s are written on %d repositories or branches: remove it, or select the Applications of one target per automation",
				src.Describe, len(src.Targets))
		}
		for _, t := range src.Targets {
			for _, a := range t.Applications {
				a.ArgoNamespace = cmp.Or(opts.ArgoCDNamespace, DefaultArgoCDNamespace)
			}
			t.Repository.Timeout = &metav1.Duration{Duration: DefaultTimeout}
			t.DefaultBranch = t.Ref.Branch == ""
		}
		return src, nil
	}
	if c := obj.Spec.GitSpec.Checkout; c != nil {
		src.Ref = c.Reference
	}
	if src.Repository.Timeout == nil {
		src.Repository.Timeout = &metav1.Duration{Duration: DefaultTimeout}
	}
	if !hasRef(src.Ref) && len(src.Applications) > 0 {
		// targetRevision HEAD: the default branch, which only the server
		// knows (ReadDefaultBranch).
		src.DefaultBranch = true
		return src, nil
	}
	if !hasRef(src.Ref) {
		return src, problemf(InvalidSpec, "the checkout ref sets none of branch, tag, semver, name or commit")
	}
	// Where a job pushes is jobplan's rule; a pull request has a base
	// branch to open against, so it needs a branch checkout as well.
	if p := obj.Spec.GitSpec.Push; src.Ref.Branch == "" && (p == nil || p.PullRequest != nil || nowhere(src.Ref, p)) {
		return src, problemf(InvalidSpec,
			"the checkout ref is not a branch, so there is no branch to push to: set spec.git.push.branch or spec.git.push.refspec")
	}
	return src, nil
}

// nowhere tells a push spec that pushes to no ref from a checkout of ref;
// a refspec that does not parse is the job's to refuse, with its reason.
func nowhere(ref updatev1.GitRepositoryRef, push *updatev1.PushSpec) bool {
	t, err := jobplan.PushTarget(ref, push)
	return err == nil && t.Branch == "" && len(t.Extra) == 0
}

// readSourceRef reads the object spec.sourceRef names into src, through
// its kind's entry of SourceKinds.
func readSourceRef(ctx context.Context, c client.Reader, obj *imagev1.ImageUpdateAutomation,
	ref *imagev1.CrossNamespaceSourceReference, opts Options, src *Source) error {
	src.Describe = "spec.sourceRef"
	kind, ok := SourceKinds[SourceKindOf(ref)]
	if !ok {
		return problemf(InvalidSource, "spec.sourceRef.kind %q is not supported: only %s", ref.Kind, strings.Join(SourceKindNames(), ", "))
	}
	name := kind.GVK.Kind
	gv := kind.GVK.GroupVersion()
	if ref.APIVersion != "" {
		parsed, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || parsed.Group != gv.Group || parsed.Version == "" {
			return problemf(InvalidSource, "spec.sourceRef.apiVersion %q is not a version of %s", ref.APIVersion, gv.Group)
		}
		gv = parsed
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if key.Namespace == "" {
		key.Namespace = obj.Namespace
	}
	src.Describe = name + " " + key.String()
	if key.Namespace != obj.Namespace && opts.NoCrossNamespaceRefs {
		return problemf(Denied,
			"cannot use %s %s from namespace %s: cross-namespace references are disabled (--no-cross-namespace-refs)", name, key, obj.Namespace)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gv.WithKind(name))
	if err := c.Get(ctx, key, u); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return problemf(SourceMissing, "%s %s not found", name, key)
		case apimeta.IsNoMatchError(err):
			return problemf(KindMissing, "the %s kind (%s) is not installed", name, gv)
		}
		return fmt.Errorf("reading %s %s: %w", name, key, err)
	}
	return kind.Read(u, src)
}

// fromGitRepository reads a Flux GitRepository into src: its URL,
// provider, credentials, proxy, timeout and ref (master when it sets none,
// as in Flux).
func fromGitRepository(u *unstructured.Unstructured, src *Source) error {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(spec, path...)
		return s
	}
	src.Repository.URL = str("url")
	if err := checkURL(src.Repository.URL, src.Describe); err != nil {
		return err
	}
	switch p := str("provider"); p {
	case "", git.ProviderGeneric:
	case "github", "azure":
		src.Repository.Provider = p
	default:
		return problemf(InvalidSource, "%s uses provider %q: only generic, github and azure are supported", src.Describe, p)
	}
	src.Repository.ServiceAccountName = str("serviceAccountName")
	if n := str("secretRef", "name"); n != "" {
		src.Repository.SecretRef = &meta.LocalObjectReference{Name: n}
	}
	if n := str("proxySecretRef", "name"); n != "" {
		src.Repository.ProxySecretRef = &meta.LocalObjectReference{Name: n}
	}
	if t := str("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return problemf(InvalidSource, "%s has an invalid spec.timeout %q", src.Describe, t)
		}
		src.Repository.Timeout = &metav1.Duration{Duration: d}
	}
	if _, ok := spec["ref"]; ok {
		src.Ref = updatev1.GitRepositoryRef{
			Branch: str("ref", "branch"), Tag: str("ref", "tag"), SemVer: str("ref", "semver"),
			Name: str("ref", "name"), Commit: str("ref", "commit"),
		}
	} else {
		src.Ref = updatev1.GitRepositoryRef{Branch: defaultFluxBranch}
	}
	return nil
}

// Credentials reads the Secrets src's repository names. They are read in
// the automation's namespace, where its UpdateJobs run and read them too,
// also when the GitRepository is in another namespace: a Secret of another
// namespace is never used for the automation. c reads the Secrets; a
// controller passes a reader past its cache, so that it needs no
// cluster-wide list and watch of Secrets.
//
// A Secret that is missing is an *Error retried soon (Secrets are not
// watched), credentials that cannot work are Stalled; both wrap a
// *CredentialsError, as does any other error, which is transient.
func Credentials(ctx context.Context, c client.Reader, obj *imagev1.ImageUpdateAutomation, src *Source) (*git.Auth, error) {
	if err := argoCDSecret(ctx, c, obj, src); err != nil {
		return nil, err
	}
	var secret, proxy string
	if ref := src.Repository.SecretRef; ref != nil {
		secret = ref.Name
	}
	if ref := src.Repository.ProxySecretRef; ref != nil {
		proxy = ref.Name
	}
	auth, _, err := gitsecret.Read(ctx, c, obj.Namespace, git.Remote{URL: src.Repository.URL, SecretName: secret,
		ProxySecretName: proxy, Provider: src.Repository.Provider, ServiceAccountName: src.Repository.ServiceAccountName})
	if err == nil {
		return auth, nil
	}
	ce := &CredentialsError{Source: src.Describe, Namespace: obj.Namespace, Err: err}
	switch {
	case errors.Is(err, gitsecret.ErrNotFound):
		return nil, &Error{Problem: SecretMissing, Err: ce}
	case errors.Is(err, git.ErrInvalidCredentials):
		return nil, &Error{Problem: SecretInvalid, Err: ce}
	case errors.Is(err, git.ErrAuthentication):
		// A provider (GitHub, Entra ID) refused the identity.
		return nil, &Error{Problem: AuthenticationRefused, Err: ce}
	}
	return nil, ce
}

// argoCDSecret sets, for an Application source, the Argo CD repository
// Secret of its URL (gitsecret.FindArgoCD) as the repository's secretRef.
// The automation's UpdateJobs read it in their own namespace, so an
// automation outside Argo CD's namespace cannot use it: that is refused
// rather than the Secret copied out of the namespace Argo CD guards.
func argoCDSecret(ctx context.Context, c client.Reader, obj *imagev1.ImageUpdateAutomation, src *Source) error {
	if len(src.Applications) == 0 || src.Repository.SecretRef != nil {
		return nil
	}
	app := src.Applications[0]
	secrets, err := gitsecret.ListArgoCD(ctx, c, app.ArgoNamespace)
	if apierrors.IsForbidden(err) {
		return problemf(Denied,
			"the controller may not list Argo CD's repository Secrets in namespace %s: install the chart with argocd.namespace=%s, or start it with --argocd-namespace naming where Argo CD runs",
			app.ArgoNamespace, app.ArgoNamespace)
	}
	if err != nil {
		return err
	}
	s := gitsecret.FindArgoCD(secrets, src.Repository.URL)
	switch {
	case s == nil:
		return nil // a public repository, as for Argo CD
	case obj.Namespace != app.ArgoNamespace:
		return problemf(Denied,
			"Argo CD's Secret %s/%s holds the credentials of %s, but UpdateJobs read Secrets in their own namespace, %s: put the automation in namespace %s",
			s.Namespace, s.Name, git.Redact(src.Repository.URL), obj.Namespace, app.ArgoNamespace)
	}
	src.Repository.SecretRef = &meta.LocalObjectReference{Name: s.Name}
	return nil
}

// CredentialsError is why the Secrets of a source could not be read or
// used. Its message is worded for the automation's Ready condition; Err is
// pkg/git's error (gitsecret.ErrNotFound, git.ErrInvalidCredentials, or a
// failed read), for a caller that words it its own way.
type CredentialsError struct {
	// Source is the source's Describe.
	Source string
	// Namespace is where the Secrets were read: the automation's.
	Namespace string
	Err       error
}

func (e *CredentialsError) Error() string {
	switch {
	case errors.Is(e.Err, gitsecret.ErrNotFound):
		return fmt.Sprintf("%s, for %s; the UpdateJobs run in namespace %s and read it there", e.Err, e.Source, e.Namespace)
	case errors.Is(e.Err, git.ErrInvalidCredentials):
		return fmt.Sprintf("credentials of %s: %s", e.Source, e.Err)
	}
	return e.Err.Error()
}

func (e *CredentialsError) Unwrap() error { return e.Err }

// checkURL accepts the URLs an UpdateJob accepts: the one rule of pkg/git.
func checkURL(raw, describe string) error {
	if raw == "" {
		return problemf(InvalidSource, "%s has no URL", describe)
	}
	if _, err := git.ParseEndpoint(raw); err != nil {
		return problemf(InvalidSource, "%s: %s", describe, err)
	}
	return nil
}

func hasRef(r updatev1.GitRepositoryRef) bool {
	return r.Branch != "" || r.Tag != "" || r.SemVer != "" || r.Name != "" || r.Commit != ""
}

// BranchOnly reports whether the ref names just a branch, whose head
// ls-remote can read; with anything else the head tells nothing of what a
// job checks out.
func BranchOnly(r updatev1.GitRepositoryRef) bool {
	return r.Branch != "" && r.Tag == "" && r.SemVer == "" && r.Name == "" && r.Commit == ""
}

// DescribeRef says which refs a checkout ref sets, e.g. "branch main" or
// "tag v1, commit abc123"; "" when it sets none.
func DescribeRef(r updatev1.GitRepositoryRef) string {
	var parts []string
	for _, p := range [][2]string{{"branch", r.Branch}, {"tag", r.Tag}, {"semver", r.SemVer}, {"name", r.Name}, {"commit", r.Commit}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	return strings.Join(parts, ", ")
}
