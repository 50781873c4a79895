package writeback

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// The Plan is asked by static binaries and by every controller's events:
// importing it must link neither cgo nor Kubernetes. jobplan reads the API
// (Kubernetes types), but must not link the engine's libgit2 nor the
// template and YAML engines, which the image-reflector-controller's events
// do not need.
func TestImportsNeitherCgoNorKubernetes(t *testing.T) {
	deps := func(pkg string) string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return string(out)
	}
	for _, line := range strings.Split(strings.TrimSpace(deps(".")), "\n") {
		pkg, cgo, _ := strings.Cut(line, " ")
		if cgo != "0" || pkg == "runtime/cgo" {
			t.Errorf("writeback links %s, which has cgo files", pkg)
		}
		if strings.Contains(pkg, "k8s.io/") {
			t.Errorf("writeback imports %s", pkg)
		}
	}
	jp := deps("./jobplan")
	for _, forbidden := range []string{"git2go", "kyaml", "sprig", "/pkg/setters", "/pkg/git "} {
		if strings.Contains(jp, forbidden) {
			t.Errorf("jobplan links %s", forbidden)
		}
	}
}

func valid() Plan {
	return Plan{
		Repository: "https://git.example.com/fleet",
		Checkout:   Ref{Branch: "main"},
		Update:     Update{Images: map[string]meta.ImageRef{"ns:app": {Name: "reg/app", Tag: "1.2.0"}}},
		Target:     Target{Branch: "main"},
	}
}

func argo(file, typ string, images ...ArgoCDImage) func(*Plan) {
	return func(p *Plan) {
		p.Path = "apps"
		p.Update.ArgoCD = append(p.Update.ArgoCD, ArgoCDOverride{File: file, Type: typ, Images: images})
	}
}

func TestValidateRefusesPlansTheEngineCannotRun(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Plan)
		err    string
	}{
		{"valid", func(*Plan) {}, ""},
		{"refspec only", func(p *Plan) { p.Target = Target{Extra: []RefUpdate{{Dst: "refs/for/main"}}} }, ""},
		{"pull request", func(p *Plan) { p.Target = Target{PullRequest: &PullRequest{Base: "main"}} }, ""},
		{"container", func(p *Plan) { p.Update = Update{Container: &Container{Image: "tool:1"}} }, ""},
		{"discovery", func(p *Plan) { p.Update = Update{Discover: &Discover{Include: []string{"reg/*"}}} }, ""},
		{"no repository", func(p *Plan) { p.Repository = "" }, "no repository"},
		{"unclean path", func(p *Plan) { p.Path = "../x" }, "not clean and relative"},
		{"nowhere", func(p *Plan) { p.Target = Target{} }, "nothing to push to"},
		{"bad branch", func(p *Plan) { p.Target.Branch = "a..b" }, "not a valid branch name"},
		{"extra outside refs/", func(p *Plan) { p.Target.Extra = []RefUpdate{{Dst: "main"}} }, "not a valid ref name"},
		{"request and branch", func(p *Plan) { p.Target.PullRequest = &PullRequest{Base: "main"} }, "its own head branch"},
		{"bad base", func(p *Plan) { p.Target = Target{PullRequest: &PullRequest{Base: "a b"}} }, "base \"a b\""},
		{"bad head", func(p *Plan) { p.Target = Target{PullRequest: &PullRequest{Base: "main", Head: "x:y"}} }, "head \"x:y\""},
		{"no image", func(p *Plan) { p.Update = Update{} }, "no image to set"},
		{"container and images", func(p *Plan) { p.Update.Container = &Container{Image: "tool:1"} }, "instead of the setters"},
		{"bad pattern", func(p *Plan) { p.Update.Discover = &Discover{Exclude: []string{"["}} }, "discover pattern"},
		{"override file", argo("apps/web/.argocd-source-web.yaml", "Kustomize", ArgoCDImage{Policy: "ns:app"}), ""},
		{"override file outside the path", argo("other/.argocd-source-web.yaml", "Kustomize", ArgoCDImage{Policy: "ns:app"}), "not under the update path"},
		{"override file escaping", argo("apps/../../.argocd-source-web.yaml", "Kustomize", ArgoCDImage{Policy: "ns:app"}), "not a clean relative path"},
		{"not an override file", argo("apps/web/values.yaml", "Helm", ArgoCDImage{Policy: "ns:app"}), "not an Argo CD override file"},
		{"directory source", argo("apps/web/.argocd-source-web.yaml", "Directory", ArgoCDImage{Policy: "ns:app"}), "has no image overrides"},
		{"override of an unknown policy", argo("apps/web/.argocd-source-web.yaml", "Helm", ArgoCDImage{Policy: "ns:gone"}), "no image for"},
		{"two images on one Helm parameter", func(p *Plan) {
			p.Update.Images["ns:db"] = meta.ImageRef{Name: "reg/db", Tag: "1"}
			argo("apps/web/.argocd-source-web.yaml", "Helm", ArgoCDImage{Policy: "ns:app"}, ArgoCDImage{Policy: "ns:db", ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageName: "db.repository"}})(p)
		}, "both set Helm parameter image.tag"},
	}
	for _, tt := range tests {
		p := valid()
		tt.mutate(&p)
		err := p.Validate()
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid)):
			t.Errorf("%s: err = %v, want ErrInvalid with %q", tt.name, err, tt.err)
		}
	}
}

