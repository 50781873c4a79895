package receiver

import (
	"context"
	"net/http"
	"slices"
	"sort"
)

// Sender is one type of webhook caller, an entry of a kind's Senders
// table: which Secret keys it needs, how its calls are authenticated, and
// how its payload is read into T, what the kind acts on (the repositories
// a registry push names, the branch a git push moved). A sender is one
// table entry rather than a case in a switch per concern, so adding one is
// its entry, its test and its value in the API's type enum; a test of each
// kind checks the table and the enum agree.
type Sender[T any] struct {
	// SecretKeys are the keys the webhook's Secret must hold; nil is
	// TokenKey alone, which every webhook has (it makes the path).
	SecretKeys []string
	// Verify authenticates a call with its Secret's data.
	Verify Verify
	// Parse reads what a verified call is about. A payload that is not
	// what the sender sends is an error; a valid one about nothing to do
	// (a ping, a delete) is the kind's own "ignore" error or a zero T.
	Parse func(h http.Header, body []byte) (T, error)
}

// Senders is a kind's table of senders by webhook type, the values of its
// API's type enum. Its methods give a receiver.Kind's SecretKeys and
// Verify, and the parse of Accept, for every type at once; a type not in
// the table (an object written before an upgrade removed its type) is
// refused as unsupported.
type Senders[T any] map[string]Sender[T]

// Types returns the table's types, sorted.
func (s Senders[T]) Types() []string {
	types := make([]string, 0, len(s))
	for t := range s {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}

// SecretKeys are the keys the Secret of a webhook of type typ must hold.
func (s Senders[T]) SecretKeys(typ string) []string {
	if keys := s[typ].SecretKeys; keys != nil {
		return slices.Clone(keys)
	}
	return []string{TokenKey}
}

// Verify authenticates a call by its webhook's type: nil, or a *Refusal.
func (s Senders[T]) Verify(ctx context.Context, c *Call, secret map[string][]byte) error {
	sender, ok := s[c.Hook.Type]
	if !ok || sender.Verify == nil {
		return Unsupported()
	}
	return sender.Verify(ctx, c, secret)
}

// Parse reads what a call is about by its webhook's type.
func (s Senders[T]) Parse(c *Call) (T, error) {
	sender, ok := s[c.Hook.Type]
	if !ok || sender.Parse == nil {
		var zero T
		return zero, Unsupported()
	}
	return sender.Parse(c.Header, c.Body)
}
