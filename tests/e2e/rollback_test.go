package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// rollbackSpec turns on spec.rollback for the sample automation, judged by
// the stand-in Kustomization apps-dev.
const rollbackSpec = `
  rollback:
    window: 2m
    healthOf:
    - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}
`

// spec.rollback through the three controllers and a real git server, the
// Kustomization's status written as kustomize-controller writes it: the
// automation's commit whose health fails within the window is reverted by
// a new commit, the image it wrote is held (a run does not write it
// again), and a Warning event says so; a newer image ends the hold; and
// health that was failing before the next commit reached it is not blamed
// on that commit.
func TestChainRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	samples = strings.Replace(samples, "  policySelector:\n", strings.TrimPrefix(rollbackSpec, "\n")+"  policySelector:\n", 1)
	if !strings.Contains(samples, "rollback:") {
		t.Fatal("the sample automation has no policySelector to put spec.rollback before")
	}
	c := env.Cluster.Client
	if err := env.Apply(ctx, kustomizationCRD); err != nil {
		t.Fatal(err)
	}
	ks := chain.Kustomization("default", "apps-dev")
	testenv.Eventually(t, time.Minute, func() (bool, error) { return c.Create(ctx, ks) == nil, nil })
	start := env.Head("main")
	rev := func(commit string) string { return "main@sha1:" + commit }
	// What runs before the automation's first commit is healthy.
	setKustomization(ctx, t, c, ks, true, rev(start))
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	host := env.RegistryHost + "/" + chain.Image
	line := func(tag string) string {
		return "image: " + host + ":" + tag + " # {\"$imagepolicy\": \"default:podinfo\"}"
	}
	manifest := func() string { return must(env.FleetGit("show", "main:"+chain.ManifestPath)) }
	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", "default"

	// 1. The automation's commit moves podinfo to 6.4.0; the Kustomization
	//    applies it and fails its health check: the commit is reverted.
	bad := waitHead(t, env, "main", start)
	waitAutomation(t, env, iua, func() bool {
		rb := iua.Status.Rollback
		return rb != nil && rb.Commit == rev(bad) && len(rb.Before) == 1 && rb.Before[0].State == "Healthy"
	})
	setKustomization(ctx, t, c, ks, false, rev(bad))
	failed := time.Now()
	revert := waitHead(t, env, "main", bad)
	t.Logf("health failure written → revert commit on main: %s", time.Since(failed).Round(time.Millisecond))
	if !strings.Contains(manifest(), line("6.3.0")) {
		t.Fatalf("the revert %s does not put 6.3.0 back:\n%s", revert, manifest())
	}
	checkCommit(t, env, revert, bad, "imagebot <imagebot@example.com>", "Update images in default/fleet\n\n- "+host+":6.4.0 -> "+host+":6.3.0\n",
		"-        "+line("6.4.0")+"\n+        "+line("6.3.0")+"\n")
	waitAutomation(t, env, iua, func() bool {
		return iua.Status.LastPushCommit == revert && iua.Status.Rollback != nil && iua.Status.Rollback.Reason == imagev1.RolledBackReason
	})
	if len(iua.Status.Holds) != 1 || iua.Status.Holds[0].Reason != imagev1.RolledBackReason ||
		iua.Status.Holds[0].Value != host+":6.3.0" || iua.Status.Holds[0].From != host+":6.4.0" {
		t.Fatalf("holds %+v, want 6.4.0 held at 6.3.0 by the rollback", iua.Status.Holds)
	}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		var list corev1.EventList
		if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == "fleet" && e.Reason == imagev1.RolledBackReason && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	// A run does not write the reverted image again.
	token, err := env.RequestReconcileToken(ctx, iua)
	if err != nil {
		t.Fatal(err)
	}
	waitAutomation(t, env, iua, func() bool { return iua.Status.LastHandledReconcileAt == token })
	if head := env.Head("main"); head != revert {
		t.Fatalf("main moved to %s after the revert:\n%s", head, manifest())
	}

	// 2. The Kustomization fails at the revert too (something else is
	//    wrong). A newer image ends the hold; its commit reaches the
	//    Kustomization, which still fails: not blamed, not reverted.
	setKustomization(ctx, t, c, ks, false, rev(revert))
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	next := waitHead(t, env, "main", revert)
	if !strings.Contains(manifest(), line("6.5.0")) {
		t.Fatalf("the commit %s after the hold does not write 6.5.0:\n%s", next, manifest())
	}
	waitAutomation(t, env, iua, func() bool {
		rb := iua.Status.Rollback
		return len(iua.Status.Holds) == 0 && rb != nil && rb.Commit == rev(next) && len(rb.Before) == 1 && rb.Before[0].State == "Degraded"
	})
	setKustomization(ctx, t, c, ks, false, rev(next))
	waitAutomation(t, env, iua, func() bool {
		return iua.Status.Rollback.Reason == imagev1.UnhealthyBeforeReason
	})
	time.Sleep(2 * time.Second)
	if head := env.Head("main"); head != next {
		t.Fatalf("main moved to %s: health failing before the commit was blamed on it\n%s", head, must(env.FleetGit("show", head)))
	}
}
