package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
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
