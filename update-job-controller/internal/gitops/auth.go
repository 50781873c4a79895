package gitops

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	git2go "github.com/libgit2/git2go/v34"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Auth holds credentials, trust and proxy for a remote.
type Auth struct {
	// Username and Password are HTTPS basic credentials. For SSH, Username
	// is the login when the URL names none (default "git").
	Username, Password string
	// BearerToken is sent over HTTPS as "Authorization: Bearer".
	BearerToken string
	// CAPEM adds trusted certificate authorities for HTTPS; TLS is always
	// verified.
	CAPEM []byte
	// Identity is an SSH private key (OpenSSH or PEM), ed25519 or ECDSA:
	// libssh2 1.10 signs RSA keys with SHA-1 only, which OpenSSH 8.8 and
	// later refuse.
	Identity []byte
	// IdentityPassword decrypts Identity.
	IdentityPassword string
	// KnownHosts is required for ssh URLs: a host key not in it is refused.
	KnownHosts []byte
	// ProxyURL, e.g. http://user:pass@proxy:3128, is used for HTTPS
	// remotes: libgit2 1.5 tunnels with CONNECT, and ignores proxies for
	// http:// and ssh://. Empty: libgit2 looks for one in the git config
	// and the environment (https_proxy...).
	ProxyURL string

	// decoded is Identity decrypted by AuthFromSecrets, so that a job's
	// fetch and push do not run the (slow, bcrypt) KDF again. It is only
	// written before the Auth is shared, and used while Identity and
	// IdentityPassword are still what it was made from.
	decoded *decodedIdentity
}

type decodedIdentity struct {
	identity []byte
	password string
	key      *sshIdentity
}

// ErrInvalidCredentials: the credentials cannot work whatever the server
// says (missing or malformed fields); retrying does not help.
var ErrInvalidCredentials = errors.New("invalid credentials")

// ErrAuthentication: the server refused the credentials.
var ErrAuthentication = errors.New("authentication failed")

// endpoint is what the credentials depend on in a repository URL.
type endpoint struct {
	scheme     string // http, https or ssh
	host, port string // port is set for ssh only
	user       string
}

// scpLike is git's short form for ssh: [user@]host:path.
var scpLike = regexp.MustCompile(`^(?:([^@/]+)@)?([^:/]+):(.*)$`)

func parseEndpoint(raw string) (endpoint, error) {
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return endpoint{}, fmt.Errorf("%w: the repository URL %q is neither a URL nor user@host:path", ErrInvalidCredentials, redact(raw))
		}
		return endpoint{scheme: "ssh", host: m[2], port: "22", user: m[1]}, nil
	}
	scheme := strings.ToLower(raw[:strings.Index(raw, "://")])
	if scheme != "http" && scheme != "https" && scheme != "ssh" {
		return endpoint{}, fmt.Errorf("%w: unsupported URL scheme %q (want https, http or ssh)", ErrInvalidCredentials, scheme)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		// url.Parse errors quote the URL, which may hold a password.
		return endpoint{}, fmt.Errorf("%w: the repository URL is not a valid URL", ErrInvalidCredentials)
	}
	ep := endpoint{scheme: scheme, host: u.Hostname(), user: u.User.Username()}
	if ep.scheme == "ssh" {
		if ep.port = u.Port(); ep.port == "" {
			ep.port = "22"
		}
	}
	return ep, nil
}

