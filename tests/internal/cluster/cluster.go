// Package cluster starts a single-node Kubernetes cluster from real parts,
// for tests that need pods to run: the charts installed with helm, jobs
// running images. Every part is one a user's cluster has, built or
// installed here, and nothing comes from the internet at run time:
//
//   - etcd and kube-apiserver from bin/testenv (`make testenv`), with their
//     own PKI: a serving certificate for the node's address, 127.0.0.1 and
//     the `kubernetes` Service address (10.0.0.1), so in-cluster clients
//     verify TLS; ServiceAccount signing keys; a kubelet client
//     certificate, so logs and exec go through the kubelet; PodSecurity
//     admission on;
//   - kube-controller-manager, kube-scheduler, the kubelet and kube-proxy
//     from bin/node (`make node-tools`, the same pinned Kubernetes);
//   - Debian's containerd, runc and CNI plugins, with a bridge network.
//
// Why not envtest plus a fake node? Because the point is what only a node
// does: pull (here: find) an image, run it as the chart's user under the
// restricted profile, pass its probes, mount its ServiceAccount token and
// reach the API server through the Service. Why not kind or k3s? Both pull
// images from the internet, and kind needs docker; these parts are the
// upstream ones at the pinned version, started as plain processes.
//
// Choices this machine forces, each a configuration switch, not a patch:
// kubelet 1.37 runs on cgroup v1 only with failCgroupV1: false (and
// cgroupsPerQOS off, cgroupfs driver); runc cannot apply a negative
// oom_score_adj in this VM, so containerd's CRI plugin has
// restrict_oom_score_adj on; the kubelet refuses a loopback node IP, so
// the node is the host's default-route address (NodeIP), which is also
// where pods reach servers the test runs on the host (see Expose).
//
// There is no cluster DNS: clients in pods find the API server through the
// KUBERNETES_SERVICE_HOST environment (kube-proxy's iptables rules for
// 10.0.0.1), and the tests give them addresses, not names.
//
// One cluster at a time per machine: kube-proxy's iptables chains
// (KUBE-SERVICES, ...) are global to the network namespace, so two
// kube-proxies would rewrite each other's rules. Start therefore takes an
// exclusive lock (/run/lock/image-toolkit-cluster.lock) held until Stop;
// a second Start, from another test package running in parallel, waits
// for it. Everything else is per cluster anyway: a temp dir holds
// containerd's root and state, runc's state, the kubelet's root, the
// logs, the CNI IP allocations; ports are free ones.
//
// Stop deletes the pods first, so that the kubelet tears down their
// sandboxes as it would on a real node (CNI DEL: veth, IP, masquerade
// rules), then stops every process, kills any container left, unmounts
// what is mounted under the dir, deletes the bridge and kube-proxy's and
// the kubelet's iptables chains. Start runs the same network clean-up
// first, so a run killed before its Stop does not break the next one.
//
// Processes are started with a parent-death signal, so a test binary
// killed by `go test -timeout` takes its control plane and kubelet along.
//
// Nothing is skipped: when a part is missing, Start fails with what to
// install or which make target to run.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Network layout. The pod and Service ranges must not overlap the host's
// networks; these are the ranges kubeadm users commonly pick.
const (
	PodCIDR       = "10.244.0.0/16"
	ServiceCIDR   = "10.0.0.0/24"
	APIServiceIP  = "10.0.0.1"
	BridgeName    = "tkcni0"
	NetworkName   = "image-toolkit-test"
	LockFile      = "/run/lock/image-toolkit-cluster.lock"
	DefaultNodeID = "image-toolkit-node"
)

// Options configure Start.
type Options struct {
	// Root is the repository root (go.work, bin/); found above the
	// working directory when empty.
	Root string
	// Dir holds everything the cluster writes; a new temp dir, removed
	// by Stop, when empty. A given Dir is kept (logs to read).
	Dir string
	// NodeName is the node's name; DefaultNodeID when empty.
	NodeName string
	// Log receives one line per step; discarded when nil.
	Log io.Writer
	// Timeout bounds Start after the lock is taken; 4 minutes when zero.
	Timeout time.Duration
}

