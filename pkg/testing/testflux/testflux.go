// Package testflux runs Flux's source-controller and kustomize-controller,
// built from their pinned release modules (`make flux-tools` writes them and
// their CRDs to bin/flux-controllers), as processes on the host against a real API
// server: health that promotion and rollback read must come from the
// controller that writes it, not from a status a test wrote by hand.
//
// Both run on the host, so the advertised address of source-controller's
// artifact server is a loopback one kustomize-controller reaches, and a git
// server on the host (testgit) serves the repositories. What they apply
// runs wherever the API server schedules it: with the real node of
// tests/internal/cluster, Deployments really roll out, so a Kustomization's
// health checks pass or fail for real.
//
// Each controller logs to a file (Flux.LogPath), named in every failure
// with its tail and kept after a failed test. Start waits for
// both readiness endpoints, bounded by StartTimeout; the test's cleanup
// stops both (SIGTERM, then SIGKILL after stopTimeout), and the kernel kills
// them if the test binary dies first.
package testflux

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Binaries and the CRD directory under Options.Bin, as hack/tools/flux
// ships them.
const (
	SourceController    = "source-controller"
	KustomizeController = "kustomize-controller"
	crdDir              = "crds"
)

// Timeouts of the harness.
const (
	// StartTimeout bounds installing the CRDs and both controllers
	// becoming ready.
	StartTimeout = 90 * time.Second
	// stopTimeout is how long a controller may take to exit on SIGTERM.
	stopTimeout = 10 * time.Second
)

// The kinds the tests create, at the versions v1.9 serves, and their
// resources for a dynamic client.
var (
	GitRepositoryKind = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}
	KustomizationKind = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}
	GitRepositories   = GitRepositoryKind.GroupVersion().WithResource("gitrepositories")
	Kustomizations    = KustomizationKind.GroupVersion().WithResource("kustomizations")
)

// Options configure Start.
type Options struct {
	// Bin holds the two binaries and crds/ (bin/flux-controllers of the repository).
	Bin string
	// Config is an administrator's: the CRDs are installed with it, and
	// the controllers get it as their kubeconfig.
	Config *rest.Config
	// Namespace is the controllers' RUNTIME_NAMESPACE (their events and
	// default namespace); "flux-system" when empty. Start does not create
	// it: the controllers watch every namespace.
	Namespace string
	// EventsURL, when set, is where the controllers post their events
	// (--events-addr): a notification-controller's (StartNotification).
	EventsURL string
	// Dir holds the logs, the kubeconfig and source-controller's artifact
	// storage. When empty, a new temporary directory, removed after a test
	// that passed and kept (and named) after one that failed.
	Dir string
}

// Flux is a running source-controller and kustomize-controller.
type Flux struct {
	dir   string
	procs []*proc
}

// cleanup stops the controllers and removes a directory Start made, unless
// the test failed.
func (f *Flux) cleanup(t testing.TB, made bool) {
	f.stop()
	switch {
	case made && !t.Failed():
		_ = os.RemoveAll(f.dir)
	case made:
		t.Logf("testflux: the controllers' logs are kept in %s", f.dir)
	}
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start installs the CRDs and starts both controllers, stopped at the end of
// the test; it fails the test, with the logs' tails, if either does not get
// ready within StartTimeout.
func Start(t testing.TB, o Options) *Flux {
	t.Helper()
	testenv.NeedTool(t, filepath.Join(o.Bin, "kustomize-controller"), "flux-tools")
	made := o.Dir == ""
	if made {
		dir, err := os.MkdirTemp("", "testflux-")
		if err != nil {
			t.Fatal(err)
		}
		o.Dir = dir
	}
	f, err := start(o)
	if f == nil {
		f = &Flux{dir: o.Dir}
	}
	t.Cleanup(func() { f.cleanup(t, made) })
	if err != nil {
		t.Fatalf("testflux: %v\n%s", err, f.Diagnose())
	}
	return f
}

func start(o Options) (*Flux, error) {
	for _, b := range []string{SourceController, KustomizeController, crdDir} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return nil, fmt.Errorf("%w: run `make flux-tools`", err)
		}
	}
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	storage := filepath.Join(o.Dir, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := installCRDs(ctx, o.Config, filepath.Join(o.Bin, crdDir)); err != nil {
		return nil, fmt.Errorf("installing Flux's CRDs: %w", err)
	}
	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, o.Config, ""); err != nil {
		return nil, err
	}
	f := &Flux{dir: o.Dir}
	env := []string{"KUBECONFIG=" + kubeconfig, "RUNTIME_NAMESPACE=" + o.Namespace}
	// A port is free when picked, not when the controller binds it: a
	// test package running at once may take it in between. Such a start is
	// tried again with new ports.
	for attempt := 1; ; attempt++ {
		err := f.launch(ctx, o.Bin, storage, env, o.EventsURL)
		if err == nil || attempt == 3 || !f.logsSay("address already in use") {
			return f, err
		}
		f.stop()
		f.procs = nil
	}
}

