package node

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testflux"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/cluster"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// promotionObjects are the chain's objects, in namespace promo: dev
// follows the registry (digests reflected, so that what is promoted is a
// digest too) and its automation writes apps/dev, which Flux applies;
// prod promotes what dev's Kustomization ran healthy for the soak, and its
// automation writes apps/prod. Formatted with the registry's repository,
// the soak, the fleet's URL, the Flux namespace and what the healthOf
// entries add to name another cluster (nothing, or a kubeConfig).
const promotionObjects = `apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: app, namespace: promo}
spec:
  image: %[1]s
  insecure: true
  interval: 5s
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app-dev, namespace: promo, labels: {stage: dev}}
spec:
  imageRepositoryRef: {name: app}
  digestReflectionPolicy: IfNotPresent
  policy: {semver: {range: ">=1.0.0"}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: app-prod, namespace: promo, labels: {stage: prod}}
spec:
  imageRepositoryRef: {name: app}
  policy:
    promotion:
      from: {automation: dev}
      healthOf:
      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev, namespace: %[4]s%[5]s}
      soak: %[2]s
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: dev, namespace: promo}
spec:
  interval: 1m
  git:
    repository: {url: %[3]s}
    checkout: {ref: {branch: main}}
    commit: {author: {name: devbot, email: devbot@example.com}}
    push: {branch: main}
  update: {path: ./apps/dev}
  policySelector: {matchLabels: {stage: dev}}
  rollback:
    healthOf:
    - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev, namespace: %[4]s%[5]s}
    window: 5m
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: prod, namespace: promo}
spec:
  interval: 1m
  git:
    repository: {url: %[3]s}
    checkout: {ref: {branch: main}}
    commit: {author: {name: promotebot, email: promotebot@example.com}}
    push: {branch: main}
  update: {path: ./apps/prod}
  policySelector: {matchLabels: {stage: prod}}
`

// markedDeployment is brokenDeployment (the image's own entrypoint runs)
// with a marker for policy, pulled from the registry: IfNotPresent, since
// the node's containerd pulls the digest the automation wrote.
func markedDeployment(image, policy string) string {
	d := strings.Replace(brokenDeployment(image), "imagePullPolicy: Never", "imagePullPolicy: IfNotPresent", 1)
	return strings.Replace(d, "image: "+image+"\n", "image: "+image+` # {"$imagepolicy": "`+policy+`"}`+"\n", 1)
}

// The promotion chain on the real node, with real Flux and our three
// controllers as processes on the host, a registry and a git server on
// the host (the node's containerd pulls from the loopback registry over
// plain HTTP, as its CRI plugin does for a loopback host):
//  1. a tag moves dev: dev's automation commits its tag and digest;
//  2. Flux applies that commit, the Deployment rolls out with that digest
//     and the Kustomization is Healthy at it;
//  3. after the soak, prod's commit lands with the same tag and digest;
//  4. a broken release (its container exits 1) moves dev; the
//     Kustomization fails its health check at that commit; dev's
//     automation (spec.rollback on that Kustomization) pushes a revert
//     and holds the broken image; Flux runs the revert; prod never moves;
//  5. a person rolls dev back by hand in git: the automation holds the
//     value (status.holds, no commit over it), Flux runs it, prod does
//     not follow; a newer release ends the hold and reaches prod after
//     the soak.
func TestFluxPromotionFollowsWhatRanHealthy(t *testing.T) { fluxPromotion(t, false) }

// The same chain across two clusters, as most teams run it: the real node
// is dev's cluster, where Flux applies apps/dev, and a second control
// plane (envtest) is the management cluster where our controllers run,
// with no Flux and no Kustomization. Prod's promotion and dev's rollback
// read dev's Kustomization through a kubeconfig Secret of dev's cluster
// (healthOf[].kubeConfig.secretRef), watched: the prod commit lands after
// the soak with dev's digest, the broken release never reaches prod and
// its revert lands, the hand rollback is held.
func TestFluxPromotionFromAnotherCluster(t *testing.T) { fluxPromotion(t, true) }

