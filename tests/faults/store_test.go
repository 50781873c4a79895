package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// TestKillReflectorDamagedStore proves that a tag store file damaged while
// the image-reflector-controller was down (killed with -9, then the file
// changed in place with its line count intact, cut short, or its header
// garbled) is detected when the controller starts, removed and rebuilt by
// a scan at once (the interval is an hour), and never served: the policy
// never names the tag the damage made up, nor does the git branch.
func TestKillReflectorDamagedStore(t *testing.T) {
	// Most of it is waiting for the killed leader's lease (15 s) to lapse:
	// it runs beside the other scenarios.
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	// An hour between scans: only the damage detection can bring one.
	applySamples(ctx, t, env, "1h")
	waitFor(t, 60*time.Second, "the branch at 6.4.0", func() bool { return branchHolds(env, "6.4.0") })

	const name = "image-reflector-controller"
	dataDir := filepath.Join(env.Cluster.Dir, name+"-0-data")
	repo := &imagev1.ImageRepository{}
	pol := &imagev1.ImagePolicy{}
	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}

	damages := []struct {
		name   string
		damage func([]byte) []byte
	}{
		// 6.3.0 becomes 6.9.0: in the policy's range and above 6.4.0,
		// a tag the registry never had. Same length, same line count.
		{"tag changed in place", func(b []byte) []byte { return bytes.Replace(b, []byte("\n6.3.0\n"), []byte("\n6.9.0\n"), 1) }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-4] }},
		{"header garbled", func(b []byte) []byte { return append([]byte("{\"obj"), b[8:]...) }},
	}
	// Short: the damage only the checksum catches; long: each kind 5 times.
	n := runs(1, 5*len(damages))
	var served int
	var worst time.Duration
	for i := range n {
		d := damages[i%len(damages)]
		if err := env.Cluster.Client.Get(ctx, key, repo); err != nil || repo.Status.LastScanResult == nil {
			t.Fatalf("no scan result: %v", err)
		}
		before := repo.Status.LastScanResult.ScanTime.Time
		env.Procs[name].Kill()
		// Scan times are whole seconds: make the next one tell.
		time.Sleep(time.Until(before.Add(1100 * time.Millisecond)))
		files, _ := filepath.Glob(filepath.Join(dataDir, "*.tags"))
		if len(files) != 1 {
			t.Fatalf("%s: tag files %v, want one", d.name, files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files[0], d.damage(b), 0o600); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		p, err := env.Cluster.StartController(ctx, localenv.BinDir(env.Cluster.Root), name)
		if err != nil {
			t.Fatal(err)
		}
		env.Procs[name] = p
		// Until the repository is scanned again, watch that nothing made
		// up is served.
		deadline := time.Now().Add(60 * time.Second)
		for {
			if err := env.Cluster.Client.Get(ctx, key, pol); err == nil && pol.Status.LatestRef != nil && pol.Status.LatestRef.Tag != "6.4.0" {
				served++
				t.Errorf("%s: the policy serves %s", d.name, pol.Status.LatestRef.Tag)
				break
			}
			if branchHolds(env, "6.9.0") {
				served++
				t.Errorf("%s: the branch got the made-up 6.9.0", d.name)
				break
			}
			err := env.Cluster.Client.Get(ctx, key, repo)
			rebuilt, _ := filepath.Glob(filepath.Join(dataDir, "*.tags"))
			if err == nil && repo.Status.LastScanResult != nil && repo.Status.LastScanResult.ScanTime.After(before) &&
				repo.Status.LastScanResult.TagCount == 2 && len(rebuilt) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new scan in 60 s; log:\n%s", d.name, p.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		worst = max(worst, time.Since(restarted))
		if !strings.Contains(p.Log(), "removed damaged tag files") {
			t.Errorf("%s: the controller did not report the damaged file; log:\n%s", d.name, p.Log())
		}
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m, `scans_total{result="scanned"} 1`) {
			t.Errorf("%s: want one scan from the registry after the restart:\n%s", d.name, grepLines(m, "scans_total"))
		}
		t.Logf("%s: rebuilt %s after the restart", d.name, time.Since(restarted).Round(100*time.Millisecond))
	}
	if err := env.Cluster.Client.Get(ctx, key, pol); err != nil || pol.Status.LatestRef == nil || pol.Status.LatestRef.Tag != "6.4.0" || !branchHolds(env, "6.4.0") {
		t.Errorf("end: policy %+v (%v), branch at 6.4.0: %v", pol.Status.LatestRef, err, branchHolds(env, "6.4.0"))
	}
	figures(t, "runs %d, damaged files %d, served %d, rebuilt within %s of the restart", n, n, served, worst.Round(100*time.Millisecond))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
