package testgit

import (
	"crypto/subtle"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a forward HTTP proxy on loopback: CONNECT tunnels (for HTTPS)
// and absolute-form requests (for plain HTTP). It counts what it carries,
// so a test can prove traffic went through it, and only reaches loopback
// addresses.
type Proxy struct {
	// URL is http://127.0.0.1:port, without credentials.
	URL string

	username, password string
	requests           atomic.Int64
	rejected           atomic.Int64
	transport          *http.Transport
	wg                 sync.WaitGroup
	mu                 sync.Mutex
	tunnels            map[net.Conn]bool
}

// NewProxy starts a proxy, stopped at the end of the test. With a
// username, it requires basic Proxy-Authorization.
func NewProxy(t testing.TB, username, password string) *Proxy {
	t.Helper()
	p := &Proxy{username: username, password: password, tunnels: map[net.Conn]bool{},
		transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		p.transport.CloseIdleConnections()
		// Hijacked tunnels are no longer the server's to close.
		p.mu.Lock()
		for c := range p.tunnels {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Requests counts the CONNECT tunnels opened and the requests forwarded.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Rejected counts the requests refused for missing or wrong credentials.
func (p *Proxy) Rejected() int64 { return p.rejected.Load() }

func (p *Proxy) authorized(req *http.Request) bool {
	if p.username == "" {
		return true
	}
	enc, ok := strings.CutPrefix(req.Header.Get("Proxy-Authorization"), "Basic ")
	if !ok {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return false
	}
	want := p.username + ":" + p.password
	return subtle.ConstantTimeCompare(b, []byte(want)) == 1
}

func (p *Proxy) serve(w http.ResponseWriter, req *http.Request) {
	if !p.authorized(req) {
		p.rejected.Add(1)
		w.Header().Set("Proxy-Authenticate", `Basic realm="testgit-proxy"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	host := req.Host
	if req.Method != http.MethodConnect {
		host = req.URL.Host
	}
	if !loopback(host) {
		http.Error(w, "this test proxy only reaches loopback addresses", http.StatusForbidden)
		return
	}
	p.requests.Add(1)
	if req.Method == http.MethodConnect {
		p.tunnel(w, req)
		return
	}
	if !req.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	out := req.Clone(req.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *Proxy) tunnel(w http.ResponseWriter, req *http.Request) {
	upstream, err := net.DialTimeout("tcp", req.Host, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		upstream.Close()
		return
	}
	p.mu.Lock()
	p.tunnels[conn], p.tunnels[upstream] = true, true
	p.mu.Unlock()
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		// Bytes the client sent after CONNECT may already be buffered.
		_, _ = io.Copy(upstream, buf)
		if tc, ok := upstream.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(conn, upstream)
		conn.Close()
		upstream.Close()
		p.mu.Lock()
		delete(p.tunnels, conn)
		delete(p.tunnels, upstream)
		p.mu.Unlock()
	}()
}

func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
