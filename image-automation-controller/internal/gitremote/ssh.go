package gitremote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"toolkit.dev/image-toolkit/pkg/gitssh"
)

// listSSH runs git-upload-pack on the server over SSH and reads its ref
// advertisement. The host key must be in KnownHosts.
func listSSH(ctx context.Context, u *url.URL, opts Options, prefixes []string) (Refs, error) {
	if opts.Proxy != nil {
		return nil, errors.New("a proxy is only supported for http and https URLs")
	}
	if len(opts.Identity) == 0 {
		return nil, errors.New("SSH needs a private key (identity)")
	}
	signer, err := ParseIdentity(opts.Identity, opts.Password)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "22"
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	hostKeys, algos, err := hostKeyCallback(opts.KnownHosts, addr)
	if err != nil {
		return nil, err
	}
	user := u.User.Username()
	if user == "" {
		user = "git"
	}
	cfg := &ssh.ClientConfig{
		User:              user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   hostKeys,
		HostKeyAlgorithms: algos,
		ClientVersion:     "SSH-2.0-image-toolkit",
	}

	conn, err := (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// Cancellation without a deadline still ends every read and write.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	wrap := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", addr, ctx.Err())
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection's deadline is the context's, which may
			// not have fired yet.
			return fmt.Errorf("%s: %w", addr, context.DeadlineExceeded)
		}
		return err
	}

	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		var keyErr *knownhosts.KeyError
		var revoked *knownhosts.RevokedError
		if errors.As(err, &keyErr) || errors.As(err, &revoked) {
			return nil, &AuthError{Err: fmt.Errorf("host key of %s not accepted by known_hosts: %w", addr, err)}
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, &AuthError{Err: fmt.Errorf("%s refused the key: %w", addr, err)}
		}
		return nil, wrap(fmt.Errorf("SSH handshake with %s: %w", addr, err))
	}
	client := ssh.NewClient(sc, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return nil, wrap(err)
	}
	defer sess.Close()
	// Servers that accept the variable speak v2; OpenSSH refuses it
	// unless AcceptEnv allows it, and v0 is the answer then.
	_ = sess.Setenv("GIT_PROTOCOL", "version=2")
	stdin, err := sess.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &capped{max: 4096}
	sess.Stderr = stderr
	if err := sess.Start("git-upload-pack " + gitssh.ShellQuote(repoPath(u.Path))); err != nil {
		return nil, wrap(fmt.Errorf("starting git-upload-pack on %s: %w", addr, err))
	}
	r := newPktReader(limit(stdout))
	ad, err := readAdvertisement(r)
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return nil, wrap(fmt.Errorf("reading the ref advertisement of %s: %w", redactURL(u.String()), err))
	}
	refs := ad.refs
	if ad.v2 {
		if _, ok := ad.caps["ls-refs"]; !ok {
			return nil, errors.New("the server speaks git protocol v2 but offers no ls-refs")
		}
		if _, err := stdin.Write(lsRefsRequest(ad.caps, prefixes)); err != nil {
			return nil, wrap(err)
		}
		if refs, err = readLsRefs(r); err != nil {
			return nil, wrap(fmt.Errorf("reading the refs of %s: %w", redactURL(u.String()), err))
		}
	}
	// A flush says we want nothing; upload-pack exits.
	_, _ = io.WriteString(stdin, flushPkt)
	_ = stdin.Close()
	return refs, nil
}

// ParseIdentity parses a PEM or OpenSSH private key, decrypting it with
// password when it is encrypted.
func ParseIdentity(key []byte, password string) (ssh.Signer, error) {
	signer, err := gitssh.Identity(key, password)
	switch {
	case errors.Is(err, gitssh.ErrEncrypted):
		return nil, errors.New("the identity is encrypted and the Secret has no password")
	case errors.Is(err, gitssh.ErrWrongPassword):
		return nil, fmt.Errorf("decrypting the identity: %w", err)
	case err != nil:
		return nil, fmt.Errorf("parsing the identity: %w", err)
	}
	return signer, nil
}

// hostKeyCallback checks host keys against knownHosts, and returns the
// host key algorithms known for addr, so that the server presents a key of
// a type we can check rather than its first preference.
func hostKeyCallback(knownHosts []byte, addr string) (ssh.HostKeyCallback, []string, error) {
	if len(bytes.TrimSpace(knownHosts)) == 0 {
		return nil, nil, errors.New("SSH needs known_hosts: host keys are always checked")
	}
	cb, err := knownHostsFromBytes(knownHosts)
	if err != nil {
		return nil, nil, err
	}
	keys, ok := gitssh.KnownKeys(cb, addr)
	switch {
	case !ok:
		return cb, nil, nil
	case len(keys) == 0 && bytes.Contains(knownHosts, []byte("@cert-authority")):
		// Certificates are checked against the authorities instead.
		return cb, nil, nil
	case len(keys) == 0:
		return nil, nil, &AuthError{Err: fmt.Errorf("known_hosts has no key for %s", knownhosts.Normalize(addr))}
	}
	return cb, gitssh.HostKeyAlgorithms(keys), nil
}

// knownHostsFromBytes parses known_hosts.
func knownHostsFromBytes(b []byte) (ssh.HostKeyCallback, error) {
	cb, err := gitssh.KnownHosts(b)
	if err != nil {
		return nil, fmt.Errorf("parsing known_hosts: %w", err)
	}
	return cb, nil
}

// repoPath is the path git passes to git-upload-pack: ssh://host/~user/x
// means ~user/x.
func repoPath(p string) string {
	if strings.HasPrefix(p, "/~") {
		return p[1:]
	}
	return p
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
