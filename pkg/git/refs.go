package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// maxAdvertisement bounds the ref advertisement read from a server: a v0
// server sends every ref, and a hostile one could send without end.
const maxAdvertisement = 64 << 20

// listResponseTimeout bounds the wait for a ref listing's response headers.
const listResponseTimeout = 30 * time.Second

// Refs maps ref names to object names. For annotated tags the name with
// "^{}" appended holds the commit the tag points to.
type Refs map[string]string

// ListRefs asks the server which objects the refs of the repository at
// repoURL whose names start with one of prefixes (all refs when none is
// given) point to, without cloning: the ref advertisement of git's
// upload-pack service (what `git ls-remote` reads), over smart HTTP(S) and
// SSH. Protocol v2's ls-refs is used when the server offers it, so only the
// asked-for refs travel; older servers send their whole advertisement. The
// context bounds the whole exchange.
func ListRefs(ctx context.Context, repoURL string, auth *Auth, prefixes ...string) (Refs, error) {
	ep, err := ParseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	// A provider's token is asked for now, not when the Auth was read.
	if auth, err = auth.Fresh(ctx); err != nil {
		return nil, err
	}
	refs, _, err := list(ctx, ep, auth, prefixes, false)
	if err != nil {
		return nil, err
	}
	return filter(refs, prefixes), nil
}

// list lists the refs under prefixes and, with symrefs, the symbolic refs'
// targets (HEAD → refs/heads/main) the server names.
func list(ctx context.Context, ep Endpoint, auth *Auth, prefixes []string, symrefs bool) (Refs, map[string]string, error) {
	if ep.Scheme == "ssh" {
		return listSSH(ctx, ep, auth, prefixes, symrefs)
	}
	return listHTTP(ctx, ep, auth, prefixes, symrefs)
}

// DefaultBranch is the branch the repository's HEAD names, as git clone
// checks it out.
func DefaultBranch(ctx context.Context, repoURL string, auth *Auth) (string, error) {
	ep, err := ParseEndpoint(repoURL)
	if err != nil {
		return "", err
	}
	if auth, err = auth.Fresh(ctx); err != nil {
		return "", err
	}
	_, sym, err := list(ctx, ep, auth, []string{"HEAD"}, true)
	if err != nil {
		return "", err
	}
	branch, ok := strings.CutPrefix(sym["HEAD"], "refs/heads/")
	if !ok || branch == "" {
		return "", fmt.Errorf("%s names no default branch (its HEAD is not a symbolic ref to a branch)", Redact(repoURL))
	}
	return branch, nil
}

// Branch returns the commit the branch points to.
func Branch(ctx context.Context, repoURL string, auth *Auth, branch string) (string, error) {
	name := "refs/heads/" + branch
	refs, err := ListRefs(ctx, repoURL, auth, name)
	if err != nil {
		return "", err
	}
	oid, ok := refs[name]
	if !ok {
		return "", fmt.Errorf("branch %q not found in %s", branch, Redact(repoURL))
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

// listHTTP speaks smart HTTP (gitprotocol-http(5)): GET info/refs, and with
// a v2 server, POST an ls-refs command to git-upload-pack.
func listHTTP(ctx context.Context, ep Endpoint, auth *Auth, prefixes []string, symrefs bool) (Refs, map[string]string, error) {
	c, err := auth.HTTPClient(ep.URL)
	if err != nil {
		return nil, nil, err
	}
	defer c.CloseIdleConnections()
	// A ref listing needs no server-side work before the answer starts,
	// unlike a push that runs hooks: a silent server is given up on early.
	c.Transport.(*http.Transport).ResponseHeaderTimeout = listResponseTimeout
	u, err := url.Parse(ep.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the repository URL is not a valid URL", ErrInvalidCredentials)
	}
	base := *u
	base.User, base.RawQuery, base.Fragment, base.RawFragment = nil, "", "", ""
	base.Path, base.RawPath = strings.TrimSuffix(base.Path, "/"), ""
	infoRefs := base
	infoRefs.Path += "/info/refs"
	infoRefs.RawQuery = "service=git-upload-pack"

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, infoRefs.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Git-Protocol", "version=2")
	resp, err := do(c, req, auth, ep.URL, "application/x-git-upload-pack-advertisement")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	ad, err := readAdvertisement(newPktReader(limit(resp.Body)))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the ref advertisement of %s: %w", base.String(), err)
	}
	if !ad.v2 {
		return ad.refs, ad.symrefs, nil
	}
	if _, ok := ad.caps["ls-refs"]; !ok {
		return nil, nil, errors.New("the server speaks git protocol v2 but offers no ls-refs")
	}

	// After a redirect, git talks to where info/refs was found.
	final := *resp.Request.URL
	final.Path = strings.TrimSuffix(final.Path, "/info/refs")
	final.RawQuery = ""
	final.Path += "/git-upload-pack"
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, final.String(), bytes.NewReader(lsRefsRequest(ad.caps, prefixes, symrefs)))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	resp2, err := do(c, req, auth, ep.URL, "application/x-git-upload-pack-result")
	if err != nil {
		return nil, nil, err
	}
	defer resp2.Body.Close()
	refs, err := readLsRefs(newPktReader(limit(resp2.Body)), ad.symrefs)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the refs of %s: %w", base.String(), err)
	}
	return refs, ad.symrefs, nil
}

