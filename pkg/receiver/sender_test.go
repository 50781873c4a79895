package receiver

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
)

// A Senders table answers for the types it has and refuses the others as
// unsupported (400): an object whose type an upgrade removed gets a
// clear refusal, not a panic. Secret keys default to the token alone and
// are the caller's copy.
func TestSendersDispatchByType(t *testing.T) {
	senders := Senders[string]{
		"plain": {Verify: PathOnly, Parse: func(_ http.Header, body []byte) (string, error) { return string(body), nil }},
		"oidc": {SecretKeys: []string{TokenKey, "email"}, Verify: Token("X-Token"),
			Parse: func(h http.Header, _ []byte) (string, error) { return h.Get("X-Event"), nil }},
	}
	if got := senders.Types(); !slices.Equal(got, []string{"oidc", "plain"}) {
		t.Errorf("Types() = %v", got)
	}
	keys := senders.SecretKeys("oidc")
	keys[0] = "changed"
	if got := senders.SecretKeys("oidc"); !slices.Equal(got, []string{TokenKey, "email"}) {
		t.Errorf("SecretKeys(oidc) = %v after the caller changed its copy", got)
	}
	if got := senders.SecretKeys("plain"); !slices.Equal(got, []string{TokenKey}) {
		t.Errorf("SecretKeys(plain) = %v", got)
	}
	h := http.Header{"X-Token": {"t"}, "X-Event": {"push"}}
	secret := map[string][]byte{TokenKey: []byte("t")}
	tests := []struct {
		typ, want string
		status    int // 0: verified and parsed
	}{
		{"plain", "body", 0},
		{"oidc", "push", 0},
		{"gone", "", http.StatusBadRequest},
	}
	for _, tt := range tests {
		c := &Call{Hook: Hook{Type: tt.typ}, Header: h, Body: []byte("body")}
		verr := senders.Verify(context.Background(), c, secret)
		got, perr := senders.Parse(c)
		if tt.status == 0 {
			if verr != nil || perr != nil || got != tt.want {
				t.Errorf("%s: verify %v, parse %q, %v", tt.typ, verr, got, perr)
			}
			continue
		}
		for _, err := range []error{verr, perr} {
			var r *Refusal
			if !errors.As(err, &r) || r.Status != tt.status || r.Reason != ReasonUnsupportedType {
				t.Errorf("%s: %v, want a %d %s refusal", tt.typ, err, tt.status, ReasonUnsupportedType)
			}
		}
	}
}
