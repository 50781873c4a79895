package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// BenchmarkShardedScale: N ImageRepositories of shardTags tags, one
// ImagePolicy each, and N/10 ImageUpdateAutomations, each applying one of
// those policies to its own app directory (update.path), 100 apps to a git
// repository (branch main), all created before the controllers start.
// Every object carries sharding.toolkit.dev/key: an automation, its policy
// and repository the shard of their git repository (shard g%3 of
// repository g, so that a branch's automations are in one shard), the
// other policies and repositories shard i%3.
//
// replicas=1 runs one of each controller, unsharded; replicas=3 runs three
// shards of each (reflector, automation controller, update-job-controller),
// each with --watch-label-selector=sharding.toolkit.dev/key=shardN. Flags
// are the defaults but --log-level=error (as in BenchmarkReflectorScale).
// Measured from the controllers' start: s-to-all-resolved (every policy
// has its latest tag, seen through a watch) and s-to-all-pushed (every
// app's manifest on main holds it); peak RSS of each replica, the largest
// reported; the API server's CPU seconds over the run. The replicas=3 run
// reports scaling (replicas=1's time to all pushed over its own) when
// replicas=1 of the same size ran before it in the process. Run a size
// with
//
//	go test -run '^$' -bench 'BenchmarkShardedScale/^3000$/' -benchtime 1x -timeout 60m ./tests/bench/
//
// (3000 is the quick check; 30000 the size). With $BENCH_PPROF
// set, each process is CPU-profiled from its start (profile_test.go).
func BenchmarkShardedScale(b *testing.B) {
	pushed := map[int]time.Duration{}
	for _, n := range []int{3000, 10000, 30000} {
		for _, replicas := range []int{1, 3} {
			b.Run(fmt.Sprintf("%d/replicas=%d", n, replicas), func(b *testing.B) {
				for range b.N {
					r := runSharded(b, n, replicas)
					if replicas == 1 {
						pushed[n] = r
					} else if one, ok := pushed[n]; ok {
						b.ReportMetric(one.Seconds()/r.Seconds(), "scaling")
					}
				}
			})
		}
	}
}

const (
	// shardTags are each repository's tags (semverScale's).
	shardTags = 10
	// appsPerGitRepo is how many automations push to one branch.
	appsPerGitRepo = 100
	shardLabel     = "sharding.toolkit.dev/key"
)

