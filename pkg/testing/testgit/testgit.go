// Package testgit runs real git servers for tests, serving bare
// repositories the test creates with the git command line: git http-backend
// behind Go's net/http/cgi over HTTP or HTTPS (optionally with basic or
// bearer auth), OpenSSH's sshd (NewSSH), and a forward HTTP proxy
// (NewProxy) to prove traffic goes through one.
package testgit

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// Username and Password require basic authentication when set.
	Username, Password string
	// BearerToken requires "Authorization: Bearer <token>" when set (basic
	// authentication is accepted too when Username is also set).
	BearerToken string
	// Authorize, when set, decides instead of the fields above, from the
	// request's Authorization header: a test whose credentials change
	// (short-lived tokens refreshed during a job) accepts exactly those
	// its token service currently honours.
	Authorize func(authorization string) bool
	// TLS serves HTTPS with a certificate for 127.0.0.1, ::1 and
	// localhost, issued by a self-signed CA made for this server alone:
	// Server.CAPEM.
	TLS bool
}

// Repos is a directory of bare repositories, shared by the HTTP and SSH
// servers.
type Repos struct {
	Root string
}

// Server serves the bare repositories under Root over HTTP(S).
type Server struct {
	// URL is the base URL; a repository is URL + "/" + name + ".git".
	URL string
	Repos
	// CAPEM is the PEM certificate to trust when Options.TLS is set.
	CAPEM []byte

	opts     Options
	backend  http.Handler
	requests atomic.Int64
	// BytesOut counts response bytes, e.g. to compare fetch sizes.
	BytesOut atomic.Int64
}

// New starts a server, stopped at the end of the test.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	s, stop, err := Start(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s
}

// Start starts a server over the bare repositories in root, outside of a
// test (e.g. for the demo); stop shuts it down.
func Start(root string, o Options) (s *Server, stop func(), err error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("git is needed for git servers: %w", err)
	}
	s = &Server{Repos: Repos{Root: root}, opts: o}
	s.backend = &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env:  append([]string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"}, noAutoGC...),
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if o.TLS {
		cert, ca, err := newCertificate()
		if err != nil {
			return nil, nil, err
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		s.CAPEM = ca
	} else {
		srv.Start()
	}
	s.URL = srv.URL
	return s, srv.Close, nil
}

// Requests counts the HTTP requests served.
func (s *Server) Requests() int64 { return s.requests.Load() }

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.requests.Add(1)
	if !s.authorized(req) {
		if s.opts.Username != "" {
			w.Header().Add("WWW-Authenticate", `Basic realm="testgit"`)
		}
		if s.opts.BearerToken != "" || s.opts.Authorize != nil {
			w.Header().Add("WWW-Authenticate", `Bearer realm="testgit"`)
		}
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	// libgit2 sends pushes chunked; CGI needs a Content-Length.
	if req.Body != nil {
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<30))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.TransferEncoding = nil
		req.Header.Del("Transfer-Encoding")
	}
	s.backend.ServeHTTP(&countingWriter{ResponseWriter: w, n: &s.BytesOut}, req)
}

// newCertificate makes a CA and a server certificate it signs, so that
// each server has its own CA: trusting one server's CA does not let a
// client trust another.
func newCertificate() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testgit CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

func (s *Server) authorized(req *http.Request) bool {
	if s.opts.Authorize != nil {
		return s.opts.Authorize(req.Header.Get("Authorization"))
	}
	if s.opts.Username == "" && s.opts.BearerToken == "" {
		return true
	}
	if u, p, ok := req.BasicAuth(); ok && s.opts.Username != "" {
		return u == s.opts.Username && p == s.opts.Password
	}
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && s.opts.BearerToken != "" &&
		subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.BearerToken)) == 1
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// RepoURL is the clone URL of a repository.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// BarePath is the path of a repository on disk, e.g. to clone it with git
// without going through the server.
func (r *Repos) BarePath(name string) string { return filepath.Join(r.Root, name+".git") }

// InitBare creates an empty bare repository and returns its path.
func (r *Repos) InitBare(t testing.TB, name string) string {
	t.Helper()
	bare := r.BarePath(name)
	Git(t, "", "init", "-q", "--bare", "--initial-branch=main", bare)
	Git(t, bare, "config", "http.receivepack", "true")
	return bare
}

// CreateRepo creates a bare repository with one commit holding files on
// branch main, and returns a work clone of it for the test to change (its
// origin is the bare repository on disk).
func (r *Repos) CreateRepo(t testing.TB, name string, files map[string]string) *Clone {
	t.Helper()
	bare := r.InitBare(t, name)
	c := &Clone{Dir: t.TempDir(), t: t}
	Git(t, c.Dir, "init", "--initial-branch=main")
	Git(t, c.Dir, "remote", "add", "origin", bare)
	c.Commit("initial", files)
	Git(t, c.Dir, "push", "origin", "main")
	return c
}

// Clone is a work tree with the server's bare repository as origin.
type Clone struct {
	Dir string
	t   testing.TB
}

// Commit writes files (path → content) and commits them.
func (c *Clone) Commit(msg string, files map[string]string) string {
	c.t.Helper()
	for p, body := range files {
		full := filepath.Join(c.Dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	Git(c.t, c.Dir, "add", "-A")
	Git(c.t, c.Dir, "commit", "-q", "-m", msg)
	return strings.TrimSpace(Git(c.t, c.Dir, "rev-parse", "HEAD"))
}

// Push pushes the clone's main branch (or the given refspecs).
func (c *Clone) Push(refspecs ...string) {
	c.t.Helper()
	if len(refspecs) == 0 {
		refspecs = []string{"main"}
	}
	Git(c.t, c.Dir, append([]string{"push", "-q", "origin"}, refspecs...)...)
}

// Git runs git in dir with a fixed identity and returns its output.
// noAutoGC turns off git's automatic gc (after commits, and after a push
// in receive-pack): on large repositories it runs detached after the
// command returns and still writes when the test removes its directories.
var noAutoGC = []string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
	"GIT_CONFIG_KEY_1=receive.autogc", "GIT_CONFIG_VALUE_1=false"}

func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_CONFIG_NOSYSTEM=1",
		"HOME="+os.TempDir())
	cmd.Env = append(cmd.Env, noAutoGC...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
