// Package krm runs `tk-image update --krm` under a real KRM orchestrator:
// kustomize as `make testenv` builds it (bin/kustomize), running the
// tk-image binary of `make build` as an exec function.
package krm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// binaries returns bin/kustomize and bin/tk-image ($IMAGE_TOOLKIT_BIN when
// set), failing with what builds them when one is missing.
func binaries(t *testing.T) (kustomize, tkImage string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := localenv.BinDir(root)
	kustomize, tkImage = filepath.Join(bin, "kustomize"), filepath.Join(bin, "tk-image")
	for p, how := range map[string]string{kustomize: "make testenv (or hack/tools.sh kustomize)", tkImage: "make build"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `%s` first", err, how)
		}
	}
	return kustomize, tkImage
}

// writeFiles writes files (relative path: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kustomize runs the kustomize binary in dir and returns stdout, stderr
// and whether it succeeded.
func kustomize(t *testing.T, bin, dir string, args ...string) (string, string, bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), err == nil
}

// The sources: a Deployment with a marked reference (podinfo), a container
// whose tag the kustomization's images: entry sets, with its newTag marked
// (worker), and an unmarked reference (busybox).
const (
	deployment = `apiVersion: apps/v1
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
        - name: worker
          image: ghcr.io/example/worker
        - name: sidecar
          image: docker.io/library/busybox:1.36
`
	kustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - deployment.yaml
images:
  - name: ghcr.io/example/worker
    newTag: "1.0.0" # {"$imagepolicy": "apps:worker:tag"}
`
)

// functionConfig is the ConfigMap that declares the exec function and
// holds the policies, with one data line replaced when bad is not empty.
func functionConfig(tkImage, bad string) string {
	data := "  apps:podinfo: ghcr.io/stefanprodan/podinfo:6.5.0\n  apps:worker: ghcr.io/example/worker:1.1.0\n"
	if bad != "" {
		data = "  " + bad + "\n"
	}
	return `apiVersion: v1
kind: ConfigMap
metadata:
  name: image-update
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: ` + tkImage + `
        args: [update, --krm]
data:
` + data
}

// kustomize fn run, the KRM function runner that reads a directory's files
// with their comments and writes the function's output back, runs tk-image
// update --krm as an exec function: the marked values (a whole reference,
// and the newTag of the kustomization's images: entry) are set in the
// files, the unmarked reference stays, every change is an Info result,
// and kustomize build then renders the new images.
func TestKustomizeFnRunUpdatesMarkedValues(t *testing.T) {
	kz, tk := binaries(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"app/deployment.yaml":         deployment,
		"app/kustomization.yaml":      kustomization,
		"fns/image-update.yaml":       functionConfig(tk, ""),
		"results/.keep-for-kustomize": "", // --results-dir must exist
	})

	out, stderr, ok := kustomize(t, kz, dir, "fn", "run", "app", "--enable-exec", "--fn-path", "fns", "--results-dir", "results")
	if !ok {
		t.Fatalf("kustomize fn run failed:\n%s%s", out, stderr)
	}
	// The orchestrator rewrites the files in its own format (list
	// indentation); the values are the function's.
	wantDeployment := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.5.0 # {"$imagepolicy": "apps:podinfo"}
      - name: worker
        image: ghcr.io/example/worker
      - name: sidecar
        image: docker.io/library/busybox:1.36
`
	wantKustomization := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- deployment.yaml
images:
- name: ghcr.io/example/worker
  newTag: "1.1.0" # {"$imagepolicy": "apps:worker:tag"}
`
	if got := readFile(t, filepath.Join(dir, "app/deployment.yaml")); got != wantDeployment {
		t.Errorf("deployment.yaml after kustomize fn run:\n%s\nwant:\n%s", got, wantDeployment)
	}
	if got := readFile(t, filepath.Join(dir, "app/kustomization.yaml")); got != wantKustomization {
		t.Errorf("kustomization.yaml after kustomize fn run:\n%s\nwant:\n%s", got, wantKustomization)
	}
	results := readFile(t, filepath.Join(dir, "results/results-0.yaml"))
	for _, want := range []string{
		"message: ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)",
		"message: 1.0.0 -> 1.1.0 (apps:worker:tag)",
	} {
		if !strings.Contains(results, want) {
			t.Errorf("results-0.yaml lacks %q:\n%s", want, results)
		}
	}
	if n := strings.Count(results, "severity: info"); n != 2 {
		t.Errorf("%d info results, want 2:\n%s", n, results)
	}

	built, stderr, ok := kustomize(t, kz, dir, "build", "app")
	if !ok {
		t.Fatalf("kustomize build failed:\n%s", stderr)
	}
	wantBuilt := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: apps
spec:
  template:
    spec:
      containers:
      - image: ghcr.io/stefanprodan/podinfo:6.5.0
        name: podinfo
      - image: ghcr.io/example/worker:1.1.0
        name: worker
      - image: docker.io/library/busybox:1.36
        name: sidecar
`
	if built != wantBuilt {
		t.Errorf("kustomize build after the update:\n%s\nwant:\n%s", built, wantBuilt)
	}
}

