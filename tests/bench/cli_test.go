package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// BenchmarkCLIGet measures `tk-image get policies -A` (default flags: a
// table, lists chunked by 500) over 1,000 ImagePolicies with a status, the
// binary from make build against a real API server: wall time per run and
// the process's peak RSS, beside kubectl's for the same list.
//
//	make build testenv && go test ./tests/bench -run '^$' -bench CLIGet -benchtime 10x
func BenchmarkCLIGet(b *testing.B) {
	const objects = 1000
	c, _ := localenv.StartTest(b)
	ctx := context.Background()
	for i := range objects {
		p := &imagev1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%04d", i), Namespace: "default"},
			Spec: imagev1.ImagePolicySpec{
				ImageRepositoryRef: meta.NamespacedObjectReference{Name: "app"},
				Policy:             imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
			},
		}
		if err := c.Client.Create(ctx, p); err != nil {
			b.Fatal(err)
		}
		p.Status.LatestRef = &meta.ImageRef{Name: "registry.example.com/team/app", Tag: "1.2.3"}
		p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded",
			Message: "latest image tag for registry.example.com/team/app resolved to 1.2.3", LastTransitionTime: metav1.Now()}}
		if err := c.Client.Status().Update(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	// kubectl, built from the same Kubernetes release as the test
	// apiserver, is the yardstick.
	tools := []struct{ name, bin, kind string }{
		{"tk-image", filepath.Join(binDir(b, c.Root), "tk-image"), "policies"},
		{"kubectl", c.Kubectl, "imagepolicies"},
	}
	for _, tool := range tools {
		b.Run(tool.name, func(b *testing.B) {
			var peak int64
			start := time.Now()
			for range b.N {
				cmd := exec.Command(tool.bin, "--kubeconfig", c.Kubeconfig, "get", tool.kind, "-A")
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v\n%s", err, out.String())
				}
				if rows := strings.Count(out.String(), "\n") - 1; rows != objects {
					b.Fatalf("%d rows, want %d", rows, objects)
				}
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					peak = max(peak, ru.Maxrss)
				}
			}
			b.ReportMetric(time.Since(start).Seconds()/float64(b.N), "s/get")
			b.ReportMetric(float64(peak)/1024, "peak-RSS-MiB")
		})
	}
}
