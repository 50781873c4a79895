// Package charts tests the Helm charts with bin/helm: lint, rendering, the
// schema, and installs and upgrades into a real control plane (envtest's
// kube-apiserver and etcd from bin/testenv).
package charts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Charts, in install order.
var charts = []string{testenv.ReflectorChart, testenv.AutomationChart, testenv.UpdateJobChart}

var (
	root    string // workspace root
	helmBin string // bin/helm
	scratch string // HELM_* homes, kubeconfigs, logs

	clusterOnce sync.Once
	cluster     *testenv.Env
	kubeconfig  string // admin kubeconfig of cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = testenv.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	helmBin = filepath.Join(binDir(), "helm")
	if _, err := os.Stat(helmBin); err != nil {
		fmt.Fprintf(os.Stderr, "%s not found: run `make testenv` first\n", helmBin)
		return 1
	}
	if scratch, err = os.MkdirTemp("", "charts-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	return code
}

// binDir is where bin/helm and the controller binaries are:
// $IMAGE_TOOLKIT_BIN (set by `make unit`) or bin/ in the workspace.
func binDir() string {
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return d
	}
	return filepath.Join(root, "bin")
}

// startCluster starts one control plane for the tests that need one, with
// no CRDs: the charts install them.
func startCluster(t *testing.T) {
	t.Helper()
	clusterOnce.Do(func() {
		cluster, clusterErr = testenv.Start()
		if clusterErr != nil {
			return
		}
		kubeconfig, clusterErr = userKubeconfig(envtest.User{Name: "charts-admin", Groups: []string{"system:masters"}})
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
}

// userKubeconfig writes a kubeconfig for a client-certificate user of the
// cluster. RBAC treats a user named system:serviceaccount:NS:NAME exactly
// like that ServiceAccount's token.
func userKubeconfig(u envtest.User) (string, error) {
	au, err := cluster.AddUser(u, nil)
	if err != nil {
		return "", err
	}
	kc, err := au.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(scratch, strings.NewReplacer(":", "_", "/", "_").Replace(u.Name)+".kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// cmdResult runs a command with a deadline and returns its stdout; the
// error carries stderr.
func cmdResult(name string, stdin io.Reader, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = root
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// helm runs bin/helm with its own empty config, cache and data homes, against
// the test cluster when one is running.
func helm(args ...string) (string, error) {
	env := []string{
		"HELM_CONFIG_HOME=" + filepath.Join(scratch, "helm", "config"),
		"HELM_CACHE_HOME=" + filepath.Join(scratch, "helm", "cache"),
		"HELM_DATA_HOME=" + filepath.Join(scratch, "helm", "data"),
		"KUBECONFIG=" + kubeconfig,
	}
	return cmdResult(helmBin, nil, env, args...)
}

func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectl runs bin/testenv/kubectl against the test cluster as admin.
func kubectl(stdin io.Reader, args ...string) (string, error) {
	return cmdResult(filepath.Join(cluster.BinaryAssetsDirectory, "kubectl"), stdin, nil,
		append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func mustKubectl(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	out, err := kubectl(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chartDir is the path of a chart in the workspace.
func chartDir(chart string) string { return filepath.Join(root, "charts", chart) }

// allValues are the values files that turn every option of chart on.
func allValues(chart string) []string {
	return []string{"-f", filepath.Join(root, "tests/charts/testdata/common.all.yaml"),
		"-f", filepath.Join(root, "tests/charts/testdata", chart+".all.yaml")}
}

// render runs helm template and returns the objects, in order.
func render(t *testing.T, chart, release, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(append([]string{"template", release, chartDir(chart), "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatalf("parsing helm template output: %v", err)
	}
	return objs
}

// parseObjects splits a multi-document YAML stream into objects.
func parseObjects(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// find returns the objects of a kind.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// withoutApprover drops the reflector chart's approver role, a grant for
// the people who approve promotions rather than for the controller.
func withoutApprover(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool {
		return strings.HasSuffix(o.GetName(), "-approver") && (o.GetKind() == "ClusterRole" || o.GetKind() == "Role")
	})
}

// one returns the only object of a kind, failing the test otherwise.
func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// named returns the object of a kind with a name, failing the test without one.
func named(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// workload returns the controller's Deployment or StatefulSet.
func workload(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	found := append(find(objs, "Deployment"), find(objs, "StatefulSet")...)
	if len(found) != 1 {
		t.Fatalf("%d Deployments and StatefulSets, want 1", len(found))
	}
	return found[0]
}

// container returns the manager container of a workload.
func container(t *testing.T, w *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s has %d containers, want 1", w.GetName(), len(cs))
	}
	return cs[0].(map[string]any)
}

// args returns the manager container's arguments.
func args(t *testing.T, w *unstructured.Unstructured) []string {
	t.Helper()
	a, _, err := unstructured.NestedStringSlice(container(t, w), "args")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func toYAMLStream(objs []*unstructured.Unstructured) (io.Reader, error) {
	var b bytes.Buffer
	for _, o := range objs {
		j, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(j)
		b.WriteString("\n")
	}
	return &b, nil
}
