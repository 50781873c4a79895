package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// With $BENCH_PPROF set to a directory, the chain benchmarks run the
// controllers with --enable-pprof, take a CPU profile of each over the
// measured part ($BENCH_PPROF_SECONDS, 20 by default) and save each one's
// metrics at its end (reconciles by result, workqueue waits, API requests
// by verb), e.g.
//
//	BENCH_PPROF=/tmp/prof go test -run '^$' -bench 'BenchmarkMonorepoAutomations/100$' -benchtime 1x ./tests/bench/
//	go tool pprof -top bin/image-automation-controller /tmp/prof/image-automation-controller.cpu.pprof
func pprofArgs() []string {
	if os.Getenv("BENCH_PPROF") == "" {
		return nil
	}
	return []string{"--enable-pprof"}
}

// profile starts the CPU profiles of procs (by name); the function it
// returns waits for them and saves the metrics.
func profile(ctx context.Context, b *testing.B, procs map[string]*localenv.Process) func() {
	dir := os.Getenv("BENCH_PPROF")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	secs, err := strconv.Atoi(os.Getenv("BENCH_PPROF_SECONDS"))
	if err != nil || secs <= 0 {
		secs = 20
	}
	var wg sync.WaitGroup
	for name, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.MetricsAddr, secs)
			if err := save(ctx, url, filepath.Join(dir, name+".cpu.pprof"), time.Duration(secs+30)*time.Second); err != nil {
				b.Logf("profiling %s: %v", name, err)
			}
		}()
	}
	return func() {
		wg.Wait()
		for name, p := range procs {
			if err := save(ctx, "http://"+p.MetricsAddr+"/metrics", filepath.Join(dir, name+".metrics"), 30*time.Second); err != nil {
				b.Logf("metrics of %s: %v", name, err)
			}
		}
	}
}

func save(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
