package webhook

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgitea"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// gitPush is the chain on a real Gitea (built from the module proxy,
// `make testenv`) whose push events reach the automation controller's
// GitWebhook, with the automation's interval at one hour, settled at 6.4.0.
type gitPush struct {
	*chain.Env
	tb   testing.TB
	ctx  context.Context
	iua  *imagev1.ImageUpdateAutomation
	want string
	// pushed counts the hand pushes.
	pushed int
}

func startGitPush(ctx context.Context, tb testing.TB) *gitPush {
	tb.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	bin := localenv.BinDir(root)
	if _, err := testgitea.Binary(bin); err != nil {
		tb.Fatalf("%v: run `make testenv` (or hack/tools.sh gitea) first", err)
	}
	env, err := chain.StartWith(ctx, tb.TempDir(), bin, []string{"6.3.0"}, func(s string) { tb.Log(s) }, chain.Options{Gitea: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Error(err)
		}
	})
	samples, err := env.Samples(root)
	if err != nil {
		tb.Fatal(err)
	}
	const token, ns = "gitea-push-token", "default"
	samples = strings.Replace(samples, "interval: 5m", "interval: 1h", 1)
	samples += fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: push-token, namespace: %[2]s}
stringData: {token: %[1]s}
---
apiVersion: image.toolkit.dev/v1beta1
kind: GitWebhook
metadata: {name: fleet-push, namespace: %[2]s}
spec:
  type: gitea
  secretRef: {name: push-token}