// Cluster is a running cluster.
type Cluster struct {
	dir, root, nodeName, nodeIP string
	keepDir                     bool
	kubeconfig                  string
	cfg                         *rest.Config
	client                      kubernetes.Interface
	containerdSock              string
	log                         io.Writer

	mu      sync.Mutex
	procs   []*proc
	closers []func()
	sysctls map[string]string
	lock    *os.File
	stopped bool
}

// Start brings the cluster up and returns when the node is Ready, the
// default ServiceAccount exists and the sandbox and busybox images are
// imported. On error everything started is stopped again, and the error
// carries the failing component's log tail.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.NodeName == "" {
		o.NodeName = DefaultNodeID
	}
	if o.Root == "" {
		if o.Root, err = repoRoot(); err != nil {
			return nil, err
		}
	}
	// Service traffic between pods on the bridge goes through iptables
	// only with br_netfilter; a fresh machine may not have it loaded.
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil && os.Geteuid() == 0 {
		exec.CommandContext(ctx, "modprobe", "br_netfilter").Run()
	}
	if err := Check(o.Root); err != nil {
		return nil, err
	}
	c = &Cluster{root: o.Root, nodeName: o.NodeName, log: o.Log, sysctls: map[string]string{}}
	c.say("waiting for the cluster lock %s", LockFile)
	if c.lock, err = acquireLock(ctx, LockFile); err != nil {
		return nil, err
	}
	// The named result is nil by the time a failed Start returns.
	started := c
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if o.Timeout == 0 {
		o.Timeout = 4 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	// A run killed before its Stop leaves its bridge and chains.
	c.cleanupNetwork()

	if o.Dir != "" {
		c.dir, c.keepDir = o.Dir, true
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, err
		}
	} else if c.dir, err = os.MkdirTemp("", "image-toolkit-cluster-"); err != nil {
		return nil, err
	}
	// Pods' files live under the dir: it must be traversable by their
	// users (the kubelet's volumes, containerd's snapshots).
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return nil, err
	}
	if c.nodeIP, err = defaultRouteIPv4(); err != nil {
		return nil, err
	}
	c.say("cluster dir %s, node %s at %s", c.dir, c.nodeName, c.nodeIP)

	// The images are built while the control plane starts.
	type built struct {
		paths []string
		err   error
	}
	images := make(chan built, 1)
	go func() {
		imgDir := filepath.Join(c.dir, "images")
		if err := os.MkdirAll(imgDir, 0o755); err != nil {
			images <- built{err: err}
			return
		}
		p, err := buildPause(ctx, c.root, imgDir)
		if err != nil {
			images <- built{err: err}
			return
		}
		b, err := buildBusybox(ctx, imgDir)
		images <- built{paths: []string{p, b}, err: err}
	}()

	if err := c.setSysctls(); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	if err := c.startContainerd(ctx); err != nil {
		return nil, err
	}
	b := <-images
	if b.err != nil {
		return nil, fmt.Errorf("building the pause and busybox images: %w", b.err)
	}
	if err := c.ImportImages(ctx, b.paths...); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) say(format string, args ...any) {
	fmt.Fprintf(c.log, "cluster: "+format+"\n", args...)
}

// Kubeconfig is the path of an administrator (system:masters) kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the administrator's client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Client is a clientset of the administrator.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// NodeIP is the node's address: the host's default-route IPv4 address.
// Pods reach servers listening on it (see Expose).
func (c *Cluster) NodeIP() string { return c.nodeIP }

// NodeName is the node's name.
func (c *Cluster) NodeName() string { return c.nodeName }

// Root is the repository root the binaries came from.
func (c *Cluster) Root() string { return c.root }

