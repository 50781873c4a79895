package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// TestGitServerFaults proves that a git server that is down, hangs, drops
// the connection mid-pack or refuses the push (a pre-receive hook, as a
// protected branch) never leaves an UpdateJob Running: each job ends within
// a bounded time, after at most backoffLimit+1 attempts, Failed with reason
// GitOperationFailed and a message that says what the server did, the
// branch untouched; and that a server down for one attempt only costs a
// retry, the change then landing once.
func TestGitServerFaults(t *testing.T) {
	t.Parallel()
	// The subtests run after this function returns: the context is the
	// test's, not one cancelled on return.
	ctx := t.Context()
	cluster, bin := localenv.StartTest(t)
	srv := testgit.New(t, testgit.Options{Username: gitUser, Password: gitPassword})
	apply(ctx, t, cluster, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: git-credentials, namespace: default}
stringData: {username: %s, password: %s}
`, gitUser, gitPassword))
	proc, err := cluster.StartController(ctx, bin, "update-job-controller")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(20 * time.Second) })

	tests := []struct {
		name    string
		fault   GitFault
		n       int  // requests faulted; <0 all
		hook    bool // a pre-receive hook refuses every push
		want    updatev1.UpdateJobPhase
		message string // in the Ready condition's message when Failed
	}{
		{name: "down for the first attempt", fault: GitDown, n: 1, want: updatev1.UpdateJobSucceeded},
		{name: "down", fault: GitDown, n: -1, want: updatev1.UpdateJobFailed, message: "503"},
		{name: "hanging", fault: GitHang, n: -1, want: updatev1.UpdateJobFailed, message: "fetching"},
		{name: "reset mid-pack", fault: GitReset, n: -1, want: updatev1.UpdateJobFailed, message: "fetching"},
		{name: "push refused by a hook", hook: true, want: updatev1.UpdateJobFailed, message: "protected branch"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			repo := fmt.Sprintf("fleet-%d", i)
			srv.CreateRepo(t, repo, map[string]string{fleetPath: fleetYAML})
			bare := srv.BarePath(repo)
			before := strings.TrimSpace(testgit.Git(t, bare, "rev-parse", "main"))
			if tt.hook {
				hook := filepath.Join(bare, "hooks", "pre-receive")
				if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'protected branch: pushes to main need a review' >&2\nexit 1\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			proxy, err := NewGitProxy(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			proxy.SetFault(tt.fault, tt.n)
			name := fmt.Sprintf("git-fault-%d", i)
			job := updateJob(name, proxy.URL+"/"+repo+".git", "7.1.0")
			// One retry, and a 3 s timeout per git operation so that a
			// hanging server costs seconds.
			job = strings.Replace(job, "    secretRef: {name: git-credentials}\n", "    secretRef: {name: git-credentials}\n    timeout: 3s\n", 1)
			job += "  backoffLimit: 1\n"
			start := time.Now()
			apply(ctx, t, cluster, job)
			got := waitFinished(ctx, t, cluster, name, proc)
			took := time.Since(start)
			ready := conditions.Get(got, conditions.ReadyCondition)
			after := strings.TrimSpace(testgit.Git(t, bare, "rev-parse", "main"))
			switch tt.want {
			case updatev1.UpdateJobSucceeded:
				if got.Status.Phase != tt.want || got.Status.Attempts != 2 || got.Status.PushedCommit != after ||
					testgit.Git(t, bare, "rev-list", "--count", before+"..main") != "1\n" {
					t.Errorf("phase %s after %d attempts, pushed %q, branch %s; want Succeeded on the second attempt, one commit",
						got.Status.Phase, got.Status.Attempts, got.Status.PushedCommit, after)
				}
			default:
				if got.Status.Phase != tt.want || got.Status.Attempts != 2 || ready == nil ||
					ready.Reason != conditions.GitOperationFailedReason || !strings.Contains(ready.Message, tt.message) {
					t.Errorf("phase %s after %d attempts, Ready %+v; want Failed after 2 attempts, reason %s, a message with %q",
						got.Status.Phase, got.Status.Attempts, ready, conditions.GitOperationFailedReason, tt.message)
				}
				if after != before {
					t.Errorf("the branch moved to %s", after)
				}
			}
			msg := ""
			if ready != nil {
				msg = ready.Reason + ": " + ready.Message
			}
			figures(t, "faulted requests %d, phase %s, attempts %d, finished in %s; %s",
				proxy.Faulted(), got.Status.Phase, got.Status.Attempts, took.Round(100*time.Millisecond), msg)
		})
	}
}