// AuthFromSecrets builds Auth for a repository URL from the data of the
// credentials Secret and of the proxy Secret (either may be nil), with
// Flux's keys. Errors wrap ErrInvalidCredentials and never hold a secret.
func AuthFromSecrets(repoURL string, creds, proxy map[string][]byte) (*Auth, error) {
	ep, err := parseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidCredentials, fmt.Sprintf(format, args...))
	}
	a := &Auth{}
	switch ep.scheme {
	case "ssh":
		a.Identity, a.IdentityPassword, a.KnownHosts = creds["identity"], string(creds["password"]), creds["known_hosts"]
		a.Username = string(creds["username"])
		if len(a.Identity) == 0 {
			return nil, invalid("an ssh URL needs an identity (private key) in the credentials Secret")
		}
		if len(a.KnownHosts) == 0 {
			return nil, invalid("an ssh URL needs known_hosts in the credentials Secret")
		}
		key, err := a.decodeIdentity()
		if err != nil {
			return nil, err
		}
		a.decoded = &decodedIdentity{identity: bytes.Clone(a.Identity), password: a.IdentityPassword, key: key}
		if _, err := parseKnownHosts(a.KnownHosts); err != nil {
			return nil, err
		}
	case "http", "https":
		a.Username, a.Password = string(creds["username"]), string(creds["password"])
		a.BearerToken, a.CAPEM = string(creds["bearerToken"]), creds["ca.crt"]
		switch {
		case a.Username != "" && a.Password == "":
			return nil, invalid("username is set without password")
		case a.Username == "" && a.Password != "":
			return nil, invalid("password is set without username")
		case a.BearerToken != "" && a.Username != "":
			return nil, invalid("username/password and bearerToken cannot be used together")
		case a.BearerToken != "" && ep.scheme == "http":
			return nil, invalid("a bearerToken is not sent over plain http://; use https://")
		}
		if ep.scheme == "http" {
			a.CAPEM = nil
		}
		if _, err := a.certPool(); err != nil {
			return nil, err
		}
	}
	if proxy != nil {
		// libgit2 1.5 would connect directly, unknown to the user.
		switch ep.scheme {
		case "ssh":
			return nil, invalid("a proxy is not supported for ssh URLs (libgit2 1.5 connects directly)")
		case "http":
			return nil, invalid("a proxy is only used for https:// URLs (libgit2 1.5 connects to http:// directly)")
		}
		if a.ProxyURL, err = proxyURL(proxy); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// proxyURL builds the proxy URL from the proxy Secret: address, and
// optional username and password.
func proxyURL(data map[string][]byte) (string, error) {
	addr := strings.TrimSpace(string(data["address"]))
	if addr == "" {
		return "", fmt.Errorf("%w: the proxy Secret has no address", ErrInvalidCredentials)
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		// Neither the address nor the parse error: either may hold a password.
		return "", fmt.Errorf("%w: the proxy address is not a URL like http://host:port", ErrInvalidCredentials)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: proxy scheme %q is not supported by libgit2 (want http or https)", ErrInvalidCredentials, u.Scheme)
	}
	user, pass := string(data["username"]), string(data["password"])
	switch {
	case user != "":
		u.User = url.UserPassword(user, pass)
	case pass != "":
		return "", fmt.Errorf("%w: the proxy Secret has a password without username", ErrInvalidCredentials)
	}
	u.Path = ""
	return u.String(), nil
}

// sshIdentity is Identity decrypted and re-encoded for libssh2.
type sshIdentity struct {
	public  string // authorized_keys line
	private string // unencrypted OpenSSH PEM
	rsa     bool
}

func (a *Auth) sshKey() (*sshIdentity, error) {
	if d := a.decoded; d != nil && bytes.Equal(d.identity, a.Identity) && d.password == a.IdentityPassword {
		return d.key, nil
	}
	return a.decodeIdentity()
}

func (a *Auth) decodeIdentity() (*sshIdentity, error) {
	raw, err := ssh.ParseRawPrivateKey(a.Identity)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing) && a.IdentityPassword == "":
		return nil, fmt.Errorf("%w: the identity is encrypted and no password is set", ErrInvalidCredentials)
	case errors.As(err, &missing):
		raw, err = ssh.ParseRawPrivateKeyWithPassphrase(a.Identity, []byte(a.IdentityPassword))
		if errors.Is(err, x509.IncorrectPasswordError) || (err != nil && strings.Contains(err.Error(), "decrypt")) {
			return nil, fmt.Errorf("%w: the password does not decrypt the identity", ErrInvalidCredentials)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the identity is not a private key: %v", ErrInvalidCredentials, err)
	}
	signer, err := ssh.NewSignerFromKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: identity: %v", ErrInvalidCredentials, err)
	}
	// libssh2 reads unencrypted OpenSSH keys of every type from memory;
	// decrypting here also spares it bcrypt and PEM cipher variants.
	block, err := ssh.MarshalPrivateKey(raw, "")
	if err != nil {
		return nil, fmt.Errorf("%w: identity: %v", ErrInvalidCredentials, err)
	}
	_, isRSA := raw.(*rsa.PrivateKey)
	return &sshIdentity{
		public:  strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		private: string(pem.EncodeToMemory(block)),
		rsa:     isRSA,
	}, nil
}

