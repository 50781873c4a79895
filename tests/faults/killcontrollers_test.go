package faults

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// holdProxy forwards to a server and, when armed, holds the next request
// that match accepts: it sends the real answer's headers and half its body
// (mid-response for the client), signals that the request is in flight and
// keeps the connection open until the client goes away (killed) or 30 s
// pass. Everything else is forwarded untouched.
type holdProxy struct {
	URL   string
	Host  string
	proxy *httputil.ReverseProxy
	srv   *httptest.Server
	match func(*http.Request) bool

	mu       sync.Mutex
	inFlight chan struct{} // non-nil while armed; closed when a request is held
	held     int
}

func newHoldProxy(target string, match func(*http.Request) bool) (*holdProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	h := &holdProxy{proxy: httputil.NewSingleHostReverseProxy(u), match: match}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	h.URL = h.srv.URL
	h.Host = strings.TrimPrefix(h.srv.URL, "http://")
	return h, nil
}

// arm makes the next matching request be held; the channel closes when it is.
func (h *holdProxy) arm() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight = make(chan struct{})
	return h.inFlight
}

// disarm forgets an arming no request took.
func (h *holdProxy) disarm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight = nil
}

func (h *holdProxy) serve(w http.ResponseWriter, req *http.Request) {
	h.mu.Lock()
	ch := h.inFlight
	if ch != nil && h.match(req) {
		h.inFlight = nil
		h.held++
	} else {
		ch = nil
	}
	h.mu.Unlock()
	if ch == nil {
		h.proxy.ServeHTTP(w, req)
		return
	}
	rec := httptest.NewRecorder()
	h.proxy.ServeHTTP(rec, req)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes()[:rec.Body.Len()/2])
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	close(ch)
	select {
	case <-req.Context().Done():
	case <-time.After(30 * time.Second):
	}
	panic(http.ErrAbortHandler)
}

