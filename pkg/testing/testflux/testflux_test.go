package testflux_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testflux"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// The harness on a control plane without a node: source-controller fetches
// the commit from a git server on the host, kustomize-controller downloads
// the artifact from source-controller's advertised loopback address and
// applies it, and the Kustomization reports the commit applied. (Pods need
// a node: tests/node runs a Deployment through the same harness.)
func TestFluxAppliesACommitFromAGitServerOnTheHost(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	for _, ns := range []string{"flux-system", "apps"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	flux := testflux.Start(t, testflux.Options{Bin: filepath.Join(root, "bin", "flux-controllers"), Config: env.Config})

	git := testgit.New(t, testgit.Options{})
	clone := git.CreateRepo(t, "fleet", map[string]string{
		"dev/kustomization.yaml": "resources: [config.yaml]\n",
		"dev/config.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
	})
	commit := testgit.Git(t, clone.Dir, "rev-parse", "HEAD")
	commit = commit[:len(commit)-1]
	dyn := dynamic.NewForConfigOrDie(env.Config)
	if _, err := dyn.Resource(testflux.GitRepositories).Namespace("flux-system").Create(ctx,
		testflux.GitRepository("flux-system", "fleet", git.RepoURL("fleet"), "main", time.Minute), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(testflux.Kustomizations).Namespace("flux-system").Create(ctx,
		testflux.Kustomization("flux-system", "dev", "fleet", "./dev", "apps", time.Minute, 20*time.Second), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(90 * time.Second)
	for {
		ks, err := dyn.Resource(testflux.Kustomizations).Namespace("flux-system").Get(ctx, "dev", metav1.GetOptions{})
		if err == nil {
			if applied, _, _ := unstructured.NestedString(ks.Object, "status", "lastAppliedRevision"); applied == "main@sha1:"+commit {
				break
			}
		}
		if time.Now().After(deadline) {
			var status any
			if ks != nil {
				status = ks.Object["status"]
			}
			t.Fatalf("the Kustomization did not apply main@sha1:%s: %v %v\n%s", commit, err, status, flux.Diagnose())
		}
		time.Sleep(250 * time.Millisecond)
	}
	cm, err := kube.CoreV1().ConfigMaps("apps").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || cm.Data["color"] != "blue" {
		t.Fatalf("the applied ConfigMap: %v, %v", cm, err)
	}
}