// Dir is the directory holding the cluster's files and logs.
func (c *Cluster) Dir() string { return c.dir }

// LogPath is the log file of a component: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd, kubelet,
// kube-proxy.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.dir, "logs", component+".log")
}

// LogTail returns the end of a component's log, for error messages.
func (c *Cluster) LogTail(component string, n int64) string {
	return tail(c.LogPath(component), n)
}

// Kubectl runs bin/testenv/kubectl against the cluster and returns its
// standard output; the error carries both outputs.
func (c *Cluster) Kubectl(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "bin", "testenv", "kubectl"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Stdin = stdin
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

// Expose makes a server listening on loopback (an httptest server, the
// test registry, the git server) reachable from pods: it forwards TCP
// connections from NodeIP:<free port> to addr and returns NodeIP:port.
// The forwarder stops with the cluster.
func (c *Cluster) Expose(addr string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(c.nodeIP, "0"))
	if err != nil {
		return "", err
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
				go func() { io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	c.mu.Lock()
	c.closers = append(c.closers, func() { l.Close() })
	c.mu.Unlock()
	return l.Addr().String(), nil
}

func closeWrite(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.CloseWrite()
	}
}

// ContainerPID returns the host PID of a running container's first
// process, given a pod's containerStatuses[].containerID
// (containerd://<id>): tests read /proc/<pid>/status for the user it
// really runs as.
func (c *Cluster) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.containerdSock, "--namespace", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		return 0, fmt.Errorf("ctr tasks ls: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no running task %s in containerd", id)
}

// Diagnose returns the tail of every component's log, for a test that
// failed in a way the cluster may explain.
func (c *Cluster) Diagnose() string {
	var b strings.Builder
	for _, p := range []string{"kubelet", "containerd", "kube-proxy", "kube-controller-manager", "kube-scheduler", "kube-apiserver"} {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p, c.LogPath(p), c.LogTail(p, 3000))
	}
	return b.String()
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	if err != nil {
		return err
	}
	serving, servingKey, err := p.issue("apiserver", "kube-apiserver", nil,
		c.nodeIP, "127.0.0.1", APIServiceIP, "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	admin, adminKey, err := p.issue("admin", "image-toolkit-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	// The API server's client certificate to the kubelet; the kubelet
	// authorizes it with a SubjectAccessReview, which system:masters passes.
	kc, kcKey, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	saKey, saPub, err := p.serviceAccountKey()
	if err != nil {
		return err
	}
	if _, _, err := p.issue("kubelet", "system:node:"+c.nodeName, []string{"system:nodes"}, c.nodeIP, c.nodeName, "localhost", "127.0.0.1"); err != nil {
		return err
	}

	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	c.say("starting etcd on %s", etcdURL)
	if _, err := c.start("etcd", filepath.Join(c.root, "bin", "testenv", "etcd"),
		"--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync"); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "etcd", 60*time.Second, func() (bool, error) {
		return httpOK(etcdURL + "/health")
	}); err != nil {
		return err
	}

	c.say("starting kube-apiserver on :%d", apiPort)
	if _, err := c.start("kube-apiserver", filepath.Join(c.root, "bin", "testenv", "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "0.0.0.0", "--secure-port", strconv.Itoa(apiPort),
		"--advertise-address", c.nodeIP,
		"--tls-cert-file", serving, "--tls-private-key-file", servingKey,
		"--client-ca-file", p.CAFile,
		"--service-cluster-ip-range", ServiceCIDR,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction,PodSecurity",
		"--allow-privileged=true",
		"--kubelet-client-certificate", kc, "--kubelet-client-key", kcKey,
		"--kubelet-certificate-authority", p.CAFile,
		"--kubelet-preferred-address-types", "InternalIP",
		"--cert-dir", filepath.Join(c.dir, "pki", "apiserver-generated"),
		"--profiling=false"); err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := kubeconfig(c.kubeconfig, fmt.Sprintf("https://127.0.0.1:%d", apiPort), p.CAFile, admin, adminKey); err != nil {
		return err
	}
	if c.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return err
	}
	c.cfg.Timeout = 30 * time.Second
	if c.client, err = kubernetes.NewForConfig(c.cfg); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-apiserver", 90*time.Second, func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	}); err != nil {
		return err
	}

	cmPort, schedPort, err := twoPorts()
	if err != nil {
		return err
	}
	c.say("starting kube-controller-manager and kube-scheduler")
	if _, err := c.start("kube-controller-manager", filepath.Join(c.root, "bin", "node", "kube-controller-manager"),
		"--kubeconfig", c.kubeconfig,
		"--authentication-kubeconfig", c.kubeconfig, "--authorization-kubeconfig", c.kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(cmPort),
		"--leader-elect=false",
		"--root-ca-file", p.CAFile,
		"--service-account-private-key-file", saKey,
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range", ServiceCIDR,
		"--cluster-cidr", PodCIDR, "--allocate-node-cidrs=false",
		"--controllers", "*",
		// Fast feedback in tests: a pod of a deleted node is not the case here.
		"--concurrent-gc-syncs", "5"); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", filepath.Join(c.root, "bin", "node", "kube-scheduler"),
		"--kubeconfig", c.kubeconfig,
		"--authentication-kubeconfig", c.kubeconfig, "--authorization-kubeconfig", c.kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(schedPort),
		"--leader-elect=false"); err != nil {
		return err
	}
	return nil
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	d := filepath.Join(c.dir, "containerd")
	netd := filepath.Join(c.dir, "cni", "net.d")
	for _, p := range []string{d, netd} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	conflist := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": %q, "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
