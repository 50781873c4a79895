package mirror

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// roundTrip does what a job does over the network: fetch main from url,
// commit a change and push it to main. It returns the pushed commit.
func roundTrip(t *testing.T, url string, auth *git.Auth) (string, error) {
	t.Helper()
	cache, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, release, err := cache.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx := context.Background()
	if err := m.Fetch(ctx, auth); err != nil {
		return "", err
	}
	head, _, err := m.Resolve(writeback.Ref{Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "work")
	if err := m.Checkout(head, dir); err != nil {
		t.Fatal(err)
	}
	// Each caller pushes to the same repository something new.
	if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:"+t.Name()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, err := m.Commit(head, dir, []string{"apps/app.yaml"}, info("Update images"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Push(ctx, auth, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
		return "", err
	}
	return commit.String(), nil
}

// hashKnownHosts rewrites the host names of known_hosts hashed, as
// ssh-keygen -H does.
func hashKnownHosts(known []byte) []byte {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(known)), "\n") {
		host, key, _ := strings.Cut(line, " ")
		out = append(out, knownhosts.HashHostname(host)+" "+key)
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// ecdsaKey returns a new ECDSA key in PEM (not OpenSSH) form and its
// authorized_keys line.
func ecdsaKey(t *testing.T) ([]byte, string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), string(ssh.MarshalAuthorizedKey(pub))
}

// rsaKey returns a new RSA key in PKCS#1 PEM form and its authorized_keys
// line.
func rsaKey(t *testing.T) ([]byte, string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), string(ssh.MarshalAuthorizedKey(pub))
}

