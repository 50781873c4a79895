package git

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// repo creates a repository with a second branch and an annotated tag, and
// returns the head of main.
func repo(t *testing.T, r *testgit.Repos) string {
	t.Helper()
	c := r.CreateRepo(t, "fleet", map[string]string{"app.yaml": "image: a:1\n"})
	testgit.Git(t, c.Dir, "tag", "-a", "-m", "release", "v1.0.0")
	testgit.Git(t, c.Dir, "checkout", "-q", "-b", "feature")
	c.Commit("feature", map[string]string{"app.yaml": "image: a:2\n"})
	testgit.Git(t, c.Dir, "checkout", "-q", "main")
	head := c.Commit("second", map[string]string{"app.yaml": "image: a:3\n"})
	c.Push("main", "feature", "v1.0.0")
	return head
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// checkBranch reads main of repoURL and checks the answer: head, or an
// error saying wantErr, ErrAuthentication exactly when auth, and never a
// credential.
func checkBranch(t *testing.T, repoURL string, a *Auth, head, wantErr string, auth bool) {
	t.Helper()
	got, err := Branch(ctx(t), repoURL, a, "main")
	if wantErr == "" {
		if err != nil || got != head {
			t.Fatalf("Branch = %q, %v; want %s", got, err, head)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("err = %v, want one containing %q", err, wantErr)
	}
	if errors.Is(err, ErrAuthentication) != auth {
		t.Errorf("ErrAuthentication = %v for %v", !auth, err)
	}
	for _, secret := range []string{"s3cret", "nope", "tok-123", "tok-456", "passphrase"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q holds a credential", err)
		}
	}
}

func TestHTTP(t *testing.T) {
	tests := []struct {
		name    string
		server  testgit.Options
		opts    func(*testgit.Server) *Auth
		wantErr string
		auth    bool
	}{
		{"anonymous", testgit.Options{}, func(*testgit.Server) *Auth { return &Auth{} }, "", false},
		{"basic auth", testgit.Options{Username: "bot", Password: "s3cret"},
			func(*testgit.Server) *Auth { return &Auth{Username: "bot", Password: "s3cret"} }, "", false},
		{"wrong password", testgit.Options{Username: "bot", Password: "s3cret"},
			func(*testgit.Server) *Auth { return &Auth{Username: "bot", Password: "nope"} }, "401", true},
		{"no credentials", testgit.Options{Username: "bot", Password: "s3cret"},
			func(*testgit.Server) *Auth { return &Auth{} }, "401", true},
		// A bearer token travels over https only.
		{"bearer token", testgit.Options{TLS: true, BearerToken: "tok-123"},
			func(s *testgit.Server) *Auth { return &Auth{BearerToken: "tok-123", CAPEM: s.CAPEM} }, "", false},
		{"wrong bearer token", testgit.Options{TLS: true, BearerToken: "tok-123"},
			func(s *testgit.Server) *Auth { return &Auth{BearerToken: "tok-456", CAPEM: s.CAPEM} }, "401", true},
		{"bearer token over http", testgit.Options{BearerToken: "tok-123"},
			func(*testgit.Server) *Auth { return &Auth{BearerToken: "tok-123"} }, "401", true},
		{"https with ca.crt", testgit.Options{TLS: true, Username: "bot", Password: "s3cret"},
			func(s *testgit.Server) *Auth { return &Auth{CAPEM: s.CAPEM, Username: "bot", Password: "s3cret"} }, "", false},
		{"https without ca.crt", testgit.Options{TLS: true},
			func(*testgit.Server) *Auth { return &Auth{} }, "certificate", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testgit.New(t, tt.server)
			head := repo(t, &s.Repos)
			checkBranch(t, s.RepoURL("fleet"), tt.opts(s), head, tt.wantErr, tt.auth)
		})
	}
}

