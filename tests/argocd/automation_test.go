package argocd

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
	"toolkit.dev/image-toolkit/tests/testkit/testargocd"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

// automationChain is image-toolkit's chain for an Argo CD Application: a
// control plane, a registry with podinfo, a git server (basic auth) whose
// repository apps holds a Kustomize application, Argo CD's repository
// Secret for it in Argo CD's namespace, and the three controllers, the
// automation controller told where Argo CD runs.
type automationChain struct {
	cluster *localenv.Cluster
	argo    *testargocd.ArgoCD // nil without Argo CD
	image   string             // registry/stefanprodan/podinfo
	img     v1.Image
	git     *testgit.Server
	repo    *testgit.Clone
}

func startAutomationChain(t *testing.T, withArgo bool) *automationChain {
	t.Helper()
	cluster, bin := localenv.StartTest(t)
	c := &automationChain{cluster: cluster}
	if withArgo {
		// Argo CD's own CRDs (bin/argocd/manifests/crds) and its namespace.
		c.argo = testargocd.Start(t, cluster.Env, testargocd.Options{})
	} else {
		// Argo CD's Application CRD of the pinned module, as pkg/gitsource's
		// tests install it; Argo CD's namespace made by hand.
		if _, err := envtest.InstallCRDs(cluster.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true,
			Paths: []string{filepath.Join(cluster.Root, "pkg", "gitsource", "testdata", "crds", "argoproj.io_applications.yaml")}}); err != nil {
			t.Fatal(err)
		}
		apply(t, cluster.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testargocd.Namespace}})
	}

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	c.image = strings.TrimPrefix(reg.URL, "http://") + "/stefanprodan/podinfo"
	var err error
	if c.img, err = random.Image(256, 1); err != nil {
		t.Fatal(err)
	}
	c.push(t, "6.5.0")

	c.git = testgit.New(t, testgit.Options{Username: "argocd", Password: "s3cret"})
	c.repo = c.git.CreateRepo(t, "apps", map[string]string{
		"kustomize/kustomization.yaml": "resources:\n- pod.yaml\n",
		"kustomize/pod.yaml":           pod(c.image + ":6.5.0"),
	})
	// The credentials both Argo CD and the automation use.
	apply(t, cluster.Client, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "apps", Namespace: testargocd.Namespace,
			Labels: map[string]string{"argocd.argoproj.io/secret-type": "repository"}},
		StringData: map[string]string{"type": "git", "url": c.git.RepoURL("apps"), "username": "argocd", "password": "s3cret"},
	})

	for _, n := range localenv.Controllers {
		var args []string
		if n == "image-automation-controller" {
			args = []string{"--argocd-namespace=" + testargocd.Namespace}
		}
		p, err := cluster.StartController(context.Background(), bin, n, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s log:\n%s", n, p.Log())
			}
			_ = p.Stop(10 * time.Second)
		})
	}
	return c
}

func (c *automationChain) push(t *testing.T, tag string) {
	t.Helper()
	ref, err := name.NewTag(c.image+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, c.img, remote.WithContext(context.Background())); err != nil {
		t.Fatal(err)
	}
}

