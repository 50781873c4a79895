package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// A person's hand rollback in git wins, through the three controllers and
// a real git server: the automation holds the rolled-back value (no commit
// puts the policy's image back) and says so in status.holds; the hold
// ends when the policy selects a newer image than the one rolled back
// from, when tk-image release releases it, and after spec.holdFor, and
// each time the next commit writes the policy's image again.
func TestChainHandRollbackIsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	start := env.Head("main")
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

	first := waitHead(t, env, "main", start)
	if !strings.Contains(manifest(), line("6.4.0")) {
		t.Fatalf("the first commit %s did not write 6.4.0:\n%s", first, manifest())
	}
	waitAutomation(t, env, iua, func() bool { return iua.Status.LastPushCommit == first && iua.Status.LastJob != nil })

	// rollback puts tag back by hand, as a person, and waits until the
	// automation has run on that head and holds it.
	rollback := func(from, to string) string {
		t.Helper()
		hand, err := env.Commit(map[string]string{chain.ManifestPath: strings.Replace(manifest(), line(from), line(to), 1)}, "podinfo back to "+to+" by hand")
		if err != nil {
			t.Fatal(err)
		}
		if err := env.RequestReconcile(ctx, iua); err != nil {
			t.Fatal(err)
		}
		waitAutomation(t, env, iua, func() bool {
			return iua.Status.ObservedSourceRevision == "main@sha1:"+hand && len(iua.Status.Holds) == 1
		})
		h := iua.Status.Holds[0]
		if h.Setter != "default:podinfo" || h.Path != chain.ManifestPath || h.Commit != hand || h.Reason != imagev1.HeldByPersonReason ||
			h.Value != host+":"+to || h.From != host+":"+from || h.Policy != "podinfo" || !strings.Contains(h.Author, "demo@example.com") {
			t.Fatalf("hold %+v, want default:podinfo at %s over %s, set by demo in %s", h, to, from, hand)
		}
		if head := env.Head("main"); head != hand || !strings.Contains(manifest(), line(to)) {
			t.Fatalf("main moved to %s after the hand rollback:\n%s", head, manifest())
		}
		return hand
	}
	// released waits for the commit that writes tag over the held value,
	// and for the hold to be gone.
	released := func(after, tag, reason string) {
		t.Helper()
		next := waitHead(t, env, "main", after)
		if !strings.Contains(manifest(), line(tag)) {
			t.Fatalf("the commit %s after the hold ended (%s) does not write %s:\n%s", next, reason, tag, manifest())
		}
		waitAutomation(t, env, iua, func() bool { return iua.Status.LastPushCommit == next && len(iua.Status.Holds) == 0 })
	}

	// 1. Held, then released by a newer image than the one rolled back
	//    from.
	hand := rollback("6.4.0", "6.3.0")
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	released(hand, "6.5.0", imagev1.NewerImageReason)

	// 2. Held, then released with tk-image release.
	hand = rollback("6.5.0", "6.4.0")
	cli := exec.CommandContext(ctx, filepath.Join(localenv.BinDir(root), "tk-image"), "--kubeconfig", env.Cluster.Kubeconfig,
		"release", "automation", "fleet", "-n", "default", "--timeout", "2m")
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), "release of 1 of 1 holds requested") {
		t.Fatalf("tk-image release: %v\n%s", err, out)
	}
	released(hand, "6.5.0", imagev1.HoldReleasedReason)

	// 3. Held, then released by spec.holdFor.
	hand = rollback("6.5.0", "6.3.0")
	if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(iua), iua); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(iua.DeepCopy())
	iua.Spec.HoldFor = &metav1.Duration{Duration: 3 * time.Second}
	if err := env.Cluster.Client.Patch(ctx, iua, patch); err != nil {
		t.Fatal(err)
	}
	released(hand, "6.5.0", imagev1.HoldExpiredReason)
}
