// Package bench measures the controllers as deployed: their binaries against
// a real control plane, with figures reported by go test -bench.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// tagsRegistry serves the Distribution API's tags/list (with n, last and
// Link pagination) for any repository, each with the same tags.
type tagsRegistry struct {
	tags     []string
	requests atomic.Int64
}

func (r *tagsRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if req.URL.Path == "/v2/" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if !strings.HasSuffix(req.URL.Path, "/tags/list") {
		http.NotFound(w, req)
		return
	}
	q := req.URL.Query()
	tags := r.tags
	if last := q.Get("last"); last != "" {
		tags = tags[sort.SearchStrings(tags, last+"\x00"):]
	}
	if n, err := strconv.Atoi(q.Get("n")); err == nil && n > 0 && n < len(tags) {
		tags = tags[:n]
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {tags[n-1]}}
		w.Header().Set("Link", fmt.Sprintf(`<%s?%s>; rel="next"`, req.URL.Path, next.Encode()))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"name": strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, "/v2/"), "/tags/list"), "tags": tags})
}

func peakRSS(pid int) (float64, error) { return statusMiB(pid, "VmHWM") }

// statusMiB is a kB field of /proc/PID/status, in MiB.
func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// scaleFlags are the reflector's flags in BenchmarkReflectorScale: the
// defaults, and tuned for one registry host serving a thousand repositories.
var scaleFlags = map[string][]string{
	"defaults": nil,
	// The fixed client limits the reflector had by default before the API
	// server's priority and fairness was left to decide.
	"qps200": {"--kube-api-qps=200", "--kube-api-burst=400"},
	"tuned": {"--concurrent=8", "--kube-api-qps=500", "--kube-api-burst=1000",
		"--registry-qps=5000", "--registry-burst=5000"},
}

// BenchmarkReflectorScale: N ImageRepositories of M tags each, with one
// ImagePolicy each, created before the controller starts; measures from
// the controller's start until every policy has a latestRef, with the
// default flags and with tuned ones (scaleFlags).
func BenchmarkReflectorScale(b *testing.B) {
	for _, flags := range []string{"defaults", "qps200", "tuned"} {
		for _, size := range []struct{ repos, tags int }{{200, 500}, {1000, 1000}, {10000, 100}} {
			b.Run(fmt.Sprintf("%s/%dx%d", flags, size.repos, size.tags), func(b *testing.B) {
				// One run is one measurement; b.Loop forbids the stopped
				// timer the set-up needs.
				for range b.N {
					runScale(b, size.repos, size.tags, scaleFlags[flags], semverScale)
				}
			})
		}
	}
}

// BenchmarkReflectorScaleDocker is BenchmarkReflectorScale/defaults with
// the docker policy kind over Docker-style tags (dockerScale).
func BenchmarkReflectorScaleDocker(b *testing.B) {
	for _, size := range []struct{ repos, tags int }{{200, 500}, {1000, 1000}} {
		b.Run(fmt.Sprintf("defaults/%dx%d", size.repos, size.tags), func(b *testing.B) {
			for range b.N {
				runScale(b, size.repos, size.tags, nil, dockerScale)
			}
		})
	}
}

// scaleKind is a repository's tags in BenchmarkReflectorScale, the policy
// that follows them and the tag it picks.
type scaleKind struct {
	tags   func(n int) []string
	policy imagev1.ImagePolicyChoice
	want   func(n int) string
}

// semverScale: n semver tags, 1.0.0 up; the semver policy picks the last.
var semverScale = scaleKind{
	tags: func(n int) []string {
		var tags []string
		for i := range n {
			tags = append(tags, fmt.Sprintf("1.%d.%d", i/100, i%100))
		}
		return tags
	},
	policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
	want:   func(n int) string { return fmt.Sprintf("1.%d.%d", (n-1)/100, (n-1)%100) },
}

// dockerScale: n tags of an official image's shapes, a quarter each of
// 1.N, 1.N-alpine, 1.N-bookworm and 1.N.0; the docker policy compatible
// with 1.0-alpine picks the last -alpine.
var dockerScale = scaleKind{
	tags: func(n int) []string {
		var tags []string
		for i := range n {
			tags = append(tags, fmt.Sprintf("1.%d%s", i/4, []string{"", "-alpine", "-bookworm", ".0"}[i%4]))
		}
		return tags
	},
	policy: imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: ">=1", CompatibleWith: "1.0-alpine"}},
	want:   func(n int) string { return fmt.Sprintf("1.%d-alpine", (n-1)/4) },
}

