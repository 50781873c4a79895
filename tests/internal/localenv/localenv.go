// Package localenv runs image-toolkit locally: a real control plane from
// bin/testenv with every CRD installed, a kubeconfig for it, and the
// controller binaries as processes. The end-to-end tests and `make demo`
// share it.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"io"
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

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Controllers lists the controller binaries, in start order.
var Controllers = []string{"image-reflector-controller", "image-automation-controller", "update-job-controller"}

// Cluster is a running control plane with a kubeconfig file for it.
type Cluster struct {
	*testenv.Env
	Root       string // workspace root
	Dir        string // scratch directory for kubeconfig and logs
	Kubeconfig string
	Kubectl    string
}

// Start starts the control plane with all CRDs and writes a kubeconfig for
// an admin user into dir.
func Start(dir string) (*Cluster, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	env, err := testenv.Start(testenv.AllCharts...)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, Root: root, Dir: dir}
	user, err := env.AddUser(envtest.User{Name: "image-toolkit-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kc, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	c.Kubectl = filepath.Join(env.BinaryAssetsDirectory, "kubectl")
	return c, nil
}

// StartTest starts a cluster for a test or benchmark, stopped when it ends,
// and returns it with the directory of the controller binaries (Binaries).
func StartTest(t testing.TB) (*Cluster, string) {
	t.Helper()
	c, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	bin, err := Binaries(c.Root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c, bin
}

// KubectlCmd returns a kubectl command against the cluster.
func (c *Cluster) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = c.Root
	return cmd
}

// Process is a controller binary running against the cluster.
type Process struct {
	Name        string
	MetricsAddr string
	ProbeAddr   string
	// WebhookAddr is the free webhook address localenv chose (reflector and automation controller),
	// when the arguments gave none.
	WebhookAddr string
	LogPath     string
	cmd         *exec.Cmd
	done        chan struct{}
	waitErr     error
	once        sync.Once
}

// StartController starts bin/<name> with free metrics and probe ports and
// waits until it is ready. Logs go to <dir>/<name>.log.
func (c *Cluster) StartController(ctx context.Context, binDir, name string, args ...string) (*Process, error) {
	return c.StartInstance(ctx, binDir, name, name+"-0", args...)
}

// StartInstance starts one replica of bin/<name>, named instance (its
// POD_NAME, log file and data directory), e.g. to run several replicas or
// shards of a controller.
func (c *Cluster) StartInstance(ctx context.Context, binDir, name, instance string, args ...string) (*Process, error) {
	all := append([]string{"--kubeconfig=" + c.Kubeconfig, "--log-encoding=console"}, dataFlags(c.Dir, name, instance)...)
	env := append(os.Environ(), "RUNTIME_NAMESPACE=default", "POD_NAME="+instance)
	return c.StartWith(ctx, binDir, name, instance, env, append(all, args...)...)
}

// StartWith starts bin/<name> with exactly the environment env and the
// arguments args, adding only free metrics and probe addresses (and for the
// reflector and the automation controller a free webhook address, unless
// args give one: their defaults :9292 and :9293 would collide between
// controllers started at once), and waits until it is
// ready. Logs go to <dir>/<instance>.log.
func (c *Cluster) StartWith(ctx context.Context, binDir, name, instance string, env []string, args ...string) (*Process, error) {
	// A free port is free when picked, not when the controller binds it:
	// another test package running at once may take it in between. Such a
	// start is tried again with new ports.
	for attempt := 1; ; attempt++ {
		p, err := c.startWith(ctx, binDir, name, instance, env, args...)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return p, err
		}
	}
}

func (c *Cluster) startWith(ctx context.Context, binDir, name, instance string, env []string, args ...string) (*Process, error) {
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, MetricsAddr: metrics, ProbeAddr: probe,
		LogPath: filepath.Join(c.Dir, instance+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.LogPath)
	if err != nil {
		return nil, err
	}
	all := append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probe}, args...)
	if (name == "image-reflector-controller" || name == "image-automation-controller") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--webhook-bind-address") }) {
		if p.WebhookAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		all = append(all, "--webhook-bind-address="+p.WebhookAddr)
	}
	p.cmd = exec.Command(filepath.Join(binDir, name), all...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = env
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("%s: %w; log:\n%s", name, err, tail(p.LogPath, 4096))
	}
	return p, nil
}

// APIServerPID finds the kube-apiserver process serving on port, e.g. to
// measure its CPU or to stop it.
func APIServerPID(port int) (int, error) {
	want := fmt.Sprintf("--secure-port=%d", port)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !slices.Contains(args, want) {
			continue
		}
		return strconv.Atoi(filepath.Base(d))
	}
	return 0, fmt.Errorf("no kube-apiserver process with %s", want)
}

// dataFlags point a controller's on-disk state into dir, instead of the
// container paths the defaults name.
func dataFlags(dir, name, instance string) []string {
	switch name {
	case "image-reflector-controller":
		return []string{"--storage-path=" + filepath.Join(dir, instance+"-data")}
	case "update-job-controller":
		return []string{"--cache-dir=" + filepath.Join(dir, instance+"-cache")}
	}
	return nil
}

func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before ready: %v", p.waitErr)
		case <-ctx.Done():
			return errors.New("not ready in time")
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := client.Get("http://" + p.ProbeAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// Metrics returns the body of the process's /metrics endpoint.
func (p *Process) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.MetricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

// Stop sends SIGTERM and waits for a clean exit; after grace it kills.
func (p *Process) Stop(grace time.Duration) error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			err = p.waitErr
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
			err = fmt.Errorf("%s did not stop within %s", p.Name, grace)
		}
	})
	return err
}

// Kill sends SIGKILL, as the kernel's OOM killer or a node failure would:
// no deferred function, no status write, no cleanup runs. It waits until
// the process is gone.
func (p *Process) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
}

// PID is the process's id.
// Exited reports whether the process has ended (a controller exits, for
// one, when it loses its leader election Lease).
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Process) PID() int { return p.cmd.Process.Pid }

// Log returns the end of the process's log.
func (p *Process) Log() string { return tail(p.LogPath, 8192) }

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// Binaries returns the directory of the controller binaries for tests: the
// ones `make build` made ($IMAGE_TOOLKIT_BIN), or fresh builds of the tree
// at root, made in scratch.
func Binaries(root, scratch string) (string, error) {
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return d, nil
	}
	for _, name := range Controllers {
		cmd := exec.Command("go", "build", "-o", filepath.Join(scratch, name), "./"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
		}
	}
	return scratch, nil
}

// BinDir returns the directory of the controller binaries: $IMAGE_TOOLKIT_BIN,
// or bin/ under the workspace root.
func BinDir(root string) string {
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return d
	}
	return filepath.Join(root, "bin")
}
