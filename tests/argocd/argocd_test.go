// Package argocd proves that Argo CD itself reads the override files
// pkg/argocd writes: Argo CD's application controller and repo server
// (tests/testkit/testargocd) render Applications from a real git server,
// and a commit of .argocd-source-<app>.yaml changes the images Argo CD
// deploys. Argo CD and its CRDs come from `make argocd-tools`.
package argocd

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/tests/testkit/testargocd"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, nil) }

const (
	podinfo = "ghcr.io/stefanprodan/podinfo"
	// Argo CD renders, syncs and reports within a few resyncs (two seconds
	// each); a cold repo server clones first.
	waitArgo = 2 * time.Minute
)

// pod is a bare Pod: the test control plane runs no controllers that would
// make Pods of a Deployment, and Argo CD reads the images it reports in
// status.summary.images from Pods.
const pod = `apiVersion: v1
kind: Pod
metadata:
  name: podinfo
spec:
  containers:
  - name: podinfo
    image: ghcr.io/stefanprodan/podinfo:6.5.0
`

const chart = `apiVersion: v2
name: podinfo
version: 0.1.0
`

const values = `image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.5.0
`

const chartPod = `apiVersion: v1
kind: Pod
metadata:
  name: podinfo
spec:
  containers:
  - name: podinfo
    image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
`

func TestArgoCDDeploysWhatTheOverrideFileSays(t *testing.T) {
	argo := testargocd.Start(t, env, testargocd.Options{})
	git := testgit.New(t, testgit.Options{Username: "argocd", Password: "s3cret"})
	repo := git.CreateRepo(t, "apps", map[string]string{
		"kustomize/kustomization.yaml": "resources:\n- pod.yaml\n",
		"kustomize/pod.yaml":           pod,
		"helm/Chart.yaml":              chart,
		"helm/values.yaml":             values,
		"helm/templates/pod.yaml":      chartPod,
	})
	argo.AddRepository(t, "apps", git.RepoURL("apps"), "argocd", "s3cret")

	for _, tc := range []struct {
		app, path string
		set       func(*argocd.File) (bool, error)
	}{
		{"kustomize-app", "kustomize", func(f *argocd.File) (bool, error) {
			return f.SetKustomizeImage(argocd.KustomizeImage{Name: podinfo, NewTag: "6.5.1"})
		}},
		{"helm-app", "helm", func(f *argocd.File) (bool, error) {
			return f.SetHelmParameter(argocd.HelmParameter{Name: "image.tag", Value: "6.5.1"})
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			head := testgit.Git(t, repo.Dir, "rev-parse", "HEAD")[:40]
			ns := namespace(t)
			app := testargocd.Application(tc.app, ns, map[string]any{
				"repoURL": git.RepoURL("apps"), "path": tc.path, "targetRevision": "main",
			})
			create(t, app)
			argo.WaitApplication(t, tc.app, waitArgo, "revision "+head+" running "+podinfo+":6.5.0",
				func(a *unstructured.Unstructured) bool {
					return testargocd.SyncRevision(a) == head && slices.Contains(testargocd.Images(a), podinfo+":6.5.0")
				})

			f, err := argocd.Parse(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tc.set(f); err != nil {
				t.Fatal(err)
			}
			override, err := f.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			// Another application's file is not this one's: Argo CD renders
			// the new commit unchanged.
			other := repo.Commit("update another app", map[string]string{tc.path + "/" + argocd.FileName("another-app"): string(override)})
			repo.Push()
			got := argo.WaitApplication(t, tc.app, waitArgo, "revision "+other+" synced",
				func(a *unstructured.Unstructured) bool {
					status, _, _ := unstructured.NestedString(a.Object, "status", "sync", "status")
					return testargocd.SyncRevision(a) == other && status == "Synced"
				})
			if images := testargocd.Images(got); !slices.Equal(images, []string{podinfo + ":6.5.0"}) {
				t.Fatalf("another application's override file changed this one: %v", images)
			}

			commit := repo.Commit("update "+tc.app, map[string]string{tc.path + "/" + argocd.FileName(tc.app): string(override)})
			repo.Push()

			got = argo.WaitApplication(t, tc.app, waitArgo, "revision "+commit+" running "+podinfo+":6.5.1",
				func(a *unstructured.Unstructured) bool {
					return testargocd.SyncRevision(a) == commit && slices.Contains(testargocd.Images(a), podinfo+":6.5.1")
				})
			if images := testargocd.Images(got); slices.Contains(images, podinfo+":6.5.0") {
				t.Errorf("the old image still runs: %v", images)
			}
		})
	}
}

// namespace is a fresh namespace with the default ServiceAccount that the
// control plane's admission wants for Pods and no controller creates here.
func namespace(t *testing.T) string {
	t.Helper()
	ns := env.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if err := env.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return ns
}

func create(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
}
