// What SSH needs to reach a server safely: known_hosts read from a
// Secret's bytes, the host key algorithms to ask a server for, the identity
// decrypted, and the path quoted for the remote shell.
package git

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// knownHostsCallback parses known_hosts with x/crypto's parser (markers, patterns,
// [host]:port, hashed names). That parser reads only files, so the bytes
// pass through a private temporary file; errors name it known_hosts.
func knownHostsCallback(data []byte) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "known_hosts-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), f.Name(), "known_hosts"))
	}
	return cb, nil
}

// knownKeys returns the keys known_hosts lists for addr (host:port); ok is
// false when the callback does not say (it accepted or failed otherwise).
func knownKeys(cb ssh.HostKeyCallback, addr string) (keys []knownhosts.KnownKey, ok bool) {
	// Ask about a key it cannot know: the error lists the keys it has.
	_, probe, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false
	}
	signer, err := ssh.NewSignerFromKey(probe)
	if err != nil {
		return nil, false
	}
	var keyErr *knownhosts.KeyError
	if err := cb(addr, &net.TCPAddr{IP: net.IPv4zero}, signer.PublicKey()); !errors.As(err, &keyErr) {
		return nil, false
	}
	return keyErr.Want, true
}

// keyAlgorithms lists the signature algorithms of keys, so that a
// server with several host keys presents one known_hosts can check rather
// than its first preference. No keys: nil, the defaults.
func keyAlgorithms(keys []knownhosts.KnownKey) []string {
	var algos []string
	for _, k := range keys {
		for _, a := range signatureAlgorithms(k.Key.Type()) {
			if !slices.Contains(algos, a) {
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// signatureAlgorithms lists the algorithms a host key of a type signs with.
func signatureAlgorithms(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}

// parseIdentity errors, for callers to phrase.
var (
	// errEncrypted: the identity is encrypted and no password was given.
	errEncrypted = errors.New("the identity is encrypted")
	// errWrongPassword: the password does not decrypt the identity.
	errWrongPassword = errors.New("the password does not decrypt the identity")
	// errNotAKey: the identity is not a private key x/crypto reads.
	errNotAKey = errors.New("the identity is not a private key")
)

// parseIdentity decodes a PEM or OpenSSH private key of any type x/crypto reads
// (ed25519, ECDSA, RSA), decrypting it with password when it is encrypted.
func parseIdentity(key []byte, password string) (ssh.Signer, error) {
	raw, err := ssh.ParseRawPrivateKey(key)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing) && password == "":
		return nil, errEncrypted
	case errors.As(err, &missing):
		raw, err = ssh.ParseRawPrivateKeyWithPassphrase(key, []byte(password))
		if errors.Is(err, x509.IncorrectPasswordError) || (err != nil && strings.Contains(err.Error(), "decrypt")) {
			return nil, fmt.Errorf("%w: %v", errWrongPassword, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotAKey, err)
	}
	signer, err := ssh.NewSignerFromKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotAKey, err)
	}
	return signer, nil
}

// ShellQuote quotes s for a POSIX shell as git's sq_quote does (' and !
// escaped), for the path in the remote command: git-upload-pack '<path>'.
func ShellQuote(s string) string {
	return "'" + shellEscapes.Replace(s) + "'"
}

var shellEscapes = strings.NewReplacer("'", `'\''`, "!", `'\!'`)
