package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// With $BENCH_PPROF set to a directory, the chain benchmarks and
// BenchmarkReflectorScale run the controllers with --enable-pprof, take a
// CPU profile of each (and of the API server) over the measured part
// ($BENCH_PPROF_SECONDS, 20 by default), save each one's heap profile and
// metrics at its end (reconciles by result, workqueue waits, API requests
// by verb), and log the API server's requests by verb and resource, e.g.
//
//	BENCH_PPROF=/tmp/prof go test -run '^$' -bench 'BenchmarkMonorepoAutomations/100$' -benchtime 1x ./tests/bench/
//	go tool pprof -top bin/image-automation-controller /tmp/prof/image-automation-controller.cpu.pprof
func pprofArgs() []string {
	if os.Getenv("BENCH_PPROF") == "" {
		return nil
	}
	return []string{"--enable-pprof"}
}

// profile starts the CPU profiles of the controllers procs and, with api
// set, of the API server; the function it returns waits for them and saves
// each controller's heap profile and metrics, and logs the API server's
// requests over the run by verb and resource (the benchmark's own polling
// included).
func profile(ctx context.Context, b *testing.B, procs map[string]*localenv.Process, api *rest.Config) func() {
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
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.MetricsAddr, secs)
			if err := save(ctx, url, filepath.Join(dir, name+".cpu.pprof"), time.Duration(secs+30)*time.Second); err != nil {
				b.Logf("profiling %s: %v", name, err)
			}
		})
		// An execution trace shows where a controller waits, which a
		// CPU profile does not: go tool trace DIR/NAME.trace.
		if os.Getenv("BENCH_TRACE") != "" {
			wg.Go(func() {
				url := fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", p.MetricsAddr, secs)
				if err := save(ctx, url, filepath.Join(dir, name+".trace"), time.Duration(secs+30)*time.Second); err != nil {
					b.Logf("tracing %s: %v", name, err)
				}
			})
		}
	}
	var before map[string]float64
	var rc *rest.RESTClient
	if api != nil {
		// The discovery client's default timeout, 32 s, is shorter than
		// a profile.
		cfg := rest.CopyConfig(api)
		cfg.Timeout = time.Duration(secs+120) * time.Second
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		rc = dc.RESTClient().(*rest.RESTClient)
		if before, err = apiServerRequests(ctx, rc); err != nil {
			b.Fatal(err)
		}
		// kube-apiserver serves Go's profiles to an admin (--profiling
		// is on by default), within its one-minute request timeout.
		wg.Go(func() {
			apiSecs := min(secs, 55)
			ctx, cancel := context.WithTimeout(ctx, time.Duration(apiSecs+60)*time.Second)
			defer cancel()
			raw, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(apiSecs)).DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "kube-apiserver.cpu.pprof"), raw, 0o644)
			}
			if err != nil {
				b.Logf("profiling kube-apiserver: %v", err)
			}
		})
	}
	return func() {
		wg.Wait()
		for name, p := range procs {
			for file, path := range map[string]string{".metrics": "/metrics", ".heap.pprof": "/debug/pprof/heap"} {
				if err := save(ctx, "http://"+p.MetricsAddr+path, filepath.Join(dir, name+file), 30*time.Second); err != nil {
					b.Logf("%s of %s: %v", path, name, err)
				}
			}
		}
		if rc == nil {
			return
		}
		after, err := apiServerRequests(ctx, rc)
		if err != nil {
			b.Logf("API server metrics: %v", err)
			return
		}
		var lines []string
		for k, v := range after {
			if strings.HasPrefix(k, "seconds ") {
				continue
			}
			if d := v - before[k]; d > 0 {
				secs := after["seconds "+k] - before["seconds "+k]
				lines = append(lines, fmt.Sprintf("%8.0f %-40s %7.1f ms mean", d, k, 1000*secs/d))
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(lines)))
		b.Logf("API server requests during the run, by verb and resource, with the API server's mean time to serve one:\n%s", strings.Join(lines, "\n"))
	}
}

// apiServerRequests is the API server's apiserver_request_total summed by
// verb, resource and subresource, watches left out, and under "seconds "
// and the same key, apiserver_request_duration_seconds_sum.
func apiServerRequests(ctx context.Context, rc *rest.RESTClient) (map[string]float64, error) {
	raw, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	label := func(line, name string) string {
		_, v, ok := strings.Cut(line, name+`="`)
		if !ok {
			return ""
		}
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		prefix := ""
		switch {
		case strings.Contains(line, `verb="WATCH"`):
			continue
		case strings.HasPrefix(line, "apiserver_request_total{"):
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_sum{"):
			prefix = "seconds "
		default:
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		key := prefix + label(line, "verb") + " " + label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	return out, nil
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
