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
	if m.LeaderElectionID != "image-reflector-controller.toolkit.dev" || m.LeaderElectionNamespace != "image-system" || !m.LeaderElection {
		t.Errorf("leader election: id %q ns %q on %v", m.LeaderElectionID, m.LeaderElectionNamespace, m.LeaderElection)
	}
	if m.Metrics.BindAddress != ":9090" || m.HealthProbeBindAddress != ":9091" {
		t.Errorf("addresses: %q %q", m.Metrics.BindAddress, m.HealthProbeBindAddress)
	}
	if s := m.Cache.DefaultLabelSelector; s == nil || s.String() != "sharding.toolkit.dev/key=shard1" {
		t.Errorf("cache selector = %v", s)
	}
	if c := o.ControllerOptions(); c.MaxConcurrentReconciles != 8 {
		t.Errorf("MaxConcurrentReconciles = %d", c.MaxConcurrentReconciles)
	}
}
