// Package e2e runs the controller binaries against a real control plane.
package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// binaries returns the directory of the controller binaries to run.
func binaries(t *testing.T, root string) string {
	t.Helper()
	dir, err := localenv.Binaries(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestControllersRunAgainstRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, bin := localenv.StartTest(t)

	for _, name := range localenv.Controllers {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), name+" ") {
			t.Errorf("%s --version: %v %q", name, err, out)
		}
		if name == "update-job-controller" && !strings.Contains(string(out), "libgit2 1.5.") {
			t.Errorf("update-job-controller is not linked to libgit2 1.5: %q", out)
		}
	}

	var procs []*localenv.Process
	for _, name := range localenv.Controllers {
		// Leader election on, as deployed: it must work against a real
		// apiserver (Leases in RUNTIME_NAMESPACE).
		p, err := cluster.StartController(ctx, bin, name, "--leader-elect=true")
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			if err := p.Stop(20 * time.Second); err != nil {
				t.Errorf("%s did not exit cleanly: %v\n%s", p.Name, err, p.Log())
			}
		}
	}()

	// The chart samples are valid against the CRDs and reach the controllers.
	apply := cluster.KubectlCmd(ctx, "apply", "-f", "charts/image-reflector-controller/samples",
		"-f", "charts/image-automation-controller/samples", "-f", "charts/update-job-controller/samples")
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}

	// The update-job-controller process claims the sample job and tries
	// it; git.example.com does not resolve here, so the attempt fails and
	// says why.
	jobs := &updatev1.UpdateJobList{}
	testenv.Eventually(t, 60*time.Second, func() (bool, error) {
		if err := cluster.Client.List(ctx, jobs, client.InNamespace("default")); err != nil {
			return false, err
		}
		if len(jobs.Items) != 1 {
			return false, nil
		}
		c := conditions.Get(&jobs.Items[0], conditions.ReadyCondition)
		return jobs.Items[0].Status.Attempts >= 1 && c != nil && c.Reason == conditions.GitOperationFailedReason &&
			strings.Contains(c.Message, "git.example.com"), nil
	})

	// `kubectl get image-toolkit` lists every kind through the category.
	out, err := cluster.KubectlCmd(ctx, "get", "image-toolkit", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get image-toolkit: %v\n%s", err, out)
	}
	for _, want := range []string{"imagerepository.image.toolkit.dev/podinfo", "imagepolicy.image.toolkit.dev/podinfo",
		"imagewebhook.image.toolkit.dev/registry", "imageupdateautomation.image.toolkit.dev/", "updatejob.update.toolkit.dev/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl get image-toolkit lacks %s:\n%s", want, out)
		}
	}

	// Each process serves controller-runtime's and our metrics.
	subsystems := map[string]string{
		"image-reflector-controller":  "imagetoolkit_reflector_",
		"image-automation-controller": "imagetoolkit_automation_",
		"update-job-controller":       "imagetoolkit_updatejob_",
	}
	for _, p := range procs {
		var body string
		testenv.Eventually(t, 30*time.Second, func() (bool, error) {
			body, err = p.Metrics(ctx)
			return err == nil && strings.Contains(body, subsystems[p.Name]+"reconcile_duration_seconds_count"), err
		})
		for _, want := range []string{"controller_runtime_reconcile_total", "# HELP " + subsystems[p.Name] + "ready_condition"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s /metrics lacks %q", p.Name, want)
			}
		}
	}
}

// startChain starts the chain (registry unless opts names one, git
// server, control plane, the controller binaries) with tags pushed, stops
// it when the test ends, and returns it with the repository root.
func startChain(ctx context.Context, t *testing.T, tags []string, opts chain.Options) (*chain.Env, string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, err := chain.StartWith(ctx, t.TempDir(), binaries(t, root), tags, func(s string) { t.Log(s) }, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env, root
}
