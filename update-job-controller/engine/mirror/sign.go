package mirror

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"golang.org/x/crypto/ssh"
)

// Signer signs commit content, returning the armored signature git stores
// in the gpgsig header.
type Signer interface {
	Sign(content []byte) ([]byte, error)
}

// ErrInvalidSigningKey: the signing Secret holds no usable key.
var ErrInvalidSigningKey = errors.New("invalid signing key")

// NewSigner builds a signer from the signing Secret: type "gpg" reads an
// armored OpenPGP private key from git.asc (passphrase optional), type
// "ssh" an OpenSSH private key from identity (password optional).
func NewSigner(keyType string, data map[string][]byte) (Signer, error) {
	switch keyType {
	case "gpg":
		return newGPGSigner(data["git.asc"], data["passphrase"])
	case "ssh":
		return newSSHSigner(data["identity"], data["password"])
	}
	return nil, fmt.Errorf("%w: unknown signing key type %q (want gpg or ssh)", ErrInvalidSigningKey, keyType)
}

type gpgSigner struct {
	entity *openpgp.Entity
}

func newGPGSigner(armored, passphrase []byte) (Signer, error) {
	if len(armored) == 0 {
		return nil, fmt.Errorf("%w: git.asc is missing or empty", ErrInvalidSigningKey)
	}
	keys, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(armored))
	if err != nil {
		return nil, fmt.Errorf("%w: git.asc is not an armored OpenPGP key: %v", ErrInvalidSigningKey, err)
	}
	for _, e := range keys {
		if e.PrivateKey == nil {
			continue
		}
		if err := e.DecryptPrivateKeys(passphrase); err != nil {
			if len(passphrase) == 0 {
				return nil, fmt.Errorf("%w: git.asc is encrypted and no passphrase is set", ErrInvalidSigningKey)
			}
			return nil, fmt.Errorf("%w: the passphrase does not decrypt git.asc", ErrInvalidSigningKey)
		}
		if _, ok := e.SigningKey(time.Now()); !ok {
			return nil, fmt.Errorf("%w: git.asc has no valid signing key (expired or revoked?)", ErrInvalidSigningKey)
		}
		return &gpgSigner{entity: e}, nil
	}
	return nil, fmt.Errorf("%w: git.asc holds no private key", ErrInvalidSigningKey)
}

func (s *gpgSigner) Sign(content []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, bytes.NewReader(content), nil); err != nil {
		return nil, fmt.Errorf("OpenPGP signing: %w", err)
	}
	return b.Bytes(), nil
}

// sshSigner writes SSH signatures (the SSHSIG format of OpenSSH's
// PROTOCOL.sshsig) in the "git" namespace, as git's gpg.format=ssh does.
type sshSigner struct {
	signer ssh.Signer
}

func newSSHSigner(key, passphrase []byte) (Signer, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: identity is missing or empty", ErrInvalidSigningKey)
	}
	signer, err := ssh.ParsePrivateKey(key)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if len(passphrase) == 0 {
			return nil, fmt.Errorf("%w: identity is encrypted and no password is set", ErrInvalidSigningKey)
		}
		if signer, err = ssh.ParsePrivateKeyWithPassphrase(key, passphrase); err != nil {
			return nil, fmt.Errorf("%w: the password does not decrypt identity", ErrInvalidSigningKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: identity is not an SSH private key: %v", ErrInvalidSigningKey, err)
	}
	return &sshSigner{signer: signer}, nil
}

const (
	sshsigMagic     = "SSHSIG"
	sshsigNamespace = "git"
	sshsigHash      = "sha512"
)

func (s *sshSigner) Sign(content []byte) ([]byte, error) {
	h := sha512.Sum512(content)
	signed := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Namespace, Reserved, Hash string
		Digest                    []byte
	}{sshsigNamespace, "", sshsigHash, h[:]})...)

	var sig *ssh.Signature
	var err error
	if as, ok := s.signer.(ssh.AlgorithmSigner); ok && s.signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		// ssh-keygen -Y verify refuses SHA-1 RSA signatures.
		sig, err = as.SignWithAlgorithm(rand.Reader, signed, ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = s.signer.Sign(rand.Reader, signed)
	}
	if err != nil {
		return nil, fmt.Errorf("SSH signing: %w", err)
	}
	blob := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		Hash      string
		Signature []byte
	}{1, s.signer.PublicKey().Marshal(), sshsigNamespace, "", sshsigHash, ssh.Marshal(sig)})...)

	enc := base64.StdEncoding.EncodeToString(blob)
	var b strings.Builder
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n-----END SSH SIGNATURE-----\n")
	return []byte(b.String()), nil
}
