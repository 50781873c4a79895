package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// soakDuration is how long TestSoak injects events: 60 s in `make test`,
// 30 minutes in `make faults`, or IMAGE_TOOLKIT_SOAK (a Go duration).
func soakDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("IMAGE_TOOLKIT_SOAK")); err == nil && d > 0 {
		return d
	}
	if long() {
		return 30 * time.Minute
	}
	return 60 * time.Second
}

// soakRange is a policy's semver range [6.lo.0, 6.hi.0), kept as numbers so
// that the test computes what the policy must pick without the reflector's
// code.
type soakRange struct{ lo, hi int }

func (r soakRange) String() string { return fmt.Sprintf(">=6.%d.0 <6.%d.0", r.lo, r.hi) }

// best is the highest tag of tags (all 6.minor.patch) within r, or "".
func (r soakRange) best(tags []string) string {
	var best string
	var bm, bp int
	for _, tag := range tags {
		var m, p int
		if _, err := fmt.Sscanf(tag, "6.%d.%d", &m, &p); err != nil || m < r.lo || m >= r.hi {
			continue
		}
		if best == "" || m > bm || (m == bm && p > bp) {
			best, bm, bp = tag, m, p
		}
	}
	return best
}

// TestSoak proves that the chain stays correct and does not leak under a
// long stream of random work: tag pushes, policy range edits, automation
// edits (suspend, interval, message template) and controller restarts
// (SIGTERM, and in the long run kill -9 too). At the end git holds, for
// every marker, exactly the tag its policy must pick from the pushed tags
// (computed here, independently), the history is linear and every commit
// changes something; no controller panicked; and each controller's RSS and
// goroutine count, measured after the restarts stopped and a warm-up, and
// again at the end, did not clearly grow: RSS as a whole and its anonymous
// part (RssAnon), since most of a controller's RSS is mapped files (its
// binary's pages, git packs), which grow as more code runs and are no leak.
func TestSoak(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	d := soakDuration()
	ctx, cancel := context.WithTimeout(context.Background(), d+15*time.Minute)
	defer cancel()
	rnd := random(t)

	tags := []string{"6.0.0", "6.1.0"}
	env := startChain(ctx, t, tags, chain.Options{})
	bin := localenv.BinDir(env.Cluster.Root)
	samples, err := env.Samples(env.Cluster.Root)
	if err != nil {
		t.Fatal(err)
	}
	// Scans and automation runs every few seconds, so that every event
	// meets several of them; a second policy for the manifest's second
	// marker, selected by the automation too.
	ranges := map[string]soakRange{"podinfo": {0, 10}, "podinfo-beta": {0, 5}}
	samples = strings.ReplaceAll(samples, "interval: 5m", "interval: 2s")
	samples = strings.Replace(samples, `range: ">=6.0.0 <7.0.0"`, `range: "`+ranges["podinfo"].String()+`"`, 1)
	samples += fmt.Sprintf(`---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-beta
  namespace: default
  labels: {automation: enabled}
spec:
  imageRepositoryRef: {name: podinfo}
  policy:
    semver: {range: "%s"}
`, ranges["podinfo-beta"])
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	c := env.Cluster.Client

	patch := func(kind, name, body string) error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("image.toolkit.dev/v1beta1")
		u.SetKind(kind)
		u.SetNamespace("default")
		u.SetName(name)
		return c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	restart := func(name string, kill bool) {
		p := env.Procs[name]
		if kill {
			p.Kill()
		} else if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
		// Keep the old log: the final check reads every one for panics.
		_ = os.Rename(p.LogPath, fmt.Sprintf("%s.%d", p.LogPath, time.Now().UnixNano()))
		np, err := env.Cluster.StartController(ctx, bin, name)
		if err != nil {
			t.Fatalf("restarting %s: %v", name, err)
		}
		env.Procs[name] = np
	}

	// Restarts happen in the first half; the second half measures the
	// processes that then run to the end.
	start := time.Now()
	restartsUntil := start.Add(d / 2)
	// A restart every 5-15 s in the short run, 30-90 s in the long one.
	restartGap := 5 * time.Second
	if long() {
		restartGap = 30 * time.Second
	}
	nextRestart := start.Add(restartGap)
	var measuredAt, lastSample time.Time
	series := map[string][]string{} // controller → "RSS MiB/anonymous MiB/goroutines" samples
	var pushes, policyEdits, autoEdits, restarts, kills int
	var measured map[string]usage
	minor := 1
	for time.Since(start) < d {
		if measured == nil && time.Now().After(restartsUntil.Add(min(d/10, time.Minute))) {
			measured, measuredAt = map[string]usage{}, time.Now()
			for _, name := range localenv.Controllers {
				measured[name] = measure(ctx, t, env.Procs[name])
			}
		}
		// A sample every twentieth of the soak in the measured half, to
		// tell a steady climb from a step.
		if measured != nil && time.Since(lastSample) > d/20 {
			lastSample = time.Now()
			for _, name := range localenv.Controllers {
				u := measure(ctx, t, env.Procs[name])
				series[name] = append(series[name], fmt.Sprintf("%d/%d/%d", u.rssKiB/1024, u.anonKiB/1024, u.goroutines))
			}
		}
		switch r := rnd.IntN(100); {
		case r < 40: // a tag push: mostly newer, sometimes a patch of an older minor
			if rnd.IntN(3) > 0 && minor < 11 {
				minor++
			}
			tag := fmt.Sprintf("6.%d.%d", rnd.IntN(minor+1), rnd.IntN(30))
			if slices.Contains(tags, tag) {
				continue
			}
			if err := env.PushTag(ctx, tag); err != nil {
				t.Fatal(err)
			}
			tags = append(tags, tag)
			pushes++
		case r < 65: // a policy's range changes, up or down
			name := []string{"podinfo", "podinfo-beta"}[rnd.IntN(2)]
			lo := rnd.IntN(6)
			rg := soakRange{lo, lo + 1 + rnd.IntN(7)}
			if err := patch("ImagePolicy", name, fmt.Sprintf(`{"spec":{"policy":{"semver":{"range":%q}}}}`, rg)); err != nil {
				t.Fatal(err)
			}
			ranges[name] = rg
			policyEdits++
		default: // the automation: suspended or resumed, another interval or message
			var body string
			switch rnd.IntN(3) {
			case 0:
				body = fmt.Sprintf(`{"spec":{"suspend":%t}}`, rnd.IntN(2) == 0)
			case 1:
				body = fmt.Sprintf(`{"spec":{"interval":"%ds"}}`, 1+rnd.IntN(5))
			case 2:
				body = fmt.Sprintf(`{"spec":{"git":{"commit":{"messageTemplate":"soak %d: {{ range .Changed.Changes }}{{ .NewValue }} {{ end }}"}}}}`, rnd.IntN(1000))
			}
			if err := patch("ImageUpdateAutomation", "fleet", body); err != nil {
				t.Fatal(err)
			}
			autoEdits++
		}
		if now := time.Now(); now.After(nextRestart) && now.Before(restartsUntil) {
			kill := long() && rnd.IntN(3) == 0
			restart(localenv.Controllers[rnd.IntN(len(localenv.Controllers))], kill)
			restarts++
			if kill {
				kills++
			}
			nextRestart = time.Now().Add(restartGap + time.Duration(rnd.Int64N(int64(2*restartGap))))
		}
		pause := 500*time.Millisecond + time.Duration(rnd.Int64N(int64(2500*time.Millisecond)))
		if long() {
			pause *= 2
		}
		time.Sleep(pause)
	}
	if measured == nil {
		t.Fatalf("the soak (%s) ended before the measurement began", d)
	}
	end := map[string]usage{}
	for _, name := range localenv.Controllers {
		end[name] = measure(ctx, t, env.Procs[name])
	}

	// The end state: resumed, git converges on what the policies must pick.
	if err := patch("ImageUpdateAutomation", "fleet", `{"spec":{"suspend":false}}`); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, rg := range ranges {
		if rg.best(tags) == "" { // a policy with nothing to pick says nothing
			tag := fmt.Sprintf("6.%d.0", rg.lo)
			if err := env.PushTag(ctx, tag); err != nil {
				t.Fatal(err)
			}
			tags = append(tags, tag)
		}
	}
	for name, rg := range ranges {
		want[name] = rg.best(tags)
	}
	converged := time.Now()
	var manifest string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		manifest, _ = env.FleetGit("show", "main:"+chain.ManifestPath)
		ok := true
		for name, tag := range want {
			pol := &imagev1.ImagePolicy{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, pol); err != nil {
				t.Fatal(err)
			}
			got := ""
			if pol.Status.LatestRef != nil {
				got = pol.Status.LatestRef.Tag
			}
			if got != tag || (tag != "" && !strings.Contains(manifest, ":"+tag+` # {"$imagepolicy": "default:`+name+`"}`)) {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the soak, git and the policies never reached %v (ranges %v, tags %v); manifest:\n%s\nautomation controller log:\n%s",
				want, ranges, tags, manifest, env.Procs["image-automation-controller"].Log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	settle := time.Since(converged)

	// A linear history in which every commit changes the manifest.
	if merges, _ := env.FleetGit("rev-list", "--merges", "main"); strings.TrimSpace(merges) != "" {
		t.Errorf("the branch has merge commits: %s", merges)
	}
	revs, _ := env.FleetGit("rev-list", "main")
	commits := strings.Fields(revs)
	var empty int
	for _, rev := range commits[:len(commits)-1] { // the last is the fleet's first commit
		if diff, _ := env.FleetGit("diff", "--name-only", rev+"^", rev); strings.TrimSpace(diff) == "" {
			empty++
		}
	}
	if empty > 0 {
		t.Errorf("%d commits change nothing", empty)
	}

	// No panic in any log, the restarted processes' included.
	logs, _ := filepath.Glob(filepath.Join(env.Cluster.Dir, "*.log*"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if panicRE.Match(b) {
			t.Errorf("%s holds a panic:\n%s", l, b)
		}
	}

	// Flat: a generous bound, to catch a leak, not noise. RSS may grow
	// by half plus 32 MiB (the Go heap sizes itself lazily), goroutines
	// by half plus 50 (informers and HTTP keep-alives come and go).
	var fig []string
	for _, name := range localenv.Controllers {
		s, e := measured[name], end[name]
		fig = append(fig, fmt.Sprintf("%s RSS %d→%d MiB (anonymous %d→%d) goroutines %d→%d", strings.TrimSuffix(name, "-controller"),
			s.rssKiB/1024, e.rssKiB/1024, s.anonKiB/1024, e.anonKiB/1024, s.goroutines, e.goroutines))
		if e.rssKiB > s.rssKiB*3/2+32*1024 {
			t.Errorf("%s: RSS grew from %d KiB to %d KiB", name, s.rssKiB, e.rssKiB)
		}
		if e.anonKiB > s.anonKiB*3/2+32*1024 {
			t.Errorf("%s: anonymous RSS grew from %d KiB to %d KiB", name, s.anonKiB, e.anonKiB)
		}
		if e.goroutines > s.goroutines*3/2+50 {
			t.Errorf("%s: goroutines grew from %d to %d", name, s.goroutines, e.goroutines)
		}
	}
	for _, name := range localenv.Controllers {
		t.Logf("%s RSS MiB/anonymous MiB/goroutines over the measured half: %s", name, strings.Join(series[name], " "))
	}
	figures(t, "duration %s (measured over the last %s), tag pushes %d, policy edits %d, automation edits %d, restarts %d (kill -9 %d), commits %d, empty %d, final %v reached %s after the end; %s",
		d, time.Since(measuredAt).Round(time.Second), pushes, policyEdits, autoEdits, restarts, kills, len(commits)-1, empty, want,
		settle.Round(100*time.Millisecond), strings.Join(fig, ", "))
}

// panicRE matches a Go panic or a goroutine dump in a log.
var panicRE = regexp.MustCompile(`(?m)^panic: |^goroutine \d+ \[|fatal error: `)

// usage is one sample of a controller's resident memory and goroutines.
type usage struct {
	rssKiB     int
	anonKiB    int // RssAnon: the part a leak grows; the rest is mapped files (the binary's pages, git packs)
	goroutines int
}

// measure reads VmRSS from /proc and go_goroutines from /metrics.
func measure(ctx context.Context, t *testing.T, p *localenv.Process) usage {
	t.Helper()
	var u usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			u.rssKiB, _ = strconv.Atoi(f[1])
		} else if len(f) >= 2 && f[0] == "RssAnon:" {
			u.anonKiB, _ = strconv.Atoi(f[1])
		}
	}
	m, err := p.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(m, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "go_goroutines" {
			g, _ := strconv.ParseFloat(f[1], 64)
			u.goroutines = int(g)
		}
	}
	if u.rssKiB == 0 || u.goroutines == 0 {
		t.Fatalf("%s: no VmRSS or go_goroutines (%+v)", p.Name, u)
	}
	return u
}
