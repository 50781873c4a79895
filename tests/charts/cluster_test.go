package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

const (
	releaseNS = "image-toolkit-system"
	appsNS    = "apps"
)

// A minimal ServiceMonitor CRD: enough for the apiserver to accept the
// charts' ServiceMonitors in a dry run; the Prometheus Operator's own CRD
// is not vendored here.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

func namespaces(t *testing.T, names ...string) {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", n)
	}
	mustKubectl(t, strings.NewReader(b.String()), "apply", "-f", "-")
}

// Every object each chart renders, with defaults and with every option on,
// passes the apiserver's validation and admission (server-side dry run).
func TestServerSideDryRun(t *testing.T) {
	startCluster(t)
	namespaces(t, releaseNS, "team-a", "monitoring")
	mustKubectl(t, strings.NewReader(serviceMonitorCRD), "apply", "-f", "-")
	mustKubectl(t, nil, "wait", "--for", "condition=Established", "--timeout", "30s", "crd/servicemonitors.monitoring.coreos.com")

	for _, c := range charts {
		for name, values := range map[string][]string{"defaults": nil, "all": allValues(c)} {
			t.Run(c+"/"+name, func(t *testing.T) {
				objs := render(t, c, c, releaseNS, values...)
				stream, err := toYAMLStream(objs)
				if err != nil {
					t.Fatal(err)
				}
				out := mustKubectl(t, stream, "apply", "--dry-run=server", "--server-side", "--field-manager=charts-test", "-f", "-")
				for _, o := range objs {
					if !strings.Contains(out, strings.ToLower(o.GetKind())+"."+groupOf(o)+"/"+o.GetName()+" serverside-applied (server dry run)") &&
						!strings.Contains(out, strings.ToLower(o.GetKind())+"/"+o.GetName()+" serverside-applied (server dry run)") {
						t.Errorf("%s %s missing from the dry run:\n%s", o.GetKind(), o.GetName(), out)
					}
				}
			})
		}
	}
}

func groupOf(o *unstructured.Unstructured) string {
	g, _, _ := strings.Cut(o.GetAPIVersion(), "/")
	if !strings.Contains(o.GetAPIVersion(), "/") {
		return ""
	}
	return g
}

// The controller pods meet the restricted Pod Security Standard: the
// apiserver's PodSecurity admission, enforcing it on a namespace, admits a
// pod made from each chart's pod template.
func TestPodSecurityRestricted(t *testing.T) {
	startCluster(t)
	mustKubectl(t, strings.NewReader(`apiVersion: v1
kind: Namespace
metadata:
  name: restricted
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
`), "apply", "-f", "-")

	podOf := func(name string, spec map[string]any) *bytes.Reader {
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "restricted"}, "spec": spec}
		b, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.NewReader(b)
	}

	// The namespace does enforce: a pod without a security context is refused.
	bare := map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}
	if out, err := kubectl(podOf("bare", bare), "create", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a bare pod was not refused: %v\n%s", err, out)
	}

	for _, c := range charts {
		for name, values := range map[string][]string{"defaults": nil, "all": allValues(c)} {
			t.Run(c+"/"+name, func(t *testing.T) {
				w := workload(t, render(t, c, c, releaseNS, values...))
				spec, _, _ := unstructured.NestedMap(w.Object, "spec", "template", "spec")
				// A StatefulSet's claim templates become volumes of its pods.
				vcts, _, _ := unstructured.NestedSlice(w.Object, "spec", "volumeClaimTemplates")
				for _, v := range vcts {
					n, _, _ := unstructured.NestedString(v.(map[string]any), "metadata", "name")
					spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": n,
						"persistentVolumeClaim": map[string]any{"claimName": n + "-0"}})
				}
				if out, err := kubectl(podOf(c, spec), "create", "--dry-run=server", "-f", "-"); err != nil {
					t.Errorf("the restricted namespace refused the pod: %v\n%s", err, out)
				}
			})
		}
	}
}

type releaseInfo struct {
	Version int
	Info    struct{ Status string }
}