func runScale(b *testing.B, repos, tags int, flags []string, kind scaleKind) {
	b.StopTimer()
	ctx := context.Background()
	cluster, stop := startCluster(b)
	defer stop()

	reg := &tagsRegistry{tags: kind.tags(tags)}
	sort.Strings(reg.tags)
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	if err := cluster.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	parallel(b, repos, func(i int) error {
		name := fmt.Sprintf("app-%04d", i)
		objs := []client.Object{
			&imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
				Spec: imagev1.ImageRepositorySpec{Image: host + "/team/" + name, Insecure: true,
					Interval: metav1.Duration{Duration: time.Hour}}},
			&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
				Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
					Policy: kind.policy}},
		}
		for _, o := range objs {
			if err := cluster.Client.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})

	// The policies are followed with a watch, not polled: a list of
	// 10,000 policies every 100 ms took a quarter of the API server's CPU
	// from the controller it measures.
	want := kind.want(tags)
	wc, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	var list imagev1.ImagePolicyList
	if err := wc.List(ctx, &list, client.InNamespace("bench")); err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &imagev1.ImagePolicyList{}, client.InNamespace("bench"),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	storage := filepath.Join(b.TempDir(), "store")
	bin := binDir(b, cluster.Root)
	apiPID := apiServerPID(b, cluster)
	apiCPU := cpuSeconds(apiPID)
	b.StartTimer()
	start := time.Now()
	proc, err := cluster.StartController(ctx, bin, "image-reflector-controller",
		append(append([]string{"--leader-elect=false", "--storage-path=" + storage, "--log-level=error"}, pprofArgs()...), flags...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = proc.Stop(20 * time.Second) }()
	profiled := profile(ctx, b, map[string]*localenv.Process{"image-reflector-controller": proc}, cluster.Config)

	resolved := map[string]bool{}
	timeout := time.After(10 * time.Minute)
	for len(resolved) < repos {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				b.Fatalf("watch of the policies ended: %v", ev.Object)
			}
			if p, ok := ev.Object.(*imagev1.ImagePolicy); ok && p.Status.LatestRef != nil && p.Status.LatestRef.Tag == want {
				resolved[p.Name] = true
			}
		case <-timeout:
			b.Fatalf("%d of %d policies resolved after 10 minutes\n%s", len(resolved), repos, proc.Log())
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	apiCPU = cpuSeconds(apiPID) - apiCPU
	ctrlCPU := cpuSeconds(proc.PID())
	profiled()
	rss, err := peakRSS(proc.PID())
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	_ = filepath.WalkDir(storage, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	// The reflector's API requests: writes per object (an ImageRepository
	// and its policy each) and requests per scan.
	m, err := proc.Metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	writes := requestCount(m, "PATCH") + requestCount(m, "PUT")
	all := writes + requestCount(m, "GET") + requestCount(m, "POST") + requestCount(m, "DELETE") + requestCount(m, "LIST")
	b.ReportMetric(float64(writes)/float64(2*repos), "api-writes-per-object")
	b.ReportMetric(float64(all)/float64(repos), "api-requests-per-scan")
	b.ReportMetric(elapsed.Seconds(), "s-to-all-resolved")
	// Where the machine's two cores went: a controller's CPU is taken
	// from the API server's.
	b.ReportMetric(ctrlCPU, "reflector-cpu-s")
	b.ReportMetric(apiCPU, "apiserver-cpu-s")
	b.ReportMetric(rss, "peak-RSS-MiB")
	b.ReportMetric(float64(reg.requests.Load()), "registry-requests")
	b.ReportMetric(float64(reg.requests.Load())/float64(repos), "requests-per-scan")
	b.ReportMetric(float64(size)/(1<<20), "store-MiB")
}

// requestCount sums client-go's rest_client_requests_total of one method
// in a /metrics body.
func requestCount(metrics, method string) int {
	total := 0
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, "rest_client_requests_total{") || !strings.Contains(l, `method="`+method+`"`) {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			f, _ := strconv.ParseFloat(l[i+1:], 64)
			total += int(f)
		}
	}
	return total
}
