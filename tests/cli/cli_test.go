// Package cli runs the tk-image binary against the whole chain: a real
// control plane, the three controller processes, a registry and a git
// server. What a user types is what these tests run.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// cli runs bin/tk-image against one cluster.
type cli struct {
	t          *testing.T
	bin        string
	kubeconfig string
}

// result is one run's exit code and output.
type result struct {
	code        int
	out, errOut string
}

func (c cli) run(args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		c.t.Fatalf("tk-image %s: %v", strings.Join(args, " "), err)
	}
	transcribe(args, out.String()+errOut.String(), code)
	return result{code, out.String(), errOut.String()}
}

// expect runs args and checks the exit code and that stdout+stderr
// contain every want.
func (c cli) expect(code int, args []string, want ...string) result {
	c.t.Helper()
	r := c.run(args...)
	all := r.out + r.errOut
	if r.code != code {
		c.t.Fatalf("tk-image %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.out, r.errOut)
	}
	for _, w := range want {
		if !strings.Contains(all, w) {
			c.t.Fatalf("tk-image %s: output lacks %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), w, r.out, r.errOut)
		}
	}
	return r
}

func a(s ...string) []string { return s }

// transcribe appends a command and its output to $TK_IMAGE_TRANSCRIPT, when
// set: the docs' examples (README.md, docs/cli.md) are copied from there, so their output is
// what the commands print.
func transcribe(args []string, output string, code int) {
	path := os.Getenv("TK_IMAGE_TRANSCRIPT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "$ tk-image %s\n%s(exit %d)\n\n", strings.Join(args, " "), output, code)
}

// Every cluster command, as a user runs it, against real controllers:
// create (applied, updated, rejected by the API server, exported), get in
// each output, reconcile and its wait, suspend and resume, job run with
// flags and from an automation (commit pushed, no change, failure), and
// delete.
func TestCommandsAgainstTheChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := localenv.Binaries(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tkImage := filepath.Join(localenv.BinDir(root), "tk-image")
	if _, err := os.Stat(tkImage); err != nil {
		t.Fatalf("%v: run make build first", err)
	}
	env, err := chain.Start(ctx, t.TempDir(), bin, []string{"6.3.0", "6.4.0"}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := cli{t: t, bin: tkImage, kubeconfig: env.Cluster.Kubeconfig}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	// Only the git-credentials Secret of the samples; the objects come
	// from tk-image.
	if err := env.Apply(ctx, samples[strings.LastIndex(samples, "---"):]); err != nil {
		t.Fatal(err)
	}
	image := env.RegistryHost + "/" + chain.Image

	// create: applied, then waited for; the controllers' Ready message is
	// the last line.
	c.expect(0, a("create", "repository", "podinfo", "--image", image, "--insecure", "--interval", "1h", "--wait"),
		"ImageRepository default/podinfo created", "2 tags")
	c.expect(0, a("create", "policy", "podinfo", "--repository", "podinfo", "--semver", ">=6.0.0", "--label", "automation=enabled", "--wait"),
		"ImagePolicy default/podinfo created", "6.4.0")
	// Again with a new range: the same object, updated in place.
	c.expect(0, a("create", "policy", "podinfo", "--repository", "podinfo", "--semver", ">=6.0.0 <7.0.0", "--label", "automation=enabled"),
		"ImagePolicy default/podinfo updated")
	var pol imagev1.ImagePolicy
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "podinfo"}, &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Spec.Policy.SemVer.Range != ">=6.0.0 <7.0.0" || pol.Labels["automation"] != "enabled" {
		t.Fatalf("policy after the second create: %+v %v", pol.Spec.Policy, pol.Labels)
	}
	// Two orderings: refused before the API server is asked, in the
	// flags' words (the API server's are below, for --platform).
	c.expect(2, a("create", "policy", "bad", "--repository", "podinfo", "--semver", "1.x", "--alphabetical", "asc"),
		"give exactly one of --semver, --docker, --alphabetical, --numerical or --newest-build")
	// --export writes nothing to the cluster.
	r := c.expect(0, a("create", "policy", "exported", "-n", "apps", "--repository", "podinfo", "--semver", "6.x", "--export"))
	wantExport := `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: exported
  namespace: apps
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    semver:
      range: 6.x
`
	if r.out != wantExport {
		t.Fatalf("--export printed:\n%s\nwant:\n%s", r.out, wantExport)
	}
	c.expect(1, a("get", "policy", "exported", "-n", "apps"), `namespaces "apps" not found`)

	// The soak, newest-build and platform flags write what the API server
	// accepts, and leave to it what was not given: newestBuild {} comes
	// back with the API's 100 candidates. A platform the schema refuses is
	// refused in the API server's words.
	c.expect(0, a("create", "policy", "timed", "--repository", "podinfo", "--newest-build", "--minimum-age", "24h",
		"--age-source", "created", "--digest-reflection", "IfNotPresent", "--platform", "linux/arm64"), "ImagePolicy default/timed created")
	var timed imagev1.ImagePolicy
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "timed"}, &timed); err != nil {
		t.Fatal(err)
	}
	if ts := timed.Spec; ts.Policy.NewestBuild == nil || ts.Policy.NewestBuild.MaxCandidates != imagev1.DefaultMaxCandidates ||
		ts.MinimumAge == nil || ts.MinimumAge.Duration.Duration != 24*time.Hour || ts.MinimumAge.Source != imagev1.AgeCreated ||
		ts.Platform != "linux/arm64" || ts.DigestReflectionPolicy != imagev1.ReflectIfNotPresent {
		t.Fatalf("policy made with the time and platform flags: %+v", ts)
	}
	c.expect(1, a("create", "policy", "bad", "--repository", "podinfo", "--semver", "6.x", "--platform", "linux"),
		`ImagePolicy.image.toolkit.dev "bad" is invalid`, "spec.platform")
	c.expect(0, a("delete", "policy", "timed"), "deleted")

	// get: the CRD's printer columns, rendered by the API server.
	r = c.expect(0, a("get", "policies"))
	if !regexp.MustCompile(`(?m)^NAME\s+IMAGE\s+TAG\s+READY\s+STATUS\s+AGE$`).MatchString(r.out) ||
		!regexp.MustCompile(`(?m)^podinfo\s+\S+/stefanprodan/podinfo\s+6\.4\.0\s+True\s`).MatchString(r.out) {
		t.Fatalf("get policies:\n%s", r.out)
	}
	r = c.expect(0, a("get", "imgpol", "-A", "-o", "wide"))
	if !regexp.MustCompile(`(?m)^NAMESPACE\s+NAME\s+IMAGE\s+TAG\s+DIGEST\s+READY`).MatchString(r.out) {
		t.Fatalf("get imgpol -A -o wide:\n%s", r.out)
	}
	if r := c.expect(0, a("get", "repository", "podinfo", "-o", "yaml"), "kind: ImageRepository", "tagCount: 2"); strings.Contains(r.out, "managedFields") {
		t.Fatalf("get -o yaml shows managedFields:\n%s", r.out)
	}
	c.expect(0, a("get", "repository", "podinfo", "-o", "yaml", "--show-managed-fields"), "managedFields")
	c.expect(0, a("get", "repositories", "-o", "json"), `"kind": "List"`, `"name": "podinfo"`)
	c.expect(0, a("get", "policies", "-o", "name"), "imagepolicy.image.toolkit.dev/podinfo")
	c.expect(0, a("get", "automations"), "No resources found in default namespace.")
	c.expect(1, a("get", "repository", "missing"), `imagerepositories.image.toolkit.dev "missing" not found`)
	c.expect(2, a("get", "widgets"), `unknown kind "widgets"`)

	// get --watch prints a row for each change until interrupted.
	watchCmd := exec.CommandContext(ctx, c.bin, "--kubeconfig", c.kubeconfig, "get", "policies", "--watch")
	var watched lockedBuffer
	watchCmd.Stdout, watchCmd.Stderr = &watched, &watched
	if err := watchCmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &watched, regexp.MustCompile(`(?m)^podinfo\s`))
	c.expect(0, a("create", "policy", "watched", "--repository", "podinfo", "--numerical", "asc"), "created")
	waitFor(t, &watched, regexp.MustCompile(`(?m)^watched\s`))
	_ = watchCmd.Process.Signal(os.Interrupt)
	if err := watchCmd.Wait(); err != nil {
		t.Fatalf("get --watch after an interrupt: %v\n%s", err, watched.String())
	}
	if n := strings.Count(watched.String(), "NAME "); n != 1 {
		t.Fatalf("get --watch printed %d headers:\n%s", n, watched.String())
	}

	// Completion lists the objects of the kind on the command line, and
	// the namespaces for -n.
	c.expect(0, a("__complete", "get", "policies", ""), "podinfo\nwatched\n")
	c.expect(0, a("__complete", "create", "policy", "x", "--repository", ""), "podinfo\n")
	c.expect(0, a("__complete", "reconcile", ""), "repository\npolicy\nautomation\n")
	c.expect(0, a("__complete", "get", "policies", "-n", ""), "default\n", "kube-system\n")
	c.expect(0, a("delete", "policy", "watched"), "deleted")

	// As a kubectl plugin: kubectl finds kubectl-tk_image on PATH, and
	// asks kubectl_complete-tk_image for completions.
	plugins := t.TempDir()
	for _, name := range []string{"kubectl-tk_image", "kubectl_complete-tk_image"} {
		if err := os.Symlink(c.bin, filepath.Join(plugins, name)); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := exec.CommandContext(ctx, env.Cluster.Kubectl, "tk-image", "get", "policies")
	kubectl.Env = append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.kubeconfig)
	if out, err := kubectl.CombinedOutput(); err != nil || !regexp.MustCompile(`(?m)^podinfo\s`).Match(out) {
		t.Fatalf("kubectl tk-image get policies: %v\n%s", err, out)
	}
	help := exec.CommandContext(ctx, filepath.Join(plugins, "kubectl-tk_image"), "get", "--help")
	if out, err := help.CombinedOutput(); err != nil || !strings.Contains(string(out), "kubectl tk-image get") {
		t.Fatalf("kubectl-tk_image get --help: %v\n%s", err, out)
	}
	complete := exec.CommandContext(ctx, filepath.Join(plugins, "kubectl_complete-tk_image"), "get", "policies", "")
	complete.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	if out, err := complete.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "podinfo\n") {
		t.Fatalf("kubectl_complete-tk_image get policies '': %v\n%s", err, out)
	}

	// reconcile: a new scan sees a new tag, and the policy follows.
	if err := env.PushTag(ctx, "6.5.0"); err != nil {
		t.Fatal(err)
	}
	c.expect(0, a("reconcile", "repository", "podinfo"), "reconcile requested", "3 tags")
	c.expect(0, a("reconcile", "policy", "podinfo"), "6.5.0")
	c.expect(1, a("reconcile", "repository", "missing"), `"missing" not found`)

	// job run with flags: the commit is pushed and its changes listed.
	// Whether the first phase read is "waiting" or already Running is a
	// race with the update-job-controller's claim (TestPhaseLine has
	// each line).
	head := env.Head("main")
	r = c.expect(0, a("job", "run", "--url", env.RepoURL, "--secret", "git-credentials", "--branch", "main",
		"--path", "clusters/prod", "--set", "default:podinfo="+image+":6.5.0"),
		" created\n", "Succeeded", "checked out main@sha1:"+head,
		"pushed commit", "podinfo.yaml", "Deployment/default/podinfo", image+":6.3.0 -> "+image+":6.5.0 (default:podinfo)")
	pushed := env.Head("main")
	if pushed == head || !strings.Contains(r.out, pushed) {
		t.Fatalf("head %s -> %s; output:\n%s", head, pushed, r.out)
	}
	// The same values again: nothing to change is a success.
	c.expect(0, a("job", "run", "again", "--url", env.RepoURL, "--secret", "git-credentials", "--branch", "main",
		"--path", "clusters/prod", "--set", "default:podinfo="+image+":6.5.0"),
		"UpdateJob default/again created", "NoChange", "no change")
	// A missing Secret fails the job: exit 1 with the job's reason.
	c.expect(1, a("job", "run", "--url", env.RepoURL, "--secret", "no-such-secret", "--branch", "main",
		"--backoff-limit", "0", "--set", "default:podinfo="+image+":6.4.0"),
		"failed: SecretNotFound")
	// Bad arguments never reach the cluster.
	c.expect(2, a("job", "run", "--url", env.RepoURL, "--branch", "main", "--set", "podinfo=x:1"), "not NAMESPACE:NAME")
	c.expect(2, a("job", "run", "--url", env.RepoURL, "--set", "default:podinfo=x:1"), "give --branch")
	c.expect(0, a("get", "jobs"), "again", "NoChange")

	// An automation created and waited for: its first run finds the
	// repository as the job left it.
	c.expect(0, a("create", "automation", "fleet", "--url", env.RepoURL, "--secret", "git-credentials", "--branch", "main",
		"--path", "clusters/prod", "--author-email", "bot@example.com", "--interval", "1h",
		"--policy-selector", "automation=enabled", "--wait"),
		"ImageUpdateAutomation default/fleet created", "no change needed")
	// Someone reverts the image in git; nothing tells the automation (its
	// interval is an hour), until job run --from-automation asks it to run.
	revert, err := env.FleetGit("rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for _, args := range [][]string{
		{"clone", "-q", env.Git.BarePath("fleet"), work},
		{"-C", work, "revert", "--no-edit", strings.TrimSpace(revert)},
		{"-C", work, "push", "-q", "origin", "main"},
	} {
		if _, err := chain.Git("", args...); err != nil {
			t.Fatal(err)
		}
	}
	c.expect(0, a("job", "run", "--from-automation", "fleet"),
		"reconcile requested", "Succeeded", "pushed commit", image+":6.3.0 -> "+image+":6.5.0")
	// Nothing changed since: the automation makes no job, and says why.
	c.expect(0, a("job", "run", "--from-automation", "fleet"), "no job: nothing changed since the last run")

	// explain, from what the real controllers recorded.
	c.expect(0, a("explain", "policy", "podinfo"), "Selected:       6.5.0", "Kept:           3")
	c.expect(0, a("explain", "automation", "fleet"), "Branch head:", "(listed now)", "default:podinfo", "applied",
		"no ImagePolicy default/podinfo-beta exists")

	// suspend and resume.
	c.expect(0, a("suspend", "automation", "fleet"), "ImageUpdateAutomation default/fleet suspended")
	c.expect(1, a("job", "run", "--from-automation", "fleet"), "is suspended: resume it first")
	c.expect(1, a("reconcile", "automation", "fleet"), "is suspended: resume it first")
	// Resuming changes the spec, so the automation runs again and finds
	// nothing to change.
	c.expect(0, a("resume", "automation", "fleet"), "resumed", "ImageUpdateAutomation default/fleet: no change needed")
	var auto imagev1.ImageUpdateAutomation
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet"}, &auto); err != nil {
		t.Fatal(err)
	}
	if auto.Spec.Suspend {
		t.Fatal("the automation is still suspended after resume")
	}

	// delete: gone when the command returns. (The automation's jobs are
	// the garbage collector's to delete, which envtest does not run.)
	c.expect(0, a("delete", "automation", "fleet"), "ImageUpdateAutomation default/fleet deleted")
	c.expect(0, a("delete", "job", "again"), "UpdateJob default/again deleted")
	c.expect(1, a("delete", "policy", "missing"), `"missing" not found`)
}

// lockedBuffer is an output buffer a running process writes while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer matches re.
func waitFor(t *testing.T, b *lockedBuffer, re *regexp.Regexp) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() (bool, error) { return re.MatchString(b.String()), nil })
}
