package main

import (
	"bufio"
	"io"
	"net/http"
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

// make demo DEMO_FLAGS=--stay, as a person runs it: after the walk-through
// the chain stays, tk-image dashboard serves it with the failing
// automation naming its Secret, a tag typed on standard input is pushed
// and reaches the Fleet page, and Ctrl-C stops everything with exit 0.
func TestStayKeepsTheChainUntilCtrlC(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := localenv.BinDir(root)
	for _, name := range append(localenv.Controllers, "tk-image") {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			testenv.Missing(t, filepath.Join(bin, name), "build")
		}
	}
	demo := filepath.Join(t.TempDir(), "demo")
	// make build's flags: the demo reuses its compile of the dependencies.
	build := exec.Command("go", "build", "-trimpath", "-tags=netgo,osusergo", "-o", demo, "./tests/cmd/demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	cmd := exec.Command(demo, "--bin", bin, "--stay", "--dashboard-address", "127.0.0.1:0")
	cmd.Dir = root
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var printed strings.Builder
	lines := make(chan string, 1000)
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	await := func(what string, d time.Duration, ok func(string) bool) string {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case l, open := <-lines:
				if !open {
					t.Fatalf("the demo ended before %s:\n%s", what, printed.String())
				}
				printed.WriteString(l + "\n")
				if ok(l) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %s within %s:\n%s", what, d, printed.String())
			}
		}
	}
	line := await("dashboard address", 4*time.Minute, func(l string) bool { return strings.Contains(l, "tk-image dashboard is serving ") })
	url := strings.Fields(line[strings.Index(line, "serving ")+len("serving "):])[0]
	await("the commands to try", 10*time.Second, func(l string) bool { return strings.Contains(l, "explain automation staging") })
	page := func(want string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		var body string
		for time.Now().Before(deadline) {
			if resp, err := http.Get(url + "?namespace=default"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if body = string(b); strings.Contains(body, want) {
					return
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("the Fleet page at %s does not show %q:\n%s", url, want, body)
	}
	page("At fault: Secret default/git-staging")
	page("resume first")
	if _, err := io.WriteString(stdin, "6.6.0\n"); err != nil {
		t.Fatal(err)
	}
	await("the push", time.Minute, func(l string) bool { return strings.Contains(l, "pushed stefanprodan/podinfo:6.6.0") })
	page("6.5.0</span> → <span class=\"tag\">6.6.0")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		for l := range lines {
			printed.WriteString(l + "\n")
		}
		if err != nil {
			t.Fatalf("the demo exited with %v after Ctrl-C:\n%s", err, printed.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the demo did not stop within a minute of Ctrl-C:\n%s", printed.String())
	}
	if !strings.Contains(printed.String(), "stopping the controllers") {
		t.Errorf("the demo did not say it stops everything:\n%s", printed.String())
	}
}