`, NetworkName, BridgeName, filepath.Join(c.dir, "cni", "ipam"), PodCIDR)
	if err := os.WriteFile(filepath.Join(netd, "10-bridge.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	c.containerdSock = filepath.Join(d, "containerd.sock")
	// restrict_oom_score_adj: runc fails with "can't get final child's
	// PID" on this VM when asked for a negative oom_score_adj.
	// Root moves runc's state under the dir, so nothing is left in
	// /run/containerd/runc.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = %q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.containerdSock, c.containerdSock+".ttrpc",
		filepath.Join(d, "opt"), PauseImage, netd, filepath.Join(d, "runc"))
	cfgPath := filepath.Join(d, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	c.say("starting containerd at %s", c.containerdSock)
	if _, err := c.start("containerd", "containerd", "--config", cfgPath); err != nil {
		return err
	}
	return c.waitFor(ctx, "containerd", 60*time.Second, func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := exec.CommandContext(cctx, "ctr", "--address", c.containerdSock, "version").Run()
		return err == nil, nil
	})
}

func (c *Cluster) startNode(ctx context.Context) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	kubeletPort, healthzPort, proxyMetrics, proxyHealthz := ports[0], ports[1], ports[2], ports[3]
	kd := filepath.Join(c.dir, "kubelet")
	for _, p := range []string{filepath.Join(kd, "pods"), filepath.Join(c.dir, "logs", "pods")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	pkiDir := filepath.Join(c.dir, "pki")
	// failCgroupV1: false, cgroupsPerQOS: false, enforceNodeAllocatable:
	// [] let kubelet 1.37 run on this cgroup v1 host; the eviction and
	// image GC thresholds are off so a full disk on a CI machine does not
	// evict the pods under test.
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
evictionHard: {}
imageGCHighThresholdPercent: 100
localStorageCapacityIsolation: false
containerRuntimeEndpoint: unix://%s
staticPodPath: %s
podLogsDir: %s
resolvConf: /etc/resolv.conf
serializeImagePulls: false
`, c.nodeIP, kubeletPort, healthzPort, filepath.Join(pkiDir, "kubelet.crt"), filepath.Join(pkiDir, "kubelet.key"),
		filepath.Join(pkiDir, "ca.crt"), c.containerdSock, filepath.Join(kd, "pods"), filepath.Join(c.dir, "logs", "pods"))
	cfgPath := filepath.Join(kd, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	c.say("starting the kubelet on %s:%d", c.nodeIP, kubeletPort)
	if _, err := c.start("kubelet", filepath.Join(c.root, "bin", "node", "kubelet"),
		"--config", cfgPath, "--kubeconfig", c.kubeconfig,
		"--root-dir", filepath.Join(kd, "root"),
		"--hostname-override", c.nodeName, "--node-ip", c.nodeIP); err != nil {
		return err
	}

	// conntrack: 0 leaves the host's conntrack sysctls alone;
	// localhostNodePorts: false leaves route_localnet alone.
	proxyCfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
metricsBindAddress: 127.0.0.1:%d
healthzBindAddress: 127.0.0.1:%d
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, c.kubeconfig, PodCIDR, c.nodeName, c.nodeIP, proxyMetrics, proxyHealthz)
	proxyPath := filepath.Join(c.dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyPath, []byte(proxyCfg), 0o644); err != nil {
		return err
	}
	c.say("starting kube-proxy (iptables mode)")
	if _, err := c.start("kube-proxy", filepath.Join(c.root, "bin", "node", "kube-proxy"), "--config", proxyPath); err != nil {
		return err
	}

	c.say("waiting for node %s to be Ready", c.nodeName)
	start := time.Now()
	if err := c.waitFor(ctx, "kubelet", 2*time.Minute, func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := c.client.CoreV1().Nodes().Get(rctx, c.nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	c.say("node Ready after %s", time.Since(start).Round(100*time.Millisecond))
	// Pods need their namespace's default ServiceAccount (the controller
	// manager makes it) and kube-proxy's rules for the kubernetes Service.
	if err := c.waitFor(ctx, "kube-controller-manager", time.Minute, func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(rctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	}); err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-proxy", time.Minute, func() (bool, error) {
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthz))
	})
}

