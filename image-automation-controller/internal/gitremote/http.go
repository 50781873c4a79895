package gitremote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// listHTTP speaks smart HTTP (gitprotocol-http(5)): GET info/refs, and with
// a v2 server, POST an ls-refs command to git-upload-pack.
func listHTTP(ctx context.Context, u *url.URL, opts Options, prefixes []string) (Refs, error) {
	tlsCfg, err := tlsConfig(opts.CAFile)
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if opts.Proxy != nil {
		proxy = http.ProxyURL(opts.Proxy)
	}
	tr := &http.Transport{
		Proxy:                 proxy,
		TLSClientConfig:       tlsCfg,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, CheckRedirect: checkRedirect}

	base := *u
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawQuery, base.Fragment = "", ""
	infoRefs := base
	infoRefs.Path += "/info/refs"
	infoRefs.RawQuery = "service=git-upload-pack"

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, infoRefs.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Git-Protocol", "version=2")
	resp, err := do(c, req, opts, "application/x-git-upload-pack-advertisement")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ad, err := readAdvertisement(newPktReader(limit(resp.Body)))
	if err != nil {
		return nil, fmt.Errorf("reading the ref advertisement of %s: %w", redactURL(u.String()), err)
	}
	if !ad.v2 {
		return ad.refs, nil
	}
	if _, ok := ad.caps["ls-refs"]; !ok {
		return nil, errors.New("the server speaks git protocol v2 but offers no ls-refs")
	}

	// After a redirect, git talks to where info/refs was found.
	final := *resp.Request.URL
	final.Path = strings.TrimSuffix(final.Path, "/info/refs")
	final.RawQuery = ""
	final.Path += "/git-upload-pack"
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, final.String(), bytes.NewReader(lsRefsRequest(ad.caps, prefixes)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	resp2, err := do(c, req, opts, "application/x-git-upload-pack-result")
	if err != nil {
		return nil, err
	}
	defer resp2.Body.Close()
	refs, err := readLsRefs(newPktReader(limit(resp2.Body)))
	if err != nil {
		return nil, fmt.Errorf("reading the refs of %s: %w", redactURL(u.String()), err)
	}
	return refs, nil
}

// do sends req with credentials and checks the status and content type.
func do(c *http.Client, req *http.Request, opts Options, wantType string) (*http.Response, error) {
	req.Header.Set("User-Agent", agent)
	switch {
	case opts.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+opts.BearerToken)
	case opts.Username != "" || opts.Password != "":
		req.SetBasicAuth(opts.Username, opts.Password)
	}
	where := redactURL(req.URL.String())
	resp, err := c.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is said below, without credentials
		}
		if isCertError(err) {
			return nil, &AuthError{Err: fmt.Errorf("%s %s: %w", req.Method, where, err)}
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, where, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err := fmt.Errorf("%s %s: HTTP %s", req.Method, where, resp.Status)
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
			return nil, &AuthError{Err: err}
		case http.StatusNotFound:
			return nil, fmt.Errorf("%w (no repository there, or it is private and the credentials do not reach it)", err)
		}
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != wantType {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: content type %q, want %q: not a smart git HTTP server", req.Method, where, ct, wantType)
	}
	return resp, nil
}

// checkRedirect follows at most 10 redirects and never from HTTPS to HTTP.
// The client drops the Authorization header when the host changes.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refusing a redirect from HTTPS to %s", redactURL(req.URL.String()))
	}
	return nil
}

// limit caps a response body; the pkt-line reader reports the truncation.
func limit(r io.Reader) io.Reader { return io.LimitReader(r, maxAdvertisement) }

// isCertError reports a server certificate that did not verify.
func isCertError(err error) bool {
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verr) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}
