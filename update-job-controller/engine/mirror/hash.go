package mirror

import (
	"encoding/hex"
	"fmt"

	git2go "github.com/libgit2/git2go/v34"
)

// Hash names a git object (SHA-1). The mirror's exported methods speak it,
// not libgit2's types, so that a program embedding the engine imports no
// git2go; the zero Hash is none (no parent, no base).
type Hash [20]byte

// ParseHash reads a hash in hex.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return Hash{}, fmt.Errorf("%q is not a SHA-1 hash: want %d hex digits", s, 2*len(h))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("%q is not a SHA-1 hash: %w", s, err)
	}
	return h, nil
}

// String is the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is none.
func (h Hash) IsZero() bool { return h == Hash{} }

// oid is h as libgit2 takes it; nil for none.
func (h Hash) oid() *git2go.Oid {
	if h.IsZero() {
		return nil
	}
	o := git2go.Oid(h)
	return &o
}

// hashOf is o as a Hash; zero for nil.
func hashOf(o *git2go.Oid) Hash {
	if o == nil {
		return Hash{}
	}
	return Hash(*o)
}
