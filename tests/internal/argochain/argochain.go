// Package argochain runs image-toolkit's chain for Argo CD Applications on
// loopback: a control plane, a registry with podinfo, a git server (basic
// auth) whose repository apps holds the Applications' files, Argo CD's
// repository Secret for it in Argo CD's namespace, and the three
// controllers, the automation controller told where Argo CD runs. With
// Options.ArgoCD, Argo CD's own application controller and repo server
// (pkg/testing/testargocd) run against the same control plane; without,
// Argo CD's Application CRD of the pinned module is installed and each
// Application's status is written as Argo CD writes it once synced. The
// tests of tests/argocd and the benchmarks of tests/bench share it.
package argochain

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
	"toolkit.dev/image-toolkit/pkg/testing/testargocd"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// Namespace is Argo CD's, where the Applications, the image objects and
// the automation live.
const Namespace = testargocd.Namespace

// FirstTag is the tag the registry holds at start, which the policy picks;
// the Applications run RunningTag, an older one, so the automation has
// something to write.
const (
	FirstTag   = "6.5.0"
	RunningTag = "6.4.0"
)

// Options say what runs.
type Options struct {
	// ArgoCD runs Argo CD's own controllers (make argocd-tools; the test
	// is skipped without them).
	ArgoCD bool
	// Apps are the Applications' paths in the repository, each a
	// Kustomize application of one Pod running podinfo:RunningTag.
	Apps []string
	// Revision is the Applications' targetRevision; main when empty.
	Revision string
}

// Chain is a running chain.
type Chain struct {
	Cluster *localenv.Cluster
	// Argo is nil without Options.ArgoCD.
	Argo *testargocd.ArgoCD
	// Image is the registry's podinfo repository, host/stefanprodan/podinfo.
	Image string
	Git   *testgit.Server
	img   v1.Image
	dest  string
	rev   string
}

