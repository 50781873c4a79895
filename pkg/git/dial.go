package git

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/proxy"
)

// Dial opens a TCP connection to addr (host:port) for SSH: through the
// Secret's proxy when there is one (CONNECT through an HTTP(S) proxy, or
// SOCKS5), else directly, as OpenSSH does. idle bounds each wait on the
// proxy; the context bounds the whole.
func (a *Auth) Dial(ctx context.Context, addr string, idle time.Duration) (net.Conn, error) {
	p, err := a.Proxy()
	if err != nil {
		return nil, err
	}
	direct := &net.Dialer{Timeout: DialTimeout}
	switch {
	case p == nil:
		conn, err := direct.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, IOError(ctx, fmt.Errorf("connecting to %s: %w", addr, err), addr, idle, false)
		}
		return conn, nil
	case p.Scheme == "socks5":
		d, err := proxy.FromURL(p, direct)
		if err != nil {
			return nil, fmt.Errorf("%w: proxy %s: %v", ErrInvalidCredentials, p.Redacted(), err)
		}
		conn, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, IOError(ctx, fmt.Errorf("proxy %s: connecting to %s: %w", p.Redacted(), addr, err), addr, idle, false)
		}
		return conn, nil
	}
	pool, err := a.CertPool()
	if err != nil {
		return nil, err
	}
	return tunnel(ctx, p, pool, addr, idle)
}

// tunnel opens a connection to addr through an HTTP(S) proxy with CONNECT.
func tunnel(ctx context.Context, p *url.URL, pool *x509.CertPool, addr string, idle time.Duration) (net.Conn, error) {
	proxyAddr := p.Host
	if p.Port() == "" {
		proxyAddr = net.JoinHostPort(p.Hostname(), map[string]string{"http": "80", "https": "443"}[p.Scheme])
	}
	conn, err := (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, IOError(ctx, fmt.Errorf("proxy %s: %w", p.Redacted(), err), proxyAddr, idle, false)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	w := NewWatchdog(idle, func() { conn.Close() })
	w.Arm()
	defer w.Disarm()
	fail := func(err error) (net.Conn, error) {
		conn.Close()
		return nil, IOError(ctx, err, proxyAddr, idle, w.Fired())
	}
	if p.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.Hostname(), RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(RequestError(fmt.Errorf("proxy %s: %w", p.Redacted(), err), p.Hostname()))
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if p.User != nil {
		pass, _ := p.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pass)))
	}
	if err := req.Write(conn); err != nil {
		return fail(fmt.Errorf("proxy %s: %w", p.Redacted(), err))
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(fmt.Errorf("proxy %s: %w", p.Redacted(), err))
	}
	// The body of a refusal is not read: the connection is closed.
	if err := ProxyRefused(resp, p); err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("proxy %s refused a tunnel to %s: HTTP %s", p.Redacted(), addr, resp.Status))
	}
	// The server speaks first: its banner may be read already.
	return &bufferedConn{Conn: conn, r: br}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// IOError says why a network read, write or handshake with host failed:
// the context, the idle timeout (fired), or err.
func IOError(ctx context.Context, err error, host string, idle time.Duration, fired bool) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case fired:
		return fmt.Errorf("%s sent nothing for %s: %w", host, idle, os.ErrDeadlineExceeded)
	}
	return err
}

// Watchdog ends a connection that stays silent too long while we wait on
// it: Arm before a blocking call, Disarm after.
type Watchdog struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

// NewWatchdog returns a disarmed watchdog that calls fire after d armed.
func NewWatchdog(d time.Duration, fire func()) *Watchdog {
	w := &Watchdog{d: d}
	w.t = time.AfterFunc(d, func() { w.fired.Store(true); fire() })
	w.t.Stop()
	return w
}

// Arm starts the wait.
func (w *Watchdog) Arm() { w.t.Reset(w.d) }

// Disarm ends the wait.
func (w *Watchdog) Disarm() { w.t.Stop() }

// Fired reports whether the watchdog has fired.
func (w *Watchdog) Fired() bool { return w.fired.Load() }

// Capped keeps the first 4 KiB written to it: a server's stderr, for
// messages.
type Capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *Capped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := 4096 - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (c *Capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
