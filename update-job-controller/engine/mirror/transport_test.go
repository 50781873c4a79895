package mirror

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// silentServer accepts TCP connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String()
}

// stallingRelay forwards TCP connections to target, but only the first
// limit bytes of each direction: then it stops reading, as a server or
// network that hangs mid-transfer.
type stallingRelay struct {
	addr    string
	stalled atomic.Bool // a direction reached the limit
}

func newStallingRelay(t *testing.T, target string, limit int64) *stallingRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &stallingRelay{addr: l.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c ...net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c...)
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	relay := func(dst, src net.Conn) {
		if n, _ := io.CopyN(dst, src, limit); n == limit {
			r.stalled.Store(true)
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			keep(c, up)
			go relay(up, c)
			go relay(c, up)
		}
	}()
	return r
}

// randomFile is content zlib cannot shrink much: a pack holding it is
// about its size.
func randomFile(t *testing.T, size int) string {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// localCommit writes a commit with no parent holding content in the
// mirror, for a push to a server the mirror never fetched from.
func localCommit(t *testing.T, m *Mirror, content string) Hash {
	t.Helper()
	blob, err := m.repo.CreateBlobFromBuffer([]byte(content))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.repo.TreeBuilder()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if err := b.Insert("big.txt", blob, git2go.FilemodeBlob); err != nil {
		t.Fatal(err)
	}
	treeID, err := b.Write()
	if err != nil {
		t.Fatal(err)
	}
	tree, err := m.repo.LookupTree(treeID)
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Free()
	sig := &git2go.Signature{Name: "bot", Email: "bot@example.com", When: time.Now()}
	id, err := m.repo.CreateCommit("", sig, sig, "local", tree)
	if err != nil {
		t.Fatal(err)
	}
	return hashOf(id)
}

// hangingServer is a remote that stops answering, and how to reach it.
type hangingServer struct {
	name  string
	url   string
	auth  *git.Auth
	relay *stallingRelay // nil: silent from the start
}

// hangingServers returns, for HTTP, HTTPS and SSH, a server that accepts
// connections and never answers, and one that stalls after the first
// 256 KiB each way: mid-pack, for a repository of 1 MiB.
func hangingServers(t *testing.T) []hangingServer {
	t.Helper()
	const limit = 256 << 10
	files := map[string]string{"big.txt": randomFile(t, 1<<20)}
	plain := testgit.New(t, testgit.Options{})
	plain.CreateRepo(t, "big", files)
	tls := testgit.New(t, testgit.Options{TLS: true})
	tls.CreateRepo(t, "big", files)
	sshd := testgit.NewSSH(t)
	sshd.CreateRepo(t, "big", files)
	silent := silentServer(t)
	// known_hosts naming sshd's host key at another address.
	knownAt := func(addr string) []byte {
		_, port, _ := net.SplitHostPort(addr)
		_, key, _ := strings.Cut(string(sshd.KnownHosts), " ")
		return []byte("[127.0.0.1]:" + port + " " + key)
	}
	relayPlain := newStallingRelay(t, strings.TrimPrefix(plain.URL, "http://"), limit)
	relayTLS := newStallingRelay(t, strings.TrimPrefix(tls.URL, "https://"), limit)
	relaySSH := newStallingRelay(t, sshd.Addr, limit)
	return []hangingServer{
		{name: "http silent", url: "http://" + silent + "/big.git"},
		{name: "https silent", url: "https://" + silent + "/big.git", auth: &git.Auth{CAPEM: tls.CAPEM}},
		{name: "ssh without banner", url: "ssh://git@" + silent + "/big.git",
			auth: &git.Auth{Identity: sshd.ClientKey, KnownHosts: knownAt(silent)}},
		{name: "http stalls mid-pack", url: "http://" + relayPlain.addr + "/big.git", relay: relayPlain},
		{name: "https stalls mid-pack", url: "https://" + relayTLS.addr + "/big.git",
			auth: &git.Auth{CAPEM: tls.CAPEM}, relay: relayTLS},
		{name: "ssh stalls mid-pack", url: "ssh://" + sshd.User + "@" + relaySSH.addr + sshd.BarePath("big"),
			auth: &git.Auth{Identity: sshd.ClientKey, KnownHosts: knownAt(relaySSH.addr)}, relay: relaySSH},
	}
}

// returns runs f and returns its error, failing the test when f has not
// returned within d. That is a bound for correctness, not speed: f returns
// soon after its deadline rather than never. It then leaves f running,
// and with it the mirror f uses: the caller must not release it.
func returns(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("still running after %s", d)
		return nil
	}
}

