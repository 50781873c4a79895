package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// memoryObjects is how many automations, and as many policies, the
// dashboard watches in the memory run.
const memoryObjects = 1000

// TestDashboardMemory runs tk-image dashboard watching 1,000 automations
// and 1,000 policies while their statuses change ten times a second and an
// event stream is open, for IMAGE_TOOLKIT_DASHBOARD_SOAK (a duration, e.g.
// 1h; the test is skipped without it), and reports its resident memory at
// the start and the end:
//
//	IMAGE_TOOLKIT_DASHBOARD_SOAK=1h go test -run TestDashboardMemory -v -timeout 2h ./tests/dashboard/
func TestDashboardMemory(t *testing.T) {
	soak, err := time.ParseDuration(os.Getenv("IMAGE_TOOLKIT_DASHBOARD_SOAK"))
	if err != nil {
		t.Skip("IMAGE_TOOLKIT_DASHBOARD_SOAK (a duration) is not set: the memory run is long")
	}
	cluster, err := localenv.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	c := cluster.Client
	ctx := mustContext(t, soak+10*time.Minute)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range memoryObjects {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := createWatched(ctx, c, i); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	base, proc := startDashboard(t, tkImage(t), cluster.Kubeconfig)
	pid := proc.Pid

	// An open page's stream: every change is sent to it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events atomic.Int64
	go func() {
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "event: change") {
				events.Add(1)
			}
		}
	}()
	fetchPage(t, base+"/")
	start := rss(t, pid)
	changes := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(soak); time.Now().Before(end); changes++ {
		<-tick.C
		a := &imagev1.ImageUpdateAutomation{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("app-%04d", changes%memoryObjects)}, a); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		a.Status.LastAutomationRunTime = &now
		a.Status.LastPushCommit = fmt.Sprintf("%040x", changes)
		if err := c.Status().Update(ctx, a); err != nil {
			t.Fatal(err)
		}
		if changes%600 == 0 {
			fetchPage(t, base+"/")
			t.Logf("%s: %d changes, RSS %d MiB", time.Until(end).Round(time.Second), changes, rss(t, pid)>>20)
		}
	}
	fetchPage(t, base+"/")
	end := rss(t, pid)
	t.Logf("FIGURES tk-image dashboard watching %d automations and %d policies: RSS %d MiB at the start, %d MiB after %s (%d status changes, %d change events to one open stream)",
		memoryObjects, memoryObjects, start>>20, end>>20, soak, changes, events.Load())
}

func createWatched(ctx context.Context, c client.Client, i int) error {
	name := fmt.Sprintf("app-%04d", i)
	p := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": name}}}
	p.Spec.ImageRepositoryRef.Name = name
	p.Spec.Policy.SemVer = &imagev1.SemVerPolicy{Range: "1.x"}
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	p.Status.LatestRef = &meta.ImageRef{Name: "registry.example.com/team/" + name, Tag: "1.4.0"}
	p.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: conditions.SucceededReason, Message: "resolved to 1.4.0", LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, p); err != nil {
		return err
	}
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	a.Spec.Interval = metav1.Duration{Duration: 5 * time.Minute}
	a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: "https://github.com/org/" + name + ".git"}
	a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}
	a.Spec.GitSpec.Commit.Author.Email = "bot@example.com"
	return c.Create(ctx, a)
}

// rss is a process's resident memory in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for process %d", pid)
	return 0
}

func fetchPage(t *testing.T, u string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
}
