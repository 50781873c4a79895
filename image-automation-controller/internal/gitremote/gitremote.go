// Package gitremote asks a git server which commit a ref points to, without
// cloning: the ref advertisement of git's upload-pack service (what
// `git ls-remote` reads), over smart HTTP(S) and SSH, in pure Go. Protocol
// v2's ls-refs is used when the server offers it, so only the asked-for refs
// travel; older servers send their whole advertisement.
package gitremote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// agent is how we introduce ourselves. Some hosting services serve the
// smart protocol only to user agents that start with "git/".
const agent = "git/2.0 (image-toolkit)"

// maxAdvertisement bounds the ref advertisement read from a server: a v0
// server sends every ref, and a hostile one could send without end.
const maxAdvertisement = 64 << 20

// Options are the credentials and transport settings for one repository.
type Options struct {
	// Username and Password authenticate over HTTP(S) (basic auth).
	Username, Password string
	// BearerToken authenticates over HTTP(S); it wins over Username.
	BearerToken string
	// CAFile holds PEM certificates trusted for HTTPS, in addition to the
	// system's.
	CAFile []byte
	// Identity is the PEM or OpenSSH private key for SSH; Password
	// decrypts it when it is encrypted.
	Identity []byte
	// KnownHosts lists the SSH host keys to accept (known_hosts format).
	KnownHosts []byte
	// Proxy is an HTTP proxy for HTTP(S) URLs, with credentials in its
	// user info; nil uses the environment (HTTPS_PROXY, NO_PROXY...).
	Proxy *url.URL
}

// Refs maps ref names to object names. For annotated tags the name with
// "^{}" appended holds the commit the tag points to.
type Refs map[string]string

// AuthError is a failure to authenticate: credentials refused or missing,
// an SSH host key known_hosts does not list, or a certificate that does not
// verify.
type AuthError struct{ Err error }

func (e *AuthError) Error() string { return e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// ListRefs returns the refs of the repository at rawURL whose names start
// with one of prefixes (all refs when none is given). The context bounds the
// whole exchange.
func ListRefs(ctx context.Context, rawURL string, opts Options, prefixes ...string) (Refs, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("invalid repository URL: %w", err)
	}
	var refs Refs
	switch u.Scheme {
	case "http", "https":
		refs, err = listHTTP(ctx, u, opts, prefixes)
	case "ssh":
		refs, err = listSSH(ctx, u, opts, prefixes)
	default:
		return nil, fmt.Errorf("unsupported URL scheme %q: want http, https or ssh", u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	return filter(refs, prefixes), nil
}

// Branch returns the commit the branch points to.
func Branch(ctx context.Context, rawURL string, opts Options, branch string) (string, error) {
	name := "refs/heads/" + branch
	refs, err := ListRefs(ctx, rawURL, opts, name)
	if err != nil {
		return "", err
	}
	oid, ok := refs[name]
	if !ok {
		return "", fmt.Errorf("branch %q not found in %s", branch, redactURL(rawURL))
	}
	return oid, nil
}

// filter keeps the refs under prefixes; a v0 server sends them all.
func filter(refs Refs, prefixes []string) Refs {
	if len(prefixes) == 0 {
		return refs
	}
	out := Refs{}
	for name, oid := range refs {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				out[name] = oid
				break
			}
		}
	}
	return out
}

// tlsConfig verifies servers against the system roots plus caFile.
func tlsConfig(caFile []byte) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caFile) == 0 {
		return cfg, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(caFile) {
		return nil, errors.New("ca.crt holds no PEM certificate")
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// redactURL drops the user info of a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
