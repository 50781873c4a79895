package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// A file:// repository is refused unless the Engine was made with
// FileURLs; with it, a run updates the repository on disk as it would a
// remote one.
func TestFileURLsOnlyWithTheSetting(t *testing.T) {
	repos := testgit.Repos{Root: t.TempDir()}
	repos.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": deployment})
	p := plan("file://"+repos.BarePath("fleet"), func(p *writeback.Plan) { p.Path = "deploy" })

	var e *Error
	if err := Check(p); !errors.As(err, &e) || e.Kind != KindInvalid || !strings.Contains(err.Error(), "is a local repository (file://)") {
		t.Errorf("Check: %v, want the local repository refused", err)
	}
	if _, err := New(Settings{WorkDir: t.TempDir()}, nil, newCache(t)).Run(context.Background(), p); !errors.As(err, &e) || e.Kind != KindInvalid {
		t.Errorf("Run without FileURLs: %v, want KindInvalid", err)
	}

	out, err := New(Settings{WorkDir: t.TempDir(), FileURLs: true}, nil, newCache(t)).Run(context.Background(), p)
	if err != nil || out.Commit == "" {
		t.Fatalf("Run with FileURLs: %+v, %v", out, err)
	}
	if got := testgit.Git(t, repos.BarePath("fleet"), "show", "main:deploy/app.yaml"); !strings.Contains(got, "podinfo:6.5.0") {
		t.Errorf("main's deploy/app.yaml after the run:\n%s", got)
	}
}
