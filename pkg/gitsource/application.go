package gitsource

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/git"
)

// ApplicationGVK is Argo CD's Application at the version read when
// spec.sourceRef.apiVersion is not set.
var ApplicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// Application is what an automation writes of an Argo CD Application:
// the Application as read (pkg/argocd), and its sources in git on the
// Source's repository and branch, the ones its jobs write.
type Application struct {
	argocd.Application
	// Written are the rendered git sources on the Source's repository and
	// targetRevision, in spec order.
	Written []argocd.Source
	// ArgoNamespace is the namespace Argo CD runs in (Options), which
	// names the override files.
	ArgoNamespace string
}

// commitSHA is a full commit name, which Argo CD checks out as it is.
var commitSHA = regexp.MustCompile(`^[0-9a-fA-F]{40}$`)

// RevisionBranch is the branch an Application's targetRevision names, or
// why it names none a write-back could push to: a commit, a semver range
// (Argo CD resolves it to the highest matching tag) or a tag by its full
// name. HEAD (and empty, Argo CD's default) is the repository's default
// branch, which only the server knows: ok is true with an empty branch
// (Source.ReadDefaultBranch reads it). A tag by its short name looks like
// a branch; reading the branch head tells them apart.
func RevisionBranch(rev string) (branch string, ok bool, why string) {
	switch {
	case rev == "" || rev == "HEAD":
		return "", true, ""
	case strings.HasPrefix(rev, "refs/heads/"):
		return strings.TrimPrefix(rev, "refs/heads/"), true, ""
	case strings.HasPrefix(rev, "refs/"):
		return "", false, "is " + rev + ", not a branch"
	case commitSHA.MatchString(rev):
		return "", false, "is a commit"
	}
	if _, err := semver.NewVersion(rev); err != nil {
		if _, err := semver.NewConstraint(rev); err == nil {
			return "", false, "is a semver range, which Argo CD resolves to a tag"
		}
	}
	return rev, true, ""
}

// fromApplication reads an Argo CD Application into src: the repository,
// branch and path of its git sources (a chart from a chart repository and
// a ref-only source are not written to). Sources on more than one
// repository or targetRevision are targets of their own (toTargets).
func fromApplication(u *unstructured.Unstructured, src *Source) error {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	app, err := argocd.ReadApplication(data)
	if err != nil {
		return problemf(InvalidSource, "%s: %s", src.Describe, err)
	}
	a := &Application{Application: app}
	for _, s := range app.Sources {
		if s.Chart == "" {
			a.Written = append(a.Written, s)
		}
	}
	if len(a.Written) == 0 {
		return problemf(InvalidSource, "%s has no source in a git repository to write to", src.Describe)
	}
	src.Applications = []*Application{a}
	return toTargets(src)
}

// toTargets sets where src's Applications are written: each written
// source's repository and targetRevision is a target, which the
// automation's jobs check out and push to, one job per target. With one
// target, src is it; with more, src.Targets are, each with the
// Applications (and of each the sources) it holds, in the order first
// named (Applications by name, sources in spec order).
func toTargets(src *Source) error {
	type key struct{ repo, rev string }
	var order []key
	targets := map[key]*Source{}
	for _, a := range src.Applications {
		for _, s := range a.Written {
			k := key{repoKey(s.RepoURL), s.TargetRevision}
			t, ok := targets[k]
			if !ok {
				t = &Source{Describe: src.Describe}
				t.Repository.URL = s.RepoURL
				if err := checkURL(t.Repository.URL, src.Describe); err != nil {
					return err
				}
				branch, ok, why := RevisionBranch(s.TargetRevision)
				if !ok {
					return problemf(NotABranch,
						"the targetRevision %q of %s %s: a write-back pushes to a branch", s.TargetRevision, a.sourceName(s), why)
				}
				t.Ref = updatev1.GitRepositoryRef{Branch: branch}
				targets[k], order = t, append(order, k)
			}
			if n := len(t.Applications); n == 0 || t.Applications[n-1].Name != a.Name || t.Applications[n-1].Namespace != a.Namespace {
				t.Applications = append(t.Applications, &Application{Application: a.Application})
			}
			mine := t.Applications[len(t.Applications)-1]
			mine.Written = append(mine.Written, s)
		}
	}
	for _, k := range order {
		t := targets[k]
		var paths []string
		for _, a := range t.Applications {
			for _, s := range a.Written {
				paths = append(paths, path.Clean("/" + s.Path)[1:])
			}
		}
		t.Path = commonDir(paths)
	}
	if len(order) == 1 {
		t := targets[order[0]]
		src.Repository.URL, src.Ref, src.Path = t.Repository.URL, t.Ref, t.Path
		return nil
	}
	for _, k := range order {
		t := targets[k]
		t.Describe = fmt.Sprintf("%s on %s (%s)", src.Describe, git.Redact(t.Repository.URL), revisionOf(k.rev))
		src.Targets = append(src.Targets, t)
	}
	return nil
}

