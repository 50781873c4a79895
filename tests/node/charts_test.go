package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/chain"
)

const (
	releaseNS   = "image-toolkit-system"
	gitUser     = "imagebot"
	gitPassword = "node-test-password-not-secret"
)

var charts = []string{"image-reflector-controller", "image-automation-controller", "update-job-controller"}

// fleet is the chain outside the cluster: a registry and a git server on
// the host, reachable from pods at the node's address.
type fleet struct {
	regLocal, regHost string // loopback address the test pushes to; NodeIP address pods use
	repoURL, bare     string
	img               v1.Image
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	f := &fleet{regLocal: strings.TrimPrefix(reg.URL, "http://")}
	var err error
	if f.regHost, err = cl.Expose(f.regLocal); err != nil {
		t.Fatal(err)
	}
	if f.img, err = random.Image(512, 1); err != nil {
		t.Fatal(err)
	}
	srv, stop, err := testgit.Start(t.TempDir(), testgit.Options{Username: gitUser, Password: gitPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	gitHost, err := cl.Expose(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	f.repoURL = "http://" + gitHost + "/fleet.git"
	f.bare = srv.BarePath("fleet")
	work := filepath.Join(t.TempDir(), "work")
	manifest := filepath.Join(work, chain.ManifestPath)
	for _, args := range [][]string{
		{"init", "-q", "--bare", "--initial-branch=main", f.bare},
		{"-C", f.bare, "config", "http.receivepack", "true"},
		{"init", "-q", "--initial-branch=main", work},
	} {
		git(t, args...)
	}
	if err := os.MkdirAll(filepath.Dir(manifest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(chain.Manifest, f.regHost)), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, "-C", work, "add", ".")
	git(t, "-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "fleet: podinfo 6.3.0")
	git(t, "-C", work, "push", "-q", f.bare, "main")
	return f
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (f *fleet) push(t *testing.T, tag string) {
	t.Helper()
	ref, err := name.NewTag(f.regLocal+"/"+chain.Image+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, f.img); err != nil {
		t.Fatal(err)
	}
}

// deployed returns the manifest on main.
func (f *fleet) deployed(t *testing.T) string {
	return git(t, "--git-dir", f.bare, "show", "main:"+chain.ManifestPath)
}

// samples are the charts' samples pointed at the fleet, scanning and
// updating every 5 s instead of every 5 minutes.
func (f *fleet) samples(t *testing.T, root string) string {
	t.Helper()
	var docs []string
	for _, p := range []string{
		"charts/image-reflector-controller/samples/imagerepository.yaml",
		"charts/image-reflector-controller/samples/imagepolicy.yaml",
		"charts/image-automation-controller/samples/imageupdateautomation.yaml",
	} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	out := strings.NewReplacer(
		"image: ghcr.io/stefanprodan/podinfo\n", "image: "+f.regHost+"/"+chain.Image+"\n  insecure: true\n",
		"url: https://git.example.com/org/fleet.git", "url: "+f.repoURL,
		"interval: 5m", "interval: 5s",
	).Replace(strings.Join(docs, "\n---\n"))
	if !strings.Contains(out, f.regHost) || !strings.Contains(out, f.repoURL) {
		t.Fatal("the chart samples no longer name ghcr.io/stefanprodan/podinfo and https://git.example.com/org/fleet.git")
	}
	return out + fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: git-credentials\nstringData:\n  username: %s\n  password: %s\n", gitUser, gitPassword)
}

func helm(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(cl.Root(), "bin", "helm"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := cl.Kubectl(ctx, strings.NewReader(stdin), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// controllerPods returns the release namespace's pods by release, when
// each release has exactly one pod, Ready, not being deleted.
func controllerPods(ctx context.Context) (map[string]corev1.Pod, string) {
	pods, err := cl.Client().CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err.Error()
	}
	byRelease := map[string]corev1.Pod{}
	var notes []string
	for _, p := range pods.Items {
		if p.Labels["app.kubernetes.io/component"] == "ui" {
			continue // the dashboard, not a controller
		}
		rel := p.Labels["app.kubernetes.io/instance"]
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		notes = append(notes, fmt.Sprintf("%s %s ready=%v %+v", p.Name, p.Status.Phase, ready, p.Status.ContainerStatuses))
		if _, dup := byRelease[rel]; dup || !ready || p.DeletionTimestamp != nil {
			return nil, strings.Join(notes, "; ")
		}
		byRelease[rel] = p
	}
	if len(byRelease) != len(charts) {
		return nil, strings.Join(notes, "; ")
	}
	return byRelease, ""
}

// The three charts, installed with helm into a namespace enforcing the
// restricted profile with the images of `make images`, run on a real
// node: every pod becomes Ready and runs as the chart's user; from inside
// the pods the chain turns a new tag in a registry on the host into a
// commit in a git server on the host; Prometheus scrapes the pods found
// through the API server; a helm upgrade rolls a controller and the next
// tag still becomes a commit; helm uninstall leaves nothing of the
// releases but their CRDs (and the leader election Leases the controllers
// made themselves).
func TestCharts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := cl.Root()
	helmDir := t.TempDir()
	helmEnv := []string{"KUBECONFIG=" + cl.Kubeconfig(), "HELM_CONFIG_HOME=" + filepath.Join(helmDir, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(helmDir, "cache"), "HELM_DATA_HOME=" + filepath.Join(helmDir, "data")}

	f := startFleet(t)
	f.push(t, "6.3.0")
	f.push(t, "6.4.0")
	restrictedNamespace(t, releaseNS)

	start := time.Now()
	for _, c := range charts {
		ref, ok := images[c]
		if !ok {
			t.Fatalf("no image %s in bin/images: run make images", c)
		}
		repo, tag, _ := strings.Cut(ref, ":")
		if i := strings.LastIndex(ref, ":"); i > 0 {
			repo, tag = ref[:i], ref[i+1:]
		}
		install := []string{"install", c, filepath.Join(root, "charts", c), "--namespace", releaseNS,
			"--set", "image.repository=" + repo, "--set-string", "image.tag=" + tag, "--set", "image.pullPolicy=Never"}
		if c == "image-automation-controller" {
			// The dashboard in the cluster, read-only (ui values).
			ui, ok := images["tk-image"]
			if !ok {
				t.Fatal("no image tk-image in bin/images: run make images")
			}
			i := strings.LastIndex(ui, ":")
			install = append(install, "--set", "ui.enabled=true", "--set", "ui.image.repository="+ui[:i],
				"--set-string", "ui.image.tag="+ui[i+1:], "--set", "ui.image.pullPolicy=Never")
		}
		helm(t, helmEnv, install...)
	}
	var pods map[string]corev1.Pod
	waitFor(t, 3*time.Minute, "every controller pod Ready", func() (bool, string) {
		var last string
		pods, last = controllerPods(ctx)
		return pods != nil, last
	})
	fmt.Printf("FIGURES charts: helm install of the three charts to all pods Ready: %s\n", time.Since(start).Round(100*time.Millisecond))

	t.Run("user", func(t *testing.T) {
		for rel, p := range pods {
			want := p.Spec.SecurityContext.RunAsUser
			if want == nil || *want != 65532 {
				t.Errorf("%s: the chart sets runAsUser %v, want the image's nonroot user 65532", rel, want)
				continue
			}
			if len(p.Status.ContainerStatuses) != 1 {
				t.Fatalf("%s: %d containers", rel, len(p.Status.ContainerStatuses))
			}
			pid, err := cl.ContainerPID(ctx, p.Status.ContainerStatuses[0].ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			uid, gid, err := procIDs(pid)
			if err != nil {
				t.Fatal(err)
			}
			if uid != int(*want) || gid != 65532 {
				t.Errorf("%s: the controller process %d runs as uid %d gid %d, want %d:65532", rel, pid, uid, gid, *want)
			}
		}
	})

	kubectl(t, f.samples(t, root), "apply", "-n", "default", "-f", "-")
	waitFor(t, 2*time.Minute, "a commit setting podinfo 6.4.0", func() (bool, string) {
		m := f.deployed(t)
		return strings.Contains(m, "stefanprodan/podinfo:6.4.0 # {\"$imagepolicy\": \"default:podinfo\"}"), m + "\n" + kubectl(t, "", "get", "imagerepositories,imagepolicies,imageupdateautomations,updatejobs", "-n", "default", "-o", "wide")
	})

	t.Run("prometheus", func(t *testing.T) {
		scrape(t, ctx, pods)
	})

	t.Run("dashboard", func(t *testing.T) {
		dashboardInCluster(t, ctx)
	})

	// A changed value rolls the automation controller's Deployment.
	old := pods["image-automation-controller"].Name
	helm(t, helmEnv, "upgrade", "image-automation-controller", filepath.Join(root, "charts", "image-automation-controller"),
		"--namespace", releaseNS, "--reuse-values", "--set", "podAnnotations.rolled=yes")
	waitFor(t, 2*time.Minute, "the upgraded automation controller's pod Ready", func() (bool, string) {
		var last string
		pods, last = controllerPods(ctx)
		return pods != nil && pods["image-automation-controller"].Name != old, last
	})
	f.push(t, "6.5.0")
	waitFor(t, 2*time.Minute, "a second commit setting podinfo 6.5.0", func() (bool, string) {
		m := f.deployed(t)
		return strings.Contains(m, "stefanprodan/podinfo:6.5.0 # {\"$imagepolicy\": \"default:podinfo\"}"), m
	})
	if n := strings.Count(git(t, "--git-dir", f.bare, "log", "--format=%an", "main"), "imagebot\n"); n != 2 {
		t.Errorf("%d commits by imagebot on main, want 2 (6.4.0, then 6.5.0)", n)
	}

	t.Run("uninstall", func(t *testing.T) {
		for _, c := range charts {
			helm(t, helmEnv, "uninstall", c, "--namespace", releaseNS, "--wait", "--timeout", "2m")
		}
		var left []string
		waitFor(t, time.Minute, "nothing of the releases left but the CRDs", func() (bool, string) {
			left = leftovers(t, false)
			return len(left) == 0, strings.Join(left, "\n")
		})
		leftovers(t, true)
		crds := kubectl(t, "", "get", "crd", "-o", "name")
		for _, crd := range []string{"imagerepositories.image.toolkit.dev", "imagepolicies.image.toolkit.dev", "imageupdateautomations.image.toolkit.dev", "updatejobs.update.toolkit.dev"} {
			if !strings.Contains(crds, "customresourcedefinition.apiextensions.k8s.io/"+crd+"\n") {
				t.Errorf("CRD %s was removed by the uninstall (crds.keep is on by default)", crd)
			}
		}
	})
}

// dashboardInCluster checks the chart's in-cluster dashboard: its pod
// becomes Ready under the restricted profile, and its Fleet page, read
// through the API server's service proxy, lists the sample automation with
// the commit the chain made, and offers no action (no POST form, no action
// path).
func dashboardInCluster(t *testing.T, ctx context.Context) {
	const svc = "image-automation-controller-ui"
	var page string
	waitFor(t, 2*time.Minute, "the dashboard serving the automation's commit", func() (bool, string) {
		b, err := cl.Client().CoreV1().Services(releaseNS).ProxyGet("http", svc, "http", "/", nil).DoRaw(ctx)
		if err != nil {
			return false, err.Error() + "\n" + uiLogs(ctx)
		}
		page = string(b)
		// The API server's proxy rewrites the page's links under its path.
		return strings.Contains(page, `/proxy/automations/default/`) && strings.Contains(page, `class="commit"`), page
	})
	for _, refused := range []string{`method="post"`, `/actions/`} {
		if strings.Contains(page, refused) {
			t.Errorf("the in-cluster dashboard offers actions (%s)", refused)
		}
	}
}

// uiLogs is what the dashboard's containers last wrote, for a failure.
func uiLogs(ctx context.Context) string {
	pods, err := cl.Client().CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=ui"})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		for _, previous := range []bool{false, true} {
			b, err := cl.Client().CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
			if err == nil && len(b) > 0 {
				out = append(out, fmt.Sprintf("--- %s (previous=%v):\n%s", p.Name, previous, b))
			}
		}
	}
	return strings.Join(out, "\n")
}

// procIDs reads the real uid and gid of a process.
func procIDs(pid int) (uid, gid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	uid, gid = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case "Gid:":
			gid, _ = strconv.Atoi(f[1])
		}
	}
	return uid, gid, nil
}

// scrape runs Debian's Prometheus on the host, scraping the controller
// pods' http-metrics ports at their pod IPs, over the bridge. Debian
// builds Prometheus without kubernetes_sd_configs (it would need
// client-go), so the targets are the pods' IPs from the API server,
// static, as a file_sd or a sidecar would give them.
func scrape(t *testing.T, ctx context.Context, pods map[string]corev1.Pod) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Fatal("prometheus is missing: apt-get install prometheus (make deps)")
	}
	dir := t.TempDir()
	var targets strings.Builder
	for rel, p := range pods {
		port := 0
		for _, cp := range p.Spec.Containers[0].Ports {
			if cp.Name == "http-metrics" {
				port = int(cp.ContainerPort)
			}
		}
		if port == 0 || p.Status.PodIP == "" {
			t.Fatalf("%s: no http-metrics port or pod IP", rel)
		}
		fmt.Fprintf(&targets, "  - targets: ['%s']\n    labels: {release: %s}\n", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)), rel)
	}
	cfg := "global: {scrape_interval: 2s, scrape_timeout: 1s}\nscrape_configs:\n- job_name: image-toolkit\n  static_configs:\n" + targets.String()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("prometheus", "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	query := func(q string) ([]struct {
		Metric map[string]string
		Value  []any
	}, error) {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("prometheus exited:\n%s", b)
		default:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(qctx, http.MethodGet, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Metric map[string]string
					Value  []any
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		return r.Data.Result, nil
	}
	waitFor(t, 90*time.Second, "Prometheus scraping every controller pod", func() (bool, string) {
		r, err := query(`up{job="image-toolkit"} == 1`)
		if err != nil {
			return false, err.Error()
		}
		var up []string
		for _, s := range r {
			up = append(up, s.Metric["release"])
		}
		slices.Sort(up)
		return len(up) == len(pods), fmt.Sprintf("up: %v", up)
	})
	waitFor(t, 60*time.Second, "a controller metric from a pod", func() (bool, string) {
		r, err := query(`imagetoolkit_reflector_scans_total{result="scanned"} > 0`)
		if err != nil {
			return false, err.Error()
		}
		return len(r) == 1 && r[0].Metric["release"] == "image-reflector-controller", fmt.Sprint(r)
	})
}

