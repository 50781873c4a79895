package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// kustomizationCRD is the stand-in for Flux's Kustomization CRD.
const kustomizationCRD = chain.KustomizationCRD

// A tag moves dev (the sample automation's clusters/prod); while dev's
// Kustomization is not healthy at dev's commit, prod (clusters/live) does
// not move; once it is, prod's commit lands after the soak with dev's
// image exactly. Reports the latency from the soak's end to prod's push.
func TestChainPromotion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	host := env.RegistryHost + "/" + chain.Image
	if _, err := env.Commit(map[string]string{chain.LivePath: chain.LiveManifest(env.RegistryHost)}, "prod runs 6.3.0"); err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	const soak = 5 * time.Second
	start := env.Head("main")
	if err := env.Apply(ctx, samples+"\n---\n"+fmt.Sprintf(chain.PromotionObjects, soak, env.RepoURL)); err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client
	ks := chain.Kustomization("default", "apps-dev")
	testenv.Eventually(t, time.Minute, func() (bool, error) { return c.Create(ctx, ks) == nil, nil })

	devCommit := waitHead(t, env, "main", start)
	if !strings.Contains(must(env.FleetGit("show", devCommit, "--", "clusters/prod")), "+        image: "+host+":6.4.0 ") {
		t.Fatalf("dev commit %s does not move clusters/prod to 6.4.0", devCommit)
	}
	fleet := &imagev1.ImageUpdateAutomation{}
	fleet.Name, fleet.Namespace = "fleet", "default"
	waitAutomation(t, env, fleet, func() bool { return fleet.Status.AppliedRevision != "" })
	applied := fleet.Status.AppliedRevision

	// dev's Kustomization fails its health check at dev's commit: prod
	// waits.
	setKustomization(ctx, t, c, ks, false, applied)
	prod := &imagev1.ImagePolicy{}
	prod.Name, prod.Namespace = "podinfo-prod", "default"
	waitPolicyReason(ctx, t, c, prod, imagev1.UpstreamNotHealthyReason)

	// Healthy at dev's commit: the soak runs, then prod's commit lands.
	setKustomization(ctx, t, c, ks, true, applied)
	healthy := time.Now()
	prodCommit := waitHead(t, env, "main", env.Head("main"))
	for i := 0; i < 5 && !strings.Contains(must(env.FleetGit("show", prodCommit)), "clusters/live"); i++ {
		prodCommit = waitHead(t, env, "main", prodCommit)
	}
	show := must(env.FleetGit("show", prodCommit))
	devLine := "image: " + host + ":6.4.0 # {\"$imagepolicy\": \"default:podinfo-prod\"}"
	if !strings.Contains(show, "+        "+devLine) || !strings.Contains(show, "promotebot") {
		t.Fatalf("prod commit %s:\n%s", prodCommit, show)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
		t.Fatal(err)
	}
	if devImage := fleet.Status.ObservedPolicies["podinfo"]; prod.Status.LatestRef == nil || *prod.Status.LatestRef != devImage {
		t.Errorf("prod promoted %v, dev applied %v", prod.Status.LatestRef, devImage)
	}
	st := prod.Status.Promotion
	if st == nil || st.PromotedHealthSeen == nil {
		t.Fatalf("status.promotion %+v", st)
	}
	ct, err := strconv.ParseInt(strings.TrimSpace(must(env.FleetGit("show", "-s", "--format=%ct", prodCommit))), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	soakEnd := st.PromotedHealthSeen.Add(soak)
	if committed := time.Unix(ct, 0); committed.Before(soakEnd.Truncate(time.Second)) {
		t.Errorf("prod committed at %s, before the soak ended at %s", committed, soakEnd)
	}
	t.Logf("health written → prod push: %s (soak %s); soak end → prod push: %s (commit times have whole seconds)",
		time.Since(healthy).Round(time.Millisecond), soak, time.Unix(ct, 0).Sub(soakEnd).Round(time.Second))
}

// setKustomization writes ks's status (chain.SetKustomization) and reads
// it back into ks.
func setKustomization(ctx context.Context, t *testing.T, c client.Client, ks *unstructured.Unstructured, ready bool, revision string) {
	t.Helper()
	if err := chain.SetKustomization(ctx, c, ks.GetNamespace(), ks.GetName(), ready, revision); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
		t.Fatal(err)
	}
}

