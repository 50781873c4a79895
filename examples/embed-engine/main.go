// Command embed-engine sets an image in the marked manifests of a git
// repository on this machine's disk, with image-toolkit's write-back
// engine. It is the smallest whole program that embeds the engine, written
// to be copied: a plan, a credentials store, a hook of its own, and a
// forge of its own.
//
//	go run . -repository file:///srv/git/fleet.git \
//	    -policy apps:podinfo -image ghcr.io/stefanprodan/podinfo:6.5.0
//
// The manifests mark the values to set as Flux's image automation does:
//
//	image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
//
// The run commits the change on main and pushes it. With -review DIR it
// proposes the change instead: the commit goes to a head branch, and a
// review request is kept in DIR by "notebook", a forge this program
// registers (pkg/forge.Register), as a program would add an in-house
// review tool the engine does not know. The hook (BeforeCommit) adds a
// trailer naming this program to every commit message.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed-engine:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("embed-engine", flag.ContinueOnError)
	repository := fs.String("repository", "", "the repository, file:///path/to/repo.git")
	path := fs.String("path", "", "the directory of the manifests, from the repository's root")
	policy := fs.String("policy", "", "the marker's policy, NAMESPACE:NAME")
	image := fs.String("image", "", "the image to set, NAME:TAG")
	review := fs.String("review", "", "propose the change: keep its review request in this directory")
	cacheDir := fs.String("cache", filepath.Join(os.TempDir(), "embed-engine-mirrors"), "where the engine keeps its mirrors")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *repository == "" || *policy == "" || *image == "" {
		return errors.New("-repository, -policy and -image are required")
	}
	ref, err := setters.ParseImage(*image)
	if err != nil {
		return fmt.Errorf("-image: %w", err)
	}

	plan := writeback.Plan{
		Repository: *repository,
		Checkout:   writeback.Ref{Branch: "main"},
		Path:       *path,
		Update:     writeback.Update{Images: map[string]meta.ImageRef{*policy: ref}},
		Commit:     writeback.Commit{AuthorName: "embed-engine", AuthorEmail: "embed-engine@example.com"},
		Target:     writeback.Target{Branch: "main"},
	}
	if *review != "" {
		forge.Register(notebookForge(*review))
		plan.Target = writeback.Target{PullRequest: &writeback.PullRequest{Provider: "notebook", Base: "main", Head: "embed-engine/" + strings.ReplaceAll(*policy, ":", "-")}}
	}

	cache, err := mirror.NewCache(*cacheDir)
	if err != nil {
		return err
	}
	e := engine.New(engine.Settings{
		FileURLs: true, // the plans are this program's user's, on their machine
		Hooks: engine.Hooks{
			// A hook of this program's: every commit says who made it.
			BeforeCommit: func(_ context.Context, c *engine.Change) error {
				c.Message = strings.TrimRight(c.Message, "\n") + "\n\nChanged-by: embed-engine\n"
				return nil
			},
		},
	}, store{}, cache)
	res, err := e.Run(ctx, plan)
	if err != nil {
		return err
	}
	for _, c := range res.Changes.Changes() {
		fmt.Fprintln(stdout, c.OldValue, "->", c.NewValue)
	}
	switch pr := res.PullRequest; {
	case pr != nil:
		fmt.Fprintf(stdout, "review request %d (%s): %s\n", pr.Number, pr.Action, pr.URL)
	case res.Commit != "":
		fmt.Fprintln(stdout, "pushed", res.Commit)
	default:
		fmt.Fprintln(stdout, "nothing to change")
	}
	return nil
}

// store is this program's credentials store: a repository on the disk
// needs none, and the notebook forge takes any token.
type store struct{}

func (store) Lookup(context.Context, string) (engine.Credentials, error) {
	return engine.Credentials{Forge: func(context.Context, *git.Auth) (engine.ForgeAuth, error) {
		return engine.ForgeAuth{Token: "local"}, nil
	}}, nil
}

// notebookForge is a forge of this program's own: review requests kept as
// JSON files in dir, one per request. A real one would call an in-house
// review tool's API with opts.Token over the HTTP client the engine gives.
func notebookForge(dir string) forge.Forge {
	return forge.Forge{
		Provider: "notebook",
		New: func(opts forge.Options, _ *http.Client) (forge.Client, error) {
			return &notebook{dir: filepath.Join(dir, filepath.FromSlash(opts.Repository))}, os.MkdirAll(filepath.Join(dir, filepath.FromSlash(opts.Repository)), 0o755)
		},
	}
}

type notebook struct {
	mu  sync.Mutex
	dir string
}

func (n *notebook) file(number int) string {
	return filepath.Join(n.dir, strconv.Itoa(number)+".json")
}

func (n *notebook) all() ([]forge.Request, error) {
	var out []forge.Request
	for i := 1; ; i++ {
		b, err := os.ReadFile(n.file(i))
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var r forge.Request
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
}

func (n *notebook) save(r forge.Request) (*forge.Request, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return &r, os.WriteFile(n.file(r.Number), b, 0o644)
}

func (n *notebook) FindOpen(_ context.Context, head, base string) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	all, err := n.all()
	for _, r := range all {
		if r.Head == head && r.Base == base && r.State == forge.Open {
			return &r, nil
		}
	}
	return nil, err
}

func (n *notebook) Create(_ context.Context, req forge.NewRequest) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	all, err := n.all()
	if err != nil {
		return nil, err
	}
	number := len(all) + 1
	return n.save(forge.Request{Number: number, URL: "file://" + filepath.ToSlash(n.file(number)), State: forge.Open,
		Title: req.Title, Body: req.Body, Head: req.Head, Base: req.Base})
}

func (n *notebook) Edit(_ context.Context, current *forge.Request, title, body string) (*forge.Request, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := *current
	r.Title, r.Body = title, body
	return n.save(r)
}

func (n *notebook) Close(_ context.Context, current *forge.Request, _ string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := *current
	r.State = forge.Closed
	_, err := n.save(r)
	return err
}
