package git

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

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
	// ClientCertPEM and ClientKeyPEM are a TLS client certificate for
	// HTTPS (tls.crt and tls.key), both or neither.
	ClientCertPEM, ClientKeyPEM []byte
	// Identity is an SSH private key (OpenSSH or PEM) of any type
	// golang.org/x/crypto/ssh reads: ed25519, ECDSA, RSA (signed with
	// rsa-sha2-256/512, as OpenSSH 8.8 and later want).
	Identity []byte
	// IdentityPassword decrypts Identity.
	IdentityPassword string
	// KnownHosts is required for ssh URLs: a host key not in it is refused.
	KnownHosts []byte
	// ProxyURL, e.g. http://user:pass@proxy:3128 or socks5://proxy:1080,
	// carries every connection: http:// remotes are fetched through an
	// HTTP proxy, https:// and ssh:// ones are tunnelled with CONNECT; a
	// SOCKS5 proxy carries all three. Empty: HTTP(S) remotes use the proxy
	// of the environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) and SSH
	// connects directly, as OpenSSH does.
	ProxyURL string

	// decoded is Identity decrypted by AuthFromSecrets, so that a job's
	// fetch and push do not run the (slow, bcrypt) KDF again. It is only
	// written before the Auth is shared, and used while Identity and
	// IdentityPassword are still what it was made from.
	decoded *decodedIdentity
	// provider, when set, issues Username, Password or BearerToken
	// (NewRemoteAuth); Fresh fills them in.
	provider *providerSource
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