// leftovers lists what remains of the releases after uninstall: objects
// of every listable kind, namespaced and cluster-scoped, labelled or
// annotated as the releases', and anything in the release namespace but
// what Kubernetes itself puts in every namespace, the events and the
// controllers' leader election Leases.
func leftovers(t *testing.T, logHeld bool) []string {
	t.Helper()
	var kinds []string
	for _, k := range strings.Fields(kubectl(t, "", "api-resources", "--verbs=list", "-o", "name")) {
		if k != "events" && k != "events.events.k8s.io" && k != "customresourcedefinitions.apiextensions.k8s.io" {
			kinds = append(kinds, k)
		}
	}
	var list struct {
		Items []struct {
			Kind     string
			Metadata struct {
				Name, Namespace string
				Labels          map[string]string
				Annotations     map[string]string
			}
			Spec struct {
				HolderIdentity string `json:"holderIdentity"`
			}
		}
	}
	if err := json.Unmarshal([]byte(kubectl(t, "", "get", strings.Join(kinds, ","), "--all-namespaces", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	// The controllers' leader election Leases are not the releases'
	// objects: each controller creates its own at run time (named by
	// pkg/runtime/app from the controller and its shard), as it creates
	// events, and helm cannot know a shard's name, so they stay. Whether
	// one is released depends on a race: helm deletes the Deployment, the
	// leader election Role and the ServiceAccount in one pass, and the pod
	// terminates afterwards, when its token may already be refused, so its
	// release-on-shutdown can fail; a later install then waits out the
	// lease (15 s). Logged, not failed.
	leases := map[string]bool{}
	for _, o := range list.Items {
		if o.Kind == "Lease" && o.Metadata.Namespace == releaseNS {
			for _, c := range charts {
				if o.Metadata.Name == c+".toolkit.dev" {
					leases[o.Metadata.Name] = true
					if logHeld && o.Spec.HolderIdentity != "" {
						t.Logf("Lease %s is still held by %s after the uninstall", o.Metadata.Name, o.Spec.HolderIdentity)
					}
				}
			}
		}
	}
	var left []string
	for _, o := range list.Items {
		m := o.Metadata
		release := slices.Contains(charts, m.Labels["app.kubernetes.io/instance"]) || slices.Contains(charts, m.Annotations["meta.helm.sh/release-name"])
		inNS := m.Namespace == releaseNS &&
			!(o.Kind == "ServiceAccount" && m.Name == "default") && !(o.Kind == "ConfigMap" && m.Name == "kube-root-ca.crt") &&
			!(o.Kind == "Lease" && leases[m.Name])
		if release || inNS {
			l := fmt.Sprintf("%s %s/%s", o.Kind, m.Namespace, m.Name)
			if o.Spec.HolderIdentity != "" {
				l += " held by " + o.Spec.HolderIdentity
			}
			left = append(left, l)
		}
	}
	return left
}