// follow makes the Application podinfo, and the ImageRepository, the
// ImagePolicy and the automation (strategy ArgoCD) that keep it up to
// date, all in Argo CD's namespace. Without Argo CD the Application's
// status is written as Argo CD writes it once it has synced.
func (c *automationChain) follow(t *testing.T) {
	t.Helper()
	ns := testargocd.Namespace
	app := testargocd.Application("podinfo", namespace(t, c.cluster.Env),
		map[string]any{"repoURL": c.git.RepoURL("apps"), "path": "kustomize", "targetRevision": "main"})
	if c.argo == nil {
		app.Object["status"] = map[string]any{"sourceType": "Kustomize", "summary": map[string]any{"images": []any{c.image + ":6.5.0"}},
			"sync": map[string]any{"status": "Synced", "revision": c.head(t)}}
	}
	apply(t, c.cluster.Client, app)
	apply(t, c.cluster.Client, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: imagev1.ImageRepositorySpec{Image: c.image, Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	apply(t, c.cluster.Client, &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=6.0.0"}}}})
	apply(t, c.cluster.Client, &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: imagev1.ImageUpdateAutomationSpec{
			SourceRef: &imagev1.CrossNamespaceSourceReference{Kind: "Application", Name: "podinfo"},
			Interval:  metav1.Duration{Duration: time.Hour},
			GitSpec: imagev1.GitSpec{Commit: updatev1.CommitSpec{
				Author: updatev1.CommitUser{Name: "imagebot", Email: "imagebot@example.com"}}},
			Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD},
		}})
}

func (c *automationChain) head(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(testgit.Git(t, c.git.BarePath("apps"), "rev-parse", "main"))
}

// overrideOn waits for a commit on main whose override file for podinfo
// sets tag, and returns it.
func (c *automationChain) overrideOn(t *testing.T, tag string, timeout time.Duration) string {
	t.Helper()
	file := "kustomize/" + argocd.FileName("podinfo")
	want := c.image + ":" + tag
	var commit string
	testenv.Eventually(t, timeout, func() (bool, error) {
		commit = c.head(t)
		out := testgit.Git(t, c.git.BarePath("apps"), "ls-tree", "--name-only", commit, file)
		if strings.TrimSpace(out) == "" {
			return false, fmt.Errorf("main (%s) has no %s", commit, file)
		}
		data := testgit.Git(t, c.git.BarePath("apps"), "show", commit+":"+file)
		f, err := argocd.Parse([]byte(data))
		if err != nil {
			return false, err
		}
		images, err := f.KustomizeImages()
		if err != nil {
			return false, err
		}
		if !slices.ContainsFunc(images, func(i argocd.KustomizeImage) bool { return i.String() == want }) {
			return false, fmt.Errorf("%s at %s sets %v, want %s", file, commit, images, want)
		}
		return true, nil
	})
	return commit
}

// scan asks the ImageRepository to scan now, as a registry webhook would.
func (c *automationChain) scan(t *testing.T) {
	t.Helper()
	p := client.RawPatch("application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))))
	repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: testargocd.Namespace}}
	if err := c.cluster.Client.Patch(context.Background(), repo, p); err != nil {
		t.Fatal(err)
	}
}

// The short version, without Argo CD (part of make test): an automation
// over an Application, whose status is written as Argo CD writes it,
// commits Argo CD's override file with Argo CD's repository credentials,
// and a pushed tag becomes a second commit of it.
func TestAutomationCommitsTheApplicationsOverrideFile(t *testing.T) {
	c := startAutomationChain(t, false)
	c.follow(t)
	first := c.overrideOn(t, "6.5.0", time.Minute)
	c.push(t, "6.5.1")
	c.scan(t)
	second := c.overrideOn(t, "6.5.1", time.Minute)
	if first == second {
		t.Fatal("no new commit for the new tag")
	}
	if parent := strings.TrimSpace(testgit.Git(t, c.git.BarePath("apps"), "rev-parse", second+"^")); parent != first {
		t.Errorf("the tag's commit %s follows %s, not the first override commit %s", second, parent, first)
	}
}

// The whole way with Argo CD's own application controller and repo server
// (make test-integrations): a tag pushed to the registry becomes our
// override commit, which Argo CD syncs: the Application's
// status.sync.revision is our commit and status.summary.images shows the
// new tag.
func TestArgoCDDeploysTheAutomationsCommit(t *testing.T) {
	c := startAutomationChain(t, true)
	c.follow(t)
	head := c.head(t)
	c.argo.WaitApplication(t, "podinfo", waitArgo, "revision "+head+" running 6.5.0", func(a *unstructured.Unstructured) bool {
		return slices.Equal(testargocd.Images(a), []string{c.image + ":6.5.0"})
	})
	c.overrideOn(t, "6.5.0", time.Minute)
	c.push(t, "6.5.1")
	c.scan(t)
	commit := c.overrideOn(t, "6.5.1", time.Minute)
	c.argo.WaitApplication(t, "podinfo", waitArgo, "revision "+commit+" running 6.5.1", func(a *unstructured.Unstructured) bool {
		status, _, _ := unstructured.NestedString(a.Object, "status", "sync", "status")
		return testargocd.SyncRevision(a) == commit && status == "Synced" && slices.Equal(testargocd.Images(a), []string{c.image + ":6.5.1"})
	})
}

func apply(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}
