package gitops

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	git2go "github.com/libgit2/git2go/v34"
)

// httpTransport speaks smart HTTP (gitprotocol-http(5)) for libgit2. It is
// stateless: every action is a request of its own.
type httpTransport struct{}

func (httpTransport) Action(remoteURL string, action git2go.SmartServiceAction) (git2go.SmartSubtransportStream, error) {
	s, err := lookup(remoteURL)
	if err != nil {
		return nil, err
	}
	switch action {
	case git2go.SmartServiceActionUploadpackLs:
		return s.infoRefs("git-upload-pack")
	case git2go.SmartServiceActionReceivepackLs:
		return s.infoRefs("git-receive-pack")
	case git2go.SmartServiceActionUploadpack:
		return s.newHTTPStream(http.MethodPost, "git-upload-pack"), nil
	case git2go.SmartServiceActionReceivepack:
		return s.newHTTPStream(http.MethodPost, "git-receive-pack"), nil
	}
	return nil, s.fail(fmt.Errorf("unknown git service action %d", action))
}

func (httpTransport) Close() error { return nil }
func (httpTransport) Free()        {}

// prepareHTTP makes the client of an HTTP(S) session.
func (s *session) prepareHTTP() error {
	u, err := url.Parse(s.url)
	if err != nil {
		return fmt.Errorf("%w: the repository URL is not a valid URL", ErrInvalidCredentials)
	}
	base := *u
	base.User, base.RawQuery, base.Fragment, base.RawFragment = nil, "", "", ""
	base.Path, base.RawPath = strings.TrimSuffix(base.Path, "/"), ""
	s.base = &base
	proxy := http.ProxyFromEnvironment
	if s.proxy != nil {
		proxy = http.ProxyURL(s.proxy)
	}
	dialer := &net.Dialer{Timeout: dialTimeout}
	s.client = &http.Client{
		Transport: &http.Transport{
			Proxy:               proxy,
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: dialTimeout,
			ForceAttemptHTTP2:   true,
			// A CONNECT refused is otherwise only its status text.
			OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
				return proxyRefused(resp, s.proxy)
			},
		},
		CheckRedirect: s.checkRedirect,
	}
	return nil
}

// proxyRefused says why a proxy refused a request, or nil.
func proxyRefused(resp *http.Response, proxy *url.URL) error {
	switch {
	case resp.StatusCode != http.StatusProxyAuthRequired:
		return nil
	case proxy != nil && proxy.User != nil:
		return fmt.Errorf("%w: the proxy refused its credentials (HTTP 407)", ErrAuthentication)
	}
	return fmt.Errorf("%w: the proxy wants credentials (HTTP 407) and the proxy Secret has none", ErrAuthentication)
}

// checkRedirect follows redirects of info/refs to the same host, as git
// does; git talks to where it found info/refs then. A redirect elsewhere
// is for the user to confirm, by changing the URL.
func (s *session) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	switch {
	case first.Method != http.MethodGet:
		return http.ErrUseLastResponse
	case len(via) >= 5:
		return fmt.Errorf("%s redirects more than 5 times", redact(s.url))
	case !strings.EqualFold(req.URL.Hostname(), first.URL.Hostname()):
		return fmt.Errorf("%s redirects to another host, %s: set the repository URL to it if that is right", redact(s.url), req.URL.Redacted())
	case first.URL.Scheme == "https" && req.URL.Scheme != "https":
		return fmt.Errorf("%s redirects from https to %s: refused", redact(s.url), req.URL.Redacted())
	}
	return nil
}

// service returns the URL of a path under the repository.
func (s *session) service(path, query string) string {
	u := *s.base
	u.Path += path
	u.RawQuery = query
	return u.String()
}

// infoRefs starts a fetch or push: GET info/refs, the refs advertisement.
func (s *session) infoRefs(service string) (git2go.SmartSubtransportStream, error) {
	h := s.newHTTPStream(http.MethodGet, service)
	if err := h.send(); err != nil {
		return nil, err
	}
	if final := h.resp.Request.URL; final.Path != s.base.Path+"/info/refs" {
		path, ok := strings.CutSuffix(final.Path, "/info/refs")
		if !ok {
			h.Free()
			return nil, s.fail(fmt.Errorf("%s redirects to %s, which is not a git repository URL", redact(s.url), final.Redacted()))
		}
		moved := *final
		moved.Path, moved.RawPath, moved.RawQuery = path, "", ""
		s.base = &moved
	}
	return h, nil
}

// httpStream is one request. For a POST, libgit2 writes the body, which
// is sent with a Content-Length when libgit2 first reads the response:
// CGI servers such as git http-backend need the length, and a job's push
// (a commit) is small enough to hold in memory.
type httpStream struct {
	s       *session
	method  string
	service string
	body    bytes.Buffer
	ctx     context.Context
	cancel  context.CancelFunc
	watch   *watchdog
	resp    *http.Response
	err     error // returned by the next Read
}

