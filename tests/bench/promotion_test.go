package bench

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

// promotionSoak is the soak of the benchmarks' promotion policies: short,
// so that a run takes minutes; the figures say it.
const promotionSoak = 5 * time.Second

// BenchmarkPromotionLatency measures what a promotion adds to its soak:
// from dev's Kustomization written Healthy at dev's commit to prod's commit
// on the git server, over 10 promotions, default flags, soak 5 s. The
// Kustomization is chain.PromotionObjects' stand-in, its status written as
// kustomize-controller writes it (tests/node runs the real one, once);
// dev is the sample automation moved by a tag, prod the automation "live".
// Reports p50, p95 and max of that time, and of it less the soak.
//
//	go test -run '^$' -bench BenchmarkPromotionLatency ./tests/bench/
func BenchmarkPromotionLatency(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		env, c, stop := startPromotionChain(ctx, b, 0)
		fleet := &imagev1.ImageUpdateAutomation{}
		fleet.Name, fleet.Namespace = "fleet", "default"
		repo := &imagev1.ImageRepository{}
		repo.Name, repo.Namespace = "podinfo", "default"
		var lat, over []time.Duration
		for i := range 10 {
			tag := fmt.Sprintf("6.4.%d", i)
			devCommit := releaseToDev(ctx, b, env, c, fleet, repo, tag)
			start := time.Now()
			if err := chain.SetKustomization(ctx, c, "default", "apps-dev", true, fleet.Status.AppliedRevision); err != nil {
				b.Fatal(err)
			}
			waitBranch(ctx, b, env, devCommit, chain.LivePath, chain.Image+":"+tag+" ")
			lat = append(lat, time.Since(start))
			over = append(over, lat[len(lat)-1]-promotionSoak)
		}
		reportLatencies(b, lat, "")
		reportLatencies(b, over, "after-soak-")
		b.ReportMetric(promotionSoak.Seconds(), "soak-s")
		stop()
		cancel()
	}
}

// BenchmarkPromotionIdleRequests counts what promotion policies cost the
// API server while nothing happens: 20 policies promoted from the sample
// automation, then a minute of idleness, default flags. Reports the API
// server's own count of requests that are not watches on the resources a
// promotion reads and writes (ImagePolicies, ImageUpdateAutomations,
// Kustomizations, ImageRepositories), from every client, so an upper
// bound on the policies' share, per policy per minute; and the
// reflector's ImagePolicy reconciles in that minute.
//
//	go test -run '^$' -bench BenchmarkPromotionIdleRequests ./tests/bench/
func BenchmarkPromotionIdleRequests(b *testing.B) {
	const policies, window = 20, time.Minute
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		env, c, stop := startPromotionChain(ctx, b, policies-1)
		fleet := &imagev1.ImageUpdateAutomation{}
		fleet.Name, fleet.Namespace = "fleet", "default"
		testenv.Eventually(b, time.Minute, func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(fleet), fleet)
			return fleet.Status.AppliedRevision != "", err
		})
		if err := chain.SetKustomization(ctx, c, "default", "apps-dev", true, fleet.Status.AppliedRevision); err != nil {
			b.Fatal(err)
		}
		// Every policy promoted; then nothing changes.
		waitPromoted(ctx, b, c, policies, 2*time.Minute)
		time.Sleep(5 * time.Second) // the status writes of the last promotions land
		reflector := env.Procs["image-reflector-controller"]
		b.ResetTimer()
		before, err := testenv.APIRequests(ctx, env.Cluster.Config, "imagepolicies", "imageupdateautomations", "kustomizations", "imagerepositories")
		if err != nil {
			b.Fatal(err)
		}
		reconciles := policyReconciles(ctx, b, reflector.Metrics)
		// Both counters have counted the setup: they measure what they say.
		if before == 0 || reconciles == 0 {
			b.Fatalf("%v API requests and %v ImagePolicy reconciles counted while 20 policies promoted", before, reconciles)
		}
		time.Sleep(window)
		after, err := testenv.APIRequests(ctx, env.Cluster.Config, "imagepolicies", "imageupdateautomations", "kustomizations", "imagerepositories")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		perMinute := float64(time.Minute) / float64(window)
		b.ReportMetric((after-before)/policies*perMinute, "requests/policy/min")
		b.ReportMetric((policyReconciles(ctx, b, reflector.Metrics)-reconciles)*perMinute, "policy-reconciles/min")
		stop()
		cancel()
	}
}

// startPromotionChain starts the chain (chain.PromotionObjects with
// promotionSoak, prod at 6.3.0 in chain.LivePath), creates dev's stand-in
// Kustomization apps-dev, and adds extra promotion policies like
// podinfo-prod, named podinfo-prod-N, selected by no automation.
func startPromotionChain(ctx context.Context, b *testing.B, extra int) (*chain.Env, client.Client, func()) {
	env, root, stop := startChain(ctx, b)
	if _, err := env.Commit(map[string]string{chain.LivePath: chain.LiveManifest(env.RegistryHost)}, "prod runs 6.3.0"); err != nil {
		b.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		b.Fatal(err)
	}
	objects := samples + "\n---\n" + fmt.Sprintf(chain.PromotionObjects, promotionSoak, env.RepoURL)
	for i := range extra {
		objects += fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: podinfo-prod-%d}
spec:
  imageRepositoryRef: {name: podinfo}
  policy:
    promotion:
      from: {automation: fleet}
      healthOf:
      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}
      soak: %s