func TestTargetSaysWhereThePlanPushes(t *testing.T) {
	tests := []struct {
		target Target
		refs   []string
		text   string
	}{
		{Target{Branch: "main"}, []string{"refs/heads/main"}, "main"},
		{Target{Branch: "auto", Force: true, Extra: []RefUpdate{{Dst: "refs/for/main"}}}, []string{"refs/heads/auto", "refs/for/main"}, "auto and refs/for/main"},
		{Target{Extra: []RefUpdate{{Dst: "refs/heads/x"}}}, []string{"refs/heads/x"}, "refs/heads/x"},
		{Target{PullRequest: &PullRequest{Base: "main", Head: "image-toolkit/ns-job"}}, []string{"refs/heads/image-toolkit/ns-job"}, "a pull request into main"},
		{Target{PullRequest: &PullRequest{Base: "main", HeadTemplate: "x-{{ .AutomationObject.Name }}"}}, nil, "a pull request into main"},
	}
	for _, tt := range tests {
		if got := tt.target.Refs(); !slices.Equal(got, tt.refs) {
			t.Errorf("%+v.Refs() = %q, want %q", tt.target, got, tt.refs)
		}
		if got := tt.target.String(); got != tt.text {
			t.Errorf("%+v.String() = %q, want %q", tt.target, got, tt.text)
		}
	}
}

func TestParseRefspecNamesTheRefItSets(t *testing.T) {
	tests := []struct {
		spec, checkout string
		want           RefUpdate
		err            string
	}{
		{"+HEAD:refs/for/main", "main", RefUpdate{Dst: "refs/for/main", Force: true}, ""},
		{"main:auto", "main", RefUpdate{Dst: "refs/heads/auto"}, ""},
		{"refs/heads/main:auto", "main", RefUpdate{Dst: "refs/heads/auto"}, ""},
		{"@:x", "", RefUpdate{Dst: "refs/heads/x"}, ""},
		{"HEAD", "main", RefUpdate{}, "want [+]SOURCE:DESTINATION"},
		{"HEAD:", "main", RefUpdate{}, "want [+]SOURCE:DESTINATION"},
		{"refs/heads/dev:x", "main", RefUpdate{}, "the source must be HEAD or the checkout branch"},
		{":x", "", RefUpdate{}, "the source must be HEAD when no branch is checked out"},
		{"HEAD:a..b", "main", RefUpdate{}, "not a valid ref name"},
	}
	for _, tt := range tests {
		got, err := ParseRefspec(tt.spec, tt.checkout)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseRefspec(%q) = %v, want ErrInvalid with %q", tt.spec, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseRefspec(%q) = %+v, %v; want %+v", tt.spec, got, err, tt.want)
		}
	}
}

// A push spec's branch and refspec say where a push goes, as Flux's do.
func TestPushTargetFollowsFluxsPushSpec(t *testing.T) {
	dst := func(d string, force bool) *RefUpdate { return &RefUpdate{Dst: d, Force: force} }
	tests := []struct {
		name    string
		branch  string
		refspec *RefUpdate
		want    Target
	}{
		{"the checkout branch", "", nil, Target{Branch: "main"}},
		{"another branch is forced", "auto", nil, Target{Branch: "auto", Force: true}},
		{"the same branch is not forced", "main", nil, Target{Branch: "main"}},
		{"a refspec alone", "", dst("refs/for/main", true), Target{Extra: []RefUpdate{{Dst: "refs/for/main", Force: true}}}},
		{"a branch and a refspec", "main", dst("refs/heads/auto", false), Target{Branch: "main", Extra: []RefUpdate{{Dst: "refs/heads/auto"}}}},
		{"a refspec to the branch is pushed once", "main", dst("refs/heads/main", false), Target{Branch: "main"}},
	}
	for _, tt := range tests {
		got := PushTarget("main", tt.branch, tt.refspec)
		if got.Branch != tt.want.Branch || got.Force != tt.want.Force || !slices.Equal(got.Extra, tt.want.Extra) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// Plans share a GroupKey when one checkout, commit and push can carry them
// all: what each keeps its own (path, images, message) is not in it; a
// pull request or a container shares nothing.
func TestGroupKey(t *testing.T) {
	base := func() Plan {
		return Plan{Repository: "https://git.example.com/org/mono.git", Checkout: Ref{Branch: "main"},
			Target: Target{Branch: "main"}, Commit: Commit{AuthorName: "bot", AuthorEmail: "bot@example.com"}}
	}
	key := base()
	for _, tc := range []struct {
		name   string
		mutate func(*Plan)
		same   bool
	}{
		{"another path, images, template and automation", func(p *Plan) {
			p.Path, p.Commit.MessageTemplate, p.Commit.Automation = "apps/a", "x", Object{Namespace: "n", Name: "a"}
		}, true},
		{"another resume", func(p *Plan) { p.Resume = "abc" }, true},
		{"another repository", func(p *Plan) { p.Repository = "https://git.example.com/org/other.git" }, false},
		{"another checkout", func(p *Plan) { p.Checkout.Branch = "dev" }, false},
		{"another push branch", func(p *Plan) { p.Target.Branch = "auto" }, false},
		{"forced", func(p *Plan) { p.Target.Force = true }, false},
		{"an extra ref", func(p *Plan) { p.Target.Extra = []RefUpdate{{Dst: "refs/heads/x"}} }, false},
		{"another author", func(p *Plan) { p.Commit.AuthorEmail = "me@example.com" }, false},
	} {
		p := base()
		tc.mutate(&p)
		if got := p.GroupKey() == key.GroupKey(); got != tc.same {
			t.Errorf("%s: same key %v, want %v", tc.name, got, tc.same)
		}
	}
	pr := base()
	pr.Target = Target{PullRequest: &PullRequest{Base: "main"}}
	container := base()
	container.Update.Container = &Container{Image: "x"}
	if pr.GroupKey() != "" || container.GroupKey() != "" {
		t.Error("a pull request or a container has a group key")
	}
}
