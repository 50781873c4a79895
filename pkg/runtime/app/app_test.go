package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
)

func config(extra *string) Config {
	return Config{
		Name:        "test-controller",
		Flags:       func(fs *flag.FlagSet) { fs.StringVar(extra, "storage-path", "/data", "") },
		VersionInfo: func() string { return "libfoo 1.2.3\n" },
		Setup: func(context.Context, ctrl.Manager, Options) error {
			panic("setup must not run for these arguments")
		},
	}
}

func TestMainExitsBeforeConnecting(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		code        int
		out, errOut string
	}{
		{"version", []string{"--version"}, 0, "test-controller dev (go", ""},
		{"version info", []string{"--version", "--storage-path=/x"}, 0, "libfoo 1.2.3", ""},
		{"help", []string{"--help"}, 0, "", "-watch-label-selector"},
		{"unknown flag", []string{"--no-such-flag"}, 2, "", "flag provided but not defined"},
		{"bad concurrency", []string{"--concurrent=0"}, 2, "", "--concurrent must be at least 1"},
		{"bad log level", []string{"--log-level=loud"}, 2, "", "--log-level must be"},
		{"bad encoding", []string{"--log-encoding=xml"}, 2, "", "--log-encoding must be"},
		{"bad selector", []string{"--watch-label-selector=a in b"}, 2, "", "--watch-label-selector"},
		{"bad qps", []string{"--kube-api-qps=-1"}, 2, "", "--kube-api-qps"},
		{"bad namespace", []string{"--watch-namespace=Team_A"}, 2, "", "--watch-namespace"},
		{"bad lease namespace", []string{"--leader-election-namespace=a.b"}, 2, "", "--leader-election-namespace \"a.b\""},
		{"events address without scheme", []string{"--events-addr=notification-controller:9292"}, 2, "", "--events-addr: events address"},
		{"events address credentials redacted", []string{"--events-addr=ftp://bot:s3cret@example.com/"}, 2, "", "bot:***@example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var extra string
			var out, errOut bytes.Buffer
			code := Main(config(&extra), tt.args, &out, &errOut)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tt.code, errOut.String())
			}
			if !strings.Contains(out.String(), tt.out) || !strings.Contains(errOut.String(), tt.errOut) {
				t.Errorf("stdout %q, stderr %q; want %q and %q", out.String(), errOut.String(), tt.out, tt.errOut)
			}
		})
	}
}

// Without --kube-api-qps the client sets no limit (client-go's -1): the
// API server's priority and fairness does; a QPS given is the client's.
func TestClientLimitsDefaultToTheServers(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var o Options
	o.BindFlags(fs, false)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if qps, burst := o.clientLimits(); qps != -1 || burst != -1 {
		t.Errorf("default: qps %v burst %d, want -1 -1 (no client-side limit)", qps, burst)
	}
	if err := fs.Parse([]string{"--kube-api-qps=50", "--kube-api-burst=300"}); err != nil {
		t.Fatal(err)
	}
	if qps, burst := o.clientLimits(); qps != 50 || burst != 300 {
		t.Errorf("given: qps %v burst %d, want 50 300", qps, burst)
	}
}

