package gitsource

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// A targetRevision is a branch the jobs push to, or refused with why:
// Argo CD checks out a commit, a semver range's highest tag or a full ref
// name as they are, and a write-back cannot push to any of them.
func TestRevisionBranch(t *testing.T) {
	for _, tc := range []struct {
		rev, branch string
		ok          bool
	}{
		{"main", "main", true},
		{"release/1.x", "release/1.x", true},
		{"refs/heads/main", "main", true},
		{"HEAD", "", true}, // the default branch: the checkout must name it
		{"", "", true},
		{"v1.2.3", "v1.2.3", true}, // a tag or a branch: the head read tells
		{"refs/tags/v1.2.3", "", false},
		{"0123456789abcdef0123456789abcdef01234567", "", false},
		{"^1.2.0", "", false},
		{">=1.0.0 <2.0.0", "", false},
		{"1.*", "", false},
	} {
		branch, ok, why := RevisionBranch(tc.rev)
		if branch != tc.branch || ok != tc.ok || ok != (why == "") {
			t.Errorf("%q: branch %q, ok %v (%s); want %q, %v", tc.rev, branch, ok, why, tc.branch, tc.ok)
		}
	}
}

func application(ns, name string, spec map[string]any) *unstructured.Unstructured {
	spec["destination"] = map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"}
	spec["project"] = "default"
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(ApplicationGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// An Argo CD Application, stored by the API server through Argo CD's own
// CRD, is a source: its git sources' repository, targetRevision (a branch)
// and common path; a chart repository's source and a ref-only source are
// not written to; what cannot be pushed to is refused with a reason.
func TestApplicationIsASource(t *testing.T) {
	ns := env.Namespace(t)
	src := func(repo, path, rev string) map[string]any {
		return map[string]any{"repoURL": repo, "path": path, "targetRevision": rev}
	}
	for _, obj := range []*unstructured.Unstructured{
		application(ns, "web", map[string]any{"source": src(url, "apps/web", "main")}),
		application(ns, "shop", map[string]any{"sources": []any{
			map[string]any{"repoURL": "https://charts.example.com", "chart": "shop", "targetRevision": "1.2.0"},
			map[string]any{"repoURL": url, "targetRevision": "main", "ref": "values"},
			src(url, "shop/base", "main"),
			src(url+"/", "shop/overlays/prod", "main"),
		}}),
		application(ns, "pinned", map[string]any{"source": src(url, "apps/web", "0123456789abcdef0123456789abcdef01234567")}),
		application(ns, "ranged", map[string]any{"source": src(url, "apps/web", "~1.2")}),
		application(ns, "head", map[string]any{"source": src(url, "apps/web", "HEAD")}),
		application(ns, "split", map[string]any{"sources": []any{src(url, "a", "main"), src("https://git.example.com/other.git", "b", "main")}}),
		application(ns, "charts", map[string]any{"source": map[string]any{"repoURL": "https://charts.example.com", "chart": "shop", "targetRevision": "1.2.0"}}),
	} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating Application %s: %v", obj.GetName(), err)
		}
	}
	resolve := func(name string, mutate func(*imagev1.ImageUpdateAutomation)) (*Source, error) {
		a := automation(ns, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: name}
			if mutate != nil {
				mutate(a)
			}
		})
		return Resolve(context.Background(), env.Client, a, Options{})
	}

	s, err := resolve("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Repository.URL != url || s.Ref != (updatev1.GitRepositoryRef{Branch: "main"}) || s.Path != "apps/web" ||
		s.Describe != "Application "+ns+"/web" || len(s.Applications) != 1 || len(s.Applications[0].Written) != 1 {
		t.Errorf("source %+v", s)
	}
	s, err = resolve("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Applications[0].Written; s.Path != "shop" || len(w) != 2 || w[0].Index != 2 || w[1].Index != 3 {
		t.Errorf("multi-source: path %q, written %+v", s.Path, w)
	}
	if got, want := s.Applications[0].String(), "Application "+ns+"/shop (sources 2, 3)"; got != want {
		t.Errorf("described as %q, want %q", got, want)
	}

	_, err = resolve("pinned", nil)
	checkFailure(t, err, failure{imagev1.TargetRevisionNotBranchReason, true, `"0123456789abcdef0123456789abcdef01234567" of Application ` + ns + `/pinned is a commit`})
	_, err = resolve("ranged", nil)
	checkFailure(t, err, failure{imagev1.TargetRevisionNotBranchReason, true, "is a semver range"})
	// HEAD is the default branch, which only the server knows: read later
	// (ReadDefaultBranch), unless the automation names the branch.
	s, err = resolve("head", nil)
	if err != nil || !s.DefaultBranch || s.Ref.Branch != "" {
		t.Errorf("HEAD: %+v, %v", s, err)
	}
	s, err = resolve("head", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "trunk"}}
	})
	if err != nil || s.Ref.Branch != "trunk" || s.DefaultBranch {
		t.Errorf("HEAD with a checkout branch: %+v, %v", s, err)
	}
	// Sources on two repositories are two targets, each with its own
	// repository, branch, path and the source it holds.
	s, err = resolve("split", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Targets) != 2 || s.Repository.URL != "" {
		t.Fatalf("split: %d targets, repository %q", len(s.Targets), s.Repository.URL)
	}
	for i, want := range []struct{ url, path string }{{url, "a"}, {"https://git.example.com/other.git", "b"}} {
		tg := s.Targets[i]
		if tg.Repository.URL != want.url || tg.Ref.Branch != "main" || tg.Path != want.path || tg.Repository.Timeout == nil ||
			len(tg.Applications) != 1 || len(tg.Applications[0].Written) != 1 || tg.Applications[0].Written[0].Index != i {
			t.Errorf("split target %d: %+v", i, tg)
		}
	}
	_, err = resolve("split", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "trunk"}}
	})
	checkFailure(t, err, failure{conditions.InvalidSpecReason, true, "written on 2 repositories or branches"})
	_, err = resolve("charts", nil)
	checkFailure(t, err, failure{imagev1.InvalidSourceReason, true, "no source in a git repository"})
}

