package faults

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrrandom "github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// TestRaces proves that 20 ImageUpdateAutomations writing different paths
// of one branch, served by two update-job-controller replicas (two
// processes, two identities) that push at the same moments, commit every
// change exactly once: 50 tag pushes spread over them end with every file
// at its image's last tag, each commit moving one image to a higher tag
// (none set twice, none set back, none lost), the history linear (no merge
// commit, each commit's parent the one before), and pushes that lost the
// server's ref lock to another retried from the new head.
//
// And it proves the rule for automations that overlap: a marker names one
// ImagePolicy, so whichever automation writes it writes that policy's
// latest image; two automations that select the same policy for the same
// path (shared-a and shared-b here) converge on one value, and the file
// never goes back to a value it had (no flip-flop), even when their jobs
// run in either order on two replicas.
func TestRaces(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rnd := random(t)
	pushes := runs(50, 200)
	const apps = 20

	env := startChain(ctx, t, []string{"6.3.0"}, chain.Options{})
	// A second update-job-controller replica: another process, another
	// identity (POD_NAME), its own mirror cache.
	second, err := env.Cluster.StartInstance(ctx, localenv.BinDir(env.Cluster.Root), "update-job-controller", "update-job-controller-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Stop(20 * time.Second) })
	replicas := []*localenv.Process{env.Procs["update-job-controller"], second}

	// Targets: app-00..app-19 (an automation each, on its own path) and
	// shared (two automations on one path, selecting the same policy).
	targets := make([]string, 0, apps+1)
	files := map[string]string{}
	var objs []string
	for i := range apps {
		app := fmt.Sprintf("app-%02d", i)
		targets = append(targets, app)
		files["apps/"+app+"/deploy.yaml"] = raceManifest(env.RegistryHost, app)
		objs = append(objs, raceImage(env.RegistryHost, app), raceAutomation(app, env.RepoURL, "./apps/"+app, "race: "+app))
	}
	targets = append(targets, "shared")
	files["shared/deploy.yaml"] = raceManifest(env.RegistryHost, "shared")
	objs = append(objs, raceImage(env.RegistryHost, "shared"),
		raceAutomation("shared-a", env.RepoURL, "./shared", "race: shared"),
		raceAutomation("shared-b", env.RepoURL, "./shared", "overlap: \"true\""))
	for _, tgt := range targets {
		if err := pushImage(ctx, env.RegistryHost, tgt, "1.0.0"); err != nil {
			t.Fatal(err)
		}
	}
	base, err := env.Commit(files, "race: 21 images at 1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(env.Cluster.Root)
	if err != nil {
		t.Fatal(err)
	}
	secret := samples[strings.LastIndex(samples, "---\n")+4:]
	if err := env.Apply(ctx, strings.Join(append(objs, secret), "\n---\n")); err != nil {
		t.Fatal(err)
	}

	// The pushes, 0-300 ms apart: every fifth to shared, so the two
	// overlapping automations meet often; the others round the apps.
	last := map[string]int{}
	for k := range pushes {
		tgt := targets[(k-k/5)%apps]
		if k%5 == 0 {
			tgt = "shared"
		}
		last[tgt]++
		if err := pushImage(ctx, env.RegistryHost, tgt, fmt.Sprintf("1.0.%d", last[tgt])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rnd.Int64N(int64(300 * time.Millisecond))))
	}
	pushed := time.Now()
	path := func(tgt string) string {
		if tgt == "shared" {
			return "shared/deploy.yaml"
		}
		return "apps/" + tgt + "/deploy.yaml"
	}
	done := func() bool {
		for _, tgt := range targets {
			out, err := env.FleetGit("show", "main:"+path(tgt))
			if err != nil || markerTag(out, "default:"+tgt) != fmt.Sprintf("1.0.%d", last[tgt]) {
				return false
			}
		}
		return true
	}
	waitFor(t, 4*time.Minute, "every file at its last tag", done)
	settled := time.Since(pushed)
	// Let the automations run a few more times: nothing may move now.
	head := env.Head("main")
	time.Sleep(8 * time.Second)
	if h := env.Head("main"); h != head {
		t.Errorf("the branch moved after every file was up to date:\n%s", gitOutE(t, env, "log", "--format=%h %s", head+"..main"))
	}

	// The history: linear, and per file a strictly rising sequence of tags.
	commits := strings.Fields(gitOutE(t, env, "rev-list", "--reverse", base+"..main"))
	if merges := strings.TrimSpace(gitOutE(t, env, "rev-list", "--merges", base+"..main")); merges != "" {
		t.Errorf("merge commits: %s", merges)
	}
	prev := base
	for _, c := range commits {
		parents := strings.Fields(gitOutE(t, env, "rev-list", "--parents", "-n", "1", c))
		if len(parents) != 2 || parents[1] != prev {
			t.Errorf("commit %s has parents %v, want %s alone", c, parents[1:], prev)
		}
		prev = c
	}
	var changes, duplicates, downgrades, sharedChanges int
	for _, tgt := range targets {
		p := path(tgt)
		value := "1.0.0"
		seen := map[string]bool{value: true}
		for _, c := range commits {
			out, err := env.FleetGit("show", c+":"+p)
			if err != nil {
				t.Fatal(err)
			}
			v := markerTag(out, "default:"+tgt)
			if v == value {
				continue
			}
			changes++
			if tgt == "shared" {
				sharedChanges++
			}
			if seen[v] {
				duplicates++
				t.Errorf("%s: %s set again by %s (values so far %v)", p, v, c, seen)
			}
			if semverLess(v, value) {
				downgrades++
				t.Errorf("%s: %s → %s in %s", p, value, v, c)
			}
			seen[v] = true
			value = v
		}
	}
	if changes < len(commits) {
		// Each commit carries one or more jobs (jobs of the branch
		// ready at once share one), each changing its own path.
		t.Errorf("%d commits made %d changes", len(commits), changes)
	}

	// No job pushed twice: the replicas' successful attempts are the
	// changes the commits made; both replicas worked, and lost ref races
	// were retried. A change to the shared file may count for both its
	// automations, when their jobs were in one commit: each reports it.
	var succeeded, retries int
	var per []string
	for _, p := range replicas {
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := metricValue(m, `imagetoolkit_updatejob_jobs_total{outcome="succeeded"}`)
		succeeded += s
		retries += metricValue(m, "imagetoolkit_updatejob_push_retries_total")
		per = append(per, strconv.Itoa(s))
		if f := metricValue(m, `imagetoolkit_updatejob_jobs_total{outcome="failed"}`); f != 0 {
			t.Errorf("%s: %d jobs failed", p.LogPath, f)
		}
	}
	if succeeded < changes || succeeded > changes+sharedChanges {
		t.Errorf("%d changes in %d commits (%d of the shared file), %d successful job attempts", changes, len(commits), sharedChanges, succeeded)
	}
	landed := 0
	for _, tgt := range targets {
		if out, err := env.FleetGit("show", "main:"+path(tgt)); err == nil && markerTag(out, "default:"+tgt) == fmt.Sprintf("1.0.%d", last[tgt]) {
			landed++
		}
	}
	figures(t, "runs 1, automations %d (2 overlapping on one path), job replicas 2 (commits %s), tag pushes %d, files expected at their last tag %d, landed %d, commits %d (%d intermediate tags folded into later commits), duplicates %d, downgrades/flip-flops %d, push retries after a lost race %d, settled %s after the last push",
		apps+2, strings.Join(per, "+"), pushes, len(targets), landed, len(commits), pushes-changes, duplicates, downgrades, retries, settled.Round(100*time.Millisecond))
}

func raceManifest(host, app string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
spec:
  template:
    spec:
      containers:
      - name: %[2]s
        image: %[1]s/race/%[2]s:1.0.0 # {"$imagepolicy": "default:%[2]s"}
`, host, app)
}

// raceImage is an ImageRepository and an ImagePolicy for app; the shared
// one carries both automations' labels.
func raceImage(host, app string) string {
	labels := "race: " + app
	if app == "shared" {
		labels = "race: shared\n    overlap: \"true\""
	}
	return fmt.Sprintf(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: %[2]s, namespace: default}
spec:
  image: %[1]s/race/%[2]s
  insecure: true
  interval: 2s
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: %[2]s
  namespace: default
  labels:
    %[3]s
spec:
  imageRepositoryRef: {name: %[2]s}
  policy:
    semver: {range: ">=1.0.0"}
`, host, app, labels)
}