// TestTransports runs a job's fetch and push against real servers: git
// http-backend over HTTPS with a self-signed CA, and sshd.
func TestTransports(t *testing.T) {
	files := map[string]string{"apps/app.yaml": "image: a:1\n"}
	https := testgit.New(t, testgit.Options{TLS: true, Username: "bot", Password: "pw-s3cret"})
	https.CreateRepo(t, "fleet", files)
	otherCA := testgit.New(t, testgit.Options{TLS: true}).CAPEM
	bearer := testgit.New(t, testgit.Options{TLS: true, BearerToken: "tok-s3cret"})
	bearer.CreateRepo(t, "fleet", files)
	sshd := testgit.NewSSH(t)
	sshd.CreateRepo(t, "fleet", files)
	encrypted, encryptedPub := testgit.SSHKeygen(t, "key-s3cret")
	sshd.Authorize(t, encryptedPub)
	ecKey, ecPub := ecdsaKey(t)
	sshd.Authorize(t, ecPub)
	rsaKey, rsaPub := rsaKey(t)
	sshd.Authorize(t, rsaPub)
	stranger, _ := testgit.SSHKeygen(t, "")
	otherPort := strings.Replace(string(sshd.KnownHosts), "]:", "]:1", 1)

	tests := []struct {
		name    string
		url     string
		creds   map[string][]byte
		bare    string
		wantErr []string // substrings of the error; none: success
		is      error
	}{
		{name: "https with ca.crt", url: https.RepoURL("fleet"), bare: https.BarePath("fleet"),
			creds: map[string][]byte{"username": []byte("bot"), "password": []byte("pw-s3cret"), "ca.crt": https.CAPEM}},
		{name: "https without ca.crt", url: https.RepoURL("fleet"),
			creds:   map[string][]byte{"username": []byte("bot"), "password": []byte("pw-s3cret")},
			wantErr: []string{"TLS certificate of 127.0.0.1", "unknown authority"}, is: git.ErrAuthentication},
		{name: "https with another CA", url: https.RepoURL("fleet"),
			creds:   map[string][]byte{"username": []byte("bot"), "password": []byte("pw-s3cret"), "ca.crt": otherCA},
			wantErr: []string{"TLS certificate of 127.0.0.1"}, is: git.ErrAuthentication},
		{name: "https wrong password", url: https.RepoURL("fleet"),
			creds: map[string][]byte{"username": []byte("bot"), "password": []byte("wrong-s3cret"), "ca.crt": https.CAPEM},
			is:    git.ErrAuthentication},
		{name: "bearer token", url: bearer.RepoURL("fleet"), bare: bearer.BarePath("fleet"),
			creds: map[string][]byte{"bearerToken": []byte("tok-s3cret"), "ca.crt": bearer.CAPEM}},
		{name: "wrong bearer token", url: bearer.RepoURL("fleet"),
			creds: map[string][]byte{"bearerToken": []byte("wrong-s3cret"), "ca.crt": bearer.CAPEM},
			is:    git.ErrAuthentication, wantErr: []string{"bearer token"}},
		{name: "ssh", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: map[string][]byte{"identity": sshd.ClientKey, "known_hosts": sshd.KnownHosts}},
		{name: "ssh hashed known_hosts", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: map[string][]byte{"identity": sshd.ClientKey, "known_hosts": hashKnownHosts(sshd.KnownHosts)}},
		{name: "ssh encrypted identity", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: map[string][]byte{"identity": encrypted, "password": []byte("key-s3cret"), "known_hosts": sshd.KnownHosts}},
		{name: "ssh ECDSA PEM identity", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: map[string][]byte{"identity": ecKey, "known_hosts": sshd.KnownHosts}},
		// libssh2 1.10 signed RSA with SHA-1 only, which OpenSSH refuses.
		{name: "ssh RSA identity", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: map[string][]byte{"identity": rsaKey, "known_hosts": sshd.KnownHosts}},
		{name: "ssh wrong host key", url: sshd.RepoURL("fleet"),
			creds:   map[string][]byte{"identity": sshd.ClientKey, "known_hosts": sshd.WrongKnownHosts(t)},
			wantErr: []string{"host key of [127.0.0.1]:", "does not match known_hosts"}, is: git.ErrAuthentication},
		{name: "ssh unknown host", url: sshd.RepoURL("fleet"),
			creds:   map[string][]byte{"identity": sshd.ClientKey, "known_hosts": []byte(otherPort)},
			wantErr: []string{"host [127.0.0.1]:", "is not in known_hosts"}, is: git.ErrAuthentication},
		{name: "ssh key not authorized", url: sshd.RepoURL("fleet"),
			creds: map[string][]byte{"identity": stranger, "known_hosts": sshd.KnownHosts},
			is:    git.ErrAuthentication},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth, err := git.AuthFromSecrets(tt.url, tt.creds, nil)
			if err != nil {
				t.Fatal(err)
			}
			commit, err := roundTrip(t, tt.url, auth)
			if tt.is == nil && len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSpace(testgit.Git(t, tt.bare, "rev-parse", "main")); got != commit {
					t.Errorf("remote main is %s, pushed %s", got, commit)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("want %v, got %v", tt.is, err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
}

func TestMissingKnownHostsFailsBeforeConnecting(t *testing.T) {
	sshd := testgit.NewSSH(t)
	sshd.CreateRepo(t, "fleet", map[string]string{"a.yaml": "a: 1\n"})
	if _, err := git.AuthFromSecrets(sshd.RepoURL("fleet"), map[string][]byte{"identity": sshd.ClientKey}, nil); !errors.Is(err, git.ErrInvalidCredentials) {
		t.Errorf("git.AuthFromSecrets without known_hosts: %v", err)
	}
	// An Auth built by hand is checked too, and nothing reaches the host.
	cache, _ := NewCache(t.TempDir())
	m, release, _ := cache.Open(sshd.RepoURL("fleet"))
	defer release()
	before := strings.Count(sshd.Logs(), "Connection from")
	if err := m.Fetch(context.Background(), &git.Auth{Identity: sshd.ClientKey}); !errors.Is(err, git.ErrInvalidCredentials) {
		t.Errorf("fetch without known_hosts: %v", err)
	}
	if n := strings.Count(sshd.Logs(), "Connection from") - before; n != 0 {
		t.Errorf("%d connections without known_hosts", n)
	}
}

func TestProxy(t *testing.T) {
	files := map[string]string{"apps/app.yaml": "image: a:1\n"}
	https := testgit.New(t, testgit.Options{TLS: true})
	https.CreateRepo(t, "fleet", files)
	http := testgit.New(t, testgit.Options{})
	http.CreateRepo(t, "fleet", files)
	sshd := testgit.NewSSH(t)
	sshd.CreateRepo(t, "fleet", files)
	sshCreds := map[string][]byte{"identity": sshd.ClientKey, "known_hosts": sshd.KnownHosts}

	tests := []struct {
		name     string
		url      string
		bare     string
		creds    map[string][]byte
		requests func() int64 // served by the git server, if it counts
		user     string
		password string
		wantErr  bool
	}{
		{name: "https with proxy credentials", url: https.RepoURL("fleet"), bare: https.BarePath("fleet"),
			creds: map[string][]byte{"ca.crt": https.CAPEM}, requests: https.Requests, user: "pu", password: "pp-s3cret"},
		{name: "https without proxy credentials", url: https.RepoURL("fleet"), bare: https.BarePath("fleet"),
			creds: map[string][]byte{"ca.crt": https.CAPEM}, requests: https.Requests},
		{name: "https wrong proxy password", url: https.RepoURL("fleet"),
			creds: map[string][]byte{"ca.crt": https.CAPEM}, user: "pu", password: "wrong-s3cret", wantErr: true},
		{name: "http with proxy credentials", url: http.RepoURL("fleet"), bare: http.BarePath("fleet"),
			requests: http.Requests, user: "pu", password: "pp-s3cret"},
		{name: "http wrong proxy password", url: http.RepoURL("fleet"), user: "pu", password: "wrong-s3cret", wantErr: true},
		{name: "ssh with proxy credentials", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"),
			creds: sshCreds, user: "pu", password: "pp-s3cret"},
		{name: "ssh without proxy credentials", url: sshd.RepoURL("fleet"), bare: sshd.BarePath("fleet"), creds: sshCreds},
		{name: "ssh wrong proxy password", url: sshd.RepoURL("fleet"), creds: sshCreds, user: "pu", password: "wrong-s3cret", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The proxy wants credentials when the test has some.
			var proxy *testgit.Proxy
			if tt.user == "" {
				proxy = testgit.NewProxy(t, "", "")
			} else {
				proxy = testgit.NewProxy(t, "pu", "pp-s3cret")
			}
			secret := map[string][]byte{"address": []byte(proxy.URL), "username": []byte(tt.user), "password": []byte(tt.password)}
			auth, err := git.AuthFromSecrets(tt.url, tt.creds, secret)
			if err != nil {
				t.Fatal(err)
			}
			var before int64
			if tt.requests != nil {
				before = tt.requests()
			}
			commit, err := roundTrip(t, tt.url, auth)
			if tt.wantErr {
				if !errors.Is(err, git.ErrAuthentication) || !strings.Contains(err.Error(), "proxy refused its credentials") {
					t.Fatalf("want git.ErrAuthentication from the proxy, got %v", err)
				}
				t.Logf("%v (%d requests refused)", err, proxy.Rejected())
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error quotes a secret: %v", err)
				}
				if n := proxy.Rejected(); n != 1 {
					t.Errorf("%d requests with refused proxy credentials, want 1", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(testgit.Git(t, tt.bare, "rev-parse", "main")); got != commit {
				t.Errorf("remote main is %s, pushed %s", got, commit)
			}
			// Fetch and push each went through the proxy.
			if proxy.Requests() < 2 || (tt.requests != nil && tt.requests() == before) {
				t.Errorf("proxy carried %d requests, the server served some: %t", proxy.Requests(), tt.requests == nil || tt.requests() > before)
			}
		})
	}
}

// A job fetches and pushes through a SOCKS5 proxy Secret, over HTTPS and
// SSH, as the automation lists refs through it.
func TestSOCKS5Proxy(t *testing.T) {
	files := map[string]string{"apps/app.yaml": "image: a:1\n"}
	https := testgit.New(t, testgit.Options{TLS: true})
	https.CreateRepo(t, "fleet", files)
	sshd := testgit.NewSSH(t)
	sshd.CreateRepo(t, "fleet", files)
	for _, tt := range []struct {
		name, url, bare string
		creds           map[string][]byte
	}{
		{"https", https.RepoURL("fleet"), https.BarePath("fleet"), map[string][]byte{"ca.crt": https.CAPEM}},
		{"ssh", sshd.RepoURL("fleet"), sshd.BarePath("fleet"), map[string][]byte{"identity": sshd.ClientKey, "known_hosts": sshd.KnownHosts}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy := testgit.NewSOCKS5(t, "pu", "pp-s3cret")
			secret := map[string][]byte{"address": []byte(proxy.URL), "username": []byte("pu"), "password": []byte("pp-s3cret")}
			auth, err := git.AuthFromSecrets(tt.url, tt.creds, secret)
			if err != nil {
				t.Fatal(err)
			}
			commit, err := roundTrip(t, tt.url, auth)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(testgit.Git(t, tt.bare, "rev-parse", "main")); got != commit {
				t.Errorf("remote main is %s, pushed %s", got, commit)
			}
			if proxy.Requests() < 2 {
				t.Errorf("the proxy carried %d connections; want the fetch's and the push's", proxy.Requests())
			}
		})
	}
}