// Protocol v2 asks for the refs it wants: the server sends only those.
func TestHTTPProtocolV2ListsOnlyAskedRefs(t *testing.T) {
	s := testgit.New(t, testgit.Options{})
	head := repo(t, &s.Repos)
	ep, _ := ParseEndpoint(s.RepoURL("fleet"))
	refs, _, err := listHTTP(ctx(t), ep, &Auth{}, []string{"refs/heads/main"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs["refs/heads/main"] != head {
		t.Errorf("refs = %v, want only refs/heads/main at %s", refs, head)
	}

	all, err := ListRefs(ctx(t), s.RepoURL("fleet"), &Auth{})
	if err != nil {
		t.Fatal(err)
	}
	tagged := strings.TrimSpace(testgit.Git(t, s.BarePath("fleet"), "rev-parse", "v1.0.0^{commit}"))
	if all["refs/heads/feature"] == "" || all["refs/tags/v1.0.0"] == "" || all["refs/tags/v1.0.0^{}"] != tagged {
		t.Errorf("all refs = %v; want feature, v1.0.0 and v1.0.0^{} = %s", all, tagged)
	}
}

func TestHTTPErrors(t *testing.T) {
	s := testgit.New(t, testgit.Options{})
	repo(t, &s.Repos)
	if _, err := Branch(ctx(t), s.RepoURL("fleet"), &Auth{}, "nope"); err == nil || !strings.Contains(err.Error(), `branch "nope" not found`) {
		t.Errorf("missing branch: %v", err)
	}
	if _, err := Branch(ctx(t), s.RepoURL("other"), &Auth{}, "main"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing repository: %v", err)
	}
	if _, err := Branch(ctx(t), "ftp://example.com/x.git", &Auth{}, "main"); err == nil || !strings.Contains(err.Error(), "unsupported URL scheme") {
		t.Errorf("ftp: %v", err)
	}
}

func TestProxy(t *testing.T) {
	s := testgit.New(t, testgit.Options{TLS: true})
	head := repo(t, &s.Repos)
	p := testgit.NewProxy(t, "proxyuser", "proxypass")
	pu, _ := url.Parse(p.URL)

	pu.User = url.UserPassword("proxyuser", "proxypass")
	got, err := Branch(ctx(t), s.RepoURL("fleet"), &Auth{CAPEM: s.CAPEM, ProxyURL: pu.String()}, "main")
	if err != nil || got != head {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	if p.Requests() == 0 {
		t.Error("the proxy carried nothing")
	}

	pu.User = url.UserPassword("proxyuser", "wrong")
	_, err = Branch(ctx(t), s.RepoURL("fleet"), &Auth{CAPEM: s.CAPEM, ProxyURL: pu.String()}, "main")
	if err == nil || p.Rejected() == 0 {
		t.Fatalf("wrong proxy password: err %v, rejected %d", err, p.Rejected())
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("error %q holds the proxy password", err)
	}
}

func TestSSH(t *testing.T) {
	s := testgit.NewSSH(t)
	head := repo(t, &s.Repos)
	encrypted, encryptedPub := testgit.SSHKeygen(t, "passphrase")
	s.Authorize(t, encryptedPub)
	ecdsaKey, ecdsaPub := ecdsaKeyPair(t)
	s.Authorize(t, ecdsaPub)
	stranger, _ := testgit.SSHKeygen(t, "")

	tests := []struct {
		name    string
		opts    *Auth
		wantErr string
		auth    bool
	}{
		{"ed25519", &Auth{Identity: s.ClientKey, KnownHosts: s.KnownHosts}, "", false},
		{"encrypted ed25519", &Auth{Identity: encrypted, IdentityPassword: "passphrase", KnownHosts: s.KnownHosts}, "", false},
		{"ecdsa", &Auth{Identity: ecdsaKey, KnownHosts: s.KnownHosts}, "", false},
		{"wrong host key", &Auth{Identity: s.ClientKey, KnownHosts: s.WrongKnownHosts(t)}, "host key", true},
		{"host not in known_hosts", &Auth{Identity: s.ClientKey, KnownHosts: []byte("[127.0.0.1]:1 " + strings.SplitN(string(s.KnownHosts), " ", 2)[1])}, "is not in known_hosts", true},
		{"key not authorized", &Auth{Identity: stranger, KnownHosts: s.KnownHosts}, "server refused the", true},
		{"no known_hosts", &Auth{Identity: s.ClientKey}, "known_hosts", false},
		{"encrypted without password", &Auth{Identity: encrypted, KnownHosts: s.KnownHosts}, "encrypted", false},
		{"proxy", &Auth{Identity: s.ClientKey, KnownHosts: s.KnownHosts, ProxyURL: "http://127.0.0.1:1"}, "proxy", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkBranch(t, s.RepoURL("fleet"), tt.opts, head, tt.wantErr, tt.auth)
		})
	}

	// OpenSSH refuses GIT_PROTOCOL here, so this is protocol v0: every
	// ref, peeled tags included.
	refs, err := ListRefs(ctx(t), s.RepoURL("fleet"), &Auth{Identity: s.ClientKey, KnownHosts: s.KnownHosts})
	if err != nil {
		t.Fatal(err)
	}
	tagged := strings.TrimSpace(testgit.Git(t, s.BarePath("fleet"), "rev-parse", "v1.0.0^{commit}"))
	if refs["refs/heads/main"] != head || refs["refs/heads/feature"] == "" || refs["refs/tags/v1.0.0^{}"] != tagged {
		t.Errorf("refs = %v", refs)
	}
	if _, err := Branch(ctx(t), s.RepoURL("missing"), &Auth{Identity: s.ClientKey, KnownHosts: s.KnownHosts}, "main"); err == nil {
		t.Error("a missing repository over SSH listed refs")
	}
}

func ecdsaKeyPair(t *testing.T) ([]byte, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(k, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// A server that accepts connections and never answers: the context ends
// the wait, over both transports.
func TestTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	key, pub := testgit.SSHKeygen(t, "")
	known := []byte("[127.0.0.1]:" + strings.Split(l.Addr().String(), ":")[1] + " " + pub + "\n")
	for _, u := range []string{"http://" + l.Addr().String() + "/x.git", "ssh://git@" + l.Addr().String() + "/x.git"} {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := Branch(c, u, &Auth{Identity: key, KnownHosts: known}, "main")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want the context's deadline", u, err)
		}
	}
}

// Redirects are followed as git follows them: on the same host, never
// from https to http.
func TestCheckRedirect(t *testing.T) {
	req := func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }
	check := checkRedirect("https://a/x")
	if err := check(req("http://a/x"), []*http.Request{req("https://a/x")}); err == nil {
		t.Error("followed a redirect from https to http")
	}
	if err := check(req("https://b/x"), []*http.Request{req("https://a/x")}); err == nil {
		t.Error("followed a redirect to another host")
	}
	if err := check(req("https://a/y"), []*http.Request{req("https://a/x")}); err != nil {
		t.Errorf("https to https on the same host: %v", err)
	}
}

// A SOCKS5 proxy from the proxy Secret carries HTTPS and SSH alike, with
// its credentials; wrong credentials fail without being quoted.
func TestSOCKS5(t *testing.T) {
	https := testgit.New(t, testgit.Options{TLS: true})
	httpsHead := repo(t, &https.Repos)
	sshd := testgit.NewSSH(t)
	sshHead := repo(t, &sshd.Repos)
	p := testgit.NewSOCKS5(t, "proxyuser", "proxy-s3cret")
	withCreds := func(user, pass string) string {
		u, _ := url.Parse(p.URL)
		u.User = url.UserPassword(user, pass)
		return u.String()
	}
	tests := []struct {
		name, url, head string
		auth            *Auth
	}{
		{"https", https.RepoURL("fleet"), httpsHead, &Auth{CAPEM: https.CAPEM}},
		{"ssh", sshd.RepoURL("fleet"), sshHead, &Auth{Identity: sshd.ClientKey, KnownHosts: sshd.KnownHosts}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := p.Requests()
			tt.auth.ProxyURL = withCreds("proxyuser", "proxy-s3cret")
			got, err := Branch(ctx(t), tt.url, tt.auth, "main")
			if err != nil || got != tt.head {
				t.Fatalf("through the proxy: %q, %v", got, err)
			}
			if p.Requests() == before {
				t.Error("the proxy carried nothing")
			}
			rejected := p.Rejected()
			tt.auth.ProxyURL = withCreds("proxyuser", "wrong-s3cret")
			if _, err := Branch(ctx(t), tt.url, tt.auth, "main"); err == nil || p.Rejected() == rejected {
				t.Fatalf("wrong proxy password: err %v, rejected %d", err, p.Rejected()-rejected)
			} else if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q holds the proxy password", err)
			}
		})
	}
}

