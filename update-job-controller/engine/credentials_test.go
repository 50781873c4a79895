package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// passwords is a store of per-repository basic credentials that records
// what it was asked, and when.
type passwords struct {
	mu     sync.Mutex
	byRepo map[string]string
	asked  []string
	fail   error
}

func (p *passwords) Lookup(_ context.Context, repository string) (Credentials, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, repository)
	if p.fail != nil {
		return Credentials{}, p.fail
	}
	pw, ok := p.byRepo[repository]
	if !ok {
		return Credentials{}, fmt.Errorf("no credentials for this repository")
	}
	return Credentials{Git: &git.Auth{Username: "bot", Password: pw}}, nil
}

// One Engine serves repositories with different credentials: the store is
// asked with the run's repository before its fetch and before its push.
func TestOneEngineAsksTheStorePerRepository(t *testing.T) {
	a := testgit.New(t, testgit.Options{Username: "bot", Password: "password-of-a"})
	b := testgit.New(t, testgit.Options{Username: "bot", Password: "password-of-b"})
	a.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": deployment})
	b.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": deployment})
	store := &passwords{byRepo: map[string]string{a.RepoURL("fleet"): "password-of-a", b.RepoURL("fleet"): "password-of-b"}}
	e := New(Settings{WorkDir: t.TempDir()}, store, newCache(t))
	for _, url := range []string{a.RepoURL("fleet"), b.RepoURL("fleet")} {
		store.asked = nil
		out, err := e.Run(context.Background(), plan(url, func(p *writeback.Plan) { p.Path = "deploy" }))
		if err != nil || out.Commit == "" {
			t.Fatalf("%s: %+v, %v", url, out, err)
		}
		if len(store.asked) != 2 || store.asked[0] != url || store.asked[1] != url {
			t.Errorf("%s: the store was asked for %q, want the repository at the fetch and at the push", url, store.asked)
		}
	}
}

// A store that cannot answer fails the run before any network call to
// the repository: KindAuthentication, retryable, naming the repository
// without its credentials; credentials that cannot work are terminal.
func TestAStoreThatFailsFailsTheRun(t *testing.T) {
	srv := testgit.New(t, testgit.Options{Username: "bot", Password: "pw"})
	srv.CreateRepo(t, "fleet", map[string]string{"deploy/app.yaml": deployment})
	url := strings.Replace(srv.RepoURL("fleet"), "://", "://bot:s3cret@", 1)
	for _, tt := range []struct {
		name     string
		fail     error
		kind     Kind
		terminal bool
	}{
		{"the store's service is down", errors.New("vault: connection refused"), KindAuthentication, false},
		{"the credentials cannot work", fmt.Errorf("%w: no key", git.ErrInvalidCredentials), KindInvalid, true},
		{"the store's own kind", &Error{Kind: KindGit, Err: errors.New("mine")}, KindGit, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := &passwords{fail: tt.fail}
			before := srv.Requests()
			_, err := New(Settings{WorkDir: t.TempDir()}, store, newCache(t)).Run(context.Background(), plan(url, nil))
			var e *Error
			if !errors.As(err, &e) || e.Kind != tt.kind || e.Terminal != tt.terminal || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("err = %#v (%v), want kind %s, terminal %t, without the URL's password", e, err, tt.kind, tt.terminal)
			}
			if srv.Requests() != before {
				t.Errorf("%d requests reached the server", srv.Requests()-before)
			}
		})
	}
}