`, token, ns)
	if err := env.Apply(ctx, samples); err != nil {
		tb.Fatal(err)
	}
	hook := &imagev1.GitWebhook{}
	hook.Name, hook.Namespace = "fleet-push", ns
	testenv.Eventually(tb, time.Minute, func() (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(hook), hook)
		return hook.Status.WebhookPath != "", err
	})
	automation := env.Procs["image-automation-controller"]
	if _, err := env.Gitea.CreateHook(ctx, "fleet", "http://"+automation.WebhookAddr+hook.Status.WebhookPath, token); err != nil {
		tb.Fatal(err)
	}
	g := &gitPush{Env: env, tb: tb, ctx: ctx, iua: &imagev1.ImageUpdateAutomation{},
		want: env.RegistryHost + "/" + chain.Image + ":6.4.0"}
	g.iua.Name, g.iua.Namespace = "fleet", ns

	// The policy moves to 6.4.0; the automation commits it to main.
	if err := env.PushTag(ctx, "6.4.0"); err != nil {
		tb.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", ns
	if err := env.RequestReconcile(ctx, repo); err != nil {
		tb.Fatal(err)
	}
	testenv.Eventually(tb, 2*time.Minute, func() (bool, error) {
		return strings.Contains(g.manifest(), g.want), nil
	})
	// Its own push comes back as a webhook call: accepted, and no
	// automation is asked to run, the commit being a job's own.
	waitCounter(tb, ctx, automation, `imagetoolkit_automation_webhook_accepted_total{type="gitea"}`, 1)
	return g
}

func (g *gitPush) manifest() string {
	g.tb.Helper()
	return g.file(chain.ManifestPath)
}

func (g *gitPush) file(path string) string {
	g.tb.Helper()
	out, err := g.FleetGit("show", "main:"+path)
	if err != nil {
		g.tb.Fatal(err)
	}
	return out
}

// settled waits until the automation has recorded its last job at the
// head of main, and returns it.
func (g *gitPush) settled() *imagev1.ImageUpdateAutomation {
	g.tb.Helper()
	testenv.Eventually(g.tb, time.Minute, func() (bool, error) {
		err := g.Cluster.Client.Get(g.ctx, client.ObjectKeyFromObject(g.iua), g.iua)
		return err == nil && g.iua.Status.LastJob != nil && g.iua.Status.LastJob.Phase != "" &&
			g.iua.Status.ObservedSourceRevision == "main@sha1:"+g.Head("main"), err
	})
	return g.iua
}

// handPush pushes a commit that adds a manifest whose marked image is
// 6.3.0, as a person adding an app would, and returns how long until main
// has 6.4.0 there. (A person who puts 6.3.0 back in the automation's
// manifest is rolling back: the automation holds that, and does not
// push.)
func (g *gitPush) handPush() time.Duration {
	g.tb.Helper()
	g.pushed++
	path := fmt.Sprintf("clusters/prod/hand-%d.yaml", g.pushed)
	old := strings.ReplaceAll(g.manifest(), g.want, g.RegistryHost+"/"+chain.Image+":6.3.0")
	if _, err := g.Commit(map[string]string{path: old}, "Add an app by hand"); err != nil {
		g.tb.Fatal(err)
	}
	pushed := time.Now()
	for !strings.Contains(g.file(path), g.want) {
		if time.Since(pushed) > time.Minute || g.ctx.Err() != nil {
			g.tb.Fatalf("main still has 6.3.0 a minute after the push\nautomation controller:\n%s", g.Procs["image-automation-controller"].Log())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(pushed)
}

// A real Gitea sends its own signed push events to the automation
// controller's GitWebhook: when a person pushes a commit to main that adds
// a marked old image, the automation runs at once, not at its hourly
// interval, and main has the policy's image again within seconds. The
// automation's own pushes reach the webhook too and ask for no run.
func TestGiteaPushRunsAutomation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := startGitPush(ctx, t)
	automation := g.Procs["image-automation-controller"]
	before := g.settled().Status.LastJob.Name
	t.Logf("a hand-made push to main was updated %.2f s later, through Gitea's push webhook", g.handPush().Seconds())
	if after := g.settled().Status.LastJob.Name; after == before {
		t.Errorf("no new job after the push: last job still %s", after)
	}
	// Three calls: the automation's first push, the person's, and the
	// automation's answer to it. Only the person's asked for a run.
	waitCounter(t, ctx, automation, `imagetoolkit_automation_webhook_accepted_total{type="gitea"}`, 3)
	if n := counter(t, ctx, automation, "imagetoolkit_automation_webhook_rejected_total"); n != 0 {
		t.Errorf("%v calls from Gitea refused, want 0", n)
	}
	if n := counter(t, ctx, automation, "imagetoolkit_automation_webhook_run_requests_total"); n != 1 {
		t.Errorf("%v runs requested, want 1: the person's push (the automation's own pushes are its jobs' commits)", n)
	}
}

// BenchmarkGitPushToCommit measures a person's push to the automation's
// commit, driven by a real Gitea's push events: a commit adding a manifest
// with an old marked image is pushed to main, Gitea calls the GitWebhook, the automation
// runs (its interval is an hour) and its UpdateJob pushes the policy's image
// there. Reports p50 and p95 over 10 pushes, from the end of `git push` to
// the automation's commit on main.
func BenchmarkGitPushToCommit(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		g := startGitPush(ctx, b)
		var lat []time.Duration
		for range 10 {
			g.settled()
			b.StartTimer()
			lat = append(lat, g.handPush())
			b.StopTimer()
		}
		cancel()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rank := func(p float64) time.Duration { return lat[int(math.Ceil(p*float64(len(lat))))-1] }
		b.ReportMetric(rank(0.50).Seconds(), "p50-s")
		b.ReportMetric(rank(0.95).Seconds(), "p95-s")
	}
}

// counter sums the samples of a metric the process exposes whose line
// starts with prefix.
func counter(t testing.TB, ctx context.Context, p *localenv.Process, prefix string) float64 {
	t.Helper()
	text, err := p.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			total += v
		}
	}
	return total
}

// waitCounter waits until the metric reaches at least n.
func waitCounter(t testing.TB, ctx context.Context, p *localenv.Process, prefix string, n float64) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		got := counter(t, ctx, p, prefix)
		return got >= n, fmt.Errorf("%s = %v, want at least %v", prefix, got, n)
	})
}