func waitPolicyReason(ctx context.Context, t *testing.T, c client.Client, p *imagev1.ImagePolicy, reason string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == "Ready" && cond.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}

// With approval Required, dev's healthy image waits for a person: prod
// does not move while no one approved it, nor for an approval of another
// digest; tk-image approve (the real binary) approves it, and prod's
// commit names the approver in its Approved-by trailer.
func TestChainPromotionWaitsForApproval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	if _, err := env.Commit(map[string]string{chain.LivePath: chain.LiveManifest(env.RegistryHost)}, "prod runs 6.3.0"); err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	objects := strings.Replace(fmt.Sprintf(chain.PromotionObjects, "0s", env.RepoURL), "      soak: 0s\n", "      soak: 0s\n      approval: Required\n", 1)
	// dev's policy records digests, so that the approval is of one.
	withDigests := strings.Replace(samples, "    name: podinfo\n  policy:\n    semver:", "    name: podinfo\n  digestReflectionPolicy: IfNotPresent\n  policy:\n    semver:", 1)
	if withDigests == samples {
		t.Fatal("the sample ImagePolicy podinfo no longer reads as this test expects")
	}
	c, ks, devCommit := applyWithDev(ctx, t, env, withDigests+"\n---\n"+objects)
	fleet := &imagev1.ImageUpdateAutomation{}
	fleet.Name, fleet.Namespace = "fleet", "default"
	waitAutomation(t, env, fleet, func() bool { return fleet.Status.AppliedRevision != "" })
	setKustomization(ctx, t, c, ks, true, fleet.Status.AppliedRevision)

	prod := &imagev1.ImagePolicy{}
	prod.Name, prod.Namespace = "podinfo-prod", "default"
	waitPolicyReason(ctx, t, c, prod, imagev1.AwaitingApprovalReason)
	devImage := fleet.Status.ObservedPolicies["podinfo"]
	if p := prod.Status.PendingRef; p == nil || p.Image == nil || *p.Image != devImage || devImage.Digest == "" {
		t.Fatalf("pendingRef %+v, want dev's image %v with its digest", prod.Status.PendingRef, devImage)
	}

	// An approval of another digest approves nothing.
	patch := client.MergeFrom(prod.DeepCopy())
	prod.Annotations = map[string]string{imagev1.ApproveAnnotation: "sha256:" + strings.Repeat("1", 64), imagev1.ApprovedByAnnotation: "mallory"}
	if err := c.Patch(ctx, prod, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
			return false, nil
		}
		ready := apimeta.FindStatusCondition(prod.Status.Conditions, "Ready")
		return ready != nil && ready.Reason == imagev1.AwaitingApprovalReason && strings.Contains(ready.Message, "is for another image"), nil
	})
	if prod.Status.LatestRef != nil || env.Head("main") != devCommit {
		t.Fatalf("prod moved without an approval of its image: latestRef %v, head %s (dev's commit %s)", prod.Status.LatestRef, env.Head("main"), devCommit)
	}

	cli := exec.CommandContext(ctx, filepath.Join(localenv.BinDir(root), "tk-image"), "--kubeconfig", env.Cluster.Kubeconfig,
		"approve", "policy", "podinfo-prod", "-n", "default", "--digest", devImage.Digest, "--timeout", "2m")
	out, err := cli.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is promoted from") {
		t.Fatalf("tk-image approve: %v\n%s", err, out)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
		t.Fatal(err)
	}
	approver := prod.Annotations[imagev1.ApprovedByAnnotation]
	if approver == "" || approver == "mallory" {
		t.Fatalf("tk-image approve recorded approved-by %q, want the kubeconfig's user", approver)
	}
	if a := prod.Status.Promotion.Approval; a == nil || a.By != approver || a.Digest != devImage.Digest {
		t.Errorf("status.promotion.approval %+v, want %s by %s", a, devImage.Digest, approver)
	}
	prodCommit := waitHead(t, env, "main", devCommit)
	trailers := strings.TrimSpace(must(env.FleetGit("log", "-1", "--format=%(trailers:key=Approved-by,valueonly)", prodCommit)))
	if trailers != approver || !strings.Contains(must(env.FleetGit("show", prodCommit)), "clusters/live") {
		t.Errorf("prod commit %s: Approved-by %q, want %q:\n%s", prodCommit, trailers, approver, must(env.FleetGit("show", prodCommit)))
	}
}

