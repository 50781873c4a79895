// Package dashboard tests tk-image dashboard in a real browser (Debian's
// chromium, headless, driven over the DevTools protocol by chromedp)
// against the whole chain: a real control plane, the three controller
// processes, a registry and a git server. It also installs tk-image into
// the real Flux CLI as a plugin, from a catalog served here.
//
// make unit installs what the browser tests need (chromium with make deps,
// axe-core with make browser-tools) and promises it
// (testenv.RequireToolsEnv), under which a missing tool fails the test; a
// plain go test skips it and says what to install. The plugin test needs
// the Flux CLI, which make test-integrations builds (make flux-tools).
package dashboard

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binDir is $IMAGE_TOOLKIT_BIN, else the repository's bin/.
func binDir(t *testing.T) string { return localenv.BinDir(repoRoot(t)) }

// tkImage is the tk-image binary under test: bin/tk-image as make build
// left it, else one built from this tree.
func tkImage(t *testing.T) string {
	t.Helper()
	if os.Getenv("IMAGE_TOOLKIT_BIN") != "" {
		return filepath.Join(binDir(t), "tk-image")
	}
	out := filepath.Join(t.TempDir(), "tk-image")
	cmd := exec.Command("go", "build", "-o", out, "./tk-image")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tk-image: %v\n%s", err, b)
	}
	return out
}

// dashboard runs tk-image dashboard with the kubeconfig and extra flags on
// a free loopback port, until the test ends, and returns its address.
func dashboard(t *testing.T, bin, kubeconfig string, flags ...string) string {
	t.Helper()
	u, _ := startDashboard(t, bin, kubeconfig, flags...)
	return u
}

// startDashboard is dashboard, also returning the process.
func startDashboard(t *testing.T, bin, kubeconfig string, flags ...string) (string, *os.Process) {
	t.Helper()
	args := append([]string{"dashboard", "--kubeconfig", kubeconfig, "--address", "127.0.0.1:0", "--no-browser"}, flags...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "dashboard.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b, _ := os.ReadFile(logPath)
				t.Errorf("tk-image dashboard did not stop cleanly on Ctrl-C: %v\n%s", err, b)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("tk-image dashboard did not stop within 10s of Ctrl-C")
		}
		logFile.Close()
		// The user's terminal gets no library's complaints.
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "goroutine ") || strings.Contains(string(b), "SetLogger") {
			t.Errorf("tk-image dashboard wrote a stack trace to stderr:\n%s", b)
		}
	})
	found := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if u, ok := strings.CutPrefix(lines.Text(), "Dashboard: "); ok {
				found <- strings.Fields(u)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-found:
		return strings.TrimSuffix(u, "/"), cmd.Process
	case <-time.After(60 * time.Second):
		b, _ := os.ReadFile(logPath)
		t.Fatalf("tk-image %s printed no address within 60s\n%s", strings.Join(args, " "), b)
	}
	return "", nil
}

// say logs progress with the time, for a slow run's record.
func say(t *testing.T) func(string) {
	start := time.Now()
	return func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) }
}

func mustContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