// revisionOf names a targetRevision in messages.
func revisionOf(rev string) string {
	if rev == "" {
		return "HEAD"
	}
	return rev
}

// readApplications reads the Applications spec.applicationSelector
// selects in the automation's namespace, each as fromApplication reads
// one, into src: each Application, and the targets their sources are
// written to (toTargets).
func readApplications(ctx context.Context, c client.Reader, obj *imagev1.ImageUpdateAutomation, src *Source) error {
	src.Describe = "spec.applicationSelector"
	sel, err := metav1.LabelSelectorAsSelector(obj.Spec.ApplicationSelector)
	if err != nil {
		return problemf(InvalidSpec, "invalid spec.applicationSelector: %s", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ApplicationGVK.GroupVersion().WithKind(ApplicationGVK.Kind + "List"))
	if err := c.List(ctx, list, client.InNamespace(obj.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return problemf(KindMissing, "the Application kind (%s) is not installed", ApplicationGVK.GroupVersion())
		}
		return fmt.Errorf("listing Applications: %w", err)
	}
	if len(list.Items) == 0 {
		return problemf(SourceMissing, "no Application in namespace %s matches spec.applicationSelector", obj.Namespace)
	}
	slices.SortFunc(list.Items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := range list.Items {
		u := &list.Items[i]
		one := &Source{Describe: "Application " + obj.Namespace + "/" + u.GetName()}
		if err := fromApplication(u, one); err != nil {
			return err
		}
		src.Applications = append(src.Applications, one.Applications...)
	}
	src.Describe = fmt.Sprintf("%d Applications of spec.applicationSelector", len(src.Applications))
	if len(src.Applications) == 1 {
		src.Describe = src.Applications[0].String() + " of spec.applicationSelector"
	}
	return toTargets(src)
}

func repoKey(u string) string {
	k, _ := RepositoryKey(u)
	return k
}

// commonDir is the deepest directory holding every one of paths (clean,
// relative; "" is the root).
func commonDir(paths []string) string {
	dir := paths[0]
	for _, p := range paths[1:] {
		for dir != "" && p != dir && !strings.HasPrefix(p, dir+"/") {
			if i := strings.LastIndexByte(dir, '/'); i >= 0 {
				dir = dir[:i]
			} else {
				dir = ""
			}
		}
	}
	return dir
}

// sourceName names one of the Application's sources in messages.
func (a *Application) sourceName(s argocd.Source) string {
	if len(a.Sources) > 1 {
		return fmt.Sprintf("source %d of Application %s/%s", s.Index, a.Namespace, a.Name)
	}
	return fmt.Sprintf("Application %s/%s", a.Namespace, a.Name)
}

// String names the Application and its written sources for messages:
// "Application argocd/shop (sources 2, 3)".
func (a *Application) String() string {
	s := fmt.Sprintf("Application %s/%s", a.Namespace, a.Name)
	if len(a.Sources) > 1 {
		var idx []string
		for _, w := range a.Written {
			idx = append(idx, fmt.Sprint(w.Index))
		}
		s += " (sources " + strings.Join(idx, ", ") + ")"
	}
	return s
}
