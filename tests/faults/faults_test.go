package faults

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
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