// Start starts the chain, stopped when t ends.
func Start(t testing.TB, o Options) *Chain {
	t.Helper()
	cluster, bin := localenv.StartTest(t)
	c := &Chain{Cluster: cluster, rev: o.Revision}
	if c.rev == "" {
		c.rev = "main"
	}
	if o.ArgoCD {
		c.Argo = testargocd.Start(t, cluster.Env, testargocd.Options{})
	} else {
		if _, err := envtest.InstallCRDs(cluster.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true,
			Paths: []string{filepath.Join(cluster.Root, "pkg", "gitsource", "testdata", "crds", "argoproj.io_applications.yaml")}}); err != nil {
			t.Fatal(err)
		}
		c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}})
	}
	// Argo CD deploys into a namespace whose Pods the control plane's
	// admission accepts: one with a default ServiceAccount.
	c.dest = cluster.Namespace(t)
	c.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: c.dest}})

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	c.Image = strings.TrimPrefix(reg.URL, "http://") + "/stefanprodan/podinfo"
	var err error
	if c.img, err = random.Image(256, 1); err != nil {
		t.Fatal(err)
	}
	c.Push(t, FirstTag)

	c.Git = testgit.New(t, testgit.Options{Username: "argocd", Password: "s3cret"})
	files := map[string]string{}
	for _, p := range o.Apps {
		files[p+"/kustomization.yaml"] = "resources:\n- pod.yaml\n"
		files[p+"/pod.yaml"] = Pod(c.Image + ":" + RunningTag)
	}
	c.Git.CreateRepo(t, "apps", files)
	// The credentials both Argo CD and the automation use.
	c.create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "apps", Namespace: Namespace,
			Labels: map[string]string{"argocd.argoproj.io/secret-type": "repository"}},
		StringData: map[string]string{"type": "git", "url": c.Git.RepoURL("apps"), "username": "argocd", "password": "s3cret"},
	})

	for _, n := range localenv.Controllers {
		var args []string
		if n == "image-automation-controller" {
			args = []string{"--argocd-namespace=" + Namespace}
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

// Pod is a bare Pod running image: the control plane runs no controllers
// that would make Pods of a Deployment, and Argo CD reads the images it
// reports in status.summary.images from Pods.
func Pod(image string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: podinfo
spec:
  containers:
  - name: podinfo
    image: ` + image + "\n"
}

func (c *Chain) create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := c.Cluster.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// Push pushes podinfo under tag.
func (c *Chain) Push(t testing.TB, tag string) {
	t.Helper()
	ref, err := name.NewTag(c.Image+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, c.img, remote.WithContext(context.Background())); err != nil {
		t.Fatal(err)
	}
}

// Application makes an Application of the repository's path at
// Options.Revision, with labels; without Argo CD its status is what Argo CD writes once synced.
func (c *Chain) Application(t testing.TB, name, path string, labels map[string]string) {
	t.Helper()
	c.ApplicationAt(t, name, path, c.rev, labels)
}

// ApplicationAt is Application on another targetRevision.
func (c *Chain) ApplicationAt(t testing.TB, name, path, rev string, labels map[string]string) {
	t.Helper()
	app := testargocd.Application(name, c.dest, map[string]any{"repoURL": c.Git.RepoURL("apps"), "path": path, "targetRevision": rev})
	app.SetLabels(labels)
	if c.Argo == nil {
		app.Object["status"] = map[string]any{"sourceType": "Kustomize", "summary": map[string]any{"images": []any{c.Image + ":" + RunningTag}},
			"sync": map[string]any{"status": "Synced", "revision": c.Head(t)}}
	}
	c.create(t, app)
}

// Follow makes the ImageRepository and ImagePolicy of podinfo and the
// automation (strategy ArgoCD) of source: spec.sourceRef to an
// Application, or spec.applicationSelector.
func (c *Chain) Follow(t testing.TB, sourceRef *imagev1.CrossNamespaceSourceReference, selector *metav1.LabelSelector) {
	t.Helper()
	c.create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: Namespace},
		Spec: imagev1.ImageRepositorySpec{Image: c.Image, Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	c.create(t, &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: Namespace},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "podinfo"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=6.0.0"}}}})
	c.create(t, &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: Namespace},
		Spec: imagev1.ImageUpdateAutomationSpec{
			SourceRef:           sourceRef,
			ApplicationSelector: selector,
			Interval:            metav1.Duration{Duration: time.Hour},
			GitSpec: imagev1.GitSpec{Commit: updatev1.CommitSpec{
				Author: updatev1.CommitUser{Name: "imagebot", Email: "imagebot@example.com"}}},
			Update: &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategyArgoCD},
		}})
}

// Head is main's commit on the server.
func (c *Chain) Head(t testing.TB) string {
	t.Helper()
	return c.HeadOf(t, "main")
}

// HeadOf is branch's commit on the server.
func (c *Chain) HeadOf(t testing.TB, branch string) string {
	t.Helper()
	return strings.TrimSpace(testgit.Git(t, c.Git.BarePath("apps"), "rev-parse", branch))
}

// OverrideAt reports whether commit's override file of app (in path) sets
// podinfo to tag, or why not.
func (c *Chain) OverrideAt(t testing.TB, commit, app, path, tag string) error {
	t.Helper()
	file := path + "/" + argocd.FileName(app)
	if strings.TrimSpace(testgit.Git(t, c.Git.BarePath("apps"), "ls-tree", "--name-only", commit, file)) == "" {
		return fmt.Errorf("%s has no %s", commit, file)
	}
	f, err := argocd.Parse([]byte(testgit.Git(t, c.Git.BarePath("apps"), "show", commit+":"+file)))
	if err != nil {
		return err
	}
	images, err := f.KustomizeImages()
	if err != nil {
		return err
	}
	want := c.Image + ":" + tag
	if !slices.ContainsFunc(images, func(i argocd.KustomizeImage) bool { return i.String() == want }) {
		return fmt.Errorf("%s at %s sets %v, want %s", file, commit, images, want)
	}
	return nil
}

// OverrideOn waits for main to hold an override file of app that sets tag,
// and returns that commit.
func (c *Chain) OverrideOn(t testing.TB, app, path, tag string, timeout time.Duration) string {
	t.Helper()
	return c.OverrideOnBranch(t, "main", app, path, tag, timeout)
}

// OverrideOnBranch is OverrideOn for another branch.
func (c *Chain) OverrideOnBranch(t testing.TB, branch, app, path, tag string, timeout time.Duration) string {
	t.Helper()
	var commit string
	testenv.Eventually(t, timeout, func() (bool, error) {
		commit = c.HeadOf(t, branch)
		err := c.OverrideAt(t, commit, app, path, tag)
		return err == nil, err
	})
	return commit
}

// Scan asks the ImageRepository to scan now, as a registry webhook would.
func (c *Chain) Scan(t testing.TB) {
	t.Helper()
	p := client.RawPatch("application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, time.Now().Format(time.RFC3339Nano))))
	repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: Namespace}}
	if err := c.Cluster.Client.Patch(context.Background(), repo, p); err != nil {
		t.Fatal(err)
	}
}

// Running is a WaitApplication condition: Argo CD synced commit and runs
// podinfo at tag.
func (c *Chain) Running(commit, tag string) func(*unstructured.Unstructured) bool {
	return func(a *unstructured.Unstructured) bool {
		status, _, _ := unstructured.NestedString(a.Object, "status", "sync", "status")
		return (commit == "" || testargocd.SyncRevision(a) == commit) && status == "Synced" &&
			slices.Equal(testargocd.Images(a), []string{c.Image + ":" + tag})
	}
}
