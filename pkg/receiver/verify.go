package receiver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"net/http"
	"strings"
)

// Equal compares in constant time, so the answer's timing says nothing of
// how much of a guess was right.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Missing refuses a call without the credential header (401).
func Missing(header string) error {
	return &Refusal{http.StatusUnauthorized, ReasonMissingAuth, "no " + header + " header"}
}

// Wrong refuses a call whose credential header does not match (403).
func Wrong(reason, header string) error {
	return &Refusal{http.StatusForbidden, reason, header + " does not match"}
}

// Unsupported refuses a call to a webhook of a type the receiver does not
// know (an object written before an upgrade removed its type).
func Unsupported() error {
	return &Refusal{http.StatusBadRequest, ReasonUnsupportedType, "unsupported webhook type"}
}

// Verify authenticates a call with its webhook Secret's data: nil, or a
// *Refusal (any other error is refused as bad credentials). The functions
// below make the ones senders share.
type Verify func(ctx context.Context, c *Call, secret map[string][]byte) error

// PathOnly accepts every call: for senders that neither sign nor send a
// configurable header (Docker Hub, Quay) the unguessable path, already
// matched, is the credential.
func PathOnly(context.Context, *Call, map[string][]byte) error { return nil }

// Bearer checks Authorization: Bearer <token>.
func Bearer(_ context.Context, c *Call, secret map[string][]byte) error {
	got := c.Header.Get("Authorization")
	if got == "" {
		return Missing("Authorization")
	}
	if !Equal(got, "Bearer "+string(secret[TokenKey])) {
		return Wrong(ReasonBadAuth, "Authorization")
	}
	return nil
}

// Token checks that header holds the token itself (GitLab's
// X-Gitlab-Token).
func Token(header string) Verify {
	return func(_ context.Context, c *Call, secret map[string][]byte) error {
		got := c.Header.Get(header)
		if got == "" {
			return Missing(header)
		}
		if !Equal(got, string(secret[TokenKey])) {
			return Wrong(ReasonBadAuth, header)
		}
		return nil
	}
}

// HMAC checks header = prefix + hex(HMAC(token, body)) with the hash
// newHash makes: GitHub's X-Hub-Signature-256 is "sha256=" and SHA-256,
// Gitea's X-Gitea-Signature has no prefix, Nexus signs with SHA-1.
func HMAC(header, prefix string, newHash func() hash.Hash) Verify {
	return func(_ context.Context, c *Call, secret map[string][]byte) error {
		got := c.Header.Get(header)
		if got == "" {
			return Missing(header)
		}
		hexSum, ok := strings.CutPrefix(got, prefix)
		if !ok {
			return Wrong(ReasonBadSignature, header)
		}
		sum, err := hex.DecodeString(hexSum)
		if err != nil {
			return Wrong(ReasonBadSignature, header)
		}
		mac := hmac.New(newHash, secret[TokenKey])
		mac.Write(c.Body)
		if !hmac.Equal(sum, mac.Sum(nil)) {
			return Wrong(ReasonBadSignature, header)
		}
		return nil
	}
}

// SHA256 checks header = "sha256=" + hex(HMAC-SHA256(token, body)), as
// GitHub and generic-hmac senders sign.
func SHA256(header string) Verify { return HMAC(header, "sha256=", sha256.New) }

// Sign returns the "sha256=<hex HMAC-SHA256>" signature of body that
// SHA256 checks, for senders written against the receiver and for tests.
func Sign(token, body []byte) string {
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