// Two images one dev commit moved reach prod in one commit: podinfo-prod
// could move at once, but beta-prod, of the same upstream commit, waits
// for an approval, so podinfo-prod waits with it (PromotionGroupWaiting,
// its status naming beta-prod and why) and prod does not move; once beta-
// prod is approved, one prod commit brings both.
func TestChainPromotionMovesAGroupInOneCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	host := env.RegistryHost + "/" + chain.Image
	live := strings.ReplaceAll(chain.LiveManifest(env.RegistryHost), `"default:podinfo-beta"`, `"default:beta-prod"`)
	if _, err := env.Commit(map[string]string{chain.LivePath: live}, "prod runs 6.3.0"); err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	objects := strings.Replace(fmt.Sprintf(chain.PromotionObjects, "0s", env.RepoURL), "from: {automation: fleet}", "from: {automation: fleet, policy: podinfo}", 1)
	objects += `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-beta
  labels:
    automation: enabled
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: ">=6.0.0 <7.0.0"
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: beta-prod
  labels:
    stage: prod
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    promotion:
      from: {automation: fleet, policy: podinfo-beta}
      healthOf:
      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}
      approval: Required
`
	c, ks, devCommit := applyWithDev(ctx, t, env, samples+"\n---\n"+objects)
	fleet := &imagev1.ImageUpdateAutomation{}
	fleet.Name, fleet.Namespace = "fleet", "default"
	waitAutomation(t, env, fleet, func() bool {
		return fleet.Status.AppliedRevision != "" && fleet.Status.ObservedPolicies["podinfo"].Tag == "6.4.0" && fleet.Status.ObservedPolicies["podinfo-beta"].Tag == "6.4.0"
	})
	if env.Head("main") != devCommit {
		t.Fatalf("dev moved in more than one commit: %s, then %s", devCommit, env.Head("main"))
	}
	setKustomization(ctx, t, c, ks, true, fleet.Status.AppliedRevision)

	api := &imagev1.ImagePolicy{}
	api.Name, api.Namespace = "podinfo-prod", "default"
	waitPolicyReason(ctx, t, c, api, imagev1.PromotionGroupWaitingReason)
	g := api.Status.Promotion.Group
	if len(g) != 1 || g[0].Policy != "beta-prod" || g[0].Ready || g[0].Reason != imagev1.AwaitingApprovalReason {
		t.Errorf("podinfo-prod's status.promotion.group %+v, want beta-prod waiting for approval", g)
	}
	beta := &imagev1.ImagePolicy{}
	beta.Name, beta.Namespace = "beta-prod", "default"
	waitPolicyReason(ctx, t, c, beta, imagev1.AwaitingApprovalReason)
	if api.Status.LatestRef != nil || env.Head("main") != devCommit {
		t.Fatalf("prod moved ahead of its group: podinfo-prod latestRef %v, head %s (dev's commit %s)", api.Status.LatestRef, env.Head("main"), devCommit)
	}

	cli := exec.CommandContext(ctx, filepath.Join(localenv.BinDir(root), "tk-image"), "--kubeconfig", env.Cluster.Kubeconfig,
		"approve", "policy", "beta-prod", "-n", "default", "--timeout", "2m")
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("tk-image approve: %v\n%s", err, out)
	}
	prodCommit := waitHead(t, env, "main", devCommit)
	show := must(env.FleetGit("show", prodCommit))
	for _, want := range []string{
		"+        image: " + host + ":6.4.0 # {\"$imagepolicy\": \"default:podinfo-prod\"}",
		"+        image: " + host + ":6.4.0 # {\"$imagepolicy\": \"default:beta-prod\"}",
	} {
		if !strings.Contains(show, want) {
			t.Errorf("prod's first commit %s lacks %q: the group did not move in one commit:\n%s", prodCommit, want, show)
		}
	}
}

// applyWithDev applies objects, then dev's stand-in Kustomization once its
// CRD (in chain.PromotionObjects) is served, and waits for dev's commit.
func applyWithDev(ctx context.Context, t *testing.T, env *chain.Env, objects string) (client.Client, *unstructured.Unstructured, string) {
	t.Helper()
	start := env.Head("main")
	if err := env.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client
	ks := chain.Kustomization("default", "apps-dev")
	testenv.Eventually(t, time.Minute, func() (bool, error) { return c.Create(ctx, ks) == nil, nil })
	return c, ks, waitHead(t, env, "main", start)
}