// AuthFromSecrets builds Auth for a repository URL from the data of the
// credentials Secret and of the proxy Secret (either may be nil), with
// Flux's keys. Errors wrap ErrInvalidCredentials and never hold a secret.
func AuthFromSecrets(repoURL string, creds, proxy map[string][]byte) (*Auth, error) {
	ep, err := ParseEndpoint(repoURL)
	if err != nil {
		return nil, err
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidCredentials, fmt.Sprintf(format, args...))
	}
	a := &Auth{}
	switch ep.Scheme {
	case "ssh":
		a.Identity, a.IdentityPassword, a.KnownHosts = creds["identity"], string(creds["password"]), creds["known_hosts"]
		a.Username = string(creds["username"])
		if len(a.Identity) == 0 {
			return nil, invalid("an ssh URL needs an identity (private key) in the credentials Secret")
		}
		if len(bytes.TrimSpace(a.KnownHosts)) == 0 {
			return nil, invalid("an ssh URL needs known_hosts in the credentials Secret")
		}
		key, err := a.decodeIdentity()
		if err != nil {
			return nil, err
		}
		a.decoded = &decodedIdentity{identity: bytes.Clone(a.Identity), password: a.IdentityPassword, key: key}
		if _, err := ParseKnownHosts(a.KnownHosts); err != nil {
			return nil, err
		}
	case "http", "https":
		a.Username, a.Password = string(creds["username"]), string(creds["password"])
		a.BearerToken, a.CAPEM = string(creds["bearerToken"]), creds["ca.crt"]
		a.ClientCertPEM, a.ClientKeyPEM = creds["tls.crt"], creds["tls.key"]
		switch {
		// A username alone is sent with an empty password, as Flux does:
		// some hosts take a token as the user name.
		case a.Username == "" && a.Password != "":
			return nil, invalid("password is set without username")
		case a.BearerToken != "" && a.Username != "":
			return nil, invalid("username/password and bearerToken cannot be used together")
		case a.BearerToken != "" && ep.Scheme == "http":
			return nil, invalid("a bearerToken is not sent over plain http://; use https://")
		}
		if ep.Scheme == "http" {
			a.CAPEM, a.ClientCertPEM, a.ClientKeyPEM = nil, nil, nil
		}
		if _, err := a.CertPool(); err != nil {
			return nil, err
		}
		if _, err := a.clientCertificates(); err != nil {
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
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" {
		return "", fmt.Errorf("%w: proxy scheme %q is not supported (want http, https or socks5)", ErrInvalidCredentials, u.Scheme)
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

// SSHKey is the decoded Identity, decoded once per Auth.
func (a *Auth) SSHKey() (ssh.Signer, error) {
	if d := a.decoded; d != nil && bytes.Equal(d.identity, a.Identity) && d.password == a.IdentityPassword {
		return d.key, nil
	}
	return a.decodeIdentity()
}

func (a *Auth) decodeIdentity() (ssh.Signer, error) {
	signer, err := parseIdentity(a.Identity, a.IdentityPassword)
	switch {
	case errors.Is(err, errEncrypted):
		return nil, fmt.Errorf("%w: the identity is encrypted and no password is set", ErrInvalidCredentials)
	case errors.Is(err, errWrongPassword):
		return nil, fmt.Errorf("%w: the password does not decrypt the identity", ErrInvalidCredentials)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	return signer, nil
}

// ParseKnownHosts reads known_hosts; errors wrap ErrInvalidCredentials.
func ParseKnownHosts(data []byte) (ssh.HostKeyCallback, error) {
	cb, err := knownHostsCallback(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	return cb, nil
}

// CheckHostKey accepts key only when known_hosts lists it for host:port.
// A refusal wraps ErrAuthentication: the Secret's known_hosts must change.
func CheckHostKey(cb ssh.HostKeyCallback, host, port string, key ssh.PublicKey) error {
	name := knownhosts.Normalize(net.JoinHostPort(host, port))
	err := cb(net.JoinHostPort(host, port), &net.TCPAddr{IP: net.IPv4zero, Port: 0}, key)
	var keyErr *knownhosts.KeyError
	var revoked *knownhosts.RevokedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &revoked):
		return fmt.Errorf("%w: the %s host key of %s is revoked in known_hosts", ErrAuthentication, key.Type(), name)
	case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
		return fmt.Errorf("%w: host %s is not in known_hosts (it offered %s %s)", ErrAuthentication, name, key.Type(), ssh.FingerprintSHA256(key))
	case errors.As(err, &keyErr):
		known := make([]string, 0, len(keyErr.Want))
		for _, k := range keyErr.Want {
			known = append(known, k.Key.Type()+" "+ssh.FingerprintSHA256(k.Key))
		}
		return fmt.Errorf("%w: the host key of %s does not match known_hosts: it offered %s %s, known_hosts has %s",
			ErrAuthentication, name, key.Type(), ssh.FingerprintSHA256(key), strings.Join(known, ", "))
	}
	return fmt.Errorf("checking the host key of %s: %w", name, err)
}

// HostKeyAlgorithms lists the host key algorithms of the keys known_hosts
// has for host:port; none known: nil, the defaults (the check then says the
// host is unknown).
func HostKeyAlgorithms(cb ssh.HostKeyCallback, host, port string) []string {
	keys, _ := knownKeys(cb, net.JoinHostPort(host, port))
	return keyAlgorithms(keys)
}

// clientCertificates is the TLS client certificate, if any.
func (a *Auth) clientCertificates() ([]tls.Certificate, error) {
	switch {
	case a == nil || len(a.ClientCertPEM) == 0 && len(a.ClientKeyPEM) == 0:
		return nil, nil
	case len(a.ClientCertPEM) == 0 || len(a.ClientKeyPEM) == 0:
		return nil, fmt.Errorf("%w: a TLS client certificate needs both tls.crt and tls.key", ErrInvalidCredentials)
	}
	cert, err := tls.X509KeyPair(a.ClientCertPEM, a.ClientKeyPEM)
	if err != nil {
		// Not err: it may quote the key.
		return nil, fmt.Errorf("%w: tls.crt and tls.key are not a certificate and its private key in PEM", ErrInvalidCredentials)
	}
	return []tls.Certificate{cert}, nil
}

// CertPool is the system's roots plus ca.crt. TLS is always verified.
func (a *Auth) CertPool() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if a != nil && len(a.CAPEM) > 0 && !pool.AppendCertsFromPEM(a.CAPEM) {
		return nil, fmt.Errorf("%w: ca.crt holds no PEM certificate", ErrInvalidCredentials)
	}
	return pool, nil
}

// Proxy is the parsed ProxyURL, or nil for none (the environment's, for
// HTTP(S)).
func (a *Auth) Proxy() (*url.URL, error) {
	if a == nil || a.ProxyURL == "" {
		return nil, nil
	}
	u, err := url.Parse(a.ProxyURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
		return nil, fmt.Errorf("%w: the proxy URL is not like http://host:port", ErrInvalidCredentials)
	}
	return u, nil
}

// Secrets lists the secret values of a, for scrubbing them from messages.
func (a *Auth) Secrets() []string {
	if a == nil {
		return nil
	}
	s := []string{a.Password, a.BearerToken, a.IdentityPassword}
	if u, err := url.Parse(a.ProxyURL); err == nil && u.User != nil {
		p, _ := u.User.Password()
		s = append(s, p)
	}
	return s
}

// Scrub replaces the secrets of a in msg, for messages of servers and of
// libraries that may echo them.
func (a *Auth) Scrub(msg string) string {
	for _, secret := range a.Secrets() {
		if len(secret) >= 3 {
			msg = strings.ReplaceAll(msg, secret, "xxxxx")
		}
	}
	return msg
}
