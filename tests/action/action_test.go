// Package action tests the repository's GitHub Action (action.yml and
// hack/action/*.sh) the way the runner runs its steps: the scripts with the
// inputs in the environment variables action.yml passes, GITHUB_OUTPUT a
// file, in a real git work tree, with the real tk-image (and, for
// policies-from-cluster, a real control plane and kubectl).
package action

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
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

// tkImage is bin/tk-image of `make build` ($IMAGE_TOOLKIT_BIN when set).
func tkImage(t *testing.T) string {
	t.Helper()
	p := filepath.Join(localenv.BinDir(repoRoot(t)), "tk-image")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make build` first", err)
	}
	return p
}

const app = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
        - name: podinfo
          image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
        - name: sidecar
          image: docker.io/library/busybox:1.36
`

const worker = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
  namespace: apps
spec:
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/example/worker:1.0.0 # {"$imagepolicy": "apps:worker"}
`

// gitTree makes a git work tree holding files, all committed.
func gitTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "initial")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// run is one run of a step script.
type run struct {
	ok      bool
	log     string            // stdout and stderr, as the job log shows them
	outputs map[string]string // what the step wrote to GITHUB_OUTPUT
}

// runScript runs hack/action/<script> in dir as the runner runs a
// composite step: the working directory the workspace, env the step's
// env: block, GITHUB_OUTPUT and RUNNER_TEMP files of the runner's.
func runScript(t *testing.T, script, dir string, env map[string]string) run {
	t.Helper()
	out := filepath.Join(t.TempDir(), "github_output")
	if err := os.WriteFile(out, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "hack", "action", script))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GITHUB_OUTPUT="+out, "RUNNER_TEMP="+t.TempDir())
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	outputs, perr := parseOutputs(string(b))
	if perr != nil {
		t.Fatalf("GITHUB_OUTPUT: %v\n%s", perr, b)
	}
	return run{ok: err == nil, log: log.String(), outputs: outputs}
}

// parseOutputs reads a GITHUB_OUTPUT file as the runner does: NAME=VALUE
// lines, and NAME<<DELIMITER ... DELIMITER for multi-line values.
func parseOutputs(s string) (map[string]string, error) {
	out := map[string]string{}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l == "" {
			continue
		}
		if name, delim, ok := strings.Cut(l, "<<"); ok && !strings.Contains(name, "=") {
			var value []string
			for i++; ; i++ {
				if i == len(lines) {
					return nil, fmt.Errorf("%s: no closing %s", name, delim)
				}
				if lines[i] == delim {
					break
				}
				value = append(value, lines[i])
			}
			out[name] = strings.Join(value, "\n")
			continue
		}
		name, value, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("line %q is neither NAME=VALUE nor NAME<<DELIMITER", l)
		}
		out[name] = value
	}
	return out, nil
}

// The action updates the marked values under its path with the policies
// of its input (blank lines, comments and surrounding spaces skipped), logs
// each change, leaves files outside the path and unmarked values alone,
// and reports changed=true and the changed files relative to the
// workspace, ready for `git add`.
func TestActionUpdatesFilesAndWritesOutputs(t *testing.T) {
	dir := gitTree(t, map[string]string{"clusters/prod/app.yaml": app, "clusters/prod/worker.yaml": worker,
		"clusters/staging/app.yaml": app})
	r := runScript(t, "run.sh", dir, map[string]string{
		"INPUT_PATH":     "clusters/prod",
		"INPUT_POLICIES": "# the release train\napps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0\n\n  apps:worker=ghcr.io/example/worker:1.1.0  \n",
		"INPUT_TK_IMAGE": tkImage(t),
	})
	if !r.ok {
		t.Fatalf("the step failed:\n%s", r.log)
	}
	if got := git(t, dir, "status", "--porcelain"); got != " M clusters/prod/app.yaml\n M clusters/prod/worker.yaml\n" {
		t.Errorf("git status after the step:\n%s", got)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "clusters/prod/app.yaml"))
	if want := strings.Replace(app, "podinfo:6.4.0", "podinfo:6.5.0", 1); string(b) != want {
		t.Errorf("app.yaml:\n%s\nwant (only the marked value changed, byte for byte):\n%s", b, want)
	}
	want := map[string]string{"changed": "true", "files": "clusters/prod/app.yaml\nclusters/prod/worker.yaml"}
	if !maps.Equal(r.outputs, want) {
		t.Errorf("outputs %q, want %q", r.outputs, want)
	}
	for _, line := range []string{
		"clusters/prod/app.yaml: Deployment/apps/podinfo: ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)",
		"clusters/prod/worker.yaml: Deployment/apps/worker: ghcr.io/example/worker:1.0.0 -> ghcr.io/example/worker:1.1.0 (apps:worker)",
	} {
		if !strings.Contains(r.log, line+"\n") {
			t.Errorf("the log lacks %q:\n%s", line, r.log)
		}
	}
}

// dry-run: true writes nothing but reports what would change; policies
// that are already applied give changed=false and no files.
func TestActionDryRunAndNoChange(t *testing.T) {
	dir := gitTree(t, map[string]string{"app.yaml": app})
	r := runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
		"INPUT_DRY_RUN":  "true",
		"INPUT_TK_IMAGE": tkImage(t),
	})
	if !r.ok {
		t.Fatalf("the dry run failed:\n%s", r.log)
	}
	if got := git(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("a dry run changed the tree:\n%s", got)
	}
	if want := map[string]string{"changed": "true", "files": "app.yaml"}; !maps.Equal(r.outputs, want) {
		t.Errorf("dry-run outputs %q, want %q", r.outputs, want)
	}
	if !strings.Contains(r.log, "Dry run: 1 file(s) would change; none written.") {
		t.Errorf("the log does not say it was a dry run:\n%s", r.log)
	}

	r = runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.4.0",
		"INPUT_TK_IMAGE": tkImage(t),
	})
	if !r.ok {
		t.Fatalf("the step failed:\n%s", r.log)
	}
	if want := map[string]string{"changed": "false", "files": ""}; !maps.Equal(r.outputs, want) {
		t.Errorf("outputs without a change %q, want %q", r.outputs, want)
	}
}

// Bad inputs fail the step with an ::error annotation saying what is
// wrong, before anything is written: a policy line that is not
// NS:NAME=IMAGE:TAG (named by its line), a value tk-image rejects (in
// tk-image's words), a boolean that is not true or false, no policies, a
// path that is not a directory.
func TestActionRejectsBadInputs(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		says []string
	}{
		{"policy line without =", map[string]string{"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0\napps:worker ghcr.io/example/worker:1.1.0"},
			[]string{`::error title=tk-image update::policies line 2: "apps:worker ghcr.io/example/worker:1.1.0" is not NAMESPACE:NAME=IMAGE:TAG[@DIGEST]`}},
		{"policy name without namespace", map[string]string{"INPUT_POLICIES": "podinfo=ghcr.io/stefanprodan/podinfo:6.5.0"},
			[]string{`--policy "podinfo=ghcr.io/stefanprodan/podinfo:6.5.0"`, "::error title=tk-image update::tk-image update failed with exit status 2"}},
		{"image without tag", map[string]string{"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo"},
			[]string{`"ghcr.io/stefanprodan/podinfo"`, "no tag"}},
		{"dry-run not a boolean", map[string]string{"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0", "INPUT_DRY_RUN": "yes"},
			[]string{`::error title=tk-image update::input dry-run must be true or false, got "yes"`}},
		{"no policies", map[string]string{"INPUT_POLICIES": "\n# none yet\n"},
			[]string{"::error title=tk-image update::no policies: set the input policies, or policies-from-cluster: true"}},
		{"path not a directory", map[string]string{"INPUT_PATH": "clusters/missing", "INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0"},
			[]string{`::error title=tk-image update::input path: "clusters/missing" is not a directory`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := gitTree(t, map[string]string{"app.yaml": app})
			tc.env["INPUT_TK_IMAGE"] = tkImage(t)
			r := runScript(t, "run.sh", dir, tc.env)
			if r.ok {
				t.Fatalf("the step succeeded:\n%s", r.log)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.log, s) {
					t.Errorf("the log does not say %q:\n%s", s, r.log)
				}
			}
			if len(r.outputs) != 0 {
				t.Errorf("a failed step wrote outputs %q", r.outputs)
			}
			if got := git(t, dir, "status", "--porcelain"); got != "" {
				t.Errorf("a failed step changed the tree:\n%s", got)
			}
		})
	}
}

// A marked file tk-image cannot parse fails the step, but only after the other
// files were updated and the outputs written, so a workflow that continues
// on error still knows what changed.
func TestActionReportsUnreadableFiles(t *testing.T) {
	dir := gitTree(t, map[string]string{"app.yaml": app, "broken.yaml": "a: [\nimage: x:1 # {\"$imagepolicy\": \"apps:podinfo\"}\n"})
	r := runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
		"INPUT_TK_IMAGE": tkImage(t),
	})
	if r.ok {
		t.Fatalf("the step succeeded:\n%s", r.log)
	}
	if !strings.Contains(r.log, "broken.yaml") || !strings.Contains(r.log, "::error title=tk-image update::tk-image could not read some files") {
		t.Errorf("the log does not name broken.yaml and the error:\n%s", r.log)
	}
	if want := map[string]string{"changed": "true", "files": "app.yaml"}; !maps.Equal(r.outputs, want) {
		t.Errorf("outputs %q, want %q", r.outputs, want)
	}
}

// Without the input tk-image the step builds tk-image with go from the
// action's checkout (ACTION_PATH), stamped with the action's ref, and runs
// it.
func TestActionBuildsTkImageFromItsCheckout(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	dir := gitTree(t, map[string]string{"app.yaml": app})
	r := runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
		"ACTION_PATH":    repoRoot(t),
		"ACTION_REF":     "v9.9.9-test",
	})
	if !r.ok {
		t.Fatalf("the step failed:\n%s", r.log)
	}
	if !regexp.MustCompile(`(?m)^tk-image v9\.9\.9-test \(`).MatchString(r.log) {
		t.Errorf("the built tk-image does not report the action's ref:\n%s", r.log)
	}
	if r.outputs["changed"] != "true" {
		t.Errorf("outputs %q", r.outputs)
	}
}

// policies-from-cluster: true reads the ImagePolicies of the cluster the
// workflow's kubeconfig points at, with kubectl; a line of the input
// policies wins over the cluster's value for the same policy.
func TestActionReadsPoliciesFromCluster(t *testing.T) {
	c, err := localenv.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createPolicies(ctx, c); err != nil {
		t.Fatal(err)
	}

	dir := gitTree(t, map[string]string{"app.yaml": app, "worker.yaml": worker})
	r := runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES_FROM_CLUSTER": "true",
		"INPUT_POLICIES":              "apps:worker=ghcr.io/example/worker:1.1.0",
		"INPUT_TK_IMAGE":              tkImage(t),
		"KUBECONFIG":                  c.Kubeconfig,
		"PATH":                        filepath.Dir(c.Kubectl) + string(os.PathListSeparator) + os.Getenv("PATH"),
	})
	if !r.ok {
		t.Fatalf("the step failed:\n%s", r.log)
	}
	for _, line := range []string{
		"app.yaml: Deployment/apps/podinfo: ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)",
		"worker.yaml: Deployment/apps/worker: ghcr.io/example/worker:1.0.0 -> ghcr.io/example/worker:1.1.0 (apps:worker)",
	} {
		if !strings.Contains(r.log, line+"\n") {
			t.Errorf("the log lacks %q:\n%s", line, r.log)
		}
	}
	if want := map[string]string{"changed": "true", "files": "app.yaml\nworker.yaml"}; !maps.Equal(r.outputs, want) {
		t.Errorf("outputs %q, want %q", r.outputs, want)
	}

	// Without a reachable cluster the step says what to set up.
	r = runScript(t, "run.sh", dir, map[string]string{
		"INPUT_POLICIES_FROM_CLUSTER": "true",
		"INPUT_TK_IMAGE":              tkImage(t),
		"KUBECONFIG":                  filepath.Join(t.TempDir(), "missing"),
		"PATH":                        filepath.Dir(c.Kubectl) + string(os.PathListSeparator) + os.Getenv("PATH"),
	})
	if r.ok || !strings.Contains(r.log, "::error title=tk-image update::policies-from-cluster: kubectl get imagepolicies.image.toolkit.dev -A failed") {
		t.Errorf("without a cluster (ok=%v):\n%s", r.ok, r.log)
	}
}

// createPolicies creates apps/podinfo and apps/worker with a latestRef in
// their status, as the reflector would have set it.
func createPolicies(ctx context.Context, c *localenv.Cluster) error {
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		return err
	}
	for name, ref := range map[string]meta.ImageRef{
		"podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"},
		"worker":  {Name: "ghcr.io/example/worker", Tag: "1.2.0"},
	} {
		p := &imagev1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}},
		}
		if err := c.Client.Create(ctx, p); err != nil {
			return err
		}
		p.Status.LatestRef = &ref
		if err := c.Client.Status().Update(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// need-go.sh asks for actions/setup-go only when go is missing from PATH
// (or older than go.work's go line), and with go.work's version as the
// minimum.
func TestNeedGo(t *testing.T) {
	root := repoRoot(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	r := runScript(t, "need-go.sh", t.TempDir(), map[string]string{"ACTION_PATH": root})
	if !r.ok || r.outputs["setup"] != "false" {
		t.Errorf("with %s on PATH (ok=%v, outputs %q):\n%s", goBin, r.ok, r.outputs, r.log)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	want := ">=" + regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(b))[1]
	if r.outputs["go-version"] != want {
		t.Errorf("go-version %q, want %q", r.outputs["go-version"], want)
	}

	// A PATH with what the script needs but go.
	noGo := t.TempDir()
	for _, tool := range []string{"bash", "env", "awk", "sort", "head"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(noGo, tool)); err != nil {
			t.Fatal(err)
		}
	}
	r = runScript(t, "need-go.sh", t.TempDir(), map[string]string{"ACTION_PATH": root, "PATH": noGo})
	if !r.ok || r.outputs["setup"] != "true" || r.outputs["go-version"] != want {
		t.Errorf("without go (ok=%v, outputs %q):\n%s", r.ok, r.outputs, r.log)
	}
}

// action is the part of action.yml the tests read.
type action struct {
	Name    string
	Inputs  map[string]struct{ Default string }
	Outputs map[string]struct{ Value string }
	Runs    struct {
		Using string
		Steps []struct {
			ID, If, Shell, Run, Uses string
			Env                      map[string]string
			With                     map[string]string
		}
	}
}

// action.yml and the scripts agree: the update step passes every input,
// under the INPUT_* name run.sh reads, and run.sh reads no other; every
// run step names its shell and an executable script that exists; the
// outputs are the update step's, which run.sh writes.
func TestActionYAMLMatchesScripts(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "action.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var a action
	if err := yaml.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	if a.Runs.Using != "composite" {
		t.Fatalf("runs.using %q, want composite", a.Runs.Using)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "action", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var update *struct {
		ID, If, Shell, Run, Uses string
		Env                      map[string]string
		With                     map[string]string
	}
	for i, s := range a.Runs.Steps {
		if s.ID == "update" {
			update = &a.Runs.Steps[i]
		}
		if s.Run == "" {
			continue
		}
		if s.Shell != "bash" {
			t.Errorf("step %q: shell %q, want bash", s.ID, s.Shell)
		}
		m := regexp.MustCompile(`^"\$ACTION_PATH/(hack/action/[a-z-]+\.sh)"$`).FindStringSubmatch(s.Run)
		if m == nil {
			t.Errorf("step %q runs %q, not a script of hack/action", s.ID, s.Run)
			continue
		}
		if st, err := os.Stat(filepath.Join(root, m[1])); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("step %q: %s is not an executable file (%v)", s.ID, m[1], err)
		}
		if s.Env["ACTION_PATH"] != "${{ github.action_path }}" {
			t.Errorf("step %q: ACTION_PATH is %q", s.ID, s.Env["ACTION_PATH"])
		}
	}
	if update == nil {
		t.Fatal("action.yml has no step with id update")
	}
	// setup-go runs on need-go.sh's word, with its version.
	needGo, err := os.ReadFile(filepath.Join(root, "hack", "action", "need-go.sh"))
	if err != nil {
		t.Fatal(err)
	}
	setupGo := false
	for _, s := range a.Runs.Steps {
		if strings.HasPrefix(s.Uses, "actions/setup-go@") {
			setupGo = true
			if !strings.Contains(s.If, "steps.go.outputs.setup == 'true'") || s.With["go-version"] != "${{ steps.go.outputs.go-version }}" {
				t.Errorf("the setup-go step (if %q, go-version %q) does not follow the go step's outputs", s.If, s.With["go-version"])
			}
		}
	}
	if !setupGo {
		t.Error("action.yml has no actions/setup-go step")
	}
	for _, w := range []string{`echo "setup=$setup"`, `echo "go-version=>=$want"`} {
		if !strings.Contains(string(needGo), w) {
			t.Errorf("need-go.sh does not write %s", w)
		}
	}

	var passed []string
	for name := range a.Inputs {
		env := "INPUT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if got, want := update.Env[env], "${{ inputs."+name+" }}"; got != want {
			t.Errorf("the update step's env %s is %q, want %q", env, got, want)
		}
		passed = append(passed, env)
	}
	read := regexp.MustCompile(`\bINPUT_[A-Z_]+\b`).FindAllString(string(script), -1)
	slices.Sort(read)
	read = slices.Compact(read)
	slices.Sort(passed)
	if !slices.Equal(read, passed) {
		t.Errorf("run.sh reads %v; action.yml passes %v", read, passed)
	}
	for name, o := range a.Outputs {
		if want := "${{ steps.update.outputs." + name + " }}"; o.Value != want {
			t.Errorf("output %s is %q, want %q", name, o.Value, want)
		}
	}
	if len(a.Outputs) != 4 {
		t.Errorf("outputs %v, want changed, files, commit and pull-request", a.Outputs)
	}
	for _, w := range []string{`echo "changed=$changed"`, `echo "files<<$delim"`, `echo "commit=`, `echo "pull-request=`} {
		if !strings.Contains(string(script), w) {
			t.Errorf("run.sh does not write %s", w)
		}
	}
}

// With the input repository the action needs no checkout: it runs
// tk-image's write-back engine on the repository (clone, update the
// path, commit as the GitHub Actions bot, push with the token as
// x-access-token's password) and reports the commit; a second run finds
// nothing to change. The token never reaches the log. The real git
// server stands in for GitHub: the push is git's smart HTTP protocol.
func TestActionCommitsToARepository(t *testing.T) {
	const token = "ghs_s3cretT0ken"
	srv := testgit.New(t, testgit.Options{Username: "x-access-token", Password: token})
	srv.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": app, "README.md": "fleet\n"})
	env := map[string]string{
		"INPUT_REPOSITORY": srv.RepoURL("fleet"),
		"INPUT_PATH":       "deploy",
		"INPUT_POLICIES":   "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
		"INPUT_TOKEN":      token,
		"INPUT_TK_IMAGE":   tkImage(t),
	}
	workspace := t.TempDir()

	r := runScript(t, "run.sh", workspace, env)
	head := strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main"))
	if !r.ok || r.outputs["changed"] != "true" || r.outputs["files"] != "deploy/app.yaml" || r.outputs["commit"] != head {
		t.Fatalf("ok %v, outputs %v, main %s\n%s", r.ok, r.outputs, head, r.log)
	}
	if strings.Contains(r.log, token) {
		t.Errorf("the log shows the token:\n%s", r.log)
	}
	if !strings.Contains(r.log, "deploy/app.yaml: Deployment/apps/podinfo: ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)") {
		t.Errorf("the log does not show the change:\n%s", r.log)
	}
	if got := testgit.Git(t, srv.BarePath("fleet"), "show", "main:deploy/app.yaml"); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("main:deploy/app.yaml\n%s", got)
	}
	author := strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "log", "-1", "--format=%an <%ae>", "main"))
	if author != "github-actions[bot] <41898282+github-actions[bot]@users.noreply.github.com>" {
		t.Errorf("author %q", author)
	}
	if entries, _ := os.ReadDir(workspace); len(entries) != 0 {
		t.Errorf("the workspace was written: %v", entries)
	}

	again := runScript(t, "run.sh", workspace, env)
	if !again.ok || again.outputs["changed"] != "false" || again.outputs["commit"] != "" {
		t.Errorf("again: ok %v, outputs %v\n%s", again.ok, again.outputs, again.log)
	}

	wrong := maps.Clone(env)
	wrong["INPUT_TOKEN"] = "not-the-token"
	if r := runScript(t, "run.sh", workspace, wrong); r.ok || !strings.Contains(r.log, "::error") {
		t.Errorf("a wrong token: ok %v\n%s", r.ok, r.log)
	}
}

// Inputs that only mean something with repository are refused without it,
// rather than ignored.
func TestActionRepositoryInputsNeedRepository(t *testing.T) {
	dir := gitTree(t, map[string]string{"app.yaml": app})
	for input, value := range map[string]string{"INPUT_BRANCH": "main", "INPUT_TOKEN": "t", "INPUT_PULL_REQUEST": "true", "INPUT_PUSH_BRANCH": "x"} {
		r := runScript(t, "run.sh", dir, map[string]string{"INPUT_POLICIES": "apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0",
			"INPUT_TK_IMAGE": tkImage(t), input: value})
		want := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(input, "INPUT_"), "_", "-")) + " needs the input repository"
		if r.ok || !strings.Contains(r.log, want) {
			t.Errorf("%s: ok %v, want %q in\n%s", input, r.ok, want, r.log)
		}
	}
}