// A controller's own --concurrent default is the flag's, --help included.
func TestConfigSetsTheConcurrentDefault(t *testing.T) {
	var extra string
	cfg := config(&extra)
	cfg.Concurrent = 32
	var out, errOut bytes.Buffer
	if code := Main(cfg, []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if !strings.Contains(errOut.String(), "(default 32)") {
		t.Errorf("--help does not give the default 32:\n%s", errOut.String())
	}
}

func TestManagerOptions(t *testing.T) {
	o := Options{MetricsAddr: ":9090", ProbeAddr: ":9091", LeaderElect: true, LeaderElectionNamespace: "image-system", Concurrent: 8,
		WatchLabelSelector: "sharding.toolkit.dev/key=shard1", LogLevel: "info", LogEncoding: "json",
		KubeAPIQPS: 50, KubeAPIBurst: 300}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	m := o.ManagerOptions(Config{Name: "image-reflector-controller"})
	if !strings.HasPrefix(m.LeaderElectionID, "image-reflector-controller-") || m.LeaderElectionNamespace != "image-system" || !m.LeaderElection {
		t.Errorf("leader election: id %q ns %q on %v", m.LeaderElectionID, m.LeaderElectionNamespace, m.LeaderElection)
	}
	if m.Metrics.BindAddress != ":9090" || m.HealthProbeBindAddress != ":9091" {
		t.Errorf("addresses: %q %q", m.Metrics.BindAddress, m.HealthProbeBindAddress)
	}
	if s := m.Cache.DefaultLabelSelector; s == nil || s.String() != "sharding.toolkit.dev/key=shard1" {
		t.Errorf("cache selector = %v", s)
	}
	// Namespaces carry no shard label: accessFrom reads them in every shard.
	for obj, by := range m.Cache.ByObject {
		if _, ok := obj.(*corev1.Namespace); !ok || by.Label == nil || !by.Label.Empty() {
			t.Errorf("cache of %T selects %v, want Namespaces only, all of them", obj, by.Label)
		}
	}
	if len(m.Cache.ByObject) != 1 {
		t.Errorf("cache by object: %v", m.Cache.ByObject)
	}
	if u := (&Options{}).ManagerOptions(Config{}); u.Cache.ByObject != nil || u.Cache.DefaultLabelSelector != nil {
		t.Errorf("unsharded, the cache selects: %+v", u.Cache)
	}
	if m.Cache.DefaultNamespaces != nil {
		t.Errorf("without --watch-namespace the cache must be cluster-wide: %v", m.Cache.DefaultNamespaces)
	}
	if m.Cache.DefaultTransform == nil {
		t.Error("the cache keeps managedFields: no DefaultTransform")
	}
	if c := o.ControllerOptions(); c.MaxConcurrentReconciles != 8 {
		t.Errorf("MaxConcurrentReconciles = %d", c.MaxConcurrentReconciles)
	}
}

func TestWatchNamespace(t *testing.T) {
	o := Options{WatchNamespace: "team-a"}
	m := o.ManagerOptions(Config{Name: "update-job-controller"})
	if _, ok := m.Cache.DefaultNamespaces["team-a"]; !ok || len(m.Cache.DefaultNamespaces) != 1 {
		t.Errorf("cache namespaces = %v, want only team-a", m.Cache.DefaultNamespaces)
	}
}

// Two shards, or two namespace-scoped instances, installed in one namespace
// must not share a Lease: each would leave the other's objects unreconciled.
func TestLeaderElectionIDPerShard(t *testing.T) {
	id := func(o Options) string {
		return o.ManagerOptions(Config{Name: "image-reflector-controller"}).LeaderElectionID
	}
	all := id(Options{})
	if all != "image-reflector-controller.toolkit.dev" {
		t.Errorf("unsharded lease = %q", all)
	}
	shard1 := id(Options{WatchLabelSelector: "sharding.toolkit.dev/key=shard1"})
	shard2 := id(Options{WatchLabelSelector: "sharding.toolkit.dev/key=shard2"})
	teamA := id(Options{WatchNamespace: "team-a"})
	seen := map[string]bool{}
	for _, l := range []string{all, shard1, shard2, teamA} {
		if seen[l] {
			t.Errorf("lease %q is shared", l)
		}
		seen[l] = true
		if len(l) > 63 {
			t.Errorf("lease name %q is longer than 63 characters", l)
		}
	}
	if same := id(Options{WatchLabelSelector: "sharding.toolkit.dev/key = shard1"}); same != shard1 {
		t.Errorf("one selector written two ways gives two leases: %q, %q", same, shard1)
	}
}

// Outside a cluster the Lease's namespace comes, unless set, from where the
// connection comes: the kubeconfig's current context, as kubectl picks it;
// in a cluster from the pod's namespace; an explicit choice always wins.
func TestResolveLeaderElectionNamespace(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := func(name, ns string) string {
		p := filepath.Join(dir, name)
		c := "apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c\n  cluster: {server: https://127.0.0.1:6443}\n" +
			"users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: ctx\n  context: {cluster: c, user: u, namespace: \"" + ns + "\"}\n"
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withNS := kubeconfig("team", "team-a")
	noNS := kubeconfig("plain", "")
	noContext := filepath.Join(dir, "nocontext")
	if err := os.WriteFile(noContext, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	podNS := filepath.Join(dir, "namespace")
	if err := os.WriteFile(podNS, []byte("image-toolkit-system\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir() // no ~/.kube/config unless a case writes one

	tests := []struct {
		name                 string
		flag, runtimeNS      string
		kubeconfigFlag, env  string
		inCluster            bool
		want, source, errMsg string
	}{
		{name: "flag wins", flag: "ops", runtimeNS: "image-system", kubeconfigFlag: withNS, want: "ops", source: "--leader-election-namespace"},
		{name: "RUNTIME_NAMESPACE", runtimeNS: "image-system", kubeconfigFlag: withNS, inCluster: true, want: "image-system", source: "RUNTIME_NAMESPACE"},
		{name: "--kubeconfig context", kubeconfigFlag: withNS, inCluster: true, want: "team-a", source: `kubeconfig context "ctx"`},
		{name: "KUBECONFIG context", env: withNS, want: "team-a", source: `kubeconfig context "ctx"`},
		{name: "context without namespace", env: noNS, want: "default", source: "names no namespace"},
		{name: "in a cluster", inCluster: true, want: "image-toolkit-system", source: "the pod's namespace"},
		{name: "no current context", kubeconfigFlag: noContext, errMsg: "no current context"},
		{name: "no kubeconfig at all", kubeconfigFlag: filepath.Join(dir, "missing"), errMsg: "reading the kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("RUNTIME_NAMESPACE", tt.runtimeNS)
			t.Setenv("KUBECONFIG", tt.env)
			old := inClusterNamespaceFile
			inClusterNamespaceFile = filepath.Join(dir, "absent")
			if tt.inCluster {
				inClusterNamespaceFile = podNS
			}
			defer func() { inClusterNamespaceFile = old }()

			o := Options{LeaderElectionNamespace: tt.flag}
			ns, source, err := o.resolveLeaderElectionNamespace(tt.kubeconfigFlag)
			if tt.errMsg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errMsg) {
					t.Fatalf("err = %v, want one containing %q", err, tt.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ns != tt.want || !strings.Contains(source, tt.source) {
				t.Errorf("got %q from %q, want %q from %q", ns, source, tt.want, tt.source)
			}
		})
	}
}

// State directories default to the chart's volume in a cluster and to the
// user's cache directory outside one, where / is seldom writable.
func TestDataDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/home/u/.cache")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if got := DataDir("image-reflector-controller", "/data"); got != "/home/u/.cache/image-toolkit/image-reflector-controller" {
		t.Errorf("outside a cluster: %q", got)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	if got := DataDir("image-reflector-controller", "/data"); got != "/data" {
		t.Errorf("in a cluster: %q", got)
	}
}

// NewScheme holds every kind it is given, and a registration that fails
// (a programming error) panics, naming what it was doing.
func TestNewScheme(t *testing.T) {
	scheme := NewScheme(clientgoscheme.AddToScheme)
	if !scheme.IsGroupRegistered("apps") || !scheme.IsGroupRegistered("") {
		t.Error("the scheme lacks client-go's kinds")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "registering the controller's kinds: boom") {
			t.Errorf("a failed registration gives %v", r)
		}
	}()
	NewScheme(func(*runtime.Scheme) error { return errors.New("boom") })
	t.Error("a failed registration did not panic")
}

// The caches keep objects without managedFields and kubectl's last-applied
// copy; every other annotation (a reconcile request) stays.
func TestTrimForCache(t *testing.T) {
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a",
		Annotations:   map[string]string{lastApplied: `{"big":"copy"}`, "reconcile.toolkit.dev/requestedAt": "now"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}}
	got, err := TrimForCache(obj)
	if err != nil {
		t.Fatal(err)
	}
	cm := got.(*corev1.ConfigMap)
	if cm.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", cm.ManagedFields)
	}
	if _, ok := cm.Annotations[lastApplied]; ok || cm.Annotations["reconcile.toolkit.dev/requestedAt"] != "now" {
		t.Errorf("annotations %v, want only the reconcile request", cm.Annotations)
	}
	// Not an object (a tombstone, say): passed on unchanged.
	if got, err := TrimForCache("tombstone"); err != nil || got != "tombstone" {
		t.Errorf("TrimForCache(string) = %v, %v", got, err)
	}
}