// Check reports what Start needs and is missing, as one error saying
// what to install or build: root, the binaries of `make testenv` and
// `make node-tools`, and Debian's packages.
func Check(root string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root: the kubelet, containerd and kube-proxy manage mounts, cgroups and iptables (run the tests as root)")
	}
	for _, b := range []string{"testenv/etcd", "testenv/kube-apiserver", "testenv/kubectl"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			missing = append(missing, "bin/"+b+" (make testenv)")
		}
	}
	for _, b := range []string{"kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(root, "bin", "node", b)); err != nil {
			missing = append(missing, "bin/node/"+b+" (make node-tools)")
		}
	}
	var pkgs []string
	need := func(ok bool, pkg string) {
		if !ok && !contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	look := func(cmd string) bool { _, err := exec.LookPath(cmd); return err == nil }
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	need(look("containerd") && look("ctr"), "containerd")
	need(look("runc"), "runc")
	need(exists("/usr/lib/cni/bridge") && exists("/usr/lib/cni/host-local") && exists("/usr/lib/cni/portmap") && exists("/usr/lib/cni/loopback"), "containernetworking-plugins")
	need(look("iptables") && look("ip6tables"), "iptables")
	need(look("ip"), "iproute2")
	need(look("conntrack"), "conntrack")
	need(exists(busyboxPath), "busybox-static")
	if len(pkgs) > 0 {
		missing = append(missing, "Debian packages: apt-get install "+strings.Join(pkgs, " ")+" (make deps installs them)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		missing = append(missing, "go on PATH (the pause image is built at start)")
	}
	if !exists("/proc/sys/net/bridge/bridge-nf-call-iptables") {
		missing = append(missing, "the br_netfilter kernel module (modprobe br_netfilter): Service traffic between pods on the bridge")
	}
	if len(missing) > 0 {
		return fmt.Errorf("cannot start a cluster, missing:\n  - %s", strings.Join(missing, "\n  - "))
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// setSysctls turns on what pod networking needs and remembers the old
// values for Stop.
func (c *Cluster) setSysctls() error {
	for _, k := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"} {
		p := filepath.Join("/proc/sys", k)
		old, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(old)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", k, err)
		}
		c.sysctls[p] = strings.TrimSpace(string(old))
	}
	return nil
}

// proc is a component process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (c *Cluster) start(name, bin string, args ...string) (*proc, error) {
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = c.dir
	// The component dies with the process that started it, even on a
	// test timeout's SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) proc(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// waitFor polls ready until it is true; it fails early when the
// component exits, and with the component's log tail either way.
func (c *Cluster) waitFor(ctx context.Context, component string, timeout time.Duration, ready func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	p := c.proc(component)
	for {
		ok, err := ready()
		if ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w\n--- %s log tail (%s):\n%s", component, err, component, c.LogPath(component), c.LogTail(component, 4000))
		}
		if p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited (%v) before it was ready\n--- %s log tail (%s):\n%s", component, p.err, component, c.LogPath(component), c.LogTail(component, 4000))
			default:
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: stopped waiting: %w", component, context.Cause(ctx))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s\n--- %s log tail (%s):\n%s", component, timeout, component, c.LogPath(component), c.LogTail(component, 4000))
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop deletes the pods, stops every component, and removes what the
// cluster added to the host: containers, mounts, the bridge, iptables
// chains; then the dir, unless Options.Dir named it. It is safe to call
// twice.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	closers := c.closers
	c.mu.Unlock()
	for _, f := range closers {
		f()
	}
	var errs []error
	if c.client != nil && c.proc("kubelet") != nil {
		// Without the controllers nothing replaces the deleted pods.
		c.stopProc("kube-controller-manager")
		if err := c.drainPods(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range []string{"kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		c.stopProc(n)
	}
	if c.containerdSock != "" {
		c.killContainers()
		c.stopProc("containerd")
	}
	if c.dir != "" {
		if err := unmountUnder(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	c.cleanupNetwork()
	for p, v := range c.sysctls {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" && !c.keepDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if c.lock != nil {
		c.lock.Close() // releases the flock
	}
	return errors.Join(errs...)
}

func (c *Cluster) stopProc(name string) {
	p := c.proc(name)
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// drainPods deletes every pod and waits until the kubelet has stopped
// them: their sandboxes torn down by CNI, as on a real node.
func (c *Cluster) drainPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nss, err := c.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing namespaces to delete pods: %w", err)
	}
	grace := int64(1)
	for _, ns := range nss.Items {
		if err := c.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("deleting the pods of %s: %w", ns.Name, err)
		}
	}
	for {
		pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			return fmt.Errorf("%d pods still there 60 s after their deletion; kubelet log tail:\n%s", n, c.LogTail("kubelet", 3000))
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// killContainers kills what containerd's shims still run for this
// cluster (a drain that timed out): the shims and their descendants,
// found by this cluster's containerd socket in the shim's command line.
func (c *Cluster) killContainers() {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	parent := map[int]int{}
	var shims []int
	for _, d := range procs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parent[pid], _ = strconv.Atoi(f[1])
			}
		}
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && contains(args, c.containerdSock) {
			shims = append(shims, pid)
		}
	}
	for _, shim := range shims {
		// Descendants first, so nothing is reparented to init alive.
		var kill []int
		var walk func(int)
		walk = func(p int) {
			for child, pp := range parent {
				if pp == p {
					walk(child)
					kill = append(kill, child)
				}
			}
		}
		walk(shim)
		for _, p := range append(kill, shim) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			mp := unescapeMount(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				points = append(points, mp)
			}
		}
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cleanupNetwork removes what the cluster adds to the host's network:
// kube-proxy's rules (kube-proxy --cleanup), the kubelet's canary chains,
// masquerade rules the CNI bridge plugin left for this network, and the
// bridge. Every step tolerates finding nothing.
func (c *Cluster) cleanupNetwork() {
	if out, err := exec.Command(filepath.Join(c.root, "bin", "node", "kube-proxy"), "--cleanup").CombinedOutput(); err != nil {
		c.say("kube-proxy --cleanup: %v: %s", err, lastLine(out))
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"mangle", "nat", "filter"} {
			for _, chain := range []string{"KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", "KUBE-PROXY-CANARY", "KUBE-FIREWALL"} {
				if exec.Command(ipt, "-w", "-t", table, "-S", chain).Run() == nil {
					removeChain(ipt, table, chain)
				}
			}
		}
		c.cleanupCNIRules(ipt)
	}
	if exec.Command("ip", "link", "show", BridgeName).Run() == nil {
		if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
			c.say("deleting bridge %s: %v: %s", BridgeName, err, out)
		}
	}
}

