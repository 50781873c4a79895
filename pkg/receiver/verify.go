package receiver

import (
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

// Bearer checks Authorization: Bearer <token>.
func Bearer(h http.Header, token []byte) error {
	got := h.Get("Authorization")
	if got == "" {
		return Missing("Authorization")
	}
	if !Equal(got, "Bearer "+string(token)) {
		return Wrong(ReasonBadAuth, "Authorization")
	}
	return nil
}

// Token checks that header holds the token itself (GitLab's
// X-Gitlab-Token).
func Token(h http.Header, header string, token []byte) error {
	got := h.Get(header)
	if got == "" {
		return Missing(header)
	}
	if !Equal(got, string(token)) {
		return Wrong(ReasonBadAuth, header)
	}
	return nil
}

// HMAC checks header = prefix + hex(HMAC(token, body)) with the hash
// newHash makes: GitHub's X-Hub-Signature-256 is "sha256=" and SHA-256,
// Gitea's X-Gitea-Signature has no prefix, Nexus signs with SHA-1.
func HMAC(h http.Header, header, prefix string, newHash func() hash.Hash, body, token []byte) error {
	got := h.Get(header)
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
	mac := hmac.New(newHash, token)
	mac.Write(body)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return Wrong(ReasonBadSignature, header)
	}
	return nil
}

// SHA256 checks header = "sha256=" + hex(HMAC-SHA256(token, body)), as
// GitHub and generic-hmac senders sign.
func SHA256(h http.Header, header string, body, token []byte) error {
	return HMAC(h, header, "sha256=", sha256.New, body, token)
}

// Sign returns the "sha256=<hex HMAC-SHA256>" signature of body that
// SHA256 checks, for senders written against the receiver and for tests.
func Sign(token, body []byte) string {
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