func raceAutomation(name, url, path, selector string) string {
	return fmt.Sprintf(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata: {name: %s, namespace: default}
spec:
  interval: 2s
  git:
    repository:
      url: %s
      secretRef: {name: git-credentials}
    checkout: {ref: {branch: main}}
    commit:
      author: {name: imagebot, email: imagebot@example.com}
    push: {branch: main}
  update:
    path: %s
    strategy: Setters
  policySelector:
    matchLabels:
      %s
`, name, url, path, selector)
}

func pushImage(ctx context.Context, host, app, tag string) error {
	img, err := ggcrrandom.Image(256, 1)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(host+"/race/"+app+":"+tag, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(ref, img, remote.WithContext(ctx))
}

// metricValue sums the samples of a series (name with its labels, or a
// name without labels) in a /metrics body.
func metricValue(body, series string) int {
	total := 0
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			total += int(f)
		}
	}
	return total
}

// TestOverlapNoFlipFlop proves the overlap rule where it is hardest to
// keep: two automations select the same policy for the same file, and one
// of them reaches the git server through a slow link (1 s a request), so
// that its job, made for the policy's previous tag, is still running when
// the other automation's job for the next tag has pushed. The slow job
// must not set the file back to the older tag when it retries from the
// new head: the file's tags rise strictly, never alternate.
func TestOverlapNoFlipFlop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rounds := runs(3, 10)
	env := startChain(ctx, t, []string{"6.3.0"}, chain.Options{})
	second, err := env.Cluster.StartInstance(ctx, localenv.BinDir(env.Cluster.Root), "update-job-controller", "update-job-controller-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Stop(20 * time.Second) })
	u, err := url.Parse(env.RepoURL)
	if err != nil {
		t.Fatal(err)
	}
	target := *u
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(&target)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	slowURL := slow.URL + u.Path

	if err := pushImage(ctx, env.RegistryHost, "shared", "1.0.0"); err != nil {
		t.Fatal(err)
	}
	base, err := env.Commit(map[string]string{"shared/deploy.yaml": raceManifest(env.RegistryHost, "shared")}, "shared at 1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(env.Cluster.Root)
	if err != nil {
		t.Fatal(err)
	}
	secret := samples[strings.LastIndex(samples, "---\n")+4:]
	objs := []string{
		strings.ReplaceAll(raceImage(env.RegistryHost, "shared"), "interval: 2s", "interval: 1s"),
		strings.ReplaceAll(raceAutomation("shared-slow", slowURL, "./shared", "race: shared"), "interval: 2s", "interval: 1s"),
		strings.ReplaceAll(raceAutomation("shared-fast", env.RepoURL, "./shared", "overlap: \"true\""), "interval: 2s", "interval: 1s"),
		secret,
	}
	if err := env.Apply(ctx, strings.Join(objs, "\n---\n")); err != nil {
		t.Fatal(err)
	}
	fileTag := func() string {
		out, err := env.FleetGit("show", "main:shared/deploy.yaml")
		if err != nil {
			return ""
		}
		return markerTag(out, "default:shared")
	}
	for r := 1; r <= rounds; r++ {
		older, newer := fmt.Sprintf("1.0.%d", 2*r-1), fmt.Sprintf("1.0.%d", 2*r)
		if err := pushImage(ctx, env.RegistryHost, "shared", older); err != nil {
			t.Fatal(err)
		}
		// Both automations make a job for the older tag; the fast one
		// pushes it, the slow one is still fetching.
		waitFor(t, 30*time.Second, older+" in git", func() bool { return fileTag() == older || fileTag() == newer })
		if err := pushImage(ctx, env.RegistryHost, "shared", newer); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, newer+" in git", func() bool { return fileTag() == newer })
		// The slow job's retry, if it sets the older tag back, comes in
		// the next seconds.
		time.Sleep(8 * time.Second)
	}
	commits := strings.Fields(gitOutE(t, env, "rev-list", "--reverse", base+"..main"))
	value, flips := "1.0.0", 0
	var seq []string
	for _, c := range commits {
		v := markerTag(gitOutE(t, env, "show", c+":shared/deploy.yaml"), "default:shared")
		seq = append(seq, v)
		if !semverLess(value, v) {
			flips++
		}
		value = v
	}
	if flips != 0 {
		t.Errorf("the file's tag went back %d times: %v", flips, seq)
	}
	figures(t, "runs %d, overlapping automations 2 (one through a 1 s/request link), tag pushes %d, commits %d, flip-flops %d, sequence %v",
		rounds, 2*rounds, len(commits), flips, seq)
}
