package node

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/testing/testflux"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/cluster"
)

// fluxTimeout is the Kustomization's spec.timeout: how long it waits for
// what it applied to become ready before it reports HealthCheckFailed.
const fluxTimeout = 30 * time.Second

// appDeployment is the Deployment the dev path holds, running image in a
// restricted namespace. minReadySeconds is what makes a container that
// exits at once a failed rollout: without it (and without a readiness
// probe) its pod counts as available the moment it starts, the rollout
// completes, and Flux's health check passes (this test saw it).
// progressDeadlineSeconds is short so that such a rollout is Failed, not
// Progressing, well within fluxTimeout.
func appDeployment(image string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 1
  minReadySeconds: 3
  progressDeadlineSeconds: 15
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: ` + image + `
        imagePullPolicy: Never
        command: ["/bin/sh", "-c", "exec sleep 3600"]
        securityContext:
          allowPrivilegeEscalation: false
          runAsNonRoot: true
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
`
}

// brokenDeployment is appDeployment with the crash image, whose entrypoint
// exits at once.
func brokenDeployment(image string) string {
	return strings.Replace(appDeployment(image), `        command: ["/bin/sh", "-c", "exec sleep 3600"]`+"\n", "", 1)
}

// Real Flux (source-controller and kustomize-controller from their pinned
// release modules, on the host) applies a path of a git server on the host
// to the real node, and pkg/health reads the Kustomization as they write
// it: a commit whose Deployment rolls out is Healthy at that commit; a
// commit of an image whose container exits at once is Degraded at that
// commit, with Flux's own HealthCheckFailed.
func TestFluxKustomizationHealthFollowsTheRollout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		fluxNS = "flux-system"
		appNS  = "apps-dev"
		ksName = "apps-dev"
	)
	if _, err := cl.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxNS}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	restrictedNamespace(t, appNS)
	flux := testflux.Start(t, testflux.Options{Bin: filepath.Join(cl.Root(), "bin", "flux-controllers"),
		Config: cl.RESTConfig(), Namespace: fluxNS})
	dyn, err := dynamic.NewForConfig(cl.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ksGVR := testflux.Kustomizations

	const crashRef = "image-toolkit.test/crash:1"
	tarball := filepath.Join(t.TempDir(), "crash.tar")
	if err := cluster.BuildGoImage(ctx, cl.Root(), "toolkit.dev/image-toolkit/tests/node/crash", crashRef, tarball, cluster.ImageUID); err != nil {
		t.Fatal(err)
	}
	if err := cl.ImportImages(ctx, tarball); err != nil {
		t.Fatal(err)
	}

	git := testgit.New(t, testgit.Options{})
	clone := git.CreateRepo(t, "fleet", map[string]string{
		"apps/dev/kustomization.yaml": "resources: [deployment.yaml]\n",
		"apps/dev/deployment.yaml":    appDeployment(cluster.BusyboxImage),
	})
	good := strings.TrimSpace(testgit.Git(t, clone.Dir, "rev-parse", "HEAD"))
	start := time.Now()
	for gvr, u := range map[schema.GroupVersionResource]*unstructured.Unstructured{
		testflux.GitRepositories: testflux.GitRepository(fluxNS, "fleet", git.RepoURL("fleet"), "main", 2*time.Second),
		ksGVR:                    testflux.Kustomization(fluxNS, ksName, "fleet", "./apps/dev", appNS, time.Minute, fluxTimeout),
	} {
		if _, err := dyn.Resource(gvr).Namespace(fluxNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	until := func(timeout time.Duration, want health.State, commit string) health.Health {
		t.Helper()
		return waitKustomization(ctx, t, dyn, flux, fluxNS, ksName, timeout, want, commit)
	}

	h := until(90*time.Second, health.Healthy, good)
	fmt.Printf("FIGURES flux: Kustomization Healthy at the first commit %s after the GitRepository was created\n", time.Since(start).Round(100*time.Millisecond))
	if want := "main@sha1:" + good; h.Revision != want {
		t.Errorf("health.Of revision %q, want %q", h.Revision, want)
	}
	// Soak counts from Since: the controller's own transition time, in
	// whole seconds, within this run.
	if h.Since.Before(start.Truncate(time.Second)) || h.Since.After(time.Now()) {
		t.Errorf("health.Of since %s, want between the GitRepository's creation %s and now", h.Since, start)
	}
	ks, err := dyn.Resource(ksGVR).Namespace(fluxNS).Get(ctx, ksName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(ks.Object, "status", "lastAppliedRevision"); got != "main@sha1:"+good {
		t.Errorf("lastAppliedRevision %q, want main@sha1:%s", got, good)
	}
	// The health is the node's: the Deployment really rolled out.
	d, err := cl.Client().AppsV1().Deployments(appNS).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas != 1 || d.Status.UpdatedReplicas != 1 {
		t.Fatalf("Healthy, but the Deployment has %d available, %d updated replicas", d.Status.AvailableReplicas, d.Status.UpdatedReplicas)
	}

	clone.Commit("dev: the crash image", map[string]string{"apps/dev/deployment.yaml": brokenDeployment(crashRef)})
	clone.Push()
	bad := strings.TrimSpace(testgit.Git(t, clone.Dir, "rev-parse", "HEAD"))
	pushed := time.Now()
	h = until(fluxTimeout+60*time.Second, health.Degraded, bad)
	fmt.Printf("FIGURES flux: Kustomization Degraded at the broken commit %s after its push (spec.timeout %s)\n", time.Since(pushed).Round(100*time.Millisecond), fluxTimeout)
	if h.Reason != "HealthCheckFailed" || h.Revision != "main@sha1:"+bad || h.Since.Before(pushed.Truncate(time.Second)) {
		t.Errorf("health.Of = %+v, want Degraded HealthCheckFailed at main@sha1:%s since after the push (%s)", h, bad, pushed)
	}
	// The failure is the node's: the crash image's container exited.
	if !crashExited(ctx, t, appNS, crashRef) {
		t.Errorf("Degraded, but no crash container exited 1")
	}
}

// waitKustomization waits for the Kustomization's health to be want at
// commit, and returns it; on timeout the test fails with the status, and
// Flux's and the node's logs.
func waitKustomization(ctx context.Context, t *testing.T, dyn dynamic.Interface, flux *testflux.Flux, namespace, name string,
	timeout time.Duration, want health.State, commit string) health.Health {
	t.Helper()
	var h health.Health
	var last *unstructured.Unstructured
	deadline := time.Now().Add(timeout)
	for {
		u, err := dyn.Resource(testflux.Kustomizations).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last, h = u, health.Of(u)
			if h.State == want && h.Commit() == commit {
				return h
			}
		}
		if time.Now().After(deadline) {
			status := "no Kustomization read"
			if last != nil {
				status = fmt.Sprint(last.Object["status"])
			}
			t.Fatalf("the Kustomization is not %s at %s after %s: health.Of says %+v (err %v)\nstatus: %s\n%s\n%s",
				want, commit, timeout, h, err, status, flux.Diagnose(), cl.Diagnose())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// crashExited tells whether a container of the app's pods in namespace,
// running image, exited 1: what the crash image does.
func crashExited(ctx context.Context, t *testing.T, namespace, image string) bool {
	t.Helper()
	return anyContainer(ctx, t, namespace, image, func(s corev1.ContainerStatus) bool {
		term := s.LastTerminationState.Terminated
		if term == nil {
			term = s.State.Terminated
		}
		return term != nil && term.ExitCode == 1
	})
}

// anyContainer tells whether a container of the app's pods in namespace
// runs image and satisfies cond; when none does, it logs the pods.
func anyContainer(ctx context.Context, t *testing.T, namespace, image string, cond func(corev1.ContainerStatus) bool) bool {
	t.Helper()
	pods, err := cl.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=app"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if runs(s, image) && cond(s) {
				return true
			}
		}
	}
	t.Logf("no container of %s in %s is as expected: %+v", image, namespace, pods.Items)
	return false
}

// runs tells whether a container status is of image: by digest when the
// reference has one (what the node pulled), else by the reference, which
// the runtime may report normalized (docker.io/... for a short name).
func runs(s corev1.ContainerStatus, image string) bool {
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return strings.HasSuffix(s.ImageID, "@"+digest)
	}
	return s.Image == image || strings.HasSuffix(s.Image, "/"+path.Base(image))
}
