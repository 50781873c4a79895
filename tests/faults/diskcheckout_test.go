package faults

import (
	"bytes"
	"compress/zlib"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// bigPath is a manifest under the automation's update path holding a
// marker and 6 MiB of one repeated line: a few KiB in the pack the job
// fetches, 6 MiB in its work tree.
const bigPath = "clusters/prod/bundle.yaml"

// TestDiskFullAtCheckout proves that a disk with room for a job's fetch but
// not for its checkout (the mirror cache and the work trees on one small
// tmpfs; a manifest that compresses to almost nothing in git but is 6 MiB
// written out) is reported as what it is: the attempt fails to be retried
// with reason StorageFull (not GitOperationFailed or UpdateFailed), the
// update-job-controller's storage_full series names the job, the branch
// does not move (nothing half-committed is pushed), the half-written work
// tree is removed (the space the checkout took is given back at once), and
// once the file system grows again the change lands in git exactly once,
// without a restart, and the mirror passes git fsck. A disk with room for
// the checkout but not for the commit's objects (a manifest of random
// base64, 4 MiB written out, 3 MiB compressed) does not stop the change:
// the commit is made in memory and pushed.
func TestDiskFullAtCheckout(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	n := runs(1, 5)

	env := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	bin := localenv.BinDir(env.Cluster.Root)
	const ujc = "update-job-controller"
	if err := env.Procs[ujc].Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(env.Cluster.Dir, ujc+"-0-cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	// Roomy at first: the setup's jobs (and the bundle's first checkout)
	// must not meet the fault.
	mountTmpfs(t, cache, "64m")
	p, err := env.Cluster.StartController(ctx, bin, ujc)
	if err != nil {
		t.Fatal(err)
	}
	env.Procs[ujc] = p
	pid := p.PID()

	applySamples(ctx, t, env, "2s")
	holds := func(path, tag string) bool {
		out, err := env.FleetGit("show", "main:"+path)
		return err == nil && markerTag(out, "default:podinfo") == tag
	}
	waitFor(t, 90*time.Second, "the branch at 6.4.0", func() bool { return holds(chain.ManifestPath, "6.4.0") })
	// Two bundles: one of a repeated line (a few KiB in git, 6 MiB written
	// out: the checkout meets the full disk), one of random base64 (4 MiB
	// written out, 3 MiB compressed: the checkout fits, the commit's new
	// blob does not).
	bundle := func(kind, tag string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: podinfo-bundle\ndata:\n  image: %s/stefanprodan/podinfo:%s # {\"$imagepolicy\": \"default:podinfo\"}\n  bundle: |\n", env.RegistryHost, tag)
		for kind == "checkout" && b.Len() < 6<<20 {
			b.WriteString("    the same line, many times over: tiny in the pack, large in a work tree\n")
		}
		raw := make([]byte, 57)
		for kind == "commit" && b.Len() < 4<<20 {
			_, _ = crand.Read(raw)
			b.WriteString("    " + base64.StdEncoding.EncodeToString(raw) + "\n")
		}
		return b.String()
	}
	zsize := func(s string) uint64 {
		var buf bytes.Buffer
		w := zlib.NewWriter(&buf)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return uint64(buf.Len())
	}
	mirrorHolds := func(commit string) bool {
		mirrors, _ := filepath.Glob(filepath.Join(cache, "*.git"))
		return len(mirrors) == 1 && exec.Command("git", "-C", mirrors[0], "cat-file", "-e", commit+"^{commit}").Run() == nil
	}

	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: "default", Name: name} }
	var expected []string
	worst := map[string]time.Duration{}
	failedAt := map[string]int{}
	landedFull := 0
	freeMiB := map[string]float64{}
	var usedAfterMiB float64
	base := env.Head("main")
	current, next, content := "6.4.0", 5, ""
	for i := 1; i <= n; i++ {
		for _, step := range []string{"checkout", "commit"} {
			tag := fmt.Sprintf("6.%d.0", next)
			next++
			prev := zsize(content)
			content = bundle(step, current)
			if _, err := env.Commit(map[string]string{bigPath: content}, "Bundle for the "+step+" fault"); err != nil {
				t.Fatal(err)
			}
			// Let the previous change settle (no job in flight), then
			// shrink the file system: room for the fetch (a few KiB, or
			// the random bundle's pack) and, for the commit fault, the
			// checkout, plus 1.5-2 MiB.
			settle(ctx, t, env)
			used := fsUsed(t, cache)
			var size uint64
			switch step {
			case "checkout":
				size = (used>>20 + 2) << 20
				// The fetch may get the bundle as a delta against the
				// random one of the step before, and libgit2's indexer
				// then appends that base to the pack: room for it too.
				if !mirrorHolds(env.Head("main")) {
					size += prev
				}
			case "commit":
				size = used + uint64(len(content)) + 3<<19
				if !mirrorHolds(env.Head("main")) {
					size += zsize(content)
				}
			}
			remount(t, cache, size)
			freeMiB[step] = float64(size-used) / (1 << 20)
			head := env.Head("main")
			if err := env.PushTag(ctx, tag); err != nil {
				t.Fatal(err)
			}
			if step == "commit" {
				// A job's objects are written in memory, and the pack
				// the push sent is kept in the mirror after it
				// (mirror.inMemory): on a disk sized for the checkout
				// and little more, where the commit's loose blob was
				// refused before, the change lands; the mirror keeps
				// the pack when it fits, else a later fetch brings it
				// back (mirror's TestCommitIntoAFullMirrorSaysNoSpace).
				waitFor(t, 90*time.Second, tag+" in git from memory, the disk full", func() bool {
					return holds(chain.ManifestPath, tag) && holds(bigPath, tag)
				})
				landedFull++
				remount(t, cache, 128<<20)
				expected = append(expected, tag)
				current = tag
				continue
			}
			var failed updatev1.UpdateJob
			var seen []string // the jobs' states, said if none becomes StorageFull
			for deadline := time.Now().Add(90 * time.Second); failed.Name == ""; time.Sleep(200 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: no UpdateJob Ready=False StorageFull after 90 s; jobs: %s", step, strings.Join(seen, "; "))
				}
				var jobs updatev1.UpdateJobList
				if env.Cluster.Client.List(ctx, &jobs, client.InNamespace("default")) != nil {
					continue
				}
				seen = seen[:0]
				for k := range jobs.Items {
					j := &jobs.Items[k]
					if readyReason(j) == conditions.StorageFullReason {
						failed = *j
					}
					if c := conditions.Get(j, conditions.ReadyCondition); c != nil {
						seen = append(seen, fmt.Sprintf("%s %s %s %s", j.Name, j.Status.Phase, c.Reason, c.Message))
					}
				}
			}
			msg := conditions.Get(&failed, conditions.ReadyCondition).Message
			t.Logf("%s: job %s (%s): %s", step, failed.Name, failed.Status.Phase, msg)
			// The fetch went through; the step under test is what failed.
			want := "checking out"
			if !strings.Contains(msg, want) || !strings.Contains(strings.ToLower(msg), "no space left on device") {
				t.Errorf("the message does not say %q ran out of space: %s", want, msg)
			} else {
				failedAt[step]++
			}
			if failed.Status.Phase != updatev1.UpdateJobFailed {
				wantSeries(ctx, t, env.Procs[ujc], `imagetoolkit_updatejob_storage_full{kind="UpdateJob",name="`+failed.Name+`",namespace="default"} 1`, true)
			}
			// Nothing pushed, and the half-written work tree gone: what
			// the file system holds is the mirror (and what it fetched).
			if h := env.Head("main"); h != head {
				t.Errorf("the branch moved from %s to %s while the %s could not be written", head, h, step)
			}
			work, _ := os.ReadDir(filepath.Join(cache, "work"))
			var left []string
			for _, w := range work {
				left = append(left, w.Name())
			}
			after := fsUsed(t, cache)
			usedAfterMiB = max(usedAfterMiB, float64(after)/(1<<20))
			if limit := used + prev + zsize(content) + 1<<20; len(left) > 0 || after > limit {
				t.Errorf("after the failed attempt the work directory holds %v and the file system %d KiB (before the job %d KiB)", left, after>>10, used>>10)
			}
			if err := env.Cluster.Client.Get(ctx, key(failed.Name), &failed); err == nil && failed.Status.Phase == updatev1.UpdateJobSucceeded {
				t.Errorf("job %s succeeded on a full disk", failed.Name)
			}

			grown := time.Now()
			remount(t, cache, 128<<20)
			waitFor(t, 90*time.Second, tag+" in git after the file system grew", func() bool {
				return holds(chain.ManifestPath, tag) && holds(bigPath, tag)
			})
			worst[step] = max(worst[step], time.Since(grown))
			expected = append(expected, tag)
			current = tag
		}
	}
	settle(ctx, t, env)
	wantSeries(ctx, t, env.Procs[ujc], `imagetoolkit_updatejob_storage_full{`, false)

	// Same process throughout.
	if p.PID() != pid || syscall.Kill(pid, 0) != nil {
		t.Errorf("%s was restarted or exited", ujc)
	}
	// Each tag once, in order, each commit carrying both files.
	commits := strings.Fields(gitOutE(t, env, "rev-list", "--reverse", "--author=imagebot", base+"..main"))
	var got []string
	for _, c := range commits {
		a := markerTag(gitOutE(t, env, "show", c+":"+chain.ManifestPath), "default:podinfo")
		if b := markerTag(gitOutE(t, env, "show", c+":"+bigPath), "default:podinfo"); b != a {
			t.Errorf("commit %s sets %s in %s and %s in %s", c, a, chain.ManifestPath, b, bigPath)
		}
		got = append(got, a)
	}
	if strings.Join(got, " ") != strings.Join(expected, " ") {
		t.Errorf("commits set %v, want %v, each once", got, expected)
	}
	var jobs updatev1.UpdateJobList
	if err := env.Cluster.Client.List(ctx, &jobs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	pushed := map[string]int{}
	for _, j := range jobs.Items {
		if j.Status.Phase == updatev1.UpdateJobSucceeded && j.Status.Result != nil && j.Status.PushedCommit != "" {
			pushed[j.Status.PushedCommit]++
		}
	}
	for c, k := range pushed {
		if k > 1 {
			t.Errorf("%d jobs pushed %s", k, c)
		}
	}
	mirrors, _ := filepath.Glob(filepath.Join(cache, "*.git"))
	for _, m := range mirrors {
		gitOut(t, m, "fsck", "--no-progress")
	}
	if len(mirrors) == 0 {
		t.Error("no mirror in the cache")
	}
	figures(t, "runs %d, StorageFull at the checkout %d of %d (6 MiB bundle, %.1f MiB free), the commit fault's change landed from memory %d of %d (4 MiB random bundle, %.1f MiB free), file system after a failed attempt at most %.2f MiB (the mirror with what it fetched), changes expected %d landed %d, restarts 0, recovery (file system grown to commit) max %s (checkout)",
		n, failedAt["checkout"], n, freeMiB["checkout"], landedFull, n, freeMiB["commit"], usedAfterMiB, len(expected), len(got),
		worst["checkout"].Round(100*time.Millisecond))
}

// settle waits until no UpdateJob is unfinished.
func settle(ctx context.Context, t *testing.T, env *chain.Env) {
	t.Helper()
	waitFor(t, 90*time.Second, "no UpdateJob in flight", func() bool {
		var jobs updatev1.UpdateJobList
		if env.Cluster.Client.List(ctx, &jobs, client.InNamespace("default")) != nil {
			return false
		}
		for _, j := range jobs.Items {
			if !j.Status.Phase.Finished() {
				return false
			}
		}
		return true
	})
}

// fsUsed is the bytes in use on dir's file system.
func fsUsed(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

// remount sets the size of the tmpfs at dir.
func remount(t *testing.T, dir string, size uint64) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dk", size>>10), dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v %s", dir, err, out)
	}
}
