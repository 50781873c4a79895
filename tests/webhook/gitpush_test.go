package webhook

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testenv"
	"toolkit.dev/image-toolkit/pkg/testgitea"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// A real Gitea (built from the module proxy, `make testenv`) sends its own
// signed push events to the automation controller's GitWebhook: when a
// person pushes a commit to main that puts an old image back, the
// automation runs at once, not at its hourly interval, and main has the
// policy's image again within seconds. The automation's own pushes reach
// the webhook too and make no further job.
func TestGiteaPushRunsAutomation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := localenv.BinDir(root)
	if _, err := testgitea.Binary(bin); err != nil {
		t.Fatalf("%v: run `make testenv` (or hack/tools.sh gitea) first", err)
	}
	env, err := chain.StartWith(ctx, t.TempDir(), bin, []string{"6.3.0"}, func(s string) { t.Log(s) }, chain.Options{Gitea: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
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
		t.Fatal(err)
	}
	hook := &imagev1.GitWebhook{}
	hook.Name, hook.Namespace = "fleet-push", ns
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(hook), hook)
		return hook.Status.WebhookPath != "", err
	})
	automation := env.Procs["image-automation-controller"]
	if _, err := env.Gitea.CreateHook(ctx, "fleet", "http://"+automation.WebhookAddr+hook.Status.WebhookPath, token); err != nil {
		t.Fatal(err)
	}

	// The policy moves to 6.4.0; the automation commits it to main.
	if err := env.PushTag(ctx, "6.4.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", ns
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	want := env.RegistryHost + "/" + chain.Image + ":6.4.0"
	manifest := func() string {
		out, err := env.FleetGit("show", "main:"+chain.ManifestPath)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, error) {
		return strings.Contains(manifest(), want), nil
	})
	// Its own push comes back as a webhook call: handled, no new job.
	waitCounter(t, ctx, automation, "imagetoolkit_automation_webhook_run_requests_total", 1)
	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", ns
	settled := func() *imagev1.ImageUpdateAutomation {
		testenv.Eventually(t, time.Minute, func() (bool, error) {
			err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(iua), iua)
			return err == nil && iua.Status.LastJob != nil && iua.Status.LastJob.Phase != "" &&
				iua.Status.ObservedSourceRevision == "main@sha1:"+env.Head("main"), err
		})
		return iua
	}
	before := settled().Status.LastJob.Name

	// A person puts 6.3.0 back by hand.
	old := strings.ReplaceAll(manifest(), want, env.RegistryHost+"/"+chain.Image+":6.3.0")
	pushed := time.Now()
	if _, err := env.Commit(map[string]string{chain.ManifestPath: old}, "Roll back podinfo by hand"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		return strings.Contains(manifest(), want), nil
	})
	t.Logf("a hand-made push to main was undone %.2f s later, through Gitea's push webhook", time.Since(pushed).Seconds())
	if after := settled().Status.LastJob.Name; after == before {
		t.Errorf("no new job after the push: last job still %s", after)
	}
	waitCounter(t, ctx, automation, `imagetoolkit_automation_webhook_accepted_total{type="gitea"}`, 2)
	if n := counter(t, ctx, automation, "imagetoolkit_automation_webhook_rejected_total"); n != 0 {
		t.Errorf("%v calls from Gitea refused, want 0", n)
	}
}

// counter sums the samples of a metric the process exposes whose line
// starts with prefix.
func counter(t *testing.T, ctx context.Context, p *localenv.Process, prefix string) float64 {
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
func waitCounter(t *testing.T, ctx context.Context, p *localenv.Process, prefix string, n float64) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, error) {
		got := counter(t, ctx, p, prefix)
		return got >= n, fmt.Errorf("%s = %v, want at least %v", prefix, got, n)
	})
}
