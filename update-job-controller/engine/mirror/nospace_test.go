package mirror

import (
	"context"
	crand "crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/tests/testkit/testgit"
)

// TestCommitIntoAFullMirrorSaysNoSpace proves that a commit whose objects
// cannot be written because the mirror's file system is full fails with
// ENOSPC in its chain (libgit2 itself says only "Generic"), so that the
// job is StorageFull rather than GitOperationFailed; and that the same
// commit succeeds once space returns.
func TestCommitIntoAFullMirrorSaysNoSpace(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (this test needs root or CAP_SYS_ADMIN): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	cache, err := NewCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, release, err := cache.Open(srv.RepoURL("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := m.Fetch(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	head, _, err := m.Resolve(writeback.Ref{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work") // off the small file system
	if err := m.Checkout(head, work); err != nil {
		t.Fatal(err)
	}
	// 1 MiB of random bytes: its blob does not compress.
	body := make([]byte, 1<<20)
	_, _ = crand.Read(body)
	if err := os.WriteFile(filepath.Join(work, "apps/app.yaml"), body, 0o644); err != nil {
		t.Fatal(err)
	}

	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	for chunk := make([]byte, 64<<10); ; {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	_, err = m.Commit(head, work, []string{"apps/app.yaml"}, info("Update on a full disk"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit on a full mirror: %v, want ENOSPC in its chain", err)
	}
	t.Logf("commit on a full mirror: %v", err)

	// An open file keeps its pages after its name is gone.
	_ = filler.Close()
	if err := os.Remove(filler.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(head, work, []string{"apps/app.yaml"}, info("Update once space returned")); err != nil {
		t.Fatalf("commit once space returned: %v", err)
	}
}
