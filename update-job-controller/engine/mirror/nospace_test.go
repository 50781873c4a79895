package mirror

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// TestCommitIntoAFullMirrorSaysNoSpace proves that a commit made while
// the mirror's file system is full is made in memory (inMemory), so that
// its push can land; that writing the pushed objects into the mirror then
// fails with ENOSPC in its chain (libgit2 itself says only "Generic"), as
// any write of the mirror does, so that the job whose fetch meets it is
// StorageFull rather than GitOperationFailed; and that the fetch brings
// the commit back once space returns.
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
	defer func() { release() }()
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
	commit, err := m.Commit(head, work, []string{"apps/app.yaml"}, info("Update on a full disk"))
	if err != nil {
		t.Fatalf("commit on a full mirror: %v, want it made in memory", err)
	}
	var pack bytes.Buffer
	if err := m.pack(&pack, commit.oid(), git.Refs{"refs/heads/main": head.String()}); err != nil {
		t.Fatal(err)
	}
	err = m.keep(pack.Bytes())
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("keeping the pushed objects in a full mirror: %v, want ENOSPC in its chain", err)
	}
	t.Logf("keeping the pushed objects in a full mirror: %v", err)
	// The push lands all the same, from memory; a mirror opened again
	// lacks its objects, and the fetch that brings them back names the
	// full disk.
	if err := m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		t.Fatalf("push from a full mirror: %v", err)
	}
	release()
	if m, release, err = cache.Open(srv.RepoURL("fleet")); err != nil {
		t.Fatal(err)
	}
	err = m.Fetch(context.Background(), nil)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fetch into a full mirror: %v, want ENOSPC in its chain", err)
	}
	t.Logf("fetch into a full mirror: %v", err)

	// An open file keeps its pages after its name is gone.
	_ = filler.Close()
	if err := os.Remove(filler.Name()); err != nil {
		t.Fatal(err)
	}
	if err := m.Fetch(context.Background(), nil); err != nil {
		t.Fatalf("fetch once space returned: %v", err)
	}
	testgit.Git(t, "", "--git-dir", m.Path, "cat-file", "-e", commit.String())
}
