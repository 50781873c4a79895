package app

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

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
		{"bad qps", []string{"--kube-api-qps=0"}, 2, "", "--kube-api-qps"},
		{"bad namespace", []string{"--watch-namespace=Team_A"}, 2, "", "--watch-namespace"},
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

func TestManagerOptions(t *testing.T) {
	t.Setenv("RUNTIME_NAMESPACE", "image-system")
	o := Options{MetricsAddr: ":9090", ProbeAddr: ":9091", LeaderElect: true, Concurrent: 8,
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
	if m.Cache.DefaultNamespaces != nil {
		t.Errorf("without --watch-namespace the cache must be cluster-wide: %v", m.Cache.DefaultNamespaces)
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