// TestHangingServerEndsWithContext: libgit2's transports would block
// forever on these servers.
func TestHangingServerEndsWithContext(t *testing.T) {
	for _, hs := range hangingServers(t) {
		t.Run(hs.name, func(t *testing.T) {
			t.Parallel()
			cache, err := NewCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m, release, err := cache.Open(hs.url)
			if err != nil {
				t.Fatal(err)
			}
			// A new commit as big as the repository: its push stalls too.
			commit := localCommit(t, m, randomFile(t, 1<<20))
			ops := []struct {
				name string
				run  func(context.Context) error
			}{
				{"fetch", func(ctx context.Context) error { return m.Fetch(ctx, hs.auth) }},
				{"push", func(ctx context.Context) error {
					return m.Push(ctx, hs.auth, commit, []writeback.RefUpdate{{Dst: "refs/heads/stalled", Force: true}})
				}},
			}
			for _, op := range ops {
				if hs.relay != nil {
					hs.relay.stalled.Store(false)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := returns(t, 10*time.Second, func() error { return op.run(ctx) })
				cancel()
				t.Logf("%s: %v", op.name, err)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: want an error wrapping context.DeadlineExceeded, got %v", op.name, err)
				}
				if strings.Contains(err.Error(), "gitops-") || !strings.Contains(err.Error(), hs.url) {
					t.Errorf("%s: the error does not name the repository URL: %v", op.name, err)
				}
				if hs.relay != nil && !hs.relay.stalled.Load() {
					t.Errorf("%s: the relay never reached its limit: the test does not stall mid-pack", op.name)
				}
			}
			release()
		})
	}
}

// TestHangingServerIdleTimeout: without a deadline, a silence longer than
// the idle timeout ends an operation.
func TestHangingServerIdleTimeout(t *testing.T) {
	saved := idleTimeout
	idleTimeout = 500 * time.Millisecond
	t.Cleanup(func() { idleTimeout = saved })
	for _, hs := range hangingServers(t) {
		t.Run(hs.name, func(t *testing.T) {
			cache, err := NewCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m, release, err := cache.Open(hs.url)
			if err != nil {
				t.Fatal(err)
			}
			err = returns(t, 10*time.Second, func() error { return m.Fetch(context.Background(), hs.auth) })
			t.Log(err)
			if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "sent nothing for 500ms") {
				t.Errorf("want an idle timeout, got %v", err)
			}
			release()
		})
	}
}

// TestConcurrentOperationsOnOneURL: the state of an operation is its own,
// even when other caches in the process work on the same URL.
func TestConcurrentOperationsOnOneURL(t *testing.T) {
	srv := testgit.New(t, testgit.Options{Username: "bot", Password: "pw"})
	srv.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	right, wrong := &git.Auth{Username: "bot", Password: "pw"}, &git.Auth{Username: "bot", Password: "wrong"}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			cache, err := NewCache(t.TempDir())
			if err != nil {
				errs[i] = err
				return
			}
			m, release, err := cache.Open(srv.RepoURL("fleet"))
			if err != nil {
				errs[i] = err
				return
			}
			defer release()
			auth := right
			if i%2 == 1 {
				auth = wrong
			}
			for range 3 {
				if errs[i] = m.Fetch(context.Background(), auth); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("fetch %d with the right password: %v", i, err)
		}
		if i%2 == 1 && !errors.Is(err, git.ErrAuthentication) {
			t.Errorf("fetch %d with a wrong password: want git.ErrAuthentication, got %v", i, err)
		}
	}
}

// TestRedirects: git follows a redirect of info/refs to the same host, and
// talks to where it landed; to another host, it is for the user to decide.
func TestRedirects(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	redirectTo := func(base string) string {
		r := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method != http.MethodGet {
				http.Error(w, "POSTs go where info/refs was found", http.StatusNotFound)
				return
			}
			rest := strings.TrimPrefix(req.URL.RequestURI(), "/moved.git")
			http.Redirect(w, req, base+"/fleet.git"+rest, http.StatusFound)
		}))
		t.Cleanup(r.Close)
		return r.URL + "/moved.git"
	}

	// Same host, another port.
	commit, err := roundTrip(t, redirectTo(srv.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(testgit.Git(t, srv.BarePath("fleet"), "rev-parse", "main")); got != commit {
		t.Errorf("remote main is %s, pushed %s", got, commit)
	}

	other := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	cache, _ := NewCache(t.TempDir())
	m, release, _ := cache.Open(redirectTo(other))
	defer release()
	if err := m.Fetch(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "redirects to another host, "+other) {
		t.Errorf("a redirect to another host: %v", err)
	}
}
