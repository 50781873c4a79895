// Package argocd proves that Argo CD itself reads the override files
// pkg/argocd writes: Argo CD's application controller and repo server
// (pkg/testing/testargocd) render Applications from a real git server,
// and a commit of .argocd-source-<app>.yaml changes the images Argo CD
// deploys. Argo CD and its CRDs come from `make argocd-tools`.
package argocd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/testing/testargocd"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/argochain"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, nil) }

const (
	podinfo = "ghcr.io/stefanprodan/podinfo"
	// Argo CD renders, syncs and reports within a few resyncs (two seconds
	// each); a cold repo server clones first.
	waitArgo = 2 * time.Minute
)

const chart = `apiVersion: v2
name: podinfo
version: 0.1.0
`

const values = `image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.5.0
`

// mirror is where the Helm application's existing override file points
// image.repository: still running it after our update proves the file was
// merged, not replaced.
const mirror = "registry.example.com/mirror/podinfo"

// valuesMirror is where the valuesObject application's own
// spec.source.helm.valuesObject points image.repository.
const valuesMirror = "registry.example.com/values/podinfo"

func TestArgoCDDeploysWhatTheOverrideFileSays(t *testing.T) {
	argo := testargocd.Start(t, env, testargocd.Options{})
	git := testgit.New(t, testgit.Options{Username: "argocd", Password: "s3cret"})
	// Each application's directory already holds an override file written
	// by hand, with a key image-toolkit does not manage.
	repo := git.CreateRepo(t, "apps", map[string]string{
		"kustomize/kustomization.yaml":                  "resources:\n- pod.yaml\n",
		"kustomize/pod.yaml":                            argochain.Pod(podinfo + ":6.5.0"),
		"kustomize/" + argocd.FileName("kustomize-app"): "kustomize:\n  namePrefix: staging-\n",
		"helm/Chart.yaml":                               chart,
		"helm/values.yaml":                              values,
		"helm/templates/pod.yaml":                       argochain.Pod(`"{{ .Values.image.repository }}:{{ .Values.image.tag }}"`),
		"helm/" + argocd.FileName("helm-app"):           "helm:\n  parameters:\n  - name: image.repository\n    value: " + mirror + "\n",
	})
	argo.AddRepository(t, "apps", git.RepoURL("apps"), "argocd", "s3cret")

	setPodinfo := func(f *argocd.File) (bool, error) {
		return f.SetKustomizeImage(argocd.KustomizeImage{Name: podinfo, NewTag: "6.5.1"})
	}
	for _, tc := range []struct {
		app, path, pod, sourceType string
		set                        func(*argocd.File) (bool, error)
		before, after              string
		// multi adds a second, ref-only source: Argo CD still merges the
		// file in the first source's path.
		multi bool
		// helm is the Application's own spec.source.helm.
		helm map[string]any
	}{
		{"kustomize-app", "kustomize", "staging-podinfo", "Kustomize", setPodinfo, podinfo + ":6.5.0", podinfo + ":6.5.1", false, nil},
		{"helm-app", "helm", "podinfo", "Helm", func(f *argocd.File) (bool, error) {
			return f.SetHelmParameter(argocd.HelmParameter{Name: "image.tag", Value: "6.5.1"})
		}, mirror + ":6.5.0", mirror + ":6.5.1", false, nil},
		{"multi-source-app", "kustomize", "podinfo", "Kustomize", setPodinfo, podinfo + ":6.5.0", podinfo + ":6.5.1", true, nil},
		// helm.valuesObject in the file is merged over the Application's
		// own valuesObject key by key: its repository stays, the tag is
		// the file's.
		{"helm-values-app", "helm", "podinfo", "Helm", func(f *argocd.File) (bool, error) {
			return f.SetHelmValue("image.tag", "6.5.1")
		}, valuesMirror + ":6.5.0", valuesMirror + ":6.5.1", false,
			map[string]any{"valuesObject": map[string]any{"image": map[string]any{"repository": valuesMirror}}}},
	} {
		t.Run(tc.app, func(t *testing.T) {
			head := testgit.Git(t, repo.Dir, "rev-parse", "HEAD")[:40]
			source := map[string]any{"repoURL": git.RepoURL("apps"), "path": tc.path, "targetRevision": "main"}
			if tc.helm != nil {
				source["helm"] = tc.helm
			}
			app := testargocd.Application(tc.app, namespace(t, env), source)
			if tc.multi {
				unstructured.RemoveNestedField(app.Object, "spec", "source")
				ref := map[string]any{"repoURL": git.RepoURL("apps"), "targetRevision": "main", "ref": "values"}
				if err := unstructured.SetNestedSlice(app.Object, []any{source, ref}, "spec", "sources"); err != nil {
					t.Fatal(err)
				}
			}
			create(t, app)
			runs := func(commit, image string) func(*unstructured.Unstructured) bool {
				return func(a *unstructured.Unstructured) bool {
					status, _, _ := unstructured.NestedString(a.Object, "status", "sync", "status")
					return testargocd.SyncRevision(a) == commit && status == "Synced" &&
						slices.Equal(testargocd.Images(a), []string{image})
				}
			}
			argo.WaitApplication(t, tc.app, waitArgo, "revision "+head+" running "+tc.before, runs(head, tc.before))

			file := filepath.Join(repo.Dir, tc.path, argocd.FileName(tc.app))
			data, err := os.ReadFile(file)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			f, err := argocd.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if changed, err := tc.set(f); err != nil || !changed {
				t.Fatalf("set: changed=%v, %v", changed, err)
			}
			override, err := f.Bytes()
			if err != nil {
				t.Fatal(err)
			}

			// Another application's file is not this one's: Argo CD renders
			// the new commit unchanged.
			other := repo.Commit("update another app", map[string]string{tc.path + "/" + argocd.FileName("another-app"): string(override)})
			repo.Push()
			argo.WaitApplication(t, tc.app, waitArgo, "revision "+other+" still running "+tc.before, runs(other, tc.before))

			commit := repo.Commit("update "+tc.app, map[string]string{tc.path + "/" + argocd.FileName(tc.app): string(override)})
			repo.Push()
			got := argo.WaitApplication(t, tc.app, waitArgo, "revision "+commit+" running "+tc.after, runs(commit, tc.after))
			// What the file held before is still applied.
			resources, _, _ := unstructured.NestedSlice(got.Object, "status", "resources")
			if len(resources) != 1 || resources[0].(map[string]any)["name"] != tc.pod {
				t.Errorf("resources = %v, want the one Pod %s", resources, tc.pod)
			}

			// pkg/argocd reads the status Argo CD wrote: the source, its
			// type, the file we committed and the image now running.
			appJSON, err := json.Marshal(got.Object)
			if err != nil {
				t.Fatal(err)
			}
			read, err := argocd.ReadApplication(appJSON)
			if err != nil {
				t.Fatal(err)
			}
			want := []argocd.Source{{RepoURL: git.RepoURL("apps"), Path: tc.path, TargetRevision: "main", Type: tc.sourceType}}
			if !reflect.DeepEqual(read.Sources, want) || !slices.Equal(read.Images, []string{tc.after}) ||
				read.OverrideFile(testargocd.Namespace, read.Sources[0]) != tc.path+"/"+argocd.FileName(tc.app) {
				t.Errorf("read %+v", read)
			}
		})
	}
}

// namespace is a fresh namespace with the default ServiceAccount that the
// control plane's admission wants for Pods and no controller creates here.
func namespace(t *testing.T, e *testenv.Env) string {
	t.Helper()
	ns := e.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if err := e.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
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
