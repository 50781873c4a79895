// Package testargocd runs Argo CD's own application controller and repo
// server, with Redis, against a test control plane, so that tests prove
// what Argo CD does with what image-toolkit commits rather than what we
// believe it does.
//
// The binaries are Argo CD's multi-call binary, built from the pinned module
// in hack/tools/argocd (`make argocd-tools`, into bin/argocd with Argo CD's
// CRDs beside them); Redis is Debian's redis-server (hack/deps.sh). Nothing
// is faked: the controller watches the control plane, asks the repo server to
// render each Application from a real git server, and syncs what it renders.
// It runs as Argo CD runs in a cluster with three differences a test needs:
// the in-cluster destination is the test control plane (Argo CD's own
// ARGOCD_FAKE_IN_CLUSTER switch), the repo server speaks plaintext gRPC on a
// loopback port, and its caches of revisions expire in a second so a new
// commit is seen on the controller's next resync (two seconds) instead of
// after three minutes.
//
// Every process writes its log to a file in a directory kept when the test
// fails; failures name the files.
package testargocd

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Namespace is where Argo CD runs and reads its configuration, as in a
// default installation.
const Namespace = "argocd"

// InCluster is the destination server of the cluster Argo CD runs in.
const InCluster = "https://kubernetes.default.svc"

// Kinds of Argo CD's API that tests use.
var (
	ApplicationKind = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}
	ProjectKind     = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "AppProject"}
)

// Options configure Start.
type Options struct {
	// Dir holds argocd-application-controller, argocd-repo-server and
	// manifests/crds; default $IMAGE_TOOLKIT_BIN/argocd, else bin/argocd.
	Dir string
	// Tools holds the kustomize and helm the repo server runs; default
	// $IMAGE_TOOLKIT_BIN, else bin.
	Tools string
	// Timeout bounds the start of each process; default a minute.
	Timeout time.Duration
}

// ArgoCD is a running Argo CD.
type ArgoCD struct {
	// LogDir holds one log file per process, kept when the test fails.
	LogDir string
	client client.Client
}

// Start installs Argo CD's CRDs and the configuration it needs into env and
// starts Redis, the repo server and the application controller, all stopped
// at the end of the test.
func Start(t testing.TB, env *testenv.Env, o Options) *ArgoCD {
	t.Helper()
	dir, tools, err := dirs(o)
	if err == nil {
		testenv.NeedTool(t, filepath.Join(dir, "argocd-application-controller"), "argocd-tools")
		err = complete(dir, tools)
	}
	if err != nil {
		t.Fatal(err)
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(dir, "manifests", "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("installing Argo CD's CRDs: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	if err := configure(ctx, env.Client); err != nil {
		t.Fatalf("configuring Argo CD: %v", err)
	}

	work, err := os.MkdirTemp("", "testargocd-")
	if err != nil {
		t.Fatal(err)
	}
	a := &ArgoCD{LogDir: work, client: env.Client}
	var procs []*process
	t.Cleanup(func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
		if t.Failed() {
			t.Logf("Argo CD's logs are kept in %s", work)
			return
		}
		_ = os.RemoveAll(work)
	})
	start := func(p *process, port int) {
		t.Helper()
		if err := p.start(); err != nil {
			t.Fatalf("%v (log: %s)", err, p.log)
		}
		procs = append(procs, p)
		if err := p.waitPort(port, o.Timeout); err != nil {
			t.Fatalf("%v (log: %s)", err, p.log)
		}
	}

	environ, err := a.environ(env.Config, dir, tools)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testenv.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	start(a.process("redis-server", "redis-server", environ, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", work), ports[0])
	start(a.process("argocd-repo-server", filepath.Join(dir, "argocd-repo-server"), environ,
		"--port", strconv.Itoa(ports[1]), "--address", "127.0.0.1", "--metrics-port", strconv.Itoa(ports[2]),
		"--redis", redisAddr, "--disable-tls", "--client-ca-path", "", "--revision-cache-expiration", "1s",
		"--logformat", "text", "--loglevel", "debug"), ports[1])
	start(a.process("argocd-application-controller", filepath.Join(dir, "argocd-application-controller"), environ,
		"--kubeconfig", filepath.Join(work, "kubeconfig"), "--namespace", Namespace,
		"--repo-server", "127.0.0.1:"+strconv.Itoa(ports[1]), "--repo-server-plaintext",
		"--redis", redisAddr, "--metrics-port", strconv.Itoa(ports[3]),
		"--app-resync", "2", "--app-resync-jitter", "0", "--self-heal-timeout-seconds", "1",
		"--logformat", "text", "--loglevel", "debug"), ports[3])
	return a
}

// dirs finds Argo CD's binaries and the tools the repo server runs.
func dirs(o Options) (dir, tools string, err error) {
	bin := os.Getenv("IMAGE_TOOLKIT_BIN")
	if bin == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			return "", "", err
		}
		bin = filepath.Join(root, "bin")
	}
	dir, tools = o.Dir, o.Tools
	if dir == "" {
		dir = filepath.Join(bin, "argocd")
	}
	if tools == "" {
		tools = bin
	}
	return dir, tools, nil
}

// complete checks that Argo CD's build and the tools its repo server runs
// are all there.
func complete(dir, tools string) error {
	for _, f := range []string{"argocd-application-controller", "argocd-repo-server", "manifests/crds", "hack/git-verify-wrapper.sh"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make argocd-tools` first", f, dir)
		}
	}
	for _, f := range []string{"kustomize", "helm"} {
		if _, err := os.Stat(filepath.Join(tools, f)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make testenv` first", f, tools)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("redis-server not found: run `make deps`")
	}
	return nil
}

