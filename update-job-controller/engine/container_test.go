package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// copyTree copies dir's regular files into dst, as a container that
// changes nothing would leave them.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// In container mode the engine gives the hook the whole tree under the
// update path (files without markers too), commits what the hook's result
// changed, and on a non-fast-forward push runs the hook again, as round 1,
// on the other writer's commit: one commit of the job lands on top of
// theirs. A hook's failure is the attempt's.
func TestRunContainerMode(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	clone := srv.CreateRepo(t, "cm", map[string]string{
		"deploy/app.yaml": deployment, "deploy/plain.txt": "no markers\n", "other/x.txt": "x\n"})
	p := plan(srv.RepoURL("cm"), func(p *writeback.Plan) {
		p.Path, p.Update = "deploy", writeback.Update{Container: &writeback.Container{Image: "busybox"}}
	})
	cache := newCache(t)
	var rounds []int
	pushes := 0
	hook := func(_ context.Context, round int, checkout, result string) error {
		rounds = append(rounds, round)
		if _, err := os.Stat(filepath.Join(checkout, "plain.txt")); err != nil {
			t.Errorf("round %d: the checkout lacks a file without markers: %v", round, err)
		}
		if _, err := os.Stat(filepath.Join(checkout, "..", "other")); err == nil {
			t.Errorf("round %d: the checkout holds more than the update path", round)
		}
		copyTree(t, checkout, result)
		b, _ := os.ReadFile(filepath.Join(result, "app.yaml"))
		return os.WriteFile(filepath.Join(result, "app.yaml"), []byte(strings.Replace(string(b), "6.4.0", "6.5.0", 1)), 0o644)
	}
	out, err := New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{
		Container: hook,
		BeforePush: func(context.Context, Push) error {
			if pushes++; pushes == 1 {
				clone.Commit("someone else", map[string]string{"other/x.txt": "y\n"})
				clone.Push()
			}
			return nil
		},
	}}, Credentials{}, cache).Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 2 || rounds[0] != 0 || rounds[1] != 1 || out.Retries != 1 {
		t.Errorf("rounds %v, retries %d; want [0 1], 1", rounds, out.Retries)
	}
	if len(out.Files) != 1 || out.Files[0].Path != "app.yaml" || out.Files[0].Operation != meta.FileModified {
		t.Errorf("files %+v", out.Files)
	}
	log := testgit.Git(t, srv.BarePath("cm"), "log", "--format=%ae %s", "main")
	if !strings.HasPrefix(log, "bot@example.com Update deploy with busybox\n") {
		t.Errorf("main:\n%s", log)
	}
	if !strings.Contains(log, "someone else") {
		t.Errorf("the other writer's commit is gone:\n%s", log)
	}

	failed := errors.New("container update exited 3")
	_, err = New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{
		Container: func(context.Context, int, string, string) error { return failed },
	}}, Credentials{}, cache).Run(context.Background(), p)
	if !errors.Is(err, failed) {
		t.Errorf("a failing hook: %v", err)
	}
}