// killEnv is a chain whose registry, or git server, is reached through a
// holdProxy, without leader election: a restarted controller would
// otherwise wait out its killed predecessor's Lease (15 s, measured by
// TestKillReflectorDamagedStore) before each recovery.
func killEnv(ctx context.Context, t *testing.T, holdRegistry bool, automationInterval string) (*chain.Env, *holdProxy) {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	opts := chain.Options{ControllerArgs: []string{"--leader-elect=false"}}
	var hold *holdProxy
	var err error
	if holdRegistry {
		hold, err = newHoldProxy(reg.URL, func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/tags/list") })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hold.srv.Close)
		opts.RegistryHost = hold.Host
	} else {
		opts.RegistryHost = strings.TrimPrefix(reg.URL, "http://")
	}
	env := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, opts)
	samples, err := env.Samples(env.Cluster.Root)
	if err != nil {
		t.Fatal(err)
	}
	samples = strings.Replace(samples, "interval: 5m", "interval: 2s", 1) // the ImageRepository
	samples = strings.Replace(samples, "interval: 5m", "interval: "+automationInterval, 1)
	if !holdRegistry {
		// The automation reads the branch (and its jobs fetch and push)
		// through the proxy, which holds upload-pack requests when armed.
		base := strings.TrimSuffix(env.RepoURL, "/fleet.git")
		hold, err = newHoldProxy(base, func(r *http.Request) bool {
			return strings.Contains(r.URL.Path, "upload-pack") || r.URL.Query().Get("service") == "git-upload-pack"
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hold.srv.Close)
		samples = strings.ReplaceAll(samples, "url: "+env.RepoURL, "url: "+hold.URL+"/fleet.git")
	}
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the branch at 6.4.0", func() bool { return branchTag(env) == "6.4.0" })
	return env, hold
}

// branchTag is the podinfo policy's tag on the branch.
func branchTag(env *chain.Env) string {
	out, err := env.FleetGit("show", "main:"+chain.ManifestPath)
	if err != nil {
		return ""
	}
	return markerTag(out, "default:podinfo")
}

// landings counts, along the branch's history since base, the commits that
// set each podinfo tag, the commits that moved it down, and those that left
// it as it was: only podinfo's policy selects the automation, so such a
// commit is a change pushed again.
func landings(t *testing.T, env *chain.Env, base string) (seen map[string]int, downgrades, again int) {
	t.Helper()
	seen = map[string]int{}
	prev := markerTag(gitOutE(t, env, "show", base+":"+chain.ManifestPath), "default:podinfo")
	for _, c := range strings.Fields(gitOutE(t, env, "rev-list", "--reverse", base+"..main")) {
		tag := markerTag(gitOutE(t, env, "show", c+":"+chain.ManifestPath), "default:podinfo")
		if tag == prev {
			again++
			continue
		}
		seen[tag]++
		if semverLess(tag, prev) {
			downgrades++
		}
		prev = tag
	}
	return seen, downgrades, again
}

// restart starts a killed controller again, keeping the killed one's log.
func restart(ctx context.Context, t *testing.T, env *chain.Env, name string, i int) *localenv.Process {
	t.Helper()
	old := env.Procs[name]
	_ = os.Rename(old.LogPath, fmt.Sprintf("%s.killed-%d", old.LogPath, i))
	p, err := env.Cluster.StartController(ctx, localenv.BinDir(env.Cluster.Root), name, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	env.Procs[name] = p
	return p
}

// TestKillReflectorDuringScan proves that kill -9 of the
// image-reflector-controller while a scan is in flight (the tag listing
// half received) serves no half-written tag store: the policy never names a
// tag the registry lacks nor moves down; the restarted controller scans
// again, its ImageRepository ends Ready with a scan result counting every
// tag, its metrics count the scans and the stored tags, and the tag pushed
// just before the kill reaches git exactly once.
func TestKillReflectorDuringScan(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rnd := random(t)
	n := runs(2, 12)
	env, hold := killEnv(ctx, t, true, "1s")
	base := env.Head("main")
	const name = "image-reflector-controller"
	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}
	pushed := map[string]bool{"6.3.0": true, "6.4.0": true}

	var kills, downgrades, wrong int
	var recovery []time.Duration
	expected := []string{}
	for i := 1; i <= n; i++ {
		tag := fmt.Sprintf("6.%d.0", 4+i)
		prev := fmt.Sprintf("6.%d.0", 3+i)
		inFlight := hold.arm()
		if err := env.PushTag(ctx, tag); err != nil {
			t.Fatal(err)
		}
		pushed[tag] = true
		expected = append(expected, tag)
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d: no tag listing in 30 s; log:\n%s", i, env.Procs[name].Log())
		}
		if long() {
			// Random timing: the reflector may be mid-read or waiting.
			time.Sleep(time.Duration(rnd.Int64N(int64(300 * time.Millisecond))))
		}
		env.Procs[name].Kill()
		killed := time.Now()
		kills++
		// While it is down the policy stays where it was.
		time.Sleep(time.Duration(rnd.Int64N(int64(time.Second))))
		p := restart(ctx, t, env, name, i)
		deadline := time.Now().Add(60 * time.Second)
		pol := &imagev1.ImagePolicy{}
		for branchTag(env) != tag {
			if err := env.Cluster.Client.Get(ctx, key, pol); err == nil && pol.Status.LatestRef != nil {
				l := pol.Status.LatestRef.Tag
				if !pushed[l] {
					wrong++
					t.Fatalf("run %d: the policy serves %s, a tag the registry never had", i, l)
				}
				if semverLess(l, prev) {
					downgrades++
					t.Fatalf("run %d: the policy moved down to %s", i, l)
				}
			}
			if bt := branchTag(env); bt != prev && bt != tag {
				t.Fatalf("run %d: the branch holds %s, want %s or %s", i, bt, prev, tag)
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: %s not in git 60 s after the restart; log:\n%s", i, tag, p.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		recovery = append(recovery, time.Since(killed))

		repo := &imagev1.ImageRepository{}
		waitFor(t, 30*time.Second, "the ImageRepository Ready with every tag", func() bool {
			if err := env.Cluster.Client.Get(ctx, key, repo); err != nil || repo.Status.LastScanResult == nil {
				return false
			}
			c := meta.FindStatusCondition(repo.Status.Conditions, "Ready")
			return c != nil && c.Status == "True" && repo.Status.LastScanResult.TagCount == len(pushed) &&
				repo.Status.LastScanResult.ScanTime.After(killed.Add(-time.Second))
		})
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m, fmt.Sprintf(`imagetoolkit_reflector_stored_tags{name="podinfo",namespace="default"} %d`, len(pushed))) ||
			strings.Contains(m, `imagetoolkit_reflector_scans_total{result="scanned"} 0`) || !strings.Contains(m, `imagetoolkit_reflector_scans_total{result="scanned"}`) {
			t.Errorf("run %d: metrics after the restart:\n%s", i, grepLines(m, "imagetoolkit_reflector_s"))
		}
	}
	seen, down, again := landings(t, env, base)
	downgrades += down
	landed, duplicates := 0, again
	for _, tag := range expected {
		if seen[tag] > 0 {
			landed++
		}
		if seen[tag] > 1 {
			duplicates++
		}
	}
	if landed != len(expected) || duplicates != 0 || downgrades != 0 {
		t.Errorf("changes expected %d, landed %d, duplicates %d, downgrades %d:\n%s", len(expected), landed, duplicates, downgrades,
			gitOutE(t, env, "log", "--format=%h %s", base+"..main"))
	}
	var worst time.Duration
	for _, r := range recovery {
		worst = max(worst, r)
	}
	figures(t, "runs %d, kills %d (listings held mid-body %d), changes expected %d landed %d, duplicates %d, downgrades %d, wrong tags served %d, recovery (kill to commit) max %s, all %v",
		n, kills, hold.held, len(expected), landed, duplicates, downgrades, wrong, worst.Round(100*time.Millisecond), roundAll(recovery))
}

// TestKillAutomationController proves that kill -9 of the
// image-automation-controller while it reads the branch (the git server
// holds its fetch mid-answer), right after it made an UpdateJob (before it
// could record the job), or at a random moment, loses no change and doubles
// none: each tag lands in git exactly once, no two UpdateJobs push one
// change, no job stays Pending, and the automation ends Ready with
// status.lastPushCommit the branch head.
func TestKillAutomationController(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rnd := random(t)
	points := []string{"reading the branch", "job created", "random"}
	n := runs(3, 15)
	env, hold := killEnv(ctx, t, false, "1s")
	base := env.Head("main")
	const name = "image-automation-controller"

	listJobs := func() map[string]updatev1.UpdateJob {
		var jobs updatev1.UpdateJobList
		if err := env.Cluster.Client.List(ctx, &jobs, client.InNamespace("default")); err != nil {
			return nil
		}
		out := map[string]updatev1.UpdateJob{}
		for _, j := range jobs.Items {
			out[j.Name] = j
		}
		return out
	}
	// created carries the name of each UpdateJob the watch sees added
	// while a run waits for one; the others (those that existed when the
	// watch began, those of other runs) are dropped.
	wc, err := client.NewWithWatch(env.Cluster.Config, client.Options{Scheme: env.Cluster.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &updatev1.UpdateJobList{}, client.InNamespace("default"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	created := make(chan string)
	go func() {
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*updatev1.UpdateJob)
			if ev.Type != "ADDED" || !ok {
				continue
			}
			select {
			case created <- j.Name:
			default: // no run is waiting for it
			}
		}
	}()
	var kills, unrecorded int
	killsAt := map[string]int{}
	var recovery []time.Duration
	var expected []string
	for i := 1; i <= n; i++ {
		point := points[(i-1)%len(points)]
		tag := fmt.Sprintf("6.%d.0", 4+i)
		var newJob string
		var inFlight <-chan struct{}
		if point == "reading the branch" {
			inFlight = hold.arm()
		}
		if err := env.PushTag(ctx, tag); err != nil {
			t.Fatal(err)
		}
		expected = append(expected, tag)
		switch point {
		case "reading the branch":
			// The automation reads the branch every second; no job runs
			// (the last one ended), so the next upload-pack is its read.
			select {
			case <-inFlight:
			case <-time.After(30 * time.Second):
				t.Fatalf("run %d: no branch read in 30 s", i)
			}
		case "job created":
			// A watch on UpdateJobs tells of the new job about a
			// millisecond after the API server stored it, while the
			// automation, answered at the same moment, records an event
			// and then writes its status: kill in that window.
			select {
			case newJob = <-created:
			case <-time.After(30 * time.Second):
				t.Fatalf("run %d: no new UpdateJob in 30 s; log:\n%s", i, env.Procs[name].Log())
			}
		case "random":
			time.Sleep(time.Duration(rnd.Int64N(int64(2 * time.Second))))
		}
		env.Procs[name].Kill()
		killed := time.Now()
		kills++
		killsAt[point]++
		hold.disarm()
		if newJob != "" {
			// Did the kill beat the status write that owns up to the job?
			auto := &imagev1.ImageUpdateAutomation{}
			if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, auto); err == nil {
				recorded := false
				for _, c := range auto.Status.Conditions {
					recorded = recorded || strings.Contains(c.Message, newJob)
				}
				if !recorded {
					unrecorded++
				}
			}
		}
		time.Sleep(time.Duration(rnd.Int64N(int64(time.Second))))
		p := restart(ctx, t, env, name, i)
		waitFor(t, 60*time.Second, tag+" in git after the restart", func() bool { return branchTag(env) == tag })
		recovery = append(recovery, time.Since(killed))
		_ = p
	}

	// Settled: the automation Ready, its last push the branch head, no job
	// left Pending or Running.
	auto := &imagev1.ImageUpdateAutomation{}
	var pending []string
	waitFor(t, 60*time.Second, "the automation Ready at the branch head with no job in flight", func() bool {
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, auto); err != nil {
			return false
		}
		pending = nil
		for jn, j := range listJobs() {
			if j.Status.Phase != updatev1.UpdateJobSucceeded && j.Status.Phase != updatev1.UpdateJobFailed && j.Status.Phase != updatev1.UpdateJobNoChange {
				pending = append(pending, jn+"="+string(j.Status.Phase))
			}
		}
		c := meta.FindStatusCondition(auto.Status.Conditions, "Ready")
		return len(pending) == 0 && c != nil && c.Status == "True" && auto.Status.LastPushCommit == env.Head("main")
	})

	seen, downgrades, again := landings(t, env, base)
	landed, duplicates := 0, again
	for _, tag := range expected {
		if seen[tag] > 0 {
			landed++
		}
		if seen[tag] > 1 {
			duplicates++
		}
	}
	pushedBy := map[string]string{}
	for jn, j := range listJobs() {
		if c := j.Status.PushedCommit; c != "" {
			if other, ok := pushedBy[c]; ok {
				duplicates++
				t.Errorf("jobs %s and %s both pushed %s", other, jn, c)
			}
			pushedBy[c] = jn
		}
	}
	if landed != len(expected) || duplicates != 0 || downgrades != 0 {
		t.Errorf("changes expected %d, landed %d, duplicates %d, downgrades %d:\n%s", len(expected), landed, duplicates, downgrades,
			gitOutE(t, env, "log", "--format=%h %s", base+"..main"))
	}
	var worst time.Duration
	for _, r := range recovery {
		worst = max(worst, r)
	}
	figures(t, "runs %d, kills %d %v (of the job-created kills, before the status named the job %d), changes expected %d landed %d, duplicates %d, downgrades %d, jobs left pending %d, recovery (kill to commit) max %s, all %v",
		n, kills, killsAt, unrecorded, len(expected), landed, duplicates, downgrades, len(pending), worst.Round(100*time.Millisecond), roundAll(recovery))
}