// kustomize build hands a transformer its resources converted through
// JSON, without their comments (api/resource.Resource.AsYAML), so tk-image
// update --krm in `transformers:` runs but sees no $imagepolicy marker and
// changes nothing; docs/setters.md says to run it on the sources instead
// (kustomize fn run, kpt, tk-image update). Should kustomize ever keep
// comments, this test fails and docs/setters.md must change.
func TestKustomizeBuildTransformerSeesNoMarkers(t *testing.T) {
	kz, tk := binaries(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"plain/deployment.yaml":    deployment,
		"plain/kustomization.yaml": kustomization,
		"fn/deployment.yaml":       deployment,
		"fn/kustomization.yaml":    kustomization + "transformers:\n  - image-update.yaml\n",
		"fn/image-update.yaml":     functionConfig(tk, ""),
	})
	plain, stderr, ok := kustomize(t, kz, dir, "build", "plain")
	if !ok {
		t.Fatalf("kustomize build plain failed:\n%s", stderr)
	}
	withFn, stderr, ok := kustomize(t, kz, dir, "build", "--enable-alpha-plugins", "--enable-exec", "fn")
	if !ok {
		t.Fatalf("kustomize build with the transformer failed:\n%s", stderr)
	}
	if withFn != plain {
		t.Errorf("the transformer changed the output; kustomize may now keep comments, and docs/setters.md must say so:\n%s\nwithout it:\n%s", withFn, plain)
	}
	if !strings.Contains(withFn, "image: ghcr.io/stefanprodan/podinfo:6.4.0\n") {
		t.Errorf("podinfo is not the source's 6.4.0:\n%s", withFn)
	}
}

// A functionConfig value that is not IMAGE:TAG makes the orchestrator
// fail, with tk-image's message naming the value in its output, and
// leaves the sources as they were: under kustomize build (a transformer)
// and under kustomize fn run.
func TestKustomizeFailsOnBadFunctionConfig(t *testing.T) {
	kz, tk := binaries(t)
	const bad = "apps:podinfo: ghcr.io/stefanprodan/podinfo" // no tag
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
	}{
		{"kustomize build transformer", map[string]string{
			"app/deployment.yaml":    deployment,
			"app/kustomization.yaml": kustomization + "transformers:\n  - image-update.yaml\n",
			"app/image-update.yaml":  functionConfig(tk, bad),
		}, []string{"build", "--enable-alpha-plugins", "--enable-exec", "app"}},
		{"kustomize fn run", map[string]string{
			"app/deployment.yaml":    deployment,
			"app/kustomization.yaml": kustomization,
			"fns/image-update.yaml":  functionConfig(tk, bad),
		}, []string{"fn", "run", "app", "--enable-exec", "--fn-path", "fns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			out, stderr, ok := kustomize(t, kz, dir, tc.args...)
			if ok {
				t.Fatalf("kustomize succeeded with a bad functionConfig:\n%s", out)
			}
			if want := `functionConfig data: "ghcr.io/stefanprodan/podinfo": no tag`; !strings.Contains(stderr, want) {
				t.Errorf("kustomize's output does not say %q:\n%s", want, stderr)
			}
			if got := readFile(t, filepath.Join(dir, "app/deployment.yaml")); got != deployment {
				t.Errorf("a failed run changed deployment.yaml:\n%s", got)
			}
		})
	}
}
