package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// Example embeds the engine: one plan (set the podinfo image on main of a
// repository on this machine's disk, which FileURLs allows), no
// credentials, and hooks that rewrite the commit message and report what
// the run does. examples/embed-engine is a whole program of this shape,
// with a forge of its own.
func Example() {
	url, stop := exampleRepository() // file://…/fleet.git, deploy/app.yaml on main
	defer stop()

	cacheDir, _ := os.MkdirTemp("", "mirrors-")
	defer os.RemoveAll(cacheDir)
	cache, err := mirror.NewCache(cacheDir)
	if err != nil {
		fmt.Println(err)
		return
	}
	e := engine.New(engine.Settings{FileURLs: true, Hooks: engine.Hooks{
		BeforeCommit: func(_ context.Context, c *engine.Change) error {
			fmt.Println("committing", c.Files)
			c.Message = "chore: update podinfo\n"
			return nil
		},
		AfterPush: func(_ context.Context, p engine.Push) { fmt.Println("pushed to", p.Refs) },
		OnEvent: func(ev engine.Event) {
			if ev.Kind == engine.EventGit {
				fmt.Println("git", ev.Op)
			}
		},
	}}, nil, cache)

	res, err := e.Run(context.Background(), writeback.Plan{
		Repository: url,
		Checkout:   writeback.Ref{Branch: "main"},
		Path:       "deploy",
		Update: writeback.Update{Images: map[string]meta.ImageRef{
			"apps:podinfo": {Name: "ghcr.io/stefanprodan/podinfo", Tag: "6.5.0"},
		}},
		Commit: writeback.Commit{AuthorName: "bot", AuthorEmail: "bot@example.com"},
		Target: writeback.Target{Branch: "main"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range res.Changes.Changes() {
		fmt.Println(c.OldValue, "->", c.NewValue)
	}
	fmt.Printf("%q\n", res.Message)
	// Output:
	// git clone
	// committing [deploy/app.yaml]
	// git push
	// pushed to [refs/heads/main]
	// ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0
	// "chore: update podinfo\n"
}

// exampleRepository makes a bare repository with one marked Deployment on
// main, with git's CLI, and returns its file:// URL.
func exampleRepository() (string, func()) {
	root, _ := os.MkdirTemp("", "example-git-")
	work := filepath.Join(root, "work")
	_ = os.MkdirAll(filepath.Join(work, "deploy"), 0o755)
	_ = os.WriteFile(filepath.Join(work, "deploy", "app.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
`), 0o644)
	bare := filepath.Join(root, "fleet.git")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "--initial-branch=main", bare},
		{"-C", work, "init", "-q", "--initial-branch=main"},
		{"-C", work, "add", "-A"},
		{"-C", work, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "initial"},
		{"-C", work, "push", "-q", bare, "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			panic(fmt.Sprintf("git %v: %v\n%s", args, err, out))
		}
	}
	return "file://" + bare, func() { os.RemoveAll(root) }
}
