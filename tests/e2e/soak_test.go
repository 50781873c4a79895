package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Soak time through the three controllers: with a minimum age on the
// sample policy, a newly pushed tag first shows as the policy's pendingRef
// while git keeps the old image, and is committed by itself once old
// enough (8 s here, real time: the binaries have no test clock), in a
// commit made no earlier than pendingRef.eligibleAt.
func TestChainMinimumAge(t *testing.T) {
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
	first := waitHead(t, env, "main", start)

	c := env.Cluster.Client
	p := &imagev1.ImagePolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: 8 * time.Second}}
	if err := c.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}

	// The policy holds 6.5.0 back for 8 s: long enough to be seen here.
	var eligibleAt time.Time
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, err
		}
		if pr := p.Status.PendingRef; pr != nil && pr.Tag == "6.5.0" {
			if pr.EligibleAt != nil {
				eligibleAt = pr.EligibleAt.Time
			}
			return true, nil
		}
		return false, nil
	})
	if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "6.4.0" {
		t.Errorf("while 6.5.0 soaks, latestRef is %+v; want 6.4.0", p.Status.LatestRef)
	}

	second := waitHead(t, env, "main", first)
	host := env.RegistryHost + "/" + chain.Image
	checkCommit(t, env, second, first, "imagebot <imagebot@example.com>",
		fmt.Sprintf("Update images in default/fleet\n\n- %[1]s:6.4.0 -> %[1]s:6.5.0\n", host),
		"-        image: "+host+":6.4.0 # {\"$imagepolicy\": \"default:podinfo\"}\n"+
			"+        image: "+host+":6.5.0 # {\"$imagepolicy\": \"default:podinfo\"}\n")
	ct, err := strconv.ParseInt(strings.TrimSpace(must(env.FleetGit("show", "-s", "--format=%ct", second))), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if committed := time.Unix(ct, 0); committed.Before(eligibleAt) {
		t.Errorf("6.5.0 committed at %s, before it was old enough at %s", committed, eligibleAt)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	if p.Status.PendingRef != nil {
		t.Errorf("pendingRef %+v after the soak", p.Status.PendingRef)
	}
}