`, i, promotionSoak)
	}
	if err := env.Apply(ctx, objects); err != nil {
		b.Fatal(err)
	}
	c := env.Cluster.Client
	ks := chain.Kustomization("default", "apps-dev")
	testenv.Eventually(b, time.Minute, func() (bool, error) { return c.Create(ctx, ks) == nil, nil })
	return env, c, stop
}

// waitPromoted waits until n promotion policies of namespace default have
// promoted.
func waitPromoted(ctx context.Context, b *testing.B, c client.Client, n int, timeout time.Duration) {
	testenv.Eventually(b, timeout, func() (bool, error) {
		l := &imagev1.ImagePolicyList{}
		if err := c.List(ctx, l, client.InNamespace("default")); err != nil {
			return false, err
		}
		promoted := 0
		for _, p := range l.Items {
			if p.Spec.Policy.Promotion != nil && p.Status.LatestRef != nil {
				promoted++
			}
		}
		return promoted == n, nil
	})
}

// releaseToDev pushes tag, scans the repository at once, and waits for
// dev's commit of it and for the automation fleet to record it applied;
// it returns dev's commit.
func releaseToDev(ctx context.Context, b *testing.B, env *chain.Env, c client.Client, fleet *imagev1.ImageUpdateAutomation, repo *imagev1.ImageRepository, tag string) string {
	head := env.Head("main")
	if err := env.PushTag(ctx, tag); err != nil {
		b.Fatal(err)
	}
	if err := env.RequestReconcile(ctx, repo); err != nil {
		b.Fatal(err)
	}
	devCommit := waitBranch(ctx, b, env, head, "clusters/prod/podinfo.yaml", chain.Image+":"+tag+" ")
	testenv.Eventually(b, time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(fleet), fleet)
		return strings.HasSuffix(fleet.Status.AppliedRevision, devCommit), err
	})
	return devCommit
}

// waitBranch waits until main moved from head and its file holds want,
// and returns main's commit.
func waitBranch(ctx context.Context, b *testing.B, env *chain.Env, head, file, want string) string {
	for {
		if h := env.Head("main"); h != head {
			if out, err := env.FleetGit("show", "main:"+file); err == nil && strings.Contains(out, want) {
				return h
			}
		}
		if ctx.Err() != nil {
			b.Fatalf("no commit on main with %s in %s: %v", want, file, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// policyReconciles is the reflector's count of ImagePolicy reconciles,
// read from its /metrics.
func policyReconciles(ctx context.Context, b *testing.B, metrics func(context.Context) (string, error)) float64 {
	body, err := metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "controller_runtime_reconcile_total{") && strings.Contains(line, `controller="imagepolicy"`) {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				b.Fatal(err)
			}
			total += v
		}
	}
	return total
}

// BenchmarkRollbackLatency measures spec.rollback: from dev's
// Kustomization written failing its health check at the automation's
// commit (written Healthy at the commit before: the failure is the
// commit's) to
// the revert commit on the git server, over 5 bad releases, default
// flags, window 5 m. The Kustomization is the stand-in of
// BenchmarkPromotionLatency; each next release is newer than the one
// rolled back from, which ends the revert's hold. Reports p50, p95 and
// max.
//
//	go test -run '^$' -bench BenchmarkRollbackLatency ./tests/bench/
func BenchmarkRollbackLatency(b *testing.B) {
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		env, c, stop := startPromotionChain(ctx, b, 0)
		fleet := &imagev1.ImageUpdateAutomation{}
		fleet.Name, fleet.Namespace = "fleet", "default"
		if err := c.Get(ctx, client.ObjectKeyFromObject(fleet), fleet); err != nil {
			b.Fatal(err)
		}
		patch := client.MergeFrom(fleet.DeepCopy())
		fleet.Spec.Rollback = &imagev1.RollbackSpec{Window: metav1.Duration{Duration: 5 * time.Minute},
			HealthOf: []imagev1.HealthObjectReference{{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-dev"}}}
		if err := c.Patch(ctx, fleet, patch); err != nil {
			b.Fatal(err)
		}
		repo := &imagev1.ImageRepository{}
		repo.Name, repo.Namespace = "podinfo", "default"
		line := func(tag string) string { return ":" + tag + ` # {"$imagepolicy": "default:podinfo"}` }
		var lat []time.Duration
		for i := range 5 {
			// What runs before the automation's commit is healthy, so
			// that a failure at the commit is blamed on it.
			head := env.Head("main")
			if err := chain.SetKustomization(ctx, c, "default", "apps-dev", true, "main@sha1:"+head); err != nil {
				b.Fatal(err)
			}
			tag := fmt.Sprintf("6.4.%d", i)
			if err := env.PushTag(ctx, tag); err != nil {
				b.Fatal(err)
			}
			if err := env.RequestReconcile(ctx, repo); err != nil {
				b.Fatal(err)
			}
			devCommit := waitBranch(ctx, b, env, head, chain.ManifestPath, line(tag))
			applied := "main@sha1:" + devCommit
			testenv.Eventually(b, time.Minute, func() (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(fleet), fleet)
				r := fleet.Status.Rollback
				return r != nil && r.Commit == applied && len(r.Before) == 1 && r.Before[0].State == "Healthy", err
			})
			start := time.Now()
			if err := chain.SetKustomization(ctx, c, "default", "apps-dev", false, applied); err != nil {
				b.Fatal(err)
			}
			// Every revert goes back to 6.3.0: the releases between were
			// reverted.
			waitBranch(ctx, b, env, devCommit, chain.ManifestPath, line("6.3.0"))
			lat = append(lat, time.Since(start))
		}
		reportLatencies(b, lat, "")
		stop()
		cancel()
	}
}
