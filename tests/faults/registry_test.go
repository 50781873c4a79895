package faults

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// TestRegistryFaultsNeverDowngrade proves that a registry that fails
// (500s, a 429 storm, a listing cut mid-body, an empty list) or flaps (a
// listing that misses the current tag once) never moves a policy's
// latestRef, nor the git branch, to a lower version; that a tag missing
// from two consecutive complete scans is taken as removed (the policy
// moves); and that a newer tag pushed once the registry heals reaches git.
func TestRegistryFaultsNeverDowngrade(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	proxy := NewRegistryProxy(strings.TrimPrefix(reg.URL, "http://"))
	t.Cleanup(proxy.Close)

	env := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{RegistryHost: proxy.Host})
	// Scan every second, so that each fault meets several scans.
	applySamples(ctx, t, env, "1s")
	waitFor(t, 60*time.Second, "the branch at 6.4.0", func() bool { return branchHolds(env, "6.4.0") })

	pol := &imagev1.ImagePolicy{}
	latest := func() string {
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, pol); err != nil || pol.Status.LatestRef == nil {
			return ""
		}
		return pol.Status.LatestRef.Tag
	}
	var downgrades int
	for _, tt := range []struct {
		fault    RegistryFault
		listings int // listings answered with the fault
	}{
		{Error500, runs(5, 30)},
		{RateLimited, runs(10, 60)},
		{Truncated, runs(5, 30)},
		{Empty, runs(3, 20)},
		// One listing without the current tag: a flap, not a removal.
		{Hide, 1},
	} {
		before := proxy.Listings.Load()
		proxy.Set(tt.fault, tt.listings, "6.4.0")
		// Scans run every second, failed ones back off to the interval.
		limit := time.Duration(tt.listings+2)*3*time.Second + 30*time.Second
		deadline := time.Now().Add(limit)
		// Watch the policy and the branch through the fault and two clean
		// listings after it.
		for proxy.Listings.Load() < before+int64(tt.listings)+2 {
			if l := latest(); l != "" && l != "6.4.0" {
				downgrades++
				t.Errorf("fault %s: latestRef moved from 6.4.0 to %s", tt.fault, l)
				break
			}
			if !branchHolds(env, "6.4.0") {
				downgrades++
				t.Errorf("fault %s: the branch left 6.4.0", tt.fault)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fault %s: %d listings in %s, want %d", tt.fault, proxy.Listings.Load()-before, limit, tt.listings+2)
			}
			time.Sleep(50 * time.Millisecond)
		}
		proxy.Set(NoFault, 0)
		t.Logf("fault %s: %d listings, latestRef %s", tt.fault, proxy.Listings.Load()-before, latest())
	}

	// The other half of the rule: a tag gone from two consecutive
	// complete scans is gone, and the policy moves to the best tag left.
	before := proxy.Listings.Load()
	proxy.Set(Hide, -1, "6.4.0")
	waitFor(t, 60*time.Second, "latestRef 6.3.0 once 6.4.0 is gone", func() bool { return latest() == "6.3.0" })
	if n := proxy.Listings.Load() - before; n < 2 {
		t.Errorf("latestRef moved after %d listing(s) without 6.4.0, want at least 2", n)
	}
	t.Logf("hide for good: latestRef moved after %d listings", proxy.Listings.Load()-before)
	proxy.Set(NoFault, 0)

	// Healed: a newer tag lands.
	healed := time.Now()
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the branch at 6.5.0", func() bool { return branchHolds(env, "6.5.0") })
	figures(t, "listings %d, faulted %d, downgrades %d, newer tag in git %s after the registry healed",
		proxy.Listings.Load(), proxy.Faulted.Load(), downgrades, time.Since(healed).Round(100*time.Millisecond))
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
