package mirror

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// bigRepo writes a repository of files files and commits commits (the
// first adds every file, each later one changes ten) with git fast-import.
func bigRepo(b *testing.B, bare string, files, commits int) {
	b.Helper()
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = bare
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(in, 1<<20)
	blob := func(content string) {
		fmt.Fprintf(w, "data %d\n%s\n", len(content), content)
	}
	for c := range commits {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@example.com> %d +0000\n", 1700000000+c)
		msg := fmt.Sprintf("commit %d", c)
		fmt.Fprintf(w, "data %d\n%s\n", len(msg), msg)
		n, first := 10, c*10
		if c == 0 {
			n, first = files, 0
		}
		for i := range n {
			f := (first + i) % files
			fmt.Fprintf(w, "M 100644 inline apps/team-%02d/app-%05d.yaml\n", f%100, f)
			blob(fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-%d\nspec:\n  image: ghcr.io/org/app-%d:1.%d.0\n", f, f, c))
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		b.Fatalf("git fast-import: %v\n%s", err, stderr.String())
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("git fast-import: %v\n%s", err, stderr.String())
	}
}

// BenchmarkJobCheckout: the git part of a job (open the mirror, fetch,
// resolve main, check out) on a repository of 20,000 files and 2,000
// commits over HTTP on loopback: the first job clones into an empty cache
// and checks out the whole tree; the second fetches one new commit into the
// warm mirror and checks out one team's directory (200 files), as a job
// with update.path does.
func BenchmarkJobCheckout(b *testing.B) {
	srv := testgit.New(b, testgit.Options{})
	bare := srv.InitBare(b, "big")
	bigRepo(b, bare, 20000, 2000)
	cacheDir := b.TempDir()
	ctx := context.Background()

	job := func(paths ...string) (time.Duration, int64) {
		before := srv.BytesOut.Load()
		start := time.Now()
		cache, err := NewCache(cacheDir)
		if err != nil {
			b.Fatal(err)
		}
		m, release, err := cache.Open(srv.RepoURL("big"))
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		if err := m.Fetch(ctx, nil); err != nil {
			b.Fatal(err)
		}
		id, _, err := m.Resolve(writeback.Ref{Branch: "main"})
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(b.TempDir(), "work")
		if err := m.Checkout(id, dir, paths...); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		if n := countFiles(b, dir); (len(paths) == 0 && n != 20000) || (len(paths) > 0 && n != 200) {
			b.Fatalf("checked out %d files", n)
		}
		return elapsed, srv.BytesOut.Load() - before
	}

	for range b.N {
		first, firstBytes := job()
		// Someone commits between the two jobs.
		bigRepoAppend(b, bare)
		second, secondBytes := job("./apps/team-07")
		b.ReportMetric(first.Seconds(), "s-first-job")
		b.ReportMetric(second.Seconds(), "s-second-job")
		b.ReportMetric(float64(firstBytes)/(1<<20), "MiB-first-fetch")
		b.ReportMetric(float64(secondBytes)/(1<<10), "KiB-second-fetch")
		b.ReportMetric(first.Seconds()/second.Seconds(), "x-faster")
	}
}

func countFiles(b *testing.B, dir string) int {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// bigRepoAppend adds one commit changing one file.
func bigRepoAppend(b *testing.B, bare string) {
	b.Helper()
	work := b.TempDir()
	testgit.Git(b, "", "clone", "-q", "--depth=1", "file://"+bare, work)
	testgit.Git(b, work, "commit", "-q", "--allow-empty", "-m", "one more")
	testgit.Git(b, work, "push", "-q", "origin", "main")
}