// The automation reads a branch over SSH through an HTTP proxy's CONNECT
// tunnel, as jobs fetch through it.
func TestSSHThroughHTTPProxy(t *testing.T) {
	sshd := testgit.NewSSH(t)
	head := repo(t, &sshd.Repos)
	p := testgit.NewProxy(t, "proxyuser", "proxypass")
	u, _ := url.Parse(p.URL)
	u.User = url.UserPassword("proxyuser", "proxypass")
	got, err := Branch(ctx(t), sshd.RepoURL("fleet"), &Auth{Identity: sshd.ClientKey, KnownHosts: sshd.KnownHosts, ProxyURL: u.String()}, "main")
	if err != nil || got != head || p.Requests() == 0 {
		t.Fatalf("Branch = %q, %v (proxy requests %d); want %s", got, err, p.Requests(), head)
	}
}

// The default branch is what the server's HEAD names, over protocol v2
// (ls-refs symrefs, smart HTTP here) and v0 (the symref= capability of the
// advertisement, which OpenSSH's git-upload-pack sends without AcceptEnv).
func TestDefaultBranchIsWhatHEADNames(t *testing.T) {
	s := testgit.New(t, testgit.Options{})
	repo(t, &s.Repos)
	if b, err := DefaultBranch(ctx(t), s.RepoURL("fleet"), &Auth{}); err != nil || b != "main" {
		t.Fatalf("DefaultBranch = %q, %v; want main", b, err)
	}
	testgit.Git(t, s.BarePath("fleet"), "symbolic-ref", "HEAD", "refs/heads/feature")
	if b, err := DefaultBranch(ctx(t), s.RepoURL("fleet"), &Auth{}); err != nil || b != "feature" {
		t.Fatalf("after HEAD moved: DefaultBranch = %q, %v; want feature", b, err)
	}
}
