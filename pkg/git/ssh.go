package git

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"
)

// SSHConfig is the client configuration for the ssh endpoint ep: the user
// (the URL's, else the Secret's username, else "git"), the identity, and
// the server's host key checked against known_hosts, offering the host key
// algorithms known_hosts has for the host. known_hosts is required: a host
// key is never accepted unchecked.
func (a *Auth) SSHConfig(ep Endpoint) (*ssh.ClientConfig, error) {
	if a == nil || len(bytes.TrimSpace(a.KnownHosts)) == 0 {
		return nil, fmt.Errorf("%w: an ssh URL needs known_hosts", ErrInvalidCredentials)
	}
	hostKeys, err := ParseKnownHosts(a.KnownHosts)
	if err != nil {
		return nil, err
	}
	user := ep.User
	if user == "" {
		user = a.Username
	}
	if user == "" {
		user = "git"
	}
	var methods []ssh.AuthMethod
	if len(a.Identity) > 0 {
		signer, err := a.SSHKey()
		if err != nil {
			return nil, err
		}
		methods = append(methods, ssh.PublicKeys(signer))
	}
	return &ssh.ClientConfig{
		User: user,
		Auth: methods,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if err := CheckHostKey(hostKeys, ep.Host, ep.Port, key); err != nil {
				return hostKeyError{err}
			}
			return nil
		},
		HostKeyAlgorithms: HostKeyAlgorithms(hostKeys, ep.Host, ep.Port),
		ClientVersion:     "SSH-2.0-image-toolkit",
	}, nil
}

// hostKeyError comes back from the handshake as our host key check said.
type hostKeyError struct{ error }

func (e hostKeyError) Unwrap() error { return e.error }

// HandshakeError explains a failed SSH handshake with addr under cfg: a
// host key refused or credentials refused wrap ErrAuthentication. The
// caller has ruled out its context and idle timeout.
func (a *Auth) HandshakeError(err error, cfg *ssh.ClientConfig, addr string) error {
	var hostErr hostKeyError
	refused := strings.Contains(err.Error(), "unable to authenticate")
	switch {
	case errors.As(err, &hostErr):
		return hostErr.error
	case refused && len(cfg.Auth) == 0:
		return fmt.Errorf("%w: the server wants an SSH key and the credentials have no identity", ErrAuthentication)
	case refused:
		if signer, kerr := a.SSHKey(); kerr == nil {
			return fmt.Errorf("%w: the server refused the %s key %s for user %q", ErrAuthentication,
				signer.PublicKey().Type(), ssh.FingerprintSHA256(signer.PublicKey()), cfg.User)
		}
		return fmt.Errorf("%w: the server refused the key for user %q", ErrAuthentication, cfg.User)
	}
	return fmt.Errorf("SSH handshake with %s: %w", addr, err)
}