// parseKnownHosts reads known_hosts with x/crypto's parser, which handles
// markers, patterns, [host]:port and hashed names. It only reads files.
func parseKnownHosts(data []byte) (ssh.HostKeyCallback, error) {
	dir, err := os.MkdirTemp("", "known-hosts-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidCredentials, strings.ReplaceAll(err.Error(), file, "known_hosts"))
	}
	return cb, nil
}

// checkHostKey accepts key only when known_hosts lists it for host:port.
func checkHostKey(cb ssh.HostKeyCallback, host, port string, key ssh.PublicKey) error {
	name := knownhosts.Normalize(net.JoinHostPort(host, port))
	err := cb(net.JoinHostPort(host, port), &net.TCPAddr{IP: net.IPv4zero, Port: 0}, key)
	var keyErr *knownhosts.KeyError
	var revoked *knownhosts.RevokedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &revoked):
		return fmt.Errorf("the %s host key of %s is revoked in known_hosts", key.Type(), name)
	case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
		return fmt.Errorf("host %s is not in known_hosts (it offered %s %s)", name, key.Type(), ssh.FingerprintSHA256(key))
	case errors.As(err, &keyErr):
		known := make([]string, 0, len(keyErr.Want))
		for _, k := range keyErr.Want {
			known = append(known, k.Key.Type()+" "+ssh.FingerprintSHA256(k.Key))
		}
		return fmt.Errorf("the host key of %s does not match known_hosts: it offered %s %s, known_hosts has %s",
			name, key.Type(), ssh.FingerprintSHA256(key), strings.Join(known, ", "))
	}
	return fmt.Errorf("checking the host key of %s: %w", name, err)
}

func (a *Auth) certPool() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if a != nil && len(a.CAPEM) > 0 && !pool.AppendCertsFromPEM(a.CAPEM) {
		return nil, fmt.Errorf("%w: ca.crt holds no PEM certificate", ErrInvalidCredentials)
	}
	return pool, nil
}

// session is what one fetch or push needs from Auth, prepared before
// any network traffic so that bad credentials fail early.
type session struct {
	auth      *Auth
	ep        endpoint
	key       *sshIdentity
	hostKeys  ssh.HostKeyCallback
	pool      *x509.CertPool
	failure   error // why a callback aborted the operation
	attempts  int
	userAsked int
	ctx       context.Context
	callbacks git2go.RemoteCallbacks
}

func (a *Auth) session(ctx context.Context, repoURL string) (*session, error) {
	ep, err := parseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	s := &session{auth: a, ep: ep, ctx: ctx}
	if s.pool, err = a.certPool(); err != nil {
		return nil, err
	}
	if ep.scheme == "ssh" {
		if a == nil || len(a.KnownHosts) == 0 {
			return nil, fmt.Errorf("%w: an ssh URL needs known_hosts", ErrInvalidCredentials)
		}
		if s.hostKeys, err = parseKnownHosts(a.KnownHosts); err != nil {
			return nil, err
		}
		if len(a.Identity) > 0 {
			if s.key, err = a.sshKey(); err != nil {
				return nil, err
			}
		}
	}
	s.callbacks = git2go.RemoteCallbacks{
		CredentialsCallback:      s.credentials,
		CertificateCheckCallback: s.checkCertificate,
		TransferProgressCallback: func(git2go.TransferProgress) error { return ctx.Err() },
		PushTransferProgressCallback: func(uint32, uint32, uint) error {
			return ctx.Err()
		},
		SidebandProgressCallback: func(string) error { return ctx.Err() },
	}
	return s, nil
}

// fail records why a callback aborted; libgit2 reports only "callback
// error".
func (s *session) fail(err error) error {
	s.failure = err
	return err
}