// spec.applicationSelector reads every Application it selects in the
// automation's namespace, by name: one repository and branch, their
// common path; Applications on another branch are another target, and a
// selector matching none is retried.
func TestApplicationSelectorReadsEverySelectedApplication(t *testing.T) {
	ns := env.Namespace(t)
	src := func(path, rev string) map[string]any {
		return map[string]any{"source": map[string]any{"repoURL": url, "path": path, "targetRevision": rev}}
	}
	for _, obj := range []*unstructured.Unstructured{
		application(ns, "web", src("apps/web", "main")),
		application(ns, "api", src("apps/api", "main")),
		application(ns, "staging", src("apps/staging", "staging")),
		application(ns, "unlabelled", src("elsewhere", "main")),
	} {
		team := map[string]string{"web": "shop", "api": "shop", "staging": "staging"}[obj.GetName()]
		if team != "" {
			obj.SetLabels(map[string]string{"team": team, "updates": "on"})
		}
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func(labels map[string]string) (*Source, error) {
		a := automation(ns, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.ApplicationSelector = &metav1.LabelSelector{MatchLabels: labels}
		})
		return Resolve(context.Background(), env.Client, a, Options{ArgoCDNamespace: ns})
	}
	s, err := resolve(map[string]string{"team": "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Repository.URL != url || s.Ref.Branch != "main" || s.Path != "apps" || len(s.Applications) != 2 ||
		s.Applications[0].Name != "api" || s.Applications[1].Name != "web" || s.Applications[0].ArgoNamespace != ns ||
		s.Describe != "2 Applications of spec.applicationSelector" {
		t.Errorf("source %+v", s)
	}
	// Applications on two branches are two targets, each holding its
	// own Applications.
	s, err = resolve(map[string]string{"updates": "on"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Targets) != 2 || len(s.Applications) != 3 {
		t.Fatalf("%d targets, %d Applications", len(s.Targets), len(s.Applications))
	}
	main, staging := s.Targets[0], s.Targets[1]
	if main.Ref.Branch != "main" || len(main.Applications) != 2 || main.Path != "apps" ||
		staging.Ref.Branch != "staging" || len(staging.Applications) != 1 || staging.Applications[0].Name != "staging" ||
		staging.Path != "apps/staging" || staging.Applications[0].ArgoNamespace != ns ||
		staging.Describe != "3 Applications of spec.applicationSelector on "+url+" (staging)" {
		t.Errorf("targets %+v, %+v", main, staging)
	}
	_, err = resolve(map[string]string{"team": "nobody"})
	checkFailure(t, err, failure{imagev1.SourceNotFoundReason, false, "no Application in namespace " + ns})
}

// An Application source's credentials are Argo CD's: the repository
// Secret of its URL in Argo CD's namespace, read with Argo CD's keys and
// the CA Argo CD keeps for the host; an automation outside that namespace
// is refused (its jobs could not read the Secret), and a repository no
// Secret names is public.
func TestApplicationSourcesUseArgoCDsRepositorySecrets(t *testing.T) {
	argoNS, other := env.Namespace(t), env.Namespace(t)
	repoSecret := secret(argoNS, "repo-fleet", map[string]string{"url": url, "username": "bot", "password": "argo-pass", "type": "git"})
	repoSecret.Labels = map[string]string{git.ArgoCDSecretTypeLabel: git.ArgoCDRepository}
	for _, obj := range []client.Object{
		repoSecret,
		application(argoNS, "web", map[string]any{"source": map[string]any{"repoURL": url, "path": "web", "targetRevision": "main"}}),
		application(argoNS, "public", map[string]any{"source": map[string]any{"repoURL": "https://git.example.com/public.git", "path": ".", "targetRevision": "main"}}),
		application(other, "web", map[string]any{"source": map[string]any{"repoURL": url, "path": "web", "targetRevision": "main"}}),
	} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	read := func(ns, app string) (*Source, *git.Auth, error) {
		a := automation(ns, func(a *imagev1.ImageUpdateAutomation) {
			a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: app}
		})
		src, err := Resolve(context.Background(), env.Client, a, Options{ArgoCDNamespace: argoNS})
		if err != nil {
			return src, nil, err
		}
		auth, err := Credentials(context.Background(), env.Client, a, src)
		return src, auth, err
	}
	src, auth, err := read(argoNS, "web")
	if err != nil {
		t.Fatal(err)
	}
	if src.Repository.SecretRef == nil || src.Repository.SecretRef.Name != "repo-fleet" || auth.Username != "bot" || auth.Password != "argo-pass" {
		t.Errorf("secretRef %+v, auth user %q", src.Repository.SecretRef, auth.Username)
	}
	src, auth, err = read(argoNS, "public")
	if err != nil || src.Repository.SecretRef != nil || auth.Username != "" {
		t.Errorf("public repository: secretRef %+v, auth %+v, %v", src.Repository.SecretRef, auth, err)
	}
	_, _, err = read(other, "web")
	checkFailure(t, err, failure{conditions.AccessDeniedReason, true, "put the automation in namespace " + argoNS})
}
