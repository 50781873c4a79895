package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/tests/internal/chain"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// TestDiskFull proves that a full disk under the image-reflector-controller's
// tag store or the update-job-controller's mirror cache and work trees (each
// on a small tmpfs of its own, filled up by a filler file) is reported, not
// hidden and not harmful: the ImageRepository or the UpdateJob is
// Ready=False with reason StorageFull and the controller's
// <prefix>storage_full series names it; the tag store still holds its last
// complete file (no half-written file, no temporary file left) and the
// policy and git stay where they were; and once space returns the next scan
// or job attempt succeeds without a restart (same process), the new tag
// lands in git exactly once and the mirror passes git fsck.
func TestDiskFull(t *testing.T) {
	t.Parallel() // each scenario has its own control plane and servers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	n := runs(1, 5)

	env := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	bin := localenv.BinDir(env.Cluster.Root)
	// Restart the two controllers on file systems of their own: 1 MiB for
	// the tag store, 8 MiB for the mirror cache and the work trees.
	disks := map[string]string{}
	for name, size := range map[string]string{"image-reflector-controller": "1m", "update-job-controller": "8m"} {
		if err := env.Procs[name].Stop(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(env.Cluster.Dir, name+"-0-data")
		if name == "update-job-controller" {
			dir = filepath.Join(env.Cluster.Dir, name+"-0-cache")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs (this scenario needs root or CAP_SYS_ADMIN): %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
		disks[name] = dir
		p, err := env.Cluster.StartController(ctx, bin, name)
		if err != nil {
			t.Fatal(err)
		}
		env.Procs[name] = p
	}
	pids := map[string]int{}
	for name, p := range env.Procs {
		pids[name] = p.PID()
	}
	applySamples(ctx, t, env, "2s")
	waitFor(t, 90*time.Second, "the branch at 6.4.0", func() bool { return branchHolds(env, "6.4.0") })
	base := env.Head("main")

	key := client.ObjectKey{Namespace: "default", Name: "podinfo"}
	var faults int
	var worstReflector, worstJob time.Duration
	var expected []string
	for i := 1; i <= n; i++ {
		// The tag store's disk fills up; a new tag is pushed.
		// Tags rise from run to run: 6.11.0 (store), 6.12.0 (cache), ...
		tag := fmt.Sprintf("6.%d.0", 9+2*i)
		tagFiles, _ := filepath.Glob(filepath.Join(disks["image-reflector-controller"], "*.tags"))
		if len(tagFiles) != 1 {
			t.Fatalf("tag files %v, want one", tagFiles)
		}
		filler := fill(t, disks["image-reflector-controller"])
		before, err := os.ReadFile(tagFiles[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := env.PushTag(ctx, tag); err != nil {
			t.Fatal(err)
		}
		faults++
		repo := &imagev1.ImageRepository{}
		waitFor(t, 60*time.Second, "ImageRepository Ready=False StorageFull", func() bool {
			return env.Cluster.Client.Get(ctx, key, repo) == nil && readyReason(repo) == conditions.StorageFullReason
		})
		wantSeries(ctx, t, env.Procs["image-reflector-controller"], `imagetoolkit_reflector_storage_full{kind="ImageRepository",name="podinfo",namespace="default"} 1`, true)
		// Nothing half-written: the last complete file, byte for byte, and
		// no temporary file; the policy and git unmoved.
		after, err := os.ReadFile(tagFiles[0])
		if err != nil || !bytes.Equal(before, after) {
			t.Errorf("the tag file changed while the disk was full (%v)", err)
		}
		if tmp, _ := filepath.Glob(filepath.Join(disks["image-reflector-controller"], "*.tmp*")); len(tmp) != 0 {
			t.Errorf("temporary files left: %v", tmp)
		}
		if l := latest(ctx, env); l == tag || branchHolds(env, tag) {
			t.Errorf("%s chosen while its scan could not be stored", tag)
		}
		t.Logf("tag store full: %s", conditions.Get(repo, conditions.ReadyCondition).Message)
		freed := time.Now()
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, tag+" in git after the store's space returned", func() bool { return branchHolds(env, tag) })
		worstReflector = max(worstReflector, time.Since(freed))
		expected = append(expected, tag)
		wantSeries(ctx, t, env.Procs["image-reflector-controller"], `imagetoolkit_reflector_storage_full{`, false)

		// The mirror cache's disk fills up; a new tag is pushed.
		tag = fmt.Sprintf("6.%d.0", 10+2*i)
		filler = fill(t, disks["update-job-controller"])
		if err := env.PushTag(ctx, tag); err != nil {
			t.Fatal(err)
		}
		faults++
		var failed *updatev1.UpdateJob
		waitFor(t, 90*time.Second, "an UpdateJob Ready=False StorageFull", func() bool {
			var jobs updatev1.UpdateJobList
			if env.Cluster.Client.List(ctx, &jobs, client.InNamespace("default")) != nil {
				return false
			}
			for k := range jobs.Items {
				if readyReason(&jobs.Items[k]) == conditions.StorageFullReason {
					failed = &jobs.Items[k]
					return true
				}
			}
			return false
		})
		t.Logf("mirror cache full: job %s: %s", failed.Name, conditions.Get(failed, conditions.ReadyCondition).Message)
		if failed.Status.Phase != updatev1.UpdateJobFailed {
			// While attempts remain the storage_full series names it.
			wantSeries(ctx, t, env.Procs["update-job-controller"], `imagetoolkit_updatejob_storage_full{kind="UpdateJob",name="`+failed.Name+`",namespace="default"} 1`, true)
		}
		if branchHolds(env, tag) {
			t.Errorf("%s in git while the job's disk was full", tag)
		}
		freed = time.Now()
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, tag+" in git after the cache's space returned", func() bool { return branchHolds(env, tag) })
		worstJob = max(worstJob, time.Since(freed))
		expected = append(expected, tag)
	}

	// Same processes throughout: recovery needed no restart.
	for name, p := range env.Procs {
		if p.PID() != pids[name] || syscall.Kill(p.PID(), 0) != nil {
			t.Errorf("%s was restarted or exited", name)
		}
	}
	// Each tag once in git, in order.
	commits := strings.Fields(gitOutE(t, env, "rev-list", "--reverse", base+"..main"))
	var got []string
	for _, c := range commits {
		got = append(got, markerTag(gitOutE(t, env, "show", c+":"+chain.ManifestPath), "default:podinfo"))
	}
	if strings.Join(got, " ") != strings.Join(expected, " ") {
		t.Errorf("commits set %v, want %v, each once", got, expected)
	}
	// The mirrors are sound.
	mirrors, _ := filepath.Glob(filepath.Join(disks["update-job-controller"], "*.git"))
	for _, m := range mirrors {
		gitOut(t, m, "fsck", "--no-progress")
	}
	if len(mirrors) == 0 {
		t.Error("no mirror in the cache")
	}
	figures(t, "runs %d, disks filled %d (tag store %d, mirror cache %d), changes expected %d landed %d, duplicates %d, half-written files served 0, restarts 0, recovery (space freed to commit) tag store max %s, mirror cache max %s",
		n, faults, n, n, len(expected), len(got), len(got)-len(expected), worstReflector.Round(100*time.Millisecond), worstJob.Round(100*time.Millisecond))
}

// fill writes a file into dir until its file system is full, and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	// Smaller writes take the last pages.
	for _, err := f.Write(chunk[:512]); err == nil; _, err = f.Write(chunk[:512]) {
	}
	return path
}

func readyReason(obj conditions.Getter) string {
	if c := conditions.Get(obj, conditions.ReadyCondition); c != nil && c.Status == "False" {
		return c.Reason
	}
	return ""
}

// wantSeries checks that a series (a prefix of its line) is, or is not, in
// the process's metrics.
func wantSeries(ctx context.Context, t *testing.T, p *localenv.Process, series string, present bool) {
	t.Helper()
	m, err := p.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m, series) != present {
		t.Errorf("%s: series %s present: %v, want %v\n%s", p.Name, series, !present, present, grepLines(m, "storage_full"))
	}
}
