// Package prometheus checks the controllers' /metrics as a user's monitoring
// sees them: promtool accepts each endpoint, and a real Prometheus scrapes
// all three while they carry an image update from a registry to git.
package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// prefixes are the metric name prefixes of our own metrics, by controller.
var prefixes = map[string]string{
	"image-reflector-controller":  "imagetoolkit_reflector_",
	"image-automation-controller": "imagetoolkit_automation_",
	"update-job-controller":       "imagetoolkit_updatejob_",
}

func TestMetrics(t *testing.T) {
	for _, tool := range []string{"promtool", "prometheus"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (Debian package prometheus; make deps installs it): %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster, bin := localenv.StartTest(t)

	// A registry with three tags and a fleet repository whose manifest
	// the automation should move from 1.0.0 to 1.2.0.
	ns := cluster.Namespace(t)
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0", "1.2.0"})
	git := testgit.New(t, testgit.Options{})
	git.CreateRepo(t, "fleet", map[string]string{
		"apps/app.yaml": fmt.Sprintf("image: %s:1.0.0 # {\"$imagepolicy\": \"%s:app\"}\n", reg.Repo("team/app"), ns),
	})

	extra := map[string][]string{
		"image-reflector-controller": {"--storage-path=" + t.TempDir()},
		"update-job-controller":      {"--cache-dir=" + t.TempDir()},
	}
	// An events endpoint that takes everything, so the forwarder's metrics
	// exist and move.
	events := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer events.Close()
	procs := map[string]*localenv.Process{}
	for _, name := range localenv.Controllers {
		args := append([]string{"--leader-elect=false", "--events-addr=" + events.URL}, extra[name]...)
		p, err := cluster.StartController(ctx, bin, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		defer func() {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Errorf("%s: %v\n%s", p.Name, err, p.Log())
			}
		}()
	}
	logs := func() string {
		var b strings.Builder
		for _, name := range localenv.Controllers {
			fmt.Fprintf(&b, "--- %s\n%s\n", name, procs[name].Log())
		}
		return b.String()
	}

	labels := map[string]string{"automation": "enabled"}
	for _, obj := range []client.Object{
		&imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("team/app"), Insecure: true,
				Interval: metav1.Duration{Duration: time.Hour}}},
		&imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: labels},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "app"},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}},
		&imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
			Spec: imagev1.ImageUpdateAutomationSpec{
				Interval:       metav1.Duration{Duration: time.Hour},
				PolicySelector: &metav1.LabelSelector{MatchLabels: labels},
				Update:         &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: "apps"},
				GitSpec: imagev1.GitSpec{
					Repository: &updatev1.GitRepositorySpec{URL: git.RepoURL("fleet")},
					Checkout:   &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
					Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Name: "imagebot", Email: "imagebot@example.com"},
						MessageTemplate: "Update images"},
				}}},
	} {
		obj.SetNamespace(ns)
		if err := cluster.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// An ImageWebhook called once without and once with its token, so the
	// receiver's labelled series exist and are linted too.
	hook := &imagev1.ImageWebhook{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: ns},
		Spec: imagev1.ImageWebhookSpec{Type: imagev1.WebhookGeneric, SecretRef: meta.LocalObjectReference{Name: "ci-webhook"}}}
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ci-webhook", Namespace: ns}, StringData: map[string]string{"token": "ci-token"}},
		hook,
	} {
		if err := cluster.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(hook), hook)
		return hook.Status.WebhookPath != "", err
	})
	for _, auth := range []string{"", "Bearer ci-token"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+procs["image-reflector-controller"].WebhookAddr+hook.Status.WebhookPath,
			strings.NewReader(fmt.Sprintf(`{"repositories":[%q]}`, reg.Repo("team/app"))))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	targets := map[string]string{}
	for name, p := range procs {
		targets[name] = p.MetricsAddr
	}
	prom := startPrometheus(t, targets)

	t.Run("prometheus", func(t *testing.T) {
		// Every controller is scraped...
		prom.eventually(t, "up", func(s []sample) error {
			return perJob(s, func(v float64) bool { return v == 1 })
		}, logs)
		// ...reports reconciliations of its kinds...
		prom.eventually(t, `sum by (job) ({__name__=~"imagetoolkit_[a-z]+_reconcile_duration_seconds_count"}) > 0`,
			func(s []sample) error { return perJob(s, nil) }, logs)
		// ...and forwarded events to --events-addr.
		prom.eventually(t, `sum by (job) ({__name__=~"imagetoolkit_[a-z]+_forwarded_events_total", outcome="sent"}) > 0`,
			func(s []sample) error { return perJob(s, nil) }, logs)
		// ...and its own work: the reflector scanned the registry, the
		// automation pushed through an UpdateJob, which succeeded.
		for _, q := range []string{
			`imagetoolkit_reflector_scans_total{job="image-reflector-controller",result="scanned"} > 0`,
			`sum(imagetoolkit_reflector_registry_requests_total{code="200"}) > 0`,
			`imagetoolkit_automation_runs_total{job="image-automation-controller",outcome="pushed"} > 0`,
			`imagetoolkit_automation_policy_to_push_seconds_count > 0`,
			`imagetoolkit_updatejob_jobs_total{job="update-job-controller",outcome="succeeded"} > 0`,
			`sum(imagetoolkit_updatejob_git_operation_duration_seconds_count{operation="push"}) > 0`,
			`imagetoolkit_reflector_webhook_accepted_total{type="generic"} > 0`,
			`imagetoolkit_reflector_webhook_rejected_total{type="generic",reason="missing_credentials"} > 0`,
			`imagetoolkit_reflector_webhook_scan_start_seconds_count > 0`,
		} {
			prom.eventually(t, q, func(s []sample) error {
				if len(s) == 0 {
					return fmt.Errorf("no series yet")
				}
				return nil
			}, logs)
		}
		// One prefix per controller: no job exports another's metrics.
		prom.eventually(t, `count by (job, __name__) ({__name__=~"imagetoolkit_.+"})`, func(s []sample) error {
			if len(s) == 0 {
				return fmt.Errorf("no imagetoolkit_ metrics")
			}
			for _, x := range s {
				if !strings.HasPrefix(x.Metric["__name__"], prefixes[x.Metric["job"]]) {
					return fmt.Errorf("job %s exports %s", x.Metric["job"], x.Metric["__name__"])
				}
			}
			return nil
		}, logs)
		if got := testgit.Git(t, git.BarePath("fleet"), "show", "main:apps/app.yaml"); !strings.Contains(got, ":1.2.0 ") {
			t.Errorf("the automation did not push 1.2.0:\n%s", got)
		}
	})

	// promtool lints what the controllers expose after that work, when
	// the labelled series exist too.
	t.Run("promtool", func(t *testing.T) {
		for _, name := range localenv.Controllers {
			body, err := procs[name].Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, "promtool", "check", "metrics")
			cmd.Stdin = strings.NewReader(body)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics rejects %s's /metrics: %v\n%s", name, err, out)
			}
			// Every family has HELP: promtool lints it too, but say
			// which of ours lacks it.
			for _, line := range strings.Split(body, "\n") {
				if f, ok := strings.CutPrefix(line, "# TYPE "); ok && strings.HasPrefix(f, "imagetoolkit_") {
					family := strings.Fields(f)[0]
					if !strings.Contains(body, "# HELP "+family+" ") {
						t.Errorf("%s: %s has no HELP", name, family)
					}
					if !strings.HasPrefix(family, prefixes[name]) {
						t.Errorf("%s exports %s, outside its prefix %s", name, family, prefixes[name])
					}
				}
			}
		}
	})
}

