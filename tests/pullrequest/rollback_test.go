package pullrequest

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// spec.rollback in PR mode on Gitea, the stand-in Kustomization's status
// written as kustomize-controller writes it. A tag opens a request; a
// reviewer squash-merges it; the Kustomization is healthy at the squash
// commit, then fails there within the window: a revert request opens
// proposing the previous image, and the image is held. A newer tag ends
// the hold; its request, merged with a merge commit, reaches a
// Kustomization that was failing already: not blamed, nothing proposed.
func TestPullRequestRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := Start(ctx, t)
	c := e.Cluster.Client
	img := e.RegistryHost + "/" + chain.Image
	line := func(tag string) string { return "image: " + img + ":" + tag + ` # {"$imagepolicy": "default:podinfo"}` }
	rev := func(commit string) string { return "main@sha1:" + commit }
	set := func(ready bool, commit string) {
		t.Helper()
		if err := chain.SetKustomization(ctx, c, "default", "apps-dev", ready, rev(commit)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Apply(ctx, chain.KustomizationCRD); err != nil {
		t.Fatal(err)
	}
	ks := chain.Kustomization("default", "apps-dev")
	testenv.Eventually(t, time.Minute, func() (bool, error) { return c.Create(ctx, ks) == nil, nil })
	set(true, e.Head("main"))
	on := `{"spec":{"rollback":{"window":"2m","healthOf":[{"apiVersion":"kustomize.toolkit.fluxcd.io/v1","kind":"Kustomization","name":"apps-dev"}]}}}`
	if err := c.Patch(ctx, e.auto, client.RawPatch(types.MergePatchType, []byte(on))); err != nil {
		t.Fatal(err)
	}

	// 1. A tag opens a request; open, it is not judged.
	e.pushTag("6.3.1")
	pr := e.open("Update podinfo to 6.3.1")
	e.waitAutomation("the request recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.History) > 0 && a.Status.History[0].PullRequest == pr.Number
	})
	if rb := e.auto.Status.Rollback; rb != nil && rb.Reason == imagev1.RolledBackReason {
		t.Fatalf("an open request was judged: %+v", rb)
	}

	// 2. Squash-merged by a reviewer: the squash commit is judged. The
	//    Kustomization, still at the commit before, is remembered healthy.
	if err := e.Gitea.MergePull(ctx, "fleet", pr.Number, "squash"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	squash := e.Head("main")
	e.waitAutomation("the squash commit judged", func(a *imagev1.ImageUpdateAutomation) bool {
		rb := a.Status.Rollback
		return a.Status.History[0].Merged == squash && rb != nil && rb.Commit == rev(squash) && len(rb.Before) == 1 && rb.Before[0].State == "Healthy"
	})
	set(true, squash)
	e.waitAutomation("the squash commit reached", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.Rollback.ReachedAt != nil
	})

	// 3. It fails there within the window: a revert request proposes
	//    6.3.0 again, main does not move, and 6.3.1 is held.
	set(false, squash)
	revert := e.open("Update podinfo to 6.3.0")
	if m := e.manifest(head); !strings.Contains(m, line("6.3.0")) {
		t.Fatalf("the revert request does not propose 6.3.0:\n%s", m)
	}
	if e.Head("main") != squash {
		t.Fatal("main moved: the revert was pushed, not proposed")
	}
	a := e.waitAutomation("the rollback recorded", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.Rollback.Reason == imagev1.RolledBackReason && len(a.Status.Holds) == 1
	})
	if h := a.Status.Holds[0]; h.Reason != imagev1.RolledBackReason || h.Value != img+":6.3.0" || h.From != img+":6.3.1" || h.Commit != squash {
		t.Fatalf("hold %+v, want 6.3.1 held at 6.3.0 by the rollback of %s", h, squash)
	}

	// 4. A newer tag ends the hold: the same request now proposes it.
	//    Merged with a merge commit, it reaches the Kustomization that
	//    was failing before: not blamed, nothing proposed.
	e.pushTag("6.3.2")
	next := e.open("Update podinfo to 6.3.2")
	if next.Number != revert.Number {
		t.Errorf("request #%d, want the revert request #%d updated", next.Number, revert.Number)
	}
	e.waitAutomation("the hold ended", func(a *imagev1.ImageUpdateAutomation) bool {
		return len(a.Status.Holds) == 0 && a.Status.History[0].PullRequest == next.Number
	})
	if err := e.Gitea.MergePull(ctx, "fleet", next.Number, "merge"); err != nil {
		t.Fatal(err)
	}
	if err := e.RequestReconcile(ctx, e.auto); err != nil {
		t.Fatal(err)
	}
	merge := e.Head("main")
	e.waitAutomation("the merge commit judged", func(a *imagev1.ImageUpdateAutomation) bool {
		rb := a.Status.Rollback
		return a.Status.History[0].Merged == merge && rb != nil && rb.Commit == rev(merge) && len(rb.Before) == 1 && rb.Before[0].State == "Degraded"
	})
	set(false, merge)
	e.waitAutomation("not blamed", func(a *imagev1.ImageUpdateAutomation) bool {
		return a.Status.Rollback.Reason == imagev1.UnhealthyBeforeReason
	})
	time.Sleep(2 * time.Second)
	if open, err := e.Pulls(ctx, "open"); err != nil || len(open) != 0 {
		t.Fatalf("open requests after a failure that was there before: %+v, %v", open, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(e.auto), e.auto); err != nil || len(e.auto.Status.Holds) != 0 {
		t.Fatalf("holds %+v, %v", e.auto.Status.Holds, err)
	}
}
