package gitops

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"toolkit.dev/image-toolkit/pkg/gitssh"
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
	// Identity is an SSH private key (OpenSSH or PEM) of any type
	// golang.org/x/crypto/ssh reads: ed25519, ECDSA, RSA (signed with
	// rsa-sha2-256/512, as OpenSSH 8.8 and later want).
	Identity []byte
	// IdentityPassword decrypts Identity.
	IdentityPassword string
	// KnownHosts is required for ssh URLs: a host key not in it is refused.
	KnownHosts []byte
	// ProxyURL, e.g. http://user:pass@proxy:3128, carries every request:
	// http:// remotes are fetched through it, https:// and ssh:// ones are
	// tunnelled with CONNECT. Empty: HTTP(S) remotes use the proxy of the
	// environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) and SSH connects
	// directly, as OpenSSH does.
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
	key      ssh.Signer
}

// ErrInvalidCredentials: the credentials cannot work whatever the server
// says (missing or malformed fields); retrying does not help.
var ErrInvalidCredentials = errors.New("invalid credentials")

// ErrAuthentication: the server refused the credentials.
var ErrAuthentication = errors.New("authentication failed")

// endpoint is a repository URL taken apart.
type endpoint struct {
	scheme     string // http, https or ssh
	host, port string // port is set for ssh only
	user       string
	path       string // ssh only: the path git-upload-pack is given
}

// scpLike is git's short form for ssh: [user@]host:path.
var scpLike = regexp.MustCompile(`^(?:([^@/]+)@)?([^:/]+):(.*)$`)

func parseEndpoint(raw string) (endpoint, error) {
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return endpoint{}, fmt.Errorf("%w: the repository URL %q is neither a URL nor user@host:path", ErrInvalidCredentials, redact(raw))
		}
		return endpoint{scheme: "ssh", host: m[2], port: "22", user: m[1], path: m[3]}, nil
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
		// ssh://host/~user/repo names a path in a home directory, as
		// user@host:~user/repo does.
		ep.path = u.Path
		if strings.HasPrefix(ep.path, "/~") {
			ep.path = ep.path[1:]
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
		// A SOCKS proxy is refused rather than left unused: nothing here
		// tunnels through one.
		return "", fmt.Errorf("%w: proxy scheme %q is not supported (want http or https)", ErrInvalidCredentials, u.Scheme)
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

func (a *Auth) sshKey() (ssh.Signer, error) {
	if d := a.decoded; d != nil && bytes.Equal(d.identity, a.Identity) && d.password == a.IdentityPassword {
		return d.key, nil
	}
	return a.decodeIdentity()
}

func (a *Auth) decodeIdentity() (ssh.Signer, error) {
	signer, err := gitssh.Identity(a.Identity, a.IdentityPassword)
	switch {
	case errors.Is(err, gitssh.ErrEncrypted):
		return nil, fmt.Errorf("%w: the identity is encrypted and no password is set", ErrInvalidCredentials)
	case errors.Is(err, gitssh.ErrWrongPassword):
		return nil, fmt.Errorf("%w: the password does not decrypt the identity", ErrInvalidCredentials)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	return signer, nil
}

// parseKnownHosts reads known_hosts; errors wrap ErrInvalidCredentials.
func parseKnownHosts(data []byte) (ssh.HostKeyCallback, error) {
	cb, err := gitssh.KnownHosts(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
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

// hostKeyAlgorithms lists the host key algorithms of the keys known_hosts
// has for host:port; none known: nil, the defaults (the check then says the
// host is unknown).
func hostKeyAlgorithms(cb ssh.HostKeyCallback, host, port string) []string {
	keys, _ := gitssh.KnownKeys(cb, net.JoinHostPort(host, port))
	return gitssh.HostKeyAlgorithms(keys)
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