func status(t *testing.T, release, ns string) releaseInfo {
	t.Helper()
	var r releaseInfo
	if err := json.Unmarshal([]byte(mustHelm(t, "status", release, "-n", ns, "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// manifest returns the objects of an installed release.
func manifest(t *testing.T, release, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := parseObjects(mustHelm(t, "get", "manifest", release, "-n", ns))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// resourceVersions reads every object of a release from the apiserver.
func resourceVersions(t *testing.T, release, ns string) map[string]string {
	t.Helper()
	rv := map[string]string{}
	for _, o := range manifest(t, release, ns) {
		ref := strings.ToLower(o.GetKind())
		if g := groupOf(o); g != "" {
			ref += "." + g
		}
		ref += "/" + o.GetName()
		args := []string{"get", ref, "-o", "jsonpath={.metadata.resourceVersion}"}
		if o.GetNamespace() != "" || namespaced(o.GetKind()) {
			objNS := o.GetNamespace()
			if objNS == "" {
				objNS = ns
			}
			args = append(args, "-n", objNS)
		}
		rv[ref] = mustKubectl(t, nil, args...)
	}
	return rv
}

func namespaced(kind string) bool {
	return !slices.Contains([]string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kind)
}

// Each chart installs into a real apiserver; an upgrade of one chart
// applies its changed CRD and leaves the other releases alone; the charts'
// RBAC is enough for the real controllers, cluster-wide and in one
// namespace; uninstalling keeps the CRDs.
func TestInstallUpgrade(t *testing.T) {
	startCluster(t)
	namespaces(t, appsNS, "team-a")

	for _, c := range charts {
		out := mustHelm(t, "install", c, chartDir(c), "-n", releaseNS, "--create-namespace")
		if !strings.Contains(out, "kubectl wait --for condition=Established") || !strings.Contains(out, "STATUS: deployed") {
			t.Errorf("helm install %s printed:\n%s", c, out)
		}
		if r := status(t, c, releaseNS); r.Version != 1 || r.Info.Status != "deployed" {
			t.Errorf("%s: revision %d, %s", c, r.Version, r.Info.Status)
		}
		resourceVersions(t, c, releaseNS) // every object exists
		for _, crd := range find(manifest(t, c, releaseNS), "CustomResourceDefinition") {
			mustKubectl(t, nil, "wait", "--for", "condition=Established", "--timeout", "30s", "crd/"+crd.GetName())
		}
	}

	// A second shard of the reflector installs beside the first.
	shard2 := "image-reflector-controller-shard2"
	mustHelm(t, "install", shard2, chartDir(testenv.ReflectorChart), "-n", releaseNS,
		"-f", filepath.Join(chartDir(testenv.ReflectorChart), "examples/shard2.yaml"))
	if !hasArg(args(t, workload(t, manifest(t, shard2, releaseNS))), "--watch-label-selector=sharding.toolkit.dev/key=shard2") {
		t.Error("shard2 does not select its shard")
	}

	untouched := map[string]map[string]string{}
	for _, r := range []string{testenv.AutomationChart, testenv.UpdateJobChart, shard2} {
		untouched[r] = resourceVersions(t, r, releaseNS)
	}

	t.Run("upgrade applies a changed CRD", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), testenv.ReflectorChart)
		if err := os.CopyFS(dir, os.DirFS(chartDir(testenv.ReflectorChart))); err != nil {
			t.Fatal(err)
		}
		crdFile := filepath.Join(dir, "files/crds/image.toolkit.dev_imagerepositories.yaml")
		editYAML(t, crdFile, func(crd map[string]any) {
			v := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
			cols, _ := v["additionalPrinterColumns"].([]any)
			v["additionalPrinterColumns"] = append(cols, map[string]any{
				"name": "UpgradeProbe", "type": "string", "jsonPath": ".spec.image", "priority": 1})
		})
		editYAML(t, filepath.Join(dir, "Chart.yaml"), func(c map[string]any) { c["version"] = "0.1.1-upgrade" })

		mustHelm(t, "upgrade", testenv.ReflectorChart, dir, "-n", releaseNS)
		if r := status(t, testenv.ReflectorChart, releaseNS); r.Version != 2 || r.Info.Status != "deployed" {
			t.Errorf("revision %d, %s after the upgrade", r.Version, r.Info.Status)
		}
		cols := mustKubectl(t, nil, "get", "crd", "imagerepositories.image.toolkit.dev",
			"-o", `jsonpath={.spec.versions[0].additionalPrinterColumns[*].name} {.metadata.labels.helm\.sh/chart}`)
		if !strings.Contains(cols, "UpgradeProbe") || !strings.HasSuffix(cols, "image-reflector-controller-0.1.1-upgrade") {
			t.Errorf("the CRD in the apiserver was not upgraded: %q", cols)
		}
		for r, before := range untouched {
			if s := status(t, r, releaseNS); s.Version != 1 {
				t.Errorf("release %s is at revision %d", r, s.Version)
			}
			if after := resourceVersions(t, r, releaseNS); !equalMaps(before, after) {
				t.Errorf("objects of release %s changed:\nbefore %v\nafter  %v", r, before, after)
			}
		}
	})

	bin := binaries(t)
	t.Run("controllers run with the chart RBAC", func(t *testing.T) {
		for _, c := range charts {
			p := startAs(t, bin, c, c, releaseNS)
			probe(t, c, appsNS, "cluster")
			if c == testenv.ReflectorChart {
				// A scan that fails at once records a Warning event: the
				// events rule every chart shares works.
				mustKubectl(t, strings.NewReader(`apiVersion: image.toolkit.dev/v1beta1
kind: ImageRepository
metadata:
  name: probe-events
  namespace: `+appsNS+`
spec:
  image: 127.0.0.1:1/probe
  interval: 1h
`), "apply", "-f", "-")
				testenv.Eventually(t, 60*time.Second, func() (bool, error) {
					out, err := kubectl(nil, "-n", appsNS, "get", "events.events.k8s.io", "-o",
						`jsonpath={range .items[*]}{.regarding.name} {.type} {.reportingController}{"\n"}{end}`)
					return strings.Contains(out, "probe-events Warning image-reflector-controller"), err
				})
			}
			if c != testenv.UpdateJobChart {
				// It reconciled, so it leads, through a Lease in its namespace.
				if holder := mustKubectl(t, nil, "-n", releaseNS, "get", "lease", c+".toolkit.dev", "-o", "jsonpath={.spec.holderIdentity}"); holder == "" {
					t.Errorf("%s: no holder in its Lease", c)
				}
			}
			p.stop(t)
			p.noForbidden(t)
		}
	})

	t.Run("watchNamespace: a Role is enough", func(t *testing.T) {
		for _, c := range charts {
			release := "team-a-" + c
			mustHelm(t, "install", release, chartDir(c), "-n", releaseNS, "--set", "watchNamespace=team-a,crds.install=false")
			objs := manifest(t, release, releaseNS)
			if n := len(find(objs, "ClusterRole")) + len(find(objs, "ClusterRoleBinding")); n != 0 {
				t.Errorf("%s: %d cluster-wide RBAC objects", release, n)
			}
			sa := "system:serviceaccount:" + releaseNS + ":" + release
			if out, err := kubectl(nil, "auth", "can-i", "watch", kindOf(c), "--all-namespaces", "--as", sa); err == nil {
				t.Errorf("%s may watch %s in every namespace: %s", release, kindOf(c), out)
			}
			mustKubectl(t, nil, "auth", "can-i", "watch", kindOf(c), "-n", "team-a", "--as", sa)

			p := startAs(t, bin, release, c, releaseNS)
			probe(t, c, "team-a", "team-a")
			// The same object outside team-a is never seen.
			obj := probeObject(t, c, appsNS, "outside")
			mustKubectl(t, strings.NewReader(obj), "apply", "-f", "-")
			probe(t, c, "team-a", "team-a-again")
			if st := mustKubectl(t, nil, "-n", appsNS, "get", kindOf(c), probeName(c, "outside"), "-o", "jsonpath={.status}"); st != "" && st != "{}" {
				t.Errorf("%s reconciled an object outside team-a: status %s", release, st)
			}
			p.stop(t)
			p.noForbidden(t)
		}
	})

	t.Run("uninstall keeps the CRDs", func(t *testing.T) {
		for _, c := range charts {
			crds := find(manifest(t, c, releaseNS), "CustomResourceDefinition")
			mustHelm(t, "uninstall", c, "-n", releaseNS, "--wait", "--timeout", "1m")
			for _, crd := range crds {
				mustKubectl(t, nil, "get", "crd", crd.GetName())
			}
			if out, err := kubectl(nil, "get", "clusterrole", c); err == nil {
				t.Errorf("ClusterRole %s outlived its release: %s", c, out)
			}
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func editYAML(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = yaml.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kindOf is the resource each controller reconciles in probe.
func kindOf(chart string) string {
	return map[string]string{
		testenv.ReflectorChart:  "imagepolicies.image.toolkit.dev",
		testenv.AutomationChart: "imageupdateautomations.image.toolkit.dev",
		testenv.UpdateJobChart:  "updatejobs.update.toolkit.dev",
	}[chart]
}

func probeName(chart, suffix string) string { return "probe-" + suffix }

// probeObject is an object the chart's controller reconciles at once,
// without a registry or git server: a policy of a missing repository, an
// automation with a reconcile request, an update job.
func probeObject(t *testing.T, chart, ns, suffix string) string {
	t.Helper()
	meta := fmt.Sprintf("metadata:\n  name: %s\n  namespace: %s\n  annotations:\n    reconcile.toolkit.dev/requestedAt: %q\n", probeName(chart, suffix), ns, suffix)
	switch chart {
	case testenv.ReflectorChart:
		return "apiVersion: image.toolkit.dev/v1beta1\nkind: ImagePolicy\n" + meta +
			"spec:\n  imageRepositoryRef:\n    name: missing\n  policy:\n    semver:\n      range: '>=1.0.0'\n"
	case testenv.AutomationChart:
		b, err := os.ReadFile(filepath.Join(chartDir(chart), "samples/imageupdateautomation.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		spec, err := yaml.Marshal(map[string]any{"spec": obj["spec"]})
		if err != nil {
			t.Fatal(err)
		}
		return "apiVersion: image.toolkit.dev/v1beta1\nkind: ImageUpdateAutomation\n" + meta + offline(string(spec))
	default:
		b, err := os.ReadFile(filepath.Join(chartDir(chart), "samples/updatejob.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		spec, err := yaml.Marshal(map[string]any{"spec": obj["spec"]})
		if err != nil {
			t.Fatal(err)
		}
		return "apiVersion: update.toolkit.dev/v1beta1\nkind: UpdateJob\n" + meta + offline(string(spec))
	}
}

// offline points the samples' git URLs at a closed local port: the probes
// must not depend on the network, nor leave a controller waiting on it.
func offline(spec string) string {
	return strings.ReplaceAll(spec, "git.example.com", "127.0.0.1:1")
}

// probe creates a probe object and waits until the controller has written
// its status: it read it through its cache and patched the status.
func probe(t *testing.T, chart, ns, suffix string) {
	t.Helper()
	mustKubectl(t, strings.NewReader(probeObject(t, chart, ns, suffix)), "apply", "-f", "-")
	var st string
	testenv.Eventually(t, 60*time.Second, func() (bool, error) {
		st = mustKubectl(t, nil, "-n", ns, "get", kindOf(chart), probeName(chart, suffix), "-o", "jsonpath={.status}")
		return st != "" && st != "{}", nil
	})
}

// binaries returns the directory of the controller binaries: the ones
// `make build` made (IMAGE_TOOLKIT_BIN), or fresh builds of this tree.
func binaries(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return d
	}
	dir := filepath.Join(scratch, "bin")
	for _, c := range charts {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, c), "./"+c)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", c, err, out)
		}
	}
	return dir
}

type process struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error // of Wait, once exited is closed
	once      sync.Once
}

// startAs runs a controller binary with the arguments of the release's
// workload, authenticated as the release's ServiceAccount, and waits until
// it is ready.
func startAs(t *testing.T, bin, release, chart, ns string) *process {
	t.Helper()
	w := workload(t, manifest(t, release, ns))
	sa, _, _ := unstructured.NestedString(w.Object, "spec", "template", "spec", "serviceAccountName")
	kc, err := userKubeconfig(envtest.User{Name: "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}})
	if err != nil {
		t.Fatal(err)
	}
	metrics, probeAddr := freeAddr(t), freeAddr(t)
	var a []string
	for _, arg := range args(t, w) {
		switch flag, _, _ := strings.Cut(arg, "="); flag {
		case "--metrics-bind-address":
			arg = flag + "=" + metrics
		case "--health-probe-bind-address":
			arg = flag + "=" + probeAddr
		case "--storage-path", "--cache-dir":
			arg = flag + "=" + t.TempDir()
		}
		a = append(a, arg)
	}
	a = append(a, "--kubeconfig="+kc)
	p := &process{name: release, log: filepath.Join(t.TempDir(), release+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(bin, chart), a...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), "RUNTIME_NAMESPACE="+ns, "POD_NAME="+release+"-0")
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get("http://" + probeAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v\n%s", release, p.err, p.tail())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready in 60s\n%s", release, p.tail())
		}
	}
}

// stop ends the process with SIGTERM; it must exit cleanly and not before.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.once.Do(func() {
		select {
		case <-p.exited:
			t.Errorf("%s exited before it was stopped: %v\n%s", p.name, p.err, p.tail())
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			if p.err != nil {
				t.Errorf("%s exited with %v\n%s", p.name, p.err, p.tail())
			}
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%s did not stop in 20s\n%s", p.name, p.tail())
		}
	})
}

// noForbidden fails when the apiserver refused the controller anything:
// the chart's RBAC must cover everything it does.
func (p *process) noForbidden(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "is forbidden: User") {
			refused = append(refused, l)
		}
	}
	if len(refused) > 0 {
		t.Errorf("%s was refused by RBAC %d times, first: %s", p.name, len(refused), refused[0])
	}
}

func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
