package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Update windows through the three controller binaries: with a schedule
// whose one window opens at the next minute boundary at least 15 s away
// (cron has minutes; written in Asia/Kolkata, UTC+05:30), the sample
// automation makes no job before it, neither for its first run nor for a
// newly pushed tag, while its status and tk-image explain name the
// opening; when the window opens the new tag is committed by itself, no
// earlier. Real time: the run waits 15 to 75 s for the minute boundary.
func TestChainUpdateWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := binaries(t, root)
	tk := filepath.Join(bin, "tk-image")
	if _, err := os.Stat(tk); err != nil {
		tk = filepath.Join(t.TempDir(), "tk-image")
		build := exec.CommandContext(ctx, "go", "build", "-o", tk, "./tk-image")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building tk-image: %v\n%s", err, out)
		}
	}
	env, err := chain.Start(ctx, t.TempDir(), bin, []string{"6.3.0", "6.4.0"}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	opens := time.Now().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute).UTC()
	if time.Until(opens) > 75*time.Second {
		opens = opens.Add(-time.Minute)
	}
	t.Logf("the window opens at %s, in %s", opens.Format(time.RFC3339), time.Until(opens).Round(time.Second))
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	local := opens.In(kolkata)
	i := strings.Index(samples, "kind: ImageUpdateAutomation\n")
	if i < 0 {
		t.Fatal("the samples have no ImageUpdateAutomation")
	}
	scheduled := samples[:i] + strings.Replace(samples[i:], "  interval: 5m\n", fmt.Sprintf(`  interval: 5m
  schedule:
    timeZone: Asia/Kolkata
    windows:
    - cron: "%d %d * * *"
      duration: 1m
`, local.Minute(), local.Hour()), 1)
	if scheduled == samples {
		t.Fatal("the automation sample no longer has interval: 5m")
	}
	start := env.Head("main")
	if err := env.Apply(ctx, scheduled); err != nil {
		t.Fatal(err)
	}

	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", "default"
	waitAutomation(t, env, iua, func() bool {
		return readyReason(iua) == imagev1.OutsideUpdateWindowReason
	})
	if w := iua.Status.NextWindow; w == nil || !w.Start.Time.Equal(opens) || !w.End.Time.Equal(opens.Add(time.Minute)) {
		t.Errorf("nextWindow %+v, want %s to %s", w, opens, opens.Add(time.Minute))
	}

	// A new tag before the window: the policy moves, git does not.
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	waitAutomation(t, env, iua, func() bool {
		return readyReason(iua) == imagev1.OutsideUpdateWindowReason && strings.Contains(readyMessage(iua), "podinfo (6.5.0)")
	})
	if !strings.Contains(readyMessage(iua), "the next opens at "+opens.Format(time.RFC3339)) {
		t.Errorf("Ready message %q does not name the opening %s", readyMessage(iua), opens.Format(time.RFC3339))
	}
	out, err := exec.CommandContext(ctx, tk, "--kubeconfig", env.Cluster.Kubeconfig,
		"-n", "default", "explain", "automation", "fleet").CombinedOutput()
	if err != nil {
		t.Fatalf("tk-image explain: %v\n%s", err, out)
	}
	if want := "closed: no UpdateJob until the next window, " + opens.Format(time.RFC3339); !strings.Contains(string(out), want) {
		t.Errorf("tk-image explain automation does not say %q:\n%s", want, out)
	}
	if n := countJobs(t, env, "fleet"); n != 0 || env.Head("main") != start {
		t.Fatalf("before the window: %d jobs, head %s (was %s); want none and the same head", n, env.Head("main"), start)
	}
	if time.Now().After(opens) {
		t.Fatalf("the checks before the window ended after it opened (%s): too slow a machine for this test", opens)
	}

	// The window opens: the pending tag is committed with no trigger.
	head := waitHead(t, env, "main", start)
	t.Logf("committed %s after the opening", time.Since(opens).Round(10*time.Millisecond))
	host := env.RegistryHost + "/" + chain.Image
	if msg := must(env.FleetGit("log", "-1", "--format=%B", head)); !strings.Contains(msg, host+":6.5.0") {
		t.Errorf("the window's commit says %q, want the new tag %s:6.5.0", msg, host)
	}
	ct, err := strconv.ParseInt(strings.TrimSpace(must(env.FleetGit("show", "-s", "--format=%ct", head))), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if committed := time.Unix(ct, 0); committed.Before(opens) {
		t.Errorf("committed at %s, before the window opened at %s", committed, opens)
	}
	// The push is recorded: the window's run is over.
	waitAutomation(t, env, iua, func() bool { return iua.Status.LastPushCommit == head })
}

func readyReason(a *imagev1.ImageUpdateAutomation) string {
	for _, c := range a.Status.Conditions {
		if c.Type == "Ready" {
			return c.Reason
		}
	}
	return ""
}

func readyMessage(a *imagev1.ImageUpdateAutomation) string {
	for _, c := range a.Status.Conditions {
		if c.Type == "Ready" {
			return c.Message
		}
	}
	return ""
}
