package git

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// UserAgent starts with git/, which some hosting services require of smart
// HTTP clients.
const UserAgent = "git/2.0 (image-toolkit)"

// DialTimeout bounds a TCP connect or TLS handshake when the context
// allows longer.
const DialTimeout = 30 * time.Second

// HTTPClient is the client for the smart HTTP(S) remote at repoURL: TLS
// verified against the system's roots plus ca.crt, the Secret's proxy (or
// the environment's), bounded connects, and redirects followed only as git
// follows them. The caller bounds each request with its context.
func (a *Auth) HTTPClient(repoURL string) (*http.Client, error) {
	pool, err := a.CertPool()
	if err != nil {
		return nil, err
	}
	certs, err := a.clientCertificates()
	if err != nil {
		return nil, err
	}
	p, err := a.Proxy()
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if p != nil {
		proxy = http.ProxyURL(p)
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               proxy,
			DialContext:         (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: DialTimeout,
			ForceAttemptHTTP2:   true,
			// A CONNECT refused is otherwise only its status text.
			OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
				return ProxyRefused(resp, p)
			},
		},
		CheckRedirect: checkRedirect(repoURL),
	}, nil
}

// checkRedirect follows redirects of info/refs to the same host, as git
// does; git talks to where it found info/refs then. A redirect elsewhere is
// for the user to confirm, by changing the URL; never from https to http.
func checkRedirect(repoURL string) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		switch {
		case first.Method != http.MethodGet:
			return http.ErrUseLastResponse
		case len(via) >= 5:
			return fmt.Errorf("%s redirects more than 5 times", Redact(repoURL))
		case !strings.EqualFold(req.URL.Hostname(), first.URL.Hostname()):
			return fmt.Errorf("%s redirects to another host, %s: set the repository URL to it if that is right", Redact(repoURL), req.URL.Redacted())
		case first.URL.Scheme == "https" && req.URL.Scheme != "https":
			return fmt.Errorf("%s redirects from https to %s: refused", Redact(repoURL), req.URL.Redacted())
		}
		return nil
	}
}

// Authorize sets the user agent and the credentials on a request to the
// repository at repoURL: the bearer token (over https only), else username
// and password, else credentials written in the URL, as git takes them.
func (a *Auth) Authorize(req *http.Request, repoURL string) {
	req.Header.Set("User-Agent", UserAgent)
	switch {
	case a != nil && a.BearerToken != "" && req.URL.Scheme == "https":
		req.Header.Set("Authorization", "Bearer "+a.BearerToken)
	case a != nil && a.Username != "":
		req.SetBasicAuth(a.Username, a.Password)
	default:
		if u, _ := url.Parse(repoURL); u != nil && u.User != nil {
			p, _ := u.User.Password()
			req.SetBasicAuth(u.User.Username(), p)
		}
	}
}

// RequestError explains a request that got no response: a certificate
// that did not verify wraps ErrAuthentication (ca.crt must change); the
// URL, which may hold credentials, is left out.
func RequestError(err error, host string) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &cert):
		return fmt.Errorf("%w: TLS certificate of %s: %w", ErrAuthentication, host, cert.Err)
	case errors.As(err, &unknown) || errors.As(err, &hostErr) || errors.As(err, &invalid):
		return fmt.Errorf("%w: TLS certificate of %s: %w", ErrAuthentication, host, err)
	}
	return err
}

// ProxyRefused says why a proxy refused a request, or nil.
func ProxyRefused(resp *http.Response, proxy *url.URL) error {
	switch {
	case resp.StatusCode != http.StatusProxyAuthRequired:
		return nil
	case proxy != nil && proxy.User != nil:
		return fmt.Errorf("%w: the proxy refused its credentials (HTTP 407)", ErrAuthentication)
	}
	return fmt.Errorf("%w: the proxy wants credentials (HTTP 407) and the proxy Secret has none", ErrAuthentication)
}

// StatusError explains a response other than 200 from the repository:
// refused credentials wrap ErrAuthentication; otherwise the status and the
// first line of the error page, scrubbed of a's secrets. It reads at most
// 200 bytes of the body.
func (a *Auth) StatusError(resp *http.Response) error {
	code := resp.StatusCode
	switch {
	case code == http.StatusProxyAuthRequired:
		p, _ := a.Proxy()
		return ProxyRefused(resp, p)
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
	return errors.New(a.Scrub(msg))
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