// prometheus is a running Prometheus server.
type prometheus struct {
	url string
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float() float64 {
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return -1
	}
	return v
}

// perJob checks that the samples hold one series per controller, each
// passing ok when given.
func perJob(s []sample, ok func(float64) bool) error {
	seen := map[string]bool{}
	for _, x := range s {
		job := x.Metric["job"]
		if ok != nil && !ok(x.float()) {
			return fmt.Errorf("%s: %v", job, x.Value[1])
		}
		seen[job] = true
	}
	var missing []string
	for _, name := range localenv.Controllers {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no series for %s", strings.Join(missing, ", "))
	}
	return nil
}

// startPrometheus runs /usr/bin/prometheus on loopback scraping the targets
// (job name → host:port) every second, with its data in a temporary
// directory, until the test ends.
func startPrometheus(t *testing.T, targets map[string]string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	jobs := make([]string, 0, len(targets))
	for job := range targets {
		jobs = append(jobs, job)
	}
	sort.Strings(jobs)
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
	for _, job := range jobs {
		fmt.Fprintf(&cfg, "- job_name: %s\n  static_configs:\n  - targets: [%q]\n", job, targets[job])
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	check := exec.Command("promtool", "check", "config", cfgPath)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}

	// Prometheus cannot listen on port 0 and report the port; take a
	// free one, and another if someone takes it first.
	for attempt := 1; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt))
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("prometheus", "--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
			"--log.level=warn")
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait(); logf.Close() }()
		p := &prometheus{url: "http://" + addr}
		if err := p.waitReady(done); err != nil {
			_ = cmd.Process.Kill()
			b, _ := os.ReadFile(logPath)
			if attempt < 3 && strings.Contains(string(b), "address already in use") {
				continue
			}
			t.Fatalf("prometheus: %v\n%s", err, b)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		return p
	}
}

func (p *prometheus) waitReady(exited <-chan error) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-deadline:
			return fmt.Errorf("not ready in 30s")
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := client.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// query runs an instant query through the HTTP API.
func (p *prometheus) query(q string) ([]sample, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(p.url + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s", q, r.Data.ResultType)
	}
	return r.Data.Result, nil
}

// eventually polls q until check accepts its result.
func (p *prometheus) eventually(t *testing.T, q string, check func([]sample) error, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := p.query(q)
		if err == nil {
			if err = check(s); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus query %s: %v\n%s", q, err, logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