// launch starts both controllers on fresh ports and waits until they are
// ready.
func (f *Flux) launch(ctx context.Context, bin, storage string, env []string, events string) error {
	ports, err := testenv.FreePorts(5)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	common := []string{"--log-encoding=console", "--log-level=debug", "--enable-leader-election=false"}
	if events != "" {
		common = append(common, "--events-addr="+events)
	}
	// The artifact server advertises the loopback address it listens on:
	// kustomize-controller runs on the same host.
	if err := f.run(SourceController, bin, env, append(common, "--storage-path="+storage,
		"--storage-addr="+addr(0), "--storage-adv-addr="+addr(0),
		"--metrics-addr="+addr(1), "--health-addr="+addr(2))...); err != nil {
		return err
	}
	if err := f.run(KustomizeController, bin, env, append(common, "--no-remote-bases=true",
		"--metrics-addr="+addr(3), "--health-addr="+addr(4))...); err != nil {
		return err
	}
	for i, p := range f.procs {
		if err := p.ready(ctx, "http://"+addr([]int{2, 4}[i])+"/readyz"); err != nil {
			return err
		}
	}
	return nil
}

// logsSay tells whether a controller's log holds s.
func (f *Flux) logsSay(s string) bool {
	for _, p := range f.procs {
		if strings.Contains(tail(f.LogPath(p.name), 64<<10), s) {
			return true
		}
	}
	return false
}

func (f *Flux) run(name, bin string, env []string, args ...string) error {
	log, err := os.Create(f.LogPath(name))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	f.procs = append(f.procs, p)
	return nil
}

// ready polls the controller's readiness endpoint until it answers 200.
func (p *proc) ready(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", p.name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s", p.name, url, StartTimeout)
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

func (f *Flux) stop() {
	for _, p := range f.procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	for _, p := range f.procs {
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// LogPath is the log file of a controller (SourceController or
// KustomizeController).
func (f *Flux) LogPath(name string) string { return filepath.Join(f.dir, name+".log") }

// Diagnose names each controller's log and returns its last lines, for a
// test that failed.
func (f *Flux) Diagnose() string {
	var b strings.Builder
	for _, name := range []string{SourceController, KustomizeController} {
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", name, f.LogPath(name), tail(f.LogPath(name), 8<<10))
	}
	return b.String()
}

func tail(path string, n int64) string {
	fh, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Size() > n {
		_, _ = fh.Seek(-n, io.SeekEnd)
	}
	b, err := io.ReadAll(fh)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// installCRDs creates the CRDs of every file in dir and waits until the API
// server serves them.
func installCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s (%v)", dir, err)
	}
	var names []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		// A CRD an earlier Start in the same cluster installed is the same
		// one: bin/flux-controllers holds one version.
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		for established := false; !established; {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range crd.Status.Conditions {
				established = established || c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}
			if !established {
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s not established: %w", name, ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// GitRepository is a GitRepository of branch at url, fetched every
// interval.
func GitRepository(namespace, name, url, branch string, interval time.Duration) *unstructured.Unstructured {
	u := object(GitRepositoryKind, namespace, name)
	u.Object["spec"] = map[string]any{
		"url":      url,
		"interval": interval.String(),
		"timeout":  "20s",
		"ref":      map[string]any{"branch": branch},
	}
	return u
}

// Kustomization applies path of the GitRepository source into
// targetNamespace every interval and, with wait, waits up to timeout for
// everything it applied to be ready (its health checks).
func Kustomization(namespace, name, source, path, targetNamespace string, interval, timeout time.Duration) *unstructured.Unstructured {
	u := object(KustomizationKind, namespace, name)
	u.Object["spec"] = map[string]any{
		"sourceRef":       map[string]any{"kind": GitRepositoryKind.Kind, "name": source},
		"path":            path,
		"targetNamespace": targetNamespace,
		"interval":        interval.String(),
		"retryInterval":   interval.String(),
		"timeout":         timeout.String(),
		"prune":           true,
		"wait":            true,
	}
	return u
}

func object(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}
