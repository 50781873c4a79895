package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// BeforeCommit sees the change before it is committed and may change its
// message, veto it (no commit, no error) or fail the run; AfterPush is
// told of the push that landed.
func TestBeforeCommitMayChangeOrVetoTheCommit(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "hooks", map[string]string{"deploy/app.yaml": deployment})
	head := func() string { return testgit.Git(t, srv.BarePath("hooks"), "rev-parse", "main") }
	p := plan(srv.RepoURL("hooks"), func(p *writeback.Plan) { p.Path = "deploy" })
	cache := newCache(t)
	runWith := func(before func(context.Context, *Change) error, after func(context.Context, Push)) (Result, error) {
		return New(Settings{WorkDir: t.TempDir(), Hooks: Hooks{BeforeCommit: before, AfterPush: after}}, Credentials{}, cache).
			Run(context.Background(), p)
	}

	start := head()
	out, err := runWith(func(_ context.Context, c *Change) error {
		if !slices.Equal(c.Files, []string{"deploy/app.yaml"}) || !strings.HasPrefix(c.Message, "Update images") {
			t.Errorf("change %+v", c)
		}
		return ErrVeto
	}, nil)
	if err != nil || out.Commit != "" || head() != start {
		t.Fatalf("vetoed: %+v, %v; main moved: %v", out, err, head() != start)
	}

	refused := errors.New("policy says no")
	if _, err := runWith(func(context.Context, *Change) error { return refused }, nil); !errors.Is(err, refused) || head() != start {
		t.Fatalf("failed hook: %v", err)
	}

	var pushed Push
	out, err = runWith(func(_ context.Context, c *Change) error {
		c.Message = "chore: bump podinfo\n"
		return nil
	}, func(_ context.Context, p Push) { pushed = p })
	if err != nil {
		t.Fatal(err)
	}
	if subject := testgit.Git(t, srv.BarePath("hooks"), "log", "-1", "--format=%s", "main"); strings.TrimSpace(subject) != "chore: bump podinfo" {
		t.Errorf("subject %q, want the hook's", subject)
	}
	if pushed.Commit != out.Commit || !slices.Equal(pushed.Refs, []string{"refs/heads/main"}) || pushed.PullRequest {
		t.Errorf("AfterPush saw %+v, want commit %s on refs/heads/main", pushed, out.Commit)
	}
}

// Failures say what failed and whether retrying can help.
func TestFailuresCarryTheirKind(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "kinds", map[string]string{"deploy/app.yaml": deployment})
	e := New(Settings{WorkDir: t.TempDir()}, Credentials{}, newCache(t))
	tests := []struct {
		name     string
		plan     writeback.Plan
		kind     Kind
		terminal bool
	}{
		{"no such repository", plan(srv.RepoURL("nope"), nil), KindGit, false},
		{"no such path", plan(srv.RepoURL("kinds"), func(p *writeback.Plan) { p.Path = "missing" }), KindUpdate, true},
		{"no such branch", plan(srv.RepoURL("kinds"), func(p *writeback.Plan) { p.Checkout.Branch = "gone" }), KindGit, false},
		{"invalid plan", plan(srv.RepoURL("kinds"), func(p *writeback.Plan) { p.Target = writeback.Target{} }), KindInvalid, true},
		{"container without hook", plan(srv.RepoURL("kinds"), func(p *writeback.Plan) {
			p.Update = writeback.Update{Container: &writeback.Container{Image: "tool:1"}}
		}), KindInvalid, true},
	}
	for _, tt := range tests {
		_, err := e.Run(context.Background(), tt.plan)
		var ee *Error
		if !errors.As(err, &ee) || ee.Kind != tt.kind || ee.Terminal != tt.terminal {
			t.Errorf("%s: %v (%+v), want kind %s, terminal %v", tt.name, err, ee, tt.kind, tt.terminal)
		}
	}
}
