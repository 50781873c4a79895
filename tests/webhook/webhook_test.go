// Package webhook tests the ImageWebhook receiver end to end with a real
// sender: Debian's docker-registry (CNCF distribution 2.8), configured to
// send its notifications to the reflector, which scans the pushed
// repository at once and its ImagePolicy picks the new tag although the
// ImageRepository's interval is an hour.
package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startRegistry runs docker-registry on a free loopback port, storing in a
// temporary directory and notifying url with the bearer token.
func startRegistry(t testing.TB, url, token string) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatal("docker-registry is not installed (make deps installs Debian's docker-registry package)")
	}
	dir := t.TempDir()
	addr := freePort(t)
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
notifications:
  endpoints:
  - name: image-toolkit
    url: %s
    headers:
      Authorization: [%q]
    timeout: 5s
    threshold: 3
    backoff: 1s
`, filepath.Join(dir, "data"), addr, url, "Bearer "+token)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("docker-registry log:\n%s", tail(string(b), 4000))
		}
	})
	hc := &http.Client{Timeout: time.Second}
	testenv.Eventually(t, 20*time.Second, func() (bool, error) {
		resp, err := hc.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return addr
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// push writes a small random image as repo:tag.
func push(t testing.TB, repo, tag string) {
	t.Helper()
	if err := pushImage(repo, tag); err != nil {
		t.Fatal(err)
	}
}

func pushImage(repo, tag string) error {
	img, err := random.Image(256, 1)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(repo+":"+tag, name.Insecure)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return remote.Write(ref, img, remote.WithContext(ctx))
}

// A push to the real distribution registry reaches the receiver as a
// notification carrying the configured Authorization header, which
// requests a scan of exactly the ImageRepository of the pushed image (not
// another of the same registry, nor one the selector leaves out), and the
// ImagePolicy picks the new tag within seconds although the repository's
// interval is an hour; five tags pushed at once are fewer scans than tags.
// It logs push → policy latency over several tags.
func TestDistributionPushScansAtOnce(t *testing.T) {
	cluster, bin := localenv.StartTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hookAddr := freePort(t)
	reflector, err := cluster.StartController(ctx, bin, "image-reflector-controller", "--webhook-bind-address="+hookAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reflector log:\n%s", reflector.Log())
		}
		_ = reflector.Stop(10 * time.Second)
	})
	c := cluster.Client
	ns := cluster.Namespace(t)

	const token = "distribution-notification-token"
	hook := &imagev1.ImageWebhook{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"},
		Spec: imagev1.ImageWebhookSpec{Type: imagev1.WebhookDistribution, SecretRef: meta.LocalObjectReference{Name: "hook-token"},
			ImageRepositorySelector: &metav1.LabelSelector{MatchLabels: map[string]string{"webhook": "yes"}}}}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook-token"}, StringData: map[string]string{"token": token}},
		hook,
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(hook), hook)
		return hook.Status.WebhookPath != "", err
	})
	reg := startRegistry(t, "http://"+hookAddr+hook.Status.WebhookPath, token)
	app, other := reg+"/team/app", reg+"/team/other"
	push(t, app, "1.0.0")
	push(t, other, "1.0.0")

	repo := func(name, image string, selected bool) *imagev1.ImageRepository {
		r := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: imagev1.ImageRepositorySpec{Image: image, Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}}
		if selected {
			r.Labels = map[string]string{"webhook": "yes"}
		}
		return r
	}
	policy := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: "app"},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=0.0.0"}}}}
	// "unselected" has the pushed image but not the selector's label.
	for _, o := range []client.Object{repo("app", app, true), repo("other", other, true), repo("unselected", app, false), policy} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	latest := func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil || policy.Status.LatestRef == nil {
			return ""
		}
		return policy.Status.LatestRef.Tag
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, error) { return latest() == "1.0.0", nil })

	var took []time.Duration
	for i := 1; i <= 10; i++ {
		tag := fmt.Sprintf("1.%d.0", i)
		push(t, app, tag)
		pushed := time.Now()
		testenv.Eventually(t, 60*time.Second, func() (bool, error) { return latest() == tag, nil })
		took = append(took, time.Since(pushed))
	}
	slices.Sort(took)
	t.Logf("registry push → ImagePolicy latestRef over %d tags: p50 %s, p95 %s, max %s (interval 1h)",
		len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)*95/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))

	// What "other" and "unselected" were asked before the burst: the
	// registry delivers the notification of other's own push (before the
	// ImageRepositories existed) when it will, and under load that can be
	// after they were created, which rightly asks "other" to scan.
	requested := func(name string) string {
		var r imagev1.ImageRepository
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
			t.Fatal(err)
		}
		return r.Annotations[meta.ReconcileRequestAnnotation]
	}
	asked := map[string]string{"other": requested("other"), "unselected": requested("unselected")}

	// A burst: five tags pushed at once are fewer scans than tags, the
	// rest folded into the pending request.
	before, err := reflector.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pushImage(app, fmt.Sprintf("2.0.%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, error) { return latest() == "2.0.5", nil })
	after, err := reflector.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requests := `imagetoolkit_reflector_webhook_scan_requests_total{type="distribution"}`
	coalesced := `imagetoolkit_reflector_webhook_coalesced_total{type="distribution"}`
	scans := metricValue(after, requests) - metricValue(before, requests)
	folded := metricValue(after, coalesced) - metricValue(before, coalesced)
	t.Logf("5 tags pushed at once: %v scan requests, %v folded into them", scans, folded)
	if scans >= 5 || folded < 1 {
		t.Errorf("5 tags pushed at once made %v scan requests (%v coalesced); want fewer than 5", scans, folded)
	}

	// Only the pushed, selected repository was asked to scan.
	for name, was := range asked {
		if v := requested(name); v != was {
			t.Errorf("ImageRepository %s got a scan request (%s) for a push to team/app", name, v)
		}
	}
	var r imagev1.ImageRepository
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status.LastHandledReconcileAt == "" {
		t.Error("the scans of team/app were not reconcile requests")
	}

	m, err := reflector.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`imagetoolkit_reflector_webhook_accepted_total{type="distribution"}`,
		`imagetoolkit_reflector_webhook_scan_requests_total{type="distribution"}`,
		`imagetoolkit_reflector_webhook_scan_start_seconds_count`,
	} {
		if v := metricValue(m, want); v < 1 {
			t.Errorf("%s = %v, want ≥ 1", want, v)
		}
	}
	if v := metricValue(m, `imagetoolkit_reflector_webhook_rejected_total{reason="bad_credentials",type="distribution"}`); v != 0 {
		t.Errorf("the registry's notifications were refused %v times", v)
	}
}

func metricValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}