func runSharded(b *testing.B, n, replicas int) time.Duration {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	cluster, stop := startCluster(b)
	defer stop()

	host := serveTags(b, semverScale.tags(shardTags))
	want := semverScale.want(shardTags)

	automations := n / 10
	gitRepos := (automations + appsPerGitRepo - 1) / appsPerGitRepo
	git := testgit.New(b, testgit.Options{})
	for g := range gitRepos {
		files := map[string]string{}
		for i := g * appsPerGitRepo; i < min((g+1)*appsPerGitRepo, automations); i++ {
			files[fmt.Sprintf("apps/app-%05d/deploy.yaml", i)] = fmt.Sprintf(
				"image: %s/team/app-%05d:1.0.0 # {\"$imagepolicy\": \"bench:app-%05d\"}\n", host, i, i)
		}
		git.CreateRepo(b, fmt.Sprintf("fleet-%02d", g), files)
	}

	c := cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	shardOf := func(i int) string {
		if i < automations {
			return fmt.Sprintf("shard%d", i/appsPerGitRepo%3+1)
		}
		return fmt.Sprintf("shard%d", i%3+1)
	}
	created := time.Now()
	parallel(b, n, func(i int) error {
		name := fmt.Sprintf("app-%05d", i)
		labels := map[string]string{shardLabel: shardOf(i), "app": name}
		objs := []client.Object{
			&imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: labels},
				Spec: imagev1.ImageRepositorySpec{Image: host + "/team/" + name, Insecure: true,
					Interval: metav1.Duration{Duration: time.Hour}}},
			&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: labels},
				Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
					Policy: semverScale.policy}},
		}
		if i < automations {
			objs = append(objs, &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: labels},
				Spec: imagev1.ImageUpdateAutomationSpec{
					Interval: metav1.Duration{Duration: time.Hour},
					GitSpec: imagev1.GitSpec{
						Repository: &updatev1.GitRepositorySpec{URL: git.RepoURL(fmt.Sprintf("fleet-%02d", i/appsPerGitRepo))},
						Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
						Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "bot", Email: "bot@example.com"}},
					},
					Update:         &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "apps/" + name},
					PolicySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				}})
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})
	b.Logf("%d repositories, %d policies and %d automations on %d git repositories created in %s (load %s)",
		n, n, automations, gitRepos, time.Since(created).Round(time.Second), loadavg())

	// Resolved policies are counted through a watch: listing tens of
	// thousands of policies again and again would load the API server
	// being measured.
	resolved, err := watchResolved(ctx, cluster, want)
	if err != nil {
		b.Fatal(err)
	}

	apiPID := apiServerPID(b, cluster)
	apiCPU := cpuSeconds(apiPID)
	busy, total := machineCPU()

	b.StartTimer()
	start := time.Now()
	procs := startShards(ctx, b, cluster, replicas)
	defer func() {
		for _, p := range procs {
			_ = p.Stop(20 * time.Second)
		}
	}()

	byName := map[string]*localenv.Process{}
	for _, p := range procs {
		byName[filepath.Base(p.LogPath[:len(p.LogPath)-len(".log")])] = p
	}
	profiled := profile(ctx, b, byName, cluster.Config)
	var toResolved, toPushed time.Duration
	for toResolved == 0 || toPushed == 0 {
		if toResolved == 0 && resolved.count() == n {
			toResolved = time.Since(start)
		}
		if toPushed == 0 && allPushed(git, gitRepos, automations, want) {
			toPushed = time.Since(start)
		}
		if ctx.Err() != nil {
			b.Fatalf("after %s: %d of %d policies resolved, every app pushed: %v", time.Since(start), resolved.count(), n, toPushed != 0)
		}
		// Nothing restarts a process here, as a kubelet would: the run
		// cannot finish without it.
		for _, p := range procs {
			if p.Exited() {
				b.Fatalf("%s exited after %s (load %s):\n%s", p.LogPath, time.Since(start).Round(time.Second), loadavg(), p.Log())
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.StopTimer()
	profiled()
	apiCPU = cpuSeconds(apiPID) - apiCPU
	busy2, total2 := machineCPU()
	var ctrlCPU float64
	for _, p := range procs {
		ctrlCPU += cpuSeconds(p.PID())
	}

	rss := map[string]float64{}
	for _, p := range procs {
		r, err := peakRSS(p.PID())
		if err != nil {
			b.Fatal(err)
		}
		rss[p.Name] = max(rss[p.Name], r)
	}
	b.ReportMetric(toResolved.Seconds(), "s-to-all-resolved")
	b.ReportMetric(toPushed.Seconds(), "s-to-all-pushed")
	b.ReportMetric(rss["image-reflector-controller"], "reflector-peak-RSS-MiB")
	b.ReportMetric(rss["image-automation-controller"], "automation-peak-RSS-MiB")
	b.ReportMetric(rss["update-job-controller"], "updatejob-peak-RSS-MiB")
	b.ReportMetric(apiCPU, "apiserver-cpu-s")
	b.ReportMetric(ctrlCPU, "controllers-cpu-s")
	// How busy the machine's cores were over the run, everything on it
	// counted: near 100 the cores, not the controllers, bound the run.
	b.ReportMetric(100*(busy2-busy)/(total2-total), "machine-cpu-busy-%")
	b.Logf("load %s at the end", loadavg())
	return toPushed
}

// serveTags serves tags for every repository (tagsRegistry) until b ends,
// and returns its host.
func serveTags(b *testing.B, tags []string) string {
	reg := &tagsRegistry{tags: slices.Sorted(slices.Values(tags))}
	srv := httptest.NewServer(reg)
	b.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// startShards starts replicas of each controller at once: one unsharded,
// or that many shards.
func startShards(ctx context.Context, b *testing.B, cluster *localenv.Cluster, replicas int) []*localenv.Process {
	var (
		mu    sync.Mutex
		procs []*localenv.Process
		wg    sync.WaitGroup
		errs  []error
	)
	bin := binDir(b, cluster.Root)
	for i := range replicas {
		var args []string
		if replicas > 1 {
			args = []string{fmt.Sprintf("--watch-label-selector=%s=shard%d", shardLabel, i+1)}
		}
		for _, name := range localenv.Controllers {
			wg.Go(func() {
				p, err := cluster.StartInstance(ctx, bin, name, fmt.Sprintf("%s-%d", name, i),
					append([]string{"--log-level=error"}, append(args, pprofArgs()...)...)...)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				procs = append(procs, p)
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		for _, p := range procs {
			_ = p.Stop(5 * time.Second)
		}
		b.Fatal(errs)
	}
	return procs
}

// resolvedPolicies counts the policies whose latest tag is the wanted one.
type resolvedPolicies struct {
	mu   sync.Mutex
	done map[string]bool
}

func (r *resolvedPolicies) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

func (r *resolvedPolicies) see(obj any, want string) {
	p, ok := obj.(*imagev1.ImagePolicy)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Status.LatestRef != nil && p.Status.LatestRef.Tag == want {
		r.done[p.Name] = true
	}
}

// watchResolved watches the bench namespace's ImagePolicies until ctx ends.
func watchResolved(ctx context.Context, cluster *localenv.Cluster, want string) (*resolvedPolicies, error) {
	c, err := cache.New(cluster.Config, cache.Options{Scheme: cluster.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{"bench": {}}})
	if err != nil {
		return nil, err
	}
	inf, err := c.GetInformer(ctx, &imagev1.ImagePolicy{})
	if err != nil {
		return nil, err
	}
	ctrllog.SetLogger(logr.Discard()) // the cache logs through it
	r := &resolvedPolicies{done: map[string]bool{}}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.see(obj, want) },
		UpdateFunc: func(_, obj any) { r.see(obj, want) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the policy watch did not sync")
	}
	return r, nil
}

// allPushed reports whether main of every git repository holds tag in
// each of its apps.
func allPushed(git *testgit.Server, repos, apps int, tag string) bool {
	for g := range repos {
		// git grep fails when nothing matches yet.
		out, _ := exec.Command("git", "-C", git.BarePath(fmt.Sprintf("fleet-%02d", g)),
			"grep", "-c", ":"+tag+" ", "main", "--", "apps").Output()
		if strings.Count(string(out), "\n") < min(appsPerGitRepo, apps-g*appsPerGitRepo) {
			return false
		}
	}
	return true
}

// apiServerPID is the process of the cluster's kube-apiserver.
func apiServerPID(b *testing.B, cluster *localenv.Cluster) int {
	b.Helper()
	u, err := url.Parse(cluster.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		b.Fatal(err)
	}
	pid, err := localenv.APIServerPID(port)
	if err != nil {
		b.Fatal(err)
	}
	return pid
}

// cpuSeconds is the user and system CPU time of pid so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// machineCPU is /proc/stat's busy and total CPU time of all cores, in
// clock ticks.
func machineCPU() (busy, total float64) {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		total += x
		if i != 3 && i != 4 {
			busy += x
		}
	}
	return busy, total
}

// loadavg is /proc/loadavg's three load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