// do sends req with credentials and checks the status and content type.
func do(c *http.Client, req *http.Request, auth *Auth, repoURL, wantType string) (*http.Response, error) {
	auth.Authorize(req, repoURL)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), RequestError(err, req.URL.Hostname()))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, auth.StatusError(resp)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != wantType {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: content type %q, want %q: not a smart git HTTP server", req.Method, req.URL.Redacted(), ct, wantType)
	}
	return resp, nil
}

// limit caps a response body; the pkt-line reader reports the truncation.
func limit(r io.Reader) io.Reader { return io.LimitReader(r, maxAdvertisement) }

// listSSH runs git-upload-pack on the server over SSH (through the proxy,
// if any) and reads its ref advertisement. The host key must be in
// known_hosts.
func listSSH(ctx context.Context, ep Endpoint, auth *Auth, prefixes []string, symrefs bool) (Refs, map[string]string, error) {
	cfg, err := auth.SSHConfig(ep)
	if err != nil {
		return nil, nil, err
	}
	addr := ep.Addr()
	conn, err := auth.Dial(ctx, addr, DialTimeout)
	if err != nil {
		return nil, nil, err
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
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, nil, wrap(err)
		}
		return nil, nil, auth.HandshakeError(err, cfg, addr)
	}
	client := ssh.NewClient(sc, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return nil, nil, wrap(err)
	}
	defer sess.Close()
	// Servers that accept the variable speak v2; OpenSSH refuses it
	// unless AcceptEnv allows it, and v0 is the answer then.
	_ = sess.Setenv("GIT_PROTOCOL", "version=2")
	stdin, err := sess.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	stderr := &Capped{}
	sess.Stderr = stderr
	if err := sess.Start("git-upload-pack " + ShellQuote(ep.Path)); err != nil {
		return nil, nil, wrap(fmt.Errorf("starting git-upload-pack on %s: %w", addr, err))
	}
	r := newPktReader(limit(stdout))
	ad, err := readAdvertisement(r)
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, auth.Scrub(msg))
		}
		return nil, nil, wrap(fmt.Errorf("reading the ref advertisement of %s: %w", Redact(ep.URL), err))
	}
	refs := ad.refs
	if ad.v2 {
		if _, ok := ad.caps["ls-refs"]; !ok {
			return nil, nil, errors.New("the server speaks git protocol v2 but offers no ls-refs")
		}
		if _, err := stdin.Write(lsRefsRequest(ad.caps, prefixes, symrefs)); err != nil {
			return nil, nil, wrap(err)
		}
		if refs, err = readLsRefs(r, ad.symrefs); err != nil {
			return nil, nil, wrap(fmt.Errorf("reading the refs of %s: %w", Redact(ep.URL), err))
		}
	}
	// A flush says we want nothing; upload-pack exits.
	_, _ = io.WriteString(stdin, flushPkt)
	_ = stdin.Close()
	return refs, ad.symrefs, nil
}