// removeChain deletes the rules that jump to chain, then the chain.
func removeChain(ipt, table, chain string) {
	out, _ := exec.Command(ipt, "-w", "-t", table, "-S").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, "-j "+chain) && !strings.HasPrefix(line, "-A "+chain+" ") {
			args := append([]string{"-w", "-t", table, "-D"}, splitRule(line[3:])...)
			exec.Command(ipt, args...).Run()
		}
	}
	exec.Command(ipt, "-w", "-t", table, "-F", chain).Run()
	exec.Command(ipt, "-w", "-t", table, "-X", chain).Run()
}

// cleanupCNIRules removes the bridge plugin's per-container masquerade
// rules and chains of this network that a container's CNI DEL did not.
func (c *Cluster) cleanupCNIRules(ipt string) {
	out, _ := exec.Command(ipt, "-w", "-t", "nat", "-S", "POSTROUTING").Output()
	marker := fmt.Sprintf(`name: \"%s\"`, NetworkName)
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "-A POSTROUTING ") || !strings.Contains(line, marker) {
			continue
		}
		args := splitRule(line[3:])
		exec.Command(ipt, append([]string{"-w", "-t", "nat", "-D"}, args...)...).Run()
		for i, a := range args {
			if a == "-j" && i+1 < len(args) && strings.HasPrefix(args[i+1], "CNI-") {
				exec.Command(ipt, "-w", "-t", "nat", "-F", args[i+1]).Run()
				exec.Command(ipt, "-w", "-t", "nat", "-X", args[i+1]).Run()
			}
		}
	}
}

