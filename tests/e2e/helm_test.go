package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// The fleet's chart versions, each marked with a policy's :tag: a Flux
// HelmRelease of a chart from an HTTP(S) Helm repository, a Flux HelmChart
// of an OCI chart, and a Chart.yaml depending on both.
const (
	helmReleaseFile = `apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: apps
spec:
  interval: 10m
  chart:
    spec:
      chart: podinfo
      version: "6.0.0" # {"$imagepolicy": "default:chart-http:tag"}
      sourceRef:
        kind: HelmRepository
        name: podinfo
`
	helmChartFile = `apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmChart
metadata:
  name: podinfo
  namespace: apps
spec:
  interval: 10m
  chart: podinfo
  version: 6.0.0 # {"$imagepolicy": "default:chart-oci:tag"}
  sourceRef:
    kind: HelmRepository
    name: podinfo-oci
`
	chartYAMLFile = `apiVersion: v2
name: umbrella
version: 1.0.0
dependencies:
- name: podinfo
  version: 6.0.0 # {"$imagepolicy": "default:chart-http:tag"}
  repository: %s
- name: podinfo-oci
  alias: podinfo-oci
  version: "6.0.0" # {"$imagepolicy": "default:chart-oci:tag"}
  repository: oci://%s
`
)

// Chart versions through the three controller binaries: an HTTPS Helm
// repository behind basic authentication (CA from certSecretRef) and an
// OCI chart repository (charts pushed with Helm's media types) are scanned
// by ImageRepositories, semver ImagePolicies pick their versions, and the
// automation commits them to a HelmRelease, a HelmChart and a Chart.yaml
// through :tag markers. A version published later in the index is
// committed after a reconcile request. An OCI tag Helm wrote for a version
// with build metadata (6.9.0_build.1) is not a semver version and is not
// picked. tk-image update, fed the live policies, makes the same edits.
func TestChainHelmCharts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	charts := testregistry.New(t, testregistry.Options{})
	for _, v := range []string{"6.0.0", "6.1.0", "6.9.0+build.1"} {
		charts.PushChart(t, "charts/podinfo", v)
	}
	helm := testregistry.NewHelmRepo(t, testregistry.HelmOptions{TLS: true, Username: "reader", Password: "helm-pass"})
	helm.AddVersions("podinfo", "6.0.0", "6.1.0", "6.1.1")

	env, root := startChain(ctx, t, []string{"6.3.0"}, chain.Options{})
	files := map[string]string{
		"clusters/prod/podinfo-release.yaml": helmReleaseFile,
		"clusters/prod/podinfo-chart.yaml":   helmChartFile,
		"clusters/prod/umbrella/Chart.yaml":  fmt.Sprintf(chartYAMLFile, helm.URL, charts.Repo("charts")),
	}
	start, err := env.Commit(files, "chart versions to follow")
	if err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	objects := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: helm-credentials}
type: kubernetes.io/basic-auth
data: {username: %s, password: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: helm-ca}
data: {ca.crt: %s}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: chart-http}
spec:
  image: %s
  interval: 1h
  secretRef: {name: helm-credentials}
  certSecretRef: {name: helm-ca}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata: {name: chart-oci}
spec:
  image: %s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: chart-http, labels: {automation: enabled}}
spec:
  imageRepositoryRef: {name: chart-http}
  policy: {semver: {range: "6.x"}}
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata: {name: chart-oci, labels: {automation: enabled}}
spec:
  imageRepositoryRef: {name: chart-oci}
  policy: {semver: {range: "6.x"}}
`, b64([]byte("reader")), b64([]byte("helm-pass")), b64(helm.CAPEM), helm.ChartURL("podinfo"), charts.Repo("charts/podinfo"))
	if err := env.Apply(ctx, samples+"\n---\n"+objects); err != nil {
		t.Fatal(err)
	}

	want := func(httpVersion string) map[string]string {
		r := strings.NewReplacer
		return map[string]string{
			"clusters/prod/podinfo-release.yaml": r(`"6.0.0"`, `"`+httpVersion+`"`).Replace(helmReleaseFile),
			"clusters/prod/podinfo-chart.yaml":   r("6.0.0", "6.1.0").Replace(helmChartFile),
			"clusters/prod/umbrella/Chart.yaml": r("  version: 6.0.0 #", "  version: "+httpVersion+" #",
				`"6.0.0"`, `"6.1.0"`).Replace(fmt.Sprintf(chartYAMLFile, helm.URL, charts.Repo("charts"))),
		}
	}
	// The two policies may be ready at different moments: one commit or
	// two, until the files hold both versions.
	waitFiles(t, env, start, want("6.1.1"))

	c := env.Cluster.Client
	p := &imagev1.ImagePolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chart-oci"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.LastSelection == nil || p.Status.LastSelection.Unparsable != 1 {
		t.Errorf("chart-oci: the _ tag should be skipped as not a version: %+v", p.Status.LastSelection)
	}

	// tk-image update, fed the policies the controllers chose, makes the
	// same edits in a copy of the first commit's files.
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policies, err := env.Cluster.KubectlCmd(ctx, "get", "imagepolicy", "-n", "default", "-o", "yaml").Output()
	if err != nil {
		t.Fatal(err)
	}
	policiesFile := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(policiesFile, policies, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(localenv.BinDir(root), "tk-image"), "update", "--dir", dir,
		"--policies-from", policiesFile).CombinedOutput(); err != nil {
		t.Fatalf("tk-image update: %v\n%s", err, out)
	}
	for name, content := range want("6.1.1") {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != content {
			t.Errorf("tk-image update %s:\n%s\nwant:\n%s", name, got, content)
		}
	}

	// A new version in the index, published with build metadata as Helm
	// repositories may, is committed once the repository is scanned again.
	head := env.Head("main")
	helm.AddVersions("podinfo", "6.2.0+build.7")
	repo := &imagev1.ImageRepository{}
	repo.Name, repo.Namespace = "chart-http", "default"
	if err := env.RequestReconcile(ctx, repo); err != nil {
		t.Fatal(err)
	}
	waitFiles(t, env, head, want("6.2.0+build.7"))
}

// waitFiles waits until main, moved from start, holds the files as given.
func waitFiles(t *testing.T, env *chain.Env, start string, files map[string]string) {
	t.Helper()
	var last string
	testenv.Eventually(t, 90*time.Second, func() (bool, error) {
		h := env.Head("main")
		if h == start {
			return false, nil
		}
		for name, content := range files {
			got, err := env.FleetGit("show", h+":"+name)
			if err != nil {
				return false, err
			}
			if got != content {
				last = name + ":\n" + got
				return false, nil
			}
		}
		return true, nil
	})
	if t.Failed() {
		t.Logf("last seen %s", last)
	}
}
