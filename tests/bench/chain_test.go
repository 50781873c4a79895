package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"

	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
)

// BenchmarkChainLatency measures what users wait for: from a tag pushed to
// the registry (with a reconcile request on the ImageRepository, as a
// registry webhook would send) to the commit on the git server, over 20
// tags, all processes on loopback. Reports p50 and p95.
func BenchmarkChainLatency(b *testing.B) {
	for range b.N {
		runChain(b, 20, 0, 0)
	}
}

// BenchmarkChainLargeRepo is the same on large repositories: 10k is the
// one Flux's automation was measured with, 10,000 manifests, 100 of them
// with a marker; 100k has 100,000 manifests and the same 100 markers, so
// the job changes as much and only the repository grows. A first job,
// with nothing to change, clones the repository into the job
// controller's mirror before the measured 20 runs, as in a running
// system.
//
//	go test -run '^$' -bench 'BenchmarkChainLargeRepo/100k' -benchtime 1x -timeout 30m ./tests/bench/
func BenchmarkChainLargeRepo(b *testing.B) {
	for _, files := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("%dk", files/1000), func(b *testing.B) {
			for range b.N {
				runChain(b, 20, files, 100)
			}
		})
	}
}

func runChain(b *testing.B, runs, files, markers int) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, root, stop := startChain(ctx, b)
	defer stop()
	if files > 0 {
		if err := env.Grow(files, markers); err != nil {
			b.Fatal(err)
		}
	}
	applySamples(ctx, b, env, root)
	// Wait until the automation has settled on 6.3.0 (nothing to do).
	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", "default"
	testenv.Eventually(b, time.Minute, func() (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(iua), iua)
		return iua.Status.ObservedSourceRevision != "", err
	})

	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	var lat []time.Duration
	profiled := profile(ctx, b, env.Procs, env.Cluster.Config)
	for i := range runs {
		head := env.Head("main")
		b.StartTimer()
		start := time.Now()
		if err := env.PushTag(ctx, fmt.Sprintf("6.4.%d", i)); err != nil {
			b.Fatal(err)
		}
		if err := env.RequestReconcile(ctx, repo); err != nil {
			b.Fatal(err)
		}
		for env.Head("main") == head {
			if ctx.Err() != nil {
				b.Fatalf("run %d: no commit: %v", i, ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if files > 0 {
			if out, _ := env.FleetGit("diff", "--stat", head, "main"); !strings.Contains(out, fmt.Sprintf(" %d files changed", markers+1)) {
				b.Fatalf("run %d changed:\n%s", i, out)
			}
		}
	}
	profiled()
	reportLatencies(b, lat, "")
}

// reportLatencies reports the p50, p95 and max of lat (nearest-rank
// percentiles), each metric's unit prefixed with prefix.
func reportLatencies(b *testing.B, lat []time.Duration, prefix string) {
	lat = slices.Clone(lat)
	slices.Sort(lat)
	rank := func(p float64) time.Duration { return lat[int(math.Ceil(p*float64(len(lat))))-1] }
	b.ReportMetric(rank(0.50).Seconds(), prefix+"p50-s")
	b.ReportMetric(rank(0.95).Seconds(), prefix+"p95-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), prefix+"max-s")
}

// startChain starts the chain with podinfo 6.3.0 and returns it with the
// repository's root and what stops it (before ctx is cancelled). The
// controllers run with their default flags, and with those in
// $BENCH_CONTROLLER_ARGS (space-separated) added, to find what bounds a
// figure; a figure names them.
func startChain(ctx context.Context, b *testing.B) (*chain.Env, string, func()) {
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	env, err := chain.StartWith(ctx, b.TempDir(), binDir(b, root), []string{"6.3.0"}, func(string) {},
		chain.Options{ControllerArgs: append(strings.Fields(os.Getenv("BENCH_CONTROLLER_ARGS")), pprofArgs()...)})
	if err != nil {
		b.Fatal(err)
	}
	return env, root, func() {
		if err := env.Stop(); err != nil {
			b.Error(err)
		}
	}
}

// applySamples applies the charts' samples to the chain.
func applySamples(ctx context.Context, b *testing.B, env *chain.Env, root string) {
	samples, err := env.Samples(root)
	if err != nil {
		b.Fatal(err)
	}
	if err := env.Apply(ctx, samples); err != nil {
		b.Fatal(err)
	}
}
