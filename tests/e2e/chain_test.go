package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// The whole chain as deployed: tags in a registry become commits in git
// with no one in between. Real controller processes, a real apiserver, a
// real registry and a real git server.
func TestChainTagToCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0", "7.0.0-rc.1"}, chain.Options{})
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	// podinfo-beta follows pre-releases; the sample automation does not
	// select it (no automation: enabled label); a second automation on
	// branch beta selects only it.
	extra := `apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-beta
  labels:
    channel: beta
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: ">=7.0.0-0"
---
` + chain.Automation(env.RepoURL, "beta", "git-credentials", `  policySelector:
    matchLabels:
      channel: beta
`)
	start := env.Head("main")
	if err := env.Apply(ctx, samples+"\n---\n"+extra); err != nil {
		t.Fatal(err)
	}
	host := env.RegistryHost + "/" + chain.Image

	// First commit on main: 6.3.0 → 6.4.0 for podinfo only, with the
	// sample's message template.
	first := waitHead(t, env, "main", start)
	wantMain := fmt.Sprintf("Update images in default/fleet\n\n- %[1]s:6.3.0 -> %[1]s:6.4.0\n", host)
	checkCommit(t, env, first, start, "imagebot <imagebot@example.com>", wantMain,
		"-        image: "+host+":6.3.0 # {\"$imagepolicy\": \"default:podinfo\"}\n"+
			"+        image: "+host+":6.4.0 # {\"$imagepolicy\": \"default:podinfo\"}\n")

	// The beta automation pushed branch beta from main: only the beta image
	// changed there.
	testenv.Eventually(t, 60*time.Second, func() (bool, error) { return env.Head("beta") != "", nil })
	beta := env.Head("beta")
	betaParent := strings.TrimSpace(must(env.FleetGit("rev-parse", beta+"^")))
	diff := must(env.FleetGit("diff", betaParent, beta))
	if !strings.Contains(diff, "+        image: "+host+":7.0.0-rc.1 # {\"$imagepolicy\": \"default:podinfo-beta\"}") ||
		strings.Count(diff, "\n+ ") != 1 {
		t.Errorf("beta diff:\n%s", diff)
	}

	iua := &imagev1.ImageUpdateAutomation{}
	iua.Name, iua.Namespace = "fleet", "default"
	waitAutomation(t, env, iua, func() bool { return iua.Status.LastPushCommit == first })

	// A newer tag, and a reconcile request on the ImageRepository: a second
	// commit on main.
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "podinfo", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	second := waitHead(t, env, "main", first)
	checkCommit(t, env, second, first, "imagebot <imagebot@example.com>",
		fmt.Sprintf("Update images in default/fleet\n\n- %[1]s:6.4.0 -> %[1]s:6.5.0\n", host),
		"-        image: "+host+":6.4.0 # {\"$imagepolicy\": \"default:podinfo\"}\n"+
			"+        image: "+host+":6.5.0 # {\"$imagepolicy\": \"default:podinfo\"}\n")

	// Nothing new: a reconcile of the automation makes no job and no commit.
	waitAutomation(t, env, iua, func() bool {
		return iua.Status.LastPushCommit == second && conditions.IsReady(iua)
	})
	jobsBefore := countJobs(t, env, "fleet")
	token, err := env.RequestReconcileToken(ctx, iua)
	if err != nil {
		t.Fatal(err)
	}
	waitAutomation(t, env, iua, func() bool {
		c := conditions.Get(iua, conditions.ReadyCondition)
		return iua.Status.LastHandledReconcileAt == token && c != nil && strings.Contains(c.Message, "nothing changed")
	})
	if h := env.Head("main"); h != second {
		t.Errorf("main moved to %s with nothing new", h)
	}
	if n := countJobs(t, env, "fleet"); n != jobsBefore {
		t.Errorf("%d jobs after a no-op run, want %d", n, jobsBefore)
	}

	// The domain metrics of every controller moved.
	for name, want := range map[string][]string{
		"image-reflector-controller":  {`imagetoolkit_reflector_scans_total`},
		"image-automation-controller": {`imagetoolkit_automation_runs_total{outcome="pushed"}`, `imagetoolkit_automation_policy_to_push_seconds_count`},
		"update-job-controller":       {`imagetoolkit_updatejob_jobs_total{outcome="succeeded"}`, `imagetoolkit_updatejob_git_operation_duration_seconds_count{operation="push"}`},
	} {
		body, err := env.Procs[name].Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range want {
			if v := metricSum(body, m); v < 1 {
				t.Errorf("%s: %s = %v, want >= 1", name, m, v)
			}
		}
	}
}

// waitAutomation polls the automation until cond holds, and shows its
// status and the controllers' logs when it does not.
func waitAutomation(t *testing.T, env *chain.Env, iua *imagev1.ImageUpdateAutomation, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := env.Cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(iua), iua)
		if err == nil && cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("automation %s: condition not met: %v\nstatus: %+v\nautomation log:\n%s\nupdate-job log:\n%s", iua.Name, err,
				iua.Status, env.Procs["image-automation-controller"].Log(), env.Procs["update-job-controller"].Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// waitHead waits for branch to move away from old.
func waitHead(t *testing.T, env *chain.Env, branch, old string) string {
	t.Helper()
	var h string
	testenv.Eventually(t, 90*time.Second, func() (bool, error) {
		h = env.Head(branch)
		return h != "" && h != old, nil
	})
	return h
}

// checkCommit checks a commit's parent, author, message and the changed
// lines of its diff.
func checkCommit(t *testing.T, env *chain.Env, commit, parent, author, message, changed string) {
	t.Helper()
	out := must(env.FleetGit("log", "-1", "--format=%P%n%an <%ae>%n%B", commit))
	want := parent + "\n" + author + "\n" + message
	if strings.TrimRight(out, "\n") != strings.TrimRight(want, "\n") {
		t.Errorf("commit %s:\n%s\nwant:\n%s", commit, out, want)
	}
	diff := must(env.FleetGit("diff", "--unified=0", parent, commit))
	var lines []string
	for _, l := range strings.Split(diff, "\n") {
		if (strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+")) && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "+++") {
			lines = append(lines, l)
		}
	}
	if got := strings.Join(lines, "\n") + "\n"; got != changed {
		t.Errorf("diff of %s:\n%s\nwant:\n%s", commit, got, changed)
	}
	if !strings.Contains(diff, "+++ b/"+chain.ManifestPath) {
		t.Errorf("diff of %s does not touch %s:\n%s", commit, chain.ManifestPath, diff)
	}
}

func countJobs(t *testing.T, env *chain.Env, automation string) int {
	t.Helper()
	list := &updatev1.UpdateJobList{}
	if err := env.Cluster.Client.List(context.Background(), list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range list.Items {
		for _, o := range j.OwnerReferences {
			if o.Name == automation {
				n++
			}
		}
	}
	return n
}

// metricSum adds up the samples of a metric whose name and labels start
// with prefix (e.g. name{label="x"}).
func metricSum(body, prefix string) float64 {
	sum := 0.0
	re := regexp.MustCompile(`\s+(\S+)$`)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "#") || !strings.HasPrefix(l, prefix) {
			continue
		}
		rest := l[len(prefix):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' && rest[0] != ',' {
			continue // a longer metric name
		}
		if m := re.FindStringSubmatch(l); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}
