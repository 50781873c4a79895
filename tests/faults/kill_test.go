package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

const (
	fleetPath = "apps/podinfo.yaml"
	fleetYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:7.0.0 # {"$imagepolicy": "default:podinfo"}
`
	gitUser     = "imagebot"
	gitPassword = "faults-password-not-secret"
	// lease is the update-job-controller's --job-lease-duration: how long
	// a killed runner's job waits before it is reclaimed.
	lease = 3 * time.Second
)

// TestKillUpdateJobController proves that kill -9 of the
// update-job-controller at any moment of a job (after the commit before the
// push, during the push, after the push before the status write, or at a
// random time) loses no change and doubles none: every job's change is on
// the branch exactly once, in job order, the job ends Succeeded naming the
// commit that carries its change, the server has no refs but main, and the
// restarted controller's mirror cache passes git fsck, holds no leftover
// push refs and serves a last job without a fault.
func TestKillUpdateJobController(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rnd := random(t)
	n := runs(3, 30)

	cluster, bin := localenv.StartTest(t)
	srv := testgit.New(t, testgit.Options{Username: gitUser, Password: gitPassword})
	srv.CreateRepo(t, "fleet", map[string]string{fleetPath: fleetYAML})
	bare := srv.BarePath("fleet")
	base := strings.TrimSpace(gitOut(t, bare, "rev-parse", "main"))
	proxy, err := NewGitProxy(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	repoURL := proxy.URL + "/fleet.git"
	apply(ctx, t, cluster, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: git-credentials, namespace: default}
stringData: {username: %s, password: %s}
`, gitUser, gitPassword))

	start := func() *localenv.Process {
		p, err := cluster.StartController(ctx, bin, "update-job-controller", "--job-lease-duration="+lease.String())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	proc := start()
	t.Cleanup(func() { _ = proc.Stop(20 * time.Second) })

	var kills int
	var recovery []time.Duration
	// Each run kills at one of the push points in turn; in the long mode
	// every fourth run kills at a random moment instead.
	for i := 1; i <= n+1; i++ {
		last := i == n+1 // the last job runs without a fault
		tag := fmt.Sprintf("7.0.%d", i)
		name := fmt.Sprintf("job-%d", i)
		killed := make(chan time.Time, 1)
		victim := proc
		kill := func() { victim.Kill(); killed <- time.Now() }
		point := "none"
		switch {
		case last:
		case long() && i%4 == 0:
			point = "random"
			// A job takes about a second here: kill somewhere in it.
			delay := time.Duration(rnd.Int64N(int64(time.Second)))
			time.AfterFunc(delay, kill)
		default:
			p := PushPoints[(i-1)%len(PushPoints)]
			point = string(p)
			proxy.Arm(p, kill)
		}
		apply(ctx, t, cluster, updateJob(name, repoURL, tag))
		if point != "none" {
			var at time.Time
			select {
			case at = <-killed:
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: the fault at %s never fired; log:\n%s", name, point, proc.Log())
			}
			kills++
			// Keep the killed process's log for the post-mortem.
			_ = os.Rename(proc.LogPath, fmt.Sprintf("%s.killed-%d", proc.LogPath, i))
			proc = start()
			job := waitFinished(ctx, t, cluster, name, proc)
			recovery = append(recovery, job.Status.CompletionTime.Sub(at))
		}
		job := waitFinished(ctx, t, cluster, name, proc)
		head := strings.TrimSpace(gitOut(t, bare, "rev-parse", "main"))
		if job.Status.Phase != updatev1.UpdateJobSucceeded || job.Status.PushedCommit != head {
			t.Errorf("%s (fault %s): phase %s, pushedCommit %q, branch at %s; want Succeeded naming the commit that holds its change; conditions %+v",
				name, point, job.Status.Phase, job.Status.PushedCommit, head, job.Status.Conditions)
		}
		if got := gitOut(t, bare, "show", "main:"+fleetPath); !strings.Contains(got, "podinfo:"+tag+" ") {
			t.Errorf("%s (fault %s): the branch does not hold %s:\n%s", name, point, tag, got)
		}
		t.Logf("%s: fault %s, phase %s, attempts %d", name, point, job.Status.Phase, job.Status.Attempts)
	}

	// Exactly one commit per job, in job order: none lost, none doubled.
	commits := strings.Fields(gitOut(t, bare, "rev-list", "--reverse", base+"..main"))
	var duplicates, lost int
	for i := 1; i <= n+1; i++ {
		want := fmt.Sprintf("podinfo:7.0.%d ", i)
		found := 0
		for _, c := range commits {
			body := gitOut(t, bare, "show", c+":"+fleetPath)
			parent := gitOut(t, bare, "show", c+"^:"+fleetPath)
			if strings.Contains(body, want) && !strings.Contains(parent, want) {
				found++
			}
		}
		switch {
		case found == 0:
			lost++
		case found > 1:
			duplicates += found - 1
		}
	}
	if len(commits) != n+1 || lost != 0 || duplicates != 0 {
		t.Errorf("%d jobs made %d commits: %d changes lost, %d doubled\n%s", n+1, len(commits), lost, duplicates,
			gitOut(t, bare, "log", "--oneline", base+"..main"))
	}
	if refs := strings.TrimSpace(gitOut(t, bare, "for-each-ref", "--format=%(refname)")); refs != "refs/heads/main" {
		t.Errorf("the server holds refs besides main:\n%s", refs)
	}

	// The mirror cache survived every kill: fsck clean, no push refs left.
	mirrors, _ := filepath.Glob(filepath.Join(cluster.Dir, "update-job-controller-0-cache", "*.git"))
	checked := 0
	for _, m := range mirrors {
		if _, err := os.Stat(filepath.Join(m, "HEAD")); err != nil {
			continue
		}
		checked++
		gitOut(t, m, "fsck", "--no-progress")
		if refs := gitOut(t, m, "for-each-ref", "refs/image-toolkit/"); refs != "" {
			t.Errorf("mirror %s keeps push refs:\n%s", m, refs)
		}
	}
	if checked == 0 {
		t.Errorf("no mirror found in the cache: %v", mirrors)
	}

	metrics, err := proc.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var maxRec time.Duration
	for _, r := range recovery {
		maxRec = max(maxRec, r)
	}
	figures(t, "runs %d, kills %d, changes expected %d landed %d, duplicates %d, lost %d, recovery max %s (lease %s)",
		n+1, kills, n+1, len(commits), duplicates, lost, maxRec.Round(100*time.Millisecond), lease)
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "imagetoolkit_updatejob_jobs_total") {
			t.Log(l)
		}
	}
}

func updateJob(name, url, tag string) string {
	return fmt.Sprintf(`apiVersion: update.toolkit.dev/v1beta1
kind: UpdateJob
metadata: {name: %s, namespace: default}
spec:
  repository:
    url: %s
    secretRef: {name: git-credentials}
  checkout: {ref: {branch: main}}
  update:
    path: ./apps
    setters:
    - policy: default:podinfo
      name: ghcr.io/stefanprodan/podinfo
      tag: %s
  commit:
    author: {name: imagebot, email: imagebot@example.com}
`, name, url, tag)
}

// waitFinished waits until the job has finished.
func waitFinished(ctx context.Context, t *testing.T, c *localenv.Cluster, name string, p *localenv.Process) *updatev1.UpdateJob {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	job := &updatev1.UpdateJob{}
	for {
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, job)
		if err == nil && job.Status.Phase.Finished() {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not finished (phase %q, err %v); log:\n%s", name, job.Status.Phase, err, p.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func apply(ctx context.Context, t *testing.T, c *localenv.Cluster, yaml string) {
	t.Helper()
	cmd := c.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(yaml)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return testgit.Git(t, dir, args...)
}