func fluxPromotion(t *testing.T, twoClusters bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const (
		fluxNS = "flux-promo"
		devNS  = "promo-dev"
		ns     = "promo"
		ksName = "apps-dev"
		soak   = 15 * time.Second
	)
	// First: it skips the test when make flux-tools has not run.
	flux := testflux.Start(t, testflux.Options{Bin: filepath.Join(cl.Root(), "bin", "flux-controllers"),
		Config: cl.RESTConfig(), Namespace: fluxNS})
	for _, n := range []string{fluxNS, ns} {
		if _, err := cl.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	restrictedNamespace(t, devNS)
	// InstallCRDs logs through controller-runtime's logger, which warns
	// with a stack trace when nothing set it.
	ctrllog.SetLogger(logr.Discard())
	dyn, err := dynamic.NewForConfig(cl.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Where our controllers run and their objects live: the node's
	// cluster, or the management cluster.
	mgmt := managementCluster(ctx, t, twoClusters, ns)
	c := mgmt.client

	// The releases: busybox sleeping (1.0.0, 1.1.0, each its own digest)
	// and the crash image (1.2.0).
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	repo := strings.TrimPrefix(reg.URL, "http://") + "/app"
	busybox, err := tarball.ImageFromPath(filepath.Join(cl.Dir(), "images", "busybox.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := func(version string) v1.Image {
		cf, err := busybox.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg := *cf.Config.DeepCopy()
		cfg.Entrypoint, cfg.Cmd = []string{"/bin/sh", "-c", "exec sleep 3600"}, nil
		cfg.Labels = map[string]string{"version": version}
		img, err := mutate.Config(busybox, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	crashTar := filepath.Join(t.TempDir(), "crash.tar")
	if err := cluster.BuildGoImage(ctx, cl.Root(), "toolkit.dev/image-toolkit/tests/node/crash", "image-toolkit.test/crash:1", crashTar, cluster.ImageUID); err != nil {
		t.Fatal(err)
	}
	crash, err := tarball.ImageFromPath(crashTar, nil)
	if err != nil {
		t.Fatal(err)
	}
	// push pushes img as tag and returns repo:tag@digest.
	push := func(tag string, img v1.Image) string {
		t.Helper()
		ref, err := name.NewTag(repo+":"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return repo + ":" + tag + "@" + d.String()
	}
	v100 := push("1.0.0", sleeper("1.0.0"))

	git := testgit.New(t, testgit.Options{})
	bare := git.BarePath("fleet")
	clone := git.CreateRepo(t, "fleet", map[string]string{
		"apps/dev/kustomization.yaml": "resources: [deployment.yaml]\n",
		"apps/dev/deployment.yaml":    markedDeployment(v100, ns+":app-dev"),
		"apps/prod/deployment.yaml":   markedDeployment(v100, ns+":app-prod"),
	})
	fleetGit := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(testgit.Git(t, "", append([]string{"--git-dir", bare}, args...)...))
	}
	first := fleetGit("rev-parse", "main")

	for gvr, u := range map[schema.GroupVersionResource]*unstructured.Unstructured{
		testflux.GitRepositories: testflux.GitRepository(fluxNS, "fleet", git.RepoURL("fleet"), "main", 2*time.Second),
		testflux.Kustomizations:  testflux.Kustomization(fluxNS, ksName, "fleet", "./apps/dev", devNS, time.Minute, fluxTimeout),
	} {
		if _, err := dyn.Resource(gvr).Namespace(fluxNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted while Flux still runs (cleanups run last first), so that
	// kustomize-controller prunes what it applied and releases its
	// finalizer; another test's Flux would find nothing of this one.
	t.Cleanup(func() { deleteFluxObjects(t, dyn, fluxNS) })
	until := func(timeout time.Duration, want health.State, commit string) health.Health {
		t.Helper()
		return waitKustomization(ctx, t, dyn, flux, fluxNS, ksName, timeout, want, commit)
	}
	until(2*time.Minute, health.Healthy, first)

	lc := &localenv.Cluster{Root: cl.Root(), Dir: t.TempDir(), Kubeconfig: mgmt.kubeconfig}
	bin := localenv.BinDir(cl.Root())
	for _, name := range localenv.Controllers {
		p, err := lc.StartController(ctx, bin, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("--- %s, last lines:\n%s", name, p.Log())
			}
		})
	}
	mgmt.apply(t, fmt.Sprintf(promotionObjects, repo, soak, git.RepoURL("fleet"), fluxNS, mgmt.healthVia))

	dev, prod := &imagev1.ImagePolicy{}, &imagev1.ImagePolicy{}
	dev.Name, dev.Namespace = "app-dev", ns
	prod.Name, prod.Namespace = "app-prod", ns
	get := func(p *imagev1.ImagePolicy) string {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		if p.Status.LatestRef == nil {
			return ""
		}
		return p.Status.LatestRef.String()
	}
	// What dev already runs is promoted first, with nothing to commit:
	// prod's file holds it already.
	waitFor(t, 2*time.Minute, "prod to promote what dev ran at the first commit", func() (bool, string) {
		return get(prod) == v100, fmt.Sprintf("dev %q prod %q %+v", get(dev), get(prod), prod.Status.Conditions)
	})
	if head := fleetGit("rev-parse", "main"); head != first {
		t.Fatalf("a commit %s although dev and prod already held %s:\n%s", head, v100, fleetGit("show", head))
	}

	// 1. A tag moves dev.
	v110 := push("1.1.0", sleeper("1.1.0"))
	devCommit := waitCommit(t, fleetGit, "dev's commit of 1.1.0", "apps/dev/deployment.yaml", v110)
	if author := fleetGit("show", "-s", "--format=%an", devCommit); author != "devbot" {
		t.Errorf("dev's commit is by %q, want devbot", author)
	}
	if !strings.Contains(fleetGit("show", "main:apps/prod/deployment.yaml"), v100) {
		t.Fatalf("prod moved with dev's commit:\n%s", fleetGit("show", devCommit))
	}

	// 2. Flux applies it; the Deployment rolls out with that digest.
	h := until(2*time.Minute, health.Healthy, devCommit)
	healthy := time.Now()
	if !podRunning(ctx, t, devNS, v110) {
		t.Fatalf("the Kustomization is Healthy at %s, but no Ready pod runs %s", devCommit, v110)
	}

	// 3. After the soak, prod's commit lands with the same tag and digest.
	prodCommit := waitCommit(t, fleetGit, "prod's commit of 1.1.0", "apps/prod/deployment.yaml", v110)
	landed := time.Now()
	if author := fleetGit("show", "-s", "--format=%an", prodCommit); author != "promotebot" {
		t.Errorf("prod's commit is by %q, want promotebot", author)
	}
	if files := fleetGit("show", "--format=", "--name-only", prodCommit); files != "apps/prod/deployment.yaml" {
		t.Errorf("prod's commit changed %q, want apps/prod/deployment.yaml only", files)
	}
	get(prod)
	st := prod.Status.Promotion
	if st == nil || st.PromotedHealthSeen == nil || st.PromotedRevision == "" {
		t.Fatalf("prod's status.promotion %+v", st)
	}
	ct, err := strconv.ParseInt(fleetGit("show", "-s", "--format=%ct", prodCommit), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	soakEnd := st.PromotedHealthSeen.Add(soak)
	if committed := time.Unix(ct, 0); committed.Before(soakEnd.Truncate(time.Second)) {
		t.Errorf("prod committed at %s, before the soak ended at %s", committed, soakEnd)
	}
	if st.PromotedHealthSeen.Time.Before(h.Since.Truncate(time.Second)) {
		t.Errorf("the soak counts from %s, before Flux's Kustomization was Healthy at dev's commit (%s)", st.PromotedHealthSeen, h.Since)
	}
	fmt.Printf("FIGURES flux promotion: Kustomization Healthy at dev's commit (seen by the test) → prod's commit on the git server: %s, soak %s; soak end → prod's commit: %s (commit times have whole seconds)\n",
		landed.Sub(healthy).Round(100*time.Millisecond), soak, time.Unix(ct, 0).Sub(soakEnd).Round(time.Second))

	// 4. A broken release moves dev; its health fails; prod does not move.
	v120 := push("1.2.0", crash)
	const devFile = "apps/dev/deployment.yaml"
	badCommit := waitCommit(t, fleetGit, "dev's commit of 1.2.0", devFile, v120)
	badPushed := time.Now()
	until(fluxTimeout+90*time.Second, health.Degraded, badCommit)
	failed := time.Now()
	fmt.Printf("FIGURES flux promotion: dev's broken commit seen → Kustomization Degraded at it: %s (spec.timeout %s); prod then watched for %s\n",
		failed.Sub(badPushed).Round(100*time.Millisecond), fluxTimeout, 2*soak)
	if !crashExited(ctx, t, devNS, v120) {
		t.Errorf("Degraded, but no container of %s exited 1", v120)
	}
	// dev's automation reverts its commit (a new commit, never a
	// force-push) and holds the broken image; Flux runs the revert.
	revert := waitCommit(t, fleetGit, "dev's revert of 1.2.0", devFile, v110)
	reverted := time.Now()
	fmt.Printf("FIGURES flux rollback: Kustomization Degraded at dev's commit (seen by the test) → the revert on the git server: %s\n",
		reverted.Sub(failed).Round(100*time.Millisecond))
	if author := fleetGit("show", "-s", "--format=%an", revert); author != "devbot" {
		t.Errorf("the revert is by %q, want devbot", author)
	}
	if files := fleetGit("show", "--format=", "--name-only", revert); files != devFile {
		t.Errorf("the revert changed %q, want %s only", files, devFile)
	}
	testgit.Git(t, "", "--git-dir", bare, "merge-base", "--is-ancestor", badCommit, revert)
	devAuto := &imagev1.ImageUpdateAutomation{}
	devAuto.Name, devAuto.Namespace = "dev", ns
	holds := func(match func(imagev1.AutomationHold) bool) bool {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(devAuto), devAuto); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(devAuto.Status.Holds, match)
	}
	waitFor(t, time.Minute, "dev's automation to hold the image it reverted", func() (bool, string) {
		return holds(func(h imagev1.AutomationHold) bool {
				return h.Reason == imagev1.RolledBackReason && h.Policy == "app-dev"
			}),
			fmt.Sprintf("holds %+v, rollback %+v", devAuto.Status.Holds, devAuto.Status.Rollback)
	})
	until(2*time.Minute, health.Healthy, revert)
	if !podRunning(ctx, t, devNS, v110) {
		t.Fatalf("the Kustomization is Healthy at the revert %s, but no Ready pod runs %s", revert, v110)
	}
	// prod never moved: watched from the failure until twice the soak
	// after the revert ran healthy.
	for window := time.Now().Add(2 * soak); time.Now().Before(window); time.Sleep(time.Second) {
		if got := fleetGit("show", "main:apps/prod/deployment.yaml"); !strings.Contains(got, v110) {
			t.Fatalf("prod moved:\n%s", fleetGit("log", "--format=%h %an %s", prodCommit+"..main"))
		}
		if got := get(prod); got != v110 {
			t.Fatalf("prod's policy chose %s", got)
		}
	}
	if log := fleetGit("log", "--format=%an", "--", "apps/prod"); strings.Count(log, "promotebot") != 1 {
		t.Errorf("prod's commits: %q, want promotebot's one", log)
	}

	// 5. A person rolls dev back by hand in git (to 1.0.0, older than
	// prod's): dev's automation holds the value (no commit over it), Flux
	// runs it healthy, and prod follows neither the person's value nor
	// the policy's; a newer release ends the hold and reaches prod.
	testgit.Git(t, clone.Dir, "pull", "-q", "--ff-only", "origin", "main")
	hand := clone.Commit("dev back to 1.0.0 by hand", map[string]string{devFile: strings.Replace(fleetGit("show", "main:"+devFile), v110, v100, 1)})
	clone.Push()
	waitFor(t, 2*time.Minute, "dev's automation to hold the hand rollback", func() (bool, string) {
		return holds(func(h imagev1.AutomationHold) bool {
			return h.Commit == hand && h.Path == devFile && h.Value == v100 && h.From == v110 && h.Reason == imagev1.HeldByPersonReason
		}), fmt.Sprintf("holds %+v", devAuto.Status.Holds)
	})
	until(2*time.Minute, health.Healthy, hand)
	healthyAgain := time.Now()
	if !podRunning(ctx, t, devNS, v100) {
		t.Fatalf("the Kustomization is Healthy at the hand rollback %s, but no Ready pod runs %s", hand, v100)
	}
	for window := healthyAgain.Add(2 * soak); time.Now().Before(window); time.Sleep(time.Second) {
		if head := fleetGit("rev-parse", "main"); head != hand {
			t.Fatalf("commits over the hand rollback: %s", fleetGit("log", "--format=%h %an %s", hand+"..main"))
		}
		if got := get(prod); got != v110 {
			t.Fatalf("prod's policy chose %s once dev's hand rollback ran healthy (status %+v)", got, prod.Status.Promotion)
		}
	}
	v130 := push("1.3.0", sleeper("1.3.0"))
	next := waitCommit(t, fleetGit, "dev's commit of 1.3.0 over the hold", devFile, v130)
	until(2*time.Minute, health.Healthy, next)
	waitCommit(t, fleetGit, "prod's commit of 1.3.0", "apps/prod/deployment.yaml", v130)
	if err := c.Get(ctx, client.ObjectKeyFromObject(devAuto), devAuto); err != nil {
		t.Fatal(err)
	}
	for _, h := range devAuto.Status.Holds {
		if h.Commit == hand && (h.Reason == imagev1.HeldByPersonReason || h.Reason == imagev1.RolledBackReason) {
			t.Errorf("the hold of %s lasts after 1.3.0 was committed over it: %+v", hand, h)
		}
	}
}

// waitCommit waits until main's file holds image and returns the commit
// that last changed the file.
func waitCommit(t *testing.T, fleetGit func(...string) string, what, file, image string) string {
	t.Helper()
	waitFor(t, 2*time.Minute, what, func() (bool, string) {
		got := fleetGit("show", "main:"+file)
		return strings.Contains(got, "image: "+image+" "), got
	})
	return fleetGit("log", "-1", "--format=%H", "main", "--", file)
}

// podRunning tells whether a Ready pod of the app in namespace runs image
// (pulled by its digest).
func podRunning(ctx context.Context, t *testing.T, namespace, image string) bool {
	t.Helper()
	return anyContainer(ctx, t, namespace, image, func(s corev1.ContainerStatus) bool { return s.Ready })
}

// deleteFluxObjects deletes the Kustomizations and GitRepositories of
// namespace and waits, up to a minute, until Flux has released them.
func deleteFluxObjects(t *testing.T, dyn dynamic.Interface, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, gvr := range []schema.GroupVersionResource{testflux.Kustomizations, testflux.GitRepositories} {
		r := dyn.Resource(gvr).Namespace(namespace)
		if err := r.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Errorf("deleting %s: %v", gvr.Resource, err)
			continue
		}
		for {
			l, err := r.List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Errorf("%s of %s still there after a minute: %v", gvr.Resource, namespace, err)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// management is where a promotion test's controllers run and its objects
// live.
type management struct {
	client     client.Client
	kubeconfig string
	// healthVia is what the healthOf entries add to reach dev's
	// Kustomization from here.
	healthVia string
	apply     func(t *testing.T, yaml string)
}

// managementCluster is the node's own cluster (one cluster: the
// Kustomization is local), or a new control plane holding namespace ns
// and a Secret dev-kubeconfig with the node cluster's kubeconfig, its
// files inlined as a Secret's kubeconfig must have them.
func managementCluster(ctx context.Context, t *testing.T, twoClusters bool, ns string) management {
	t.Helper()
	if !twoClusters {
		if _, err := envtest.InstallCRDs(cl.RESTConfig(), envtest.CRDInstallOptions{
			Paths: testenv.CRDPaths(cl.Root(), testenv.AllCharts...), ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cl.RESTConfig(), client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return management{client: c, kubeconfig: cl.Kubeconfig(), apply: func(t *testing.T, yaml string) { kubectl(t, yaml, "apply", "-f", "-") }}
	}
	env, err := testenv.Start(testenv.AllCharts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	path := filepath.Join(t.TempDir(), "management.kubeconfig")
	if err := testenv.WriteKubeconfig(path, env.Config, ""); err != nil {
		t.Fatal(err)
	}
	dev, err := clientcmd.LoadFromFile(cl.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmdapi.FlattenConfig(dev); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Write(*dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev-kubeconfig"},
		Data: map[string][]byte{"value": kc}}); err != nil {
		t.Fatal(err)
	}
	kubectlBin := filepath.Join(cl.Root(), "bin", "testenv", "kubectl")
	return management{client: env.Client, kubeconfig: path, healthVia: ", kubeConfig: {secretRef: {name: dev-kubeconfig}}",
		apply: func(t *testing.T, yaml string) {
			t.Helper()
			cmd := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", path, "apply", "-f", "-")
			cmd.Stdin = strings.NewReader(yaml)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kubectl apply to the management cluster: %v\n%s", err, out)
			}
		}}
}