// credentials answers libgit2's requests. libgit2 asks again each time
// the server refuses, forever: give up after one retry.
func (s *session) credentials(_, urlUser string, allowed git2go.CredentialType) (*git2go.Credential, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, s.fail(err)
	}
	a := s.auth
	sshUser := urlUser
	if sshUser == "" && a != nil {
		sshUser = a.Username
	}
	if sshUser == "" {
		sshUser = "git"
	}
	if allowed&git2go.CredentialTypeUsername != 0 {
		if s.userAsked++; s.userAsked > 2 {
			return nil, s.fail(fmt.Errorf("%w: the server refused the user %q", ErrAuthentication, sshUser))
		}
		return git2go.NewCredentialUsername(sshUser)
	}
	s.attempts++
	if s.attempts > 2 {
		reason := "the server refused the credentials"
		if s.key != nil && s.key.rsa {
			reason += " (libssh2 1.10 signs RSA keys with SHA-1, which OpenSSH 8.8 and later refuse: use an ed25519 or ECDSA identity)"
		}
		return nil, s.fail(fmt.Errorf("%w: %s", ErrAuthentication, reason))
	}
	switch {
	case allowed&(git2go.CredentialTypeSSHKey|git2go.CredentialTypeSSHMemory) != 0 && s.key != nil:
		return git2go.NewCredentialSSHKeyFromMemory(sshUser, s.key.public, s.key.private, "")
	case allowed&git2go.CredentialTypeUserpassPlaintext != 0 && a != nil && a.Username != "":
		return git2go.NewCredentialUserpassPlaintext(a.Username, a.Password)
	case a != nil && a.BearerToken != "":
		return nil, s.fail(fmt.Errorf("%w: the server refused the bearer token", ErrAuthentication))
	case s.ep.scheme == "ssh":
		return nil, s.fail(fmt.Errorf("%w: the server wants an SSH key and the credentials have no identity", ErrAuthentication))
	}
	return nil, s.fail(fmt.Errorf("%w: the server wants a username and password", ErrAuthentication))
}

// checkCertificate verifies TLS certificates (against CAPEM too) and SSH
// host keys against known_hosts; nothing unverified is accepted.
func (s *session) checkCertificate(cert *git2go.Certificate, valid bool, host string) error {
	if err := s.ctx.Err(); err != nil {
		return s.fail(err)
	}
	switch cert.Kind {
	case git2go.CertificateX509:
		if valid && (s.auth == nil || len(s.auth.CAPEM) == 0) {
			return nil
		}
		if _, err := cert.X509.Verify(x509.VerifyOptions{DNSName: host, Roots: s.pool}); err != nil {
			return s.fail(fmt.Errorf("TLS certificate of %s: %w", host, err))
		}
		return nil
	case git2go.CertificateHostkey:
		if s.hostKeys == nil {
			return s.fail(fmt.Errorf("%w: no known_hosts to check the host key of %s", ErrInvalidCredentials, host))
		}
		if cert.Hostkey.SSHPublicKey == nil {
			return s.fail(fmt.Errorf("the SSH transport gave no host key of %s to check", host))
		}
		if err := checkHostKey(s.hostKeys, host, s.ep.port, cert.Hostkey.SSHPublicKey); err != nil {
			return s.fail(err)
		}
		return nil
	}
	return s.fail(fmt.Errorf("unknown kind of certificate from %s", host))
}

func (s *session) headers() []string {
	if s.auth != nil && s.auth.BearerToken != "" && s.ep.scheme == "https" {
		return []string{"Authorization: Bearer " + s.auth.BearerToken}
	}
	return nil
}

func (s *session) proxy() git2go.ProxyOptions {
	if s.auth != nil && s.auth.ProxyURL != "" {
		return git2go.ProxyOptions{Type: git2go.ProxyTypeSpecified, Url: s.auth.ProxyURL}
	}
	return git2go.ProxyOptions{Type: git2go.ProxyTypeAuto}
}

// scrub removes secrets from a message of libgit2, which may quote URLs.
func (s *session) scrub(msg string) string {
	if a := s.auth; a != nil {
		secrets := []string{a.Password, a.BearerToken, a.IdentityPassword}
		if u, err := url.Parse(a.ProxyURL); err == nil && u.User != nil {
			p, _ := u.User.Password()
			secrets = append(secrets, p)
		}
		for _, secret := range secrets {
			if len(secret) >= 3 {
				msg = strings.ReplaceAll(msg, secret, "xxxxx")
			}
		}
	}
	return msg
}

// redact hides the password of a URL, for messages.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i := strings.Index(raw, "@"); i >= 0 && strings.Contains(raw[:i], "://") {
		return raw[:strings.Index(raw, "://")+3] + "xxxxx" + raw[i:]
	}
	return raw
}