// splitRule splits an iptables -S line into arguments, honouring the
// double quotes (with backslash escapes) of comments.
func splitRule(s string) []string {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case ch == '"':
			inQuote, have = !inQuote, true
		case ch == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// acquireLock takes an exclusive flock on path, waiting while ctx lasts.
func acquireLock(ctx context.Context, path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			f.Truncate(0)
			fmt.Fprintf(f, "%d\n", os.Getpid())
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			holder, _ := os.ReadFile(path)
			f.Close()
			return nil, fmt.Errorf("another cluster (pid %s) holds %s: %w", strings.TrimSpace(string(holder)), path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// defaultRouteIPv4 is the IPv4 address of the interface of the default
// route (/proc/net/route): the kubelet refuses a loopback node IP, and
// pods reach the host there.
func defaultRouteIPv4() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			return "", err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return "", err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), nil
			}
		}
		return "", fmt.Errorf("the default route's interface %s has no IPv4 address", f[0])
	}
	return "", errors.New("no default route in /proc/net/route: the node needs a non-loopback IPv4 address")
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func twoPorts() (int, int, error) {
	p, err := freePorts(2)
	if err != nil {
		return 0, 0, err
	}
	return p[0], p[1], nil
}

func httpOK(url string) (bool, error) {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return false, nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	if st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// repoRoot finds the directory holding go.work above the working
// directory.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no go.work above the working directory: set Options.Root")
		}
		d = parent
	}
}