func (s *session) newHTTPStream(method, service string) *httpStream {
	ctx, cancel := context.WithCancel(s.ctx)
	h := &httpStream{s: s, method: method, service: service, ctx: ctx, cancel: cancel}
	h.watch = newWatchdog(s.idle, cancel)
	s.onClose(h.Free)
	return h
}

func (h *httpStream) Write(p []byte) (int, error) {
	if h.method != http.MethodPost || h.resp != nil {
		return 0, h.s.fail(errors.New("libgit2 wrote to a finished HTTP request"))
	}
	return h.body.Write(p)
}

func (h *httpStream) Read(p []byte) (int, error) {
	if h.resp == nil && h.err == nil {
		h.err = h.send()
	}
	if h.err != nil {
		return 0, h.err
	}
	h.watch.arm()
	n, err := h.resp.Body.Read(p)
	h.watch.disarm()
	switch {
	case err == io.EOF:
		h.err = io.EOF
	case err != nil:
		h.err = h.s.fail(h.s.ioError(fmt.Errorf("reading the response of %s: %w", h.service, err), h.watch.fired.Load()))
	}
	if n > 0 {
		return n, nil // the error, if any, comes with the next read
	}
	return 0, h.err
}

func (h *httpStream) Free() {
	h.watch.disarm()
	if h.resp != nil {
		h.resp.Body.Close()
	}
	h.cancel()
}

// send makes the request and checks the response's status and type.
func (h *httpStream) send() error {
	s := h.s
	var req *http.Request
	var err error
	if h.method == http.MethodGet {
		req, err = http.NewRequestWithContext(h.ctx, http.MethodGet, s.service("/info/refs", "service="+h.service), nil)
	} else {
		req, err = http.NewRequestWithContext(h.ctx, http.MethodPost, s.service("/"+h.service, ""), bytes.NewReader(h.body.Bytes()))
	}
	if err != nil {
		return s.fail(err)
	}
	wantType := "application/x-" + h.service + "-advertisement"
	if h.method == http.MethodGet {
		req.Header.Set("Accept", "*/*")
		req.Header.Set("Pragma", "no-cache")
	} else {
		req.Header.Set("Content-Type", "application/x-"+h.service+"-request")
		wantType = "application/x-" + h.service + "-result"
		req.Header.Set("Accept", wantType)
	}
	req.Header.Set("User-Agent", userAgent)
	switch a := s.auth; {
	case a != nil && a.BearerToken != "" && s.base.Scheme == "https":
		req.Header.Set("Authorization", "Bearer "+a.BearerToken)
	case a != nil && a.Username != "":
		req.SetBasicAuth(a.Username, a.Password)
	default:
		// Credentials in the URL, as git takes them.
		if u, _ := url.Parse(s.url); u != nil && u.User != nil {
			p, _ := u.User.Password()
			req.SetBasicAuth(u.User.Username(), p)
		}
	}

	h.watch.arm()
	resp, err := s.client.Do(req)
	h.watch.disarm()
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is in the message of the operation
		}
		var cert *tls.CertificateVerificationError
		if errors.As(err, &cert) {
			err = fmt.Errorf("TLS certificate of %s: %w", req.URL.Hostname(), cert.Err)
		}
		return s.fail(s.ioError(err, h.watch.fired.Load()))
	}
	h.resp = resp
	if resp.StatusCode != http.StatusOK {
		h.watch.arm() // statusError reads the body
		defer h.watch.disarm()
		return s.fail(s.statusError(resp))
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != wantType {
		return s.fail(fmt.Errorf("%s %s answered with content type %q, not %q: not a smart git HTTP server",
			req.Method, req.URL.Redacted(), ct, wantType))
	}
	return nil
}

// statusError explains a response other than 200.
func (s *session) statusError(resp *http.Response) error {
	code := resp.StatusCode
	switch a := s.auth; {
	case code == http.StatusProxyAuthRequired:
		return proxyRefused(resp, s.proxy)
	case code != http.StatusUnauthorized && code != http.StatusForbidden:
	case a != nil && a.BearerToken != "":
		return fmt.Errorf("%w: the server refused the bearer token (HTTP %d)", ErrAuthentication, code)
	case a != nil && a.Username != "":
		return fmt.Errorf("%w: the server refused the username and password (HTTP %d)", ErrAuthentication, code)
	default:
		return fmt.Errorf("%w: the server wants credentials (HTTP %d) and none are set", ErrAuthentication, code)
	}
	msg := fmt.Sprintf("%s %s: HTTP %s", resp.Request.Method, resp.Request.URL.Redacted(), resp.Status)
	if code == http.StatusNotFound {
		msg += " (no repository there, or it is private and the credentials do not reach it)"
	}
	if text := firstLine(resp.Body); text != "" {
		msg += ": " + text
	}
	return errors.New(s.scrub(msg))
}

// firstLine returns the start of an error page's first line, printable.
func firstLine(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 200))
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, line))
}