// configure writes what a default installation holds: the namespace, the
// three configuration objects (empty but for the key that signs sessions,
// which Argo CD refuses to run without) and the default project.
func configure(ctx context.Context, c client.Client) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: partOf}
	}
	project := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "default", "namespace": Namespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	project.SetGroupVersionKind(ProjectKind)
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-cm")},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-rbac-cm")},
		&corev1.Secret{ObjectMeta: meta("argocd-secret"), Data: map[string][]byte{"server.secretkey": key}},
		project,
	} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	return nil
}

// environ is the processes' environment: a kubeconfig for the control
// plane, Argo CD's paths moved out of /app and /tmp into the work
// directory, and a PATH with kustomize, helm, the `argocd` that git runs as
// its askpass helper (the same multi-call binary) and Argo CD's
// git-verify-wrapper.sh, which the repo server runs on every checkout.
func (a *ArgoCD) environ(cfg *rest.Config, dir, tools string) ([]string, error) {
	work := a.LogDir
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, cfg, Namespace); err != nil {
		return nil, err
	}
	path := filepath.Join(work, "path")
	for _, d := range []string{path, "tmp", "home", "gnupg", "tls", "ssh", "config"} {
		if !filepath.IsAbs(d) {
			d = filepath.Join(work, d)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.Symlink(filepath.Join(dir, "argocd-repo-server"), filepath.Join(path, "argocd")); err != nil {
		return nil, err
	}
	wrapper, err := os.ReadFile(filepath.Join(dir, "hack", "git-verify-wrapper.sh"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(path, "git-verify-wrapper.sh"), wrapper, 0o755); err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + path + string(os.PathListSeparator) + tools + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + filepath.Join(work, "home"),
		"TMPDIR=" + filepath.Join(work, "tmp"),
		"KUBECONFIG=" + kubeconfig,
		"ARGOCD_FAKE_IN_CLUSTER=true",
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_GNUPGHOME=" + filepath.Join(work, "gnupg"),
		"ARGOCD_TLS_DATA_PATH=" + filepath.Join(work, "tls"),
		"ARGOCD_SSH_DATA_PATH=" + filepath.Join(work, "ssh"),
		"ARGOCD_APP_CONF_PATH=" + filepath.Join(work, "config"),
		"ARGOCD_ASK_PASS_SOCK=" + filepath.Join(work, "askpass.sock"),
		"ARGOCD_PLUGINSOCKFILEPATH=" + filepath.Join(work, "plugins"),
		"ARGOCD_EXEC_TIMEOUT=60s",
	}
	return env, nil
}

// process is one of Argo CD's processes, logging to a file.
type process struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

func (a *ArgoCD) process(name, bin string, environ []string, args ...string) *process {
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	cmd.Dir = a.LogDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stop kills the helpers it starts too
	return &process{name: name, log: filepath.Join(a.LogDir, name+".log"), cmd: cmd, done: make(chan struct{})}
}

func (p *process) start() error {
	f, err := os.Create(p.log)
	if err != nil {
		return err
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return nil
}

// waitPort waits until the process accepts connections on port, failing
// early when it exits.
func (p *process) waitPort(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s does not listen on port %d after %s", p.name, port, timeout)
}

// stop ends the process group: SIGTERM, then SIGKILL after ten seconds.
func (p *process) stop() {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Logs names the log files, for failure messages.
func (a *ArgoCD) Logs() string {
	return filepath.Join(a.LogDir, "{redis-server,argocd-repo-server,argocd-application-controller}.log")
}

// AddRepository writes a repository Secret, as `argocd repo add` does, for
// a git repository at url with basic authentication (none when username is
// empty).
func (a *ArgoCD) AddRepository(t testing.TB, name, url, username, password string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace,
			Labels: map[string]string{"argocd.argoproj.io/secret-type": "repository"}},
		StringData: map[string]string{"type": "git", "url": url},
	}
	if username != "" {
		s.StringData["username"], s.StringData["password"] = username, password
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.client.Create(ctx, s); err != nil {
		t.Fatalf("creating repository Secret %s: %v", name, err)
	}
}

// Application is an Application in Argo CD's namespace deploying source
// into namespace of the cluster Argo CD runs in, synced automatically.
func Application(name, namespace string, source map[string]any) *unstructured.Unstructured {
	app := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": Namespace},
		"spec": map[string]any{
			"project":     "default",
			"source":      source,
			"destination": map[string]any{"server": InCluster, "namespace": namespace},
			"syncPolicy":  map[string]any{"automated": map[string]any{"selfHeal": true}},
		},
	}}
	app.SetGroupVersionKind(ApplicationKind)
	return app
}

// WaitApplication polls the Application until done accepts it, and fails
// the test after timeout with its status and the log files.
func (a *ArgoCD) WaitApplication(t testing.TB, name string, timeout time.Duration, what string, done func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(ApplicationKind)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		err := a.client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, app)
		if err == nil && done(app) {
			return app
		}
		select {
		case <-ctx.Done():
			status, _ := json.MarshalIndent(app.Object["status"], "", "  ")
			t.Fatalf("Application %s: %s not seen after %s (last error: %v)\nstatus: %s\nlogs: %s",
				name, what, timeout, err, status, a.Logs())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// SyncRevision is status.sync.revision, the commit Argo CD compared with;
// for a multi-source Application, its first source's (status.sync.revisions).
func SyncRevision(app *unstructured.Unstructured) string {
	if s, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision"); s != "" {
		return s
	}
	if s, _, _ := unstructured.NestedStringSlice(app.Object, "status", "sync", "revisions"); len(s) > 0 {
		return s[0]
	}
	return ""
}

// Images is status.summary.images, the images Argo CD saw running.
func Images(app *unstructured.Unstructured) []string {
	s, _, _ := unstructured.NestedStringSlice(app.Object, "status", "summary", "images")
	return s
}
