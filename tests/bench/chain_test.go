package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
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

// BenchmarkChainFirstRun is a first run on a cold mirror, what a new
// installation meets: the controllers started with nothing to do, the
// fleet repository grown to 10,000 (100,000) manifests, 100 of them marked,
// with 200 commits of history, and 6.4.0 in the registry beside the 6.3.0
// the files hold. Measured from the samples applied (the automation's
// first look at the repository, the job controller's mirror empty) to the
// first push, then from a new tag (a policy change) to its push. Reports
// each controller's peak RSS over the whole run and the sum of the
// automation's and the job controller's, the figure Flux's one process is
// compared with, and the two controllers' peak RssAnon (sampleAnon).
//
//	go test -run '^$' -bench 'BenchmarkChainFirstRun/100k' -benchtime 1x -timeout 30m ./tests/bench/
//
// The -flat sizes put every manifest in one directory (generated
// manifests often are): one tree of 100,000 entries, 4 MiB, that each
// look-up along a path parses.
func BenchmarkChainFirstRun(b *testing.B) {
	for _, size := range []struct {
		name        string
		files, dirs int
	}{{"10k", 10000, 100}, {"100k", 100000, 100}, {"10k-flat", 10000, 1}, {"100k-flat", 100000, 1}} {
		b.Run(size.name, func(b *testing.B) {
			for range b.N {
				runFirst(b, size.files, size.dirs, 100, 200)
			}
		})
	}
}

func runFirst(b *testing.B, files, dirs, markers, commits int) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, root, stop := startChain(ctx, b, "6.3.0", "6.4.0")
	defer stop()
	if err := env.GrowIn(files, markers, dirs); err != nil {
		b.Fatal(err)
	}
	if err := env.History(commits, files); err != nil {
		b.Fatal(err)
	}
	head := env.Head("main")
	profiled := profile(ctx, b, env.Procs, nil)
	anon := sampleAnon(env.Procs)
	b.StartTimer()
	start := time.Now()
	applySamples(ctx, b, env, root)
	waitPush(ctx, b, env, head, "the first run")
	first := time.Since(start)
	b.StopTimer()
	if out, _ := env.FleetGit("diff", "--stat", head, "main"); !strings.Contains(out, fmt.Sprintf(" %d files changed", markers+1)) {
		b.Fatalf("the first run changed:\n%s", out)
	}

	head = env.Head("main")
	b.StartTimer()
	start = time.Now()
	if err := env.PushTag(ctx, "6.4.1"); err != nil {
		b.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		b.Fatal(err)
	}
	waitPush(ctx, b, env, head, "the policy change")
	change := time.Since(start)
	b.StopTimer()
	peakAnon := anon()
	profiled()
	keepLogs(b, env)

	rss := map[string]float64{}
	for name, p := range env.Procs {
		r, err := peakRSS(p.PID())
		if err != nil {
			b.Fatal(err)
		}
		rss[name] = r
	}
	// What the job controller's memory is at the end: its Go heap
	// (metrics) against its resident anonymous and file-backed pages
	// (libgit2's allocations and mapped packs).
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", env.Procs["update-job-controller"].PID())); err == nil {
		var kept []string
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && slices.Contains([]string{"VmHWM:", "VmRSS:", "RssAnon:", "RssFile:"}, f[0]) {
				kept = append(kept, f[0]+" "+f[1]+" kB")
			}
		}
		b.Logf("update-job-controller at the end: %s", strings.Join(kept, ", "))
	}
	b.ReportMetric(first.Seconds(), "s-to-first-push")
	b.ReportMetric(change.Seconds(), "s-change-to-push")
	b.ReportMetric(rss["image-reflector-controller"], "reflector-peak-RSS-MiB")
	b.ReportMetric(rss["image-automation-controller"], "automation-peak-RSS-MiB")
	b.ReportMetric(rss["update-job-controller"], "updatejob-peak-RSS-MiB")
	b.ReportMetric(rss["image-automation-controller"]+rss["update-job-controller"], "automation+updatejob-MiB")
	b.ReportMetric(peakAnon["image-automation-controller"], "automation-peak-anon-MiB")
	b.ReportMetric(peakAnon["update-job-controller"], "updatejob-peak-anon-MiB")
	b.Logf("load %s at the end", loadavg())
}

// sampleAnon reads each process's RssAnon every 20 ms until the function
// it returns is called, which returns each one's highest, in MiB. RssAnon
// is what a process's own allocations keep resident (the Go heap,
// libgit2's); VmHWM adds its mapped binary, which on this kernel is most
// of the binary's size and varies by some MiB from run to run with the
// page cache.
func sampleAnon(procs map[string]*localenv.Process) func() map[string]float64 {
	// Only the sampler writes peak; the caller reads it after wg.Wait.
	peak := map[string]float64{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for name, p := range procs {
				if v, err := statusMiB(p.PID(), "RssAnon"); err == nil {
					peak[name] = max(peak[name], v)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() map[string]float64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// waitPush waits for the fleet's main to move from head.
func waitPush(ctx context.Context, b *testing.B, env *chain.Env, head, what string) {
	for env.Head("main") == head {
		if ctx.Err() != nil {
			b.Fatalf("%s: no commit: %v", what, ctx.Err())
		}
		time.Sleep(5 * time.Millisecond)
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
		waitPush(ctx, b, env, head, fmt.Sprintf("run %d", i))
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if files > 0 {
			if out, _ := env.FleetGit("diff", "--stat", head, "main"); !strings.Contains(out, fmt.Sprintf(" %d files changed", markers+1)) {
				b.Fatalf("run %d changed:\n%s", i, out)
			}
		}
	}
	profiled()
	keepLogs(b, env)
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

// startChain starts the chain with podinfo's tags (6.3.0 when none given)
// and returns it with the repository's root and what stops it (before ctx
// is cancelled). The
// controllers run with their default flags, and with those in
// $BENCH_CONTROLLER_ARGS (space-separated) added, to find what bounds a
// figure; a figure names them.
func startChain(ctx context.Context, b *testing.B, tags ...string) (*chain.Env, string, func()) {
	if len(tags) == 0 {
		tags = []string{"6.3.0"}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	env, err := chain.StartWith(ctx, b.TempDir(), binDir(b, root), tags, func(string) {},
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
