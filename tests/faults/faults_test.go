package faults

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// The suite has two lengths. `make test` runs the short one (a few faults
// per scenario, under two minutes in all); `make faults` sets
// IMAGE_TOOLKIT_FAULTS=long for many runs with random timing.
// IMAGE_TOOLKIT_FAULTS_RUNS overrides the number of runs of every scenario,
// and IMAGE_TOOLKIT_FAULTS_SEED the random seed (printed, to replay a
// failure).

func long() bool { return os.Getenv("IMAGE_TOOLKIT_FAULTS") == "long" }

// runs is how many faults a scenario injects: short in `make test` and
// with -short, many in `make faults`.
func runs(short, many int) int {
	if n, err := strconv.Atoi(os.Getenv("IMAGE_TOOLKIT_FAULTS_RUNS")); err == nil && n > 0 {
		return n
	}
	if long() {
		return many
	}
	return short
}

// random returns the scenario's random source, seeded from
// IMAGE_TOOLKIT_FAULTS_SEED or the clock, and logs the seed.
func random(t *testing.T) *rand.Rand {
	seed, err := strconv.ParseUint(os.Getenv("IMAGE_TOOLKIT_FAULTS_SEED"), 10, 64)
	if err != nil {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("IMAGE_TOOLKIT_FAULTS_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// figures logs a scenario's measured figures in one line, for
// docs/reliability.md.
func figures(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURES "+t.Name()+": "+format, args...)
}

// startChain starts the whole chain (tests/internal/chain) with tags in
// its registry, stopped when the test ends.
func startChain(ctx context.Context, t *testing.T, tags []string, opts chain.Options) *chain.Env {
	t.Helper()
	env, err := chain.StartWith(ctx, t.TempDir(), "", tags, func(string) {}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// applySamples applies the sample objects with every interval set to
// interval.
func applySamples(ctx context.Context, t *testing.T, env *chain.Env, interval string) {
	t.Helper()
	samples, err := env.Samples(env.Cluster.Root)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(ctx, strings.ReplaceAll(samples, "interval: 5m", "interval: "+interval)); err != nil {
		t.Fatal(err)
	}
}

// branchHolds reports whether main's sample manifest sets the sample
// policy's marker to tag.
func branchHolds(env *chain.Env, tag string) bool {
	out, err := env.FleetGit("show", "main:"+chain.ManifestPath)
	return err == nil && strings.Contains(out, "podinfo:"+tag+" # {\"$imagepolicy\": \"default:podinfo\"}")
}

// mountTmpfs mounts a tmpfs of size on dir for the rest of the test, or
// skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (this scenario needs root or CAP_SYS_ADMIN): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}
