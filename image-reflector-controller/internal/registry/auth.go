package registry

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sync/singleflight"
)

const (
	// tokenTimeout bounds one token exchange, which runs on its own
	// context because every scan waiting for the token shares it.
	tokenTimeout = 30 * time.Second
	// defaultTokenLife is the Docker token specification's lifetime of a
	// token whose answer has no expires_in.
	defaultTokenLife = 60 * time.Second
	// idleAuth: a host's state unused this long is forgotten, so rotated
	// credentials do not pile up.
	idleAuth = time.Hour
)

// authCache remembers, per registry host and credentials, how the registry
// authenticates and the bearer tokens it issued, so a scan does not pay a
// ping and a token exchange each time.
type authCache struct {
	mu        sync.Mutex
	states    map[string]*authState
	lastSweep time.Time
	flight    singleflight.Group
}

// authState is one registry as one set of credentials sees it.
type authState struct {
	key string

	mu sync.Mutex
	// scheme is the registry's challenge ("basic", "bearer"), "" until
	// the registry asked for credentials.
	scheme string
	params map[string]string
	tokens map[string]token // by scope
	used   time.Time
}

type token struct {
	value   string
	expires time.Time
}

// authKey identifies a host as a set of credentials sees it. The
// credentials enter only as a hash: a token is never reused by other
// credentials, and the key reveals nothing if it is ever printed.
func authKey(reg string, insecure bool, cfg *authn.AuthConfig) string {
	h := sha256.New()
	for _, v := range []string{cfg.Username, cfg.Password, cfg.Auth, cfg.IdentityToken, cfg.RegistryToken} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s\x00%t\x00%s", reg, insecure, hex.EncodeToString(h.Sum(nil)))
}

func (c *authCache) state(key string, now time.Time) *authState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.states == nil {
		c.states = map[string]*authState{}
	}
	if now.Sub(c.lastSweep) > idleAuth/4 {
		c.lastSweep = now
		for k, s := range c.states {
			s.mu.Lock()
			idle := now.Sub(s.used) > idleAuth
			s.mu.Unlock()
			if idle {
				delete(c.states, k)
			}
		}
	}
	s, ok := c.states[key]
	if !ok {
		s = &authState{key: key, tokens: map[string]token{}}
		c.states[key] = s
	}
	s.mu.Lock()
	s.used = now
	s.mu.Unlock()
	return s
}

// authTransport authenticates the requests of one repository to its
// registry. It sends nothing until the registry asks: an anonymous
// registry then costs no ping and no token, and the first 401 carries the
// challenge a ping would have fetched.
type authTransport struct {
	cache    *authCache
	state    *authState
	registry name.Registry
	insecure bool
	scope    string
	auth     authn.Authenticator
	cfg      *authn.AuthConfig
	next     http.RoundTripper
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Credentials go to the registry only, not where it redirects.
	if req.URL.Host != t.registry.RegistryStr() {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	sent, err := t.header(ctx, "")
	if err != nil {
		return nil, err
	}
	resp, err := t.send(req, sent)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	ch, ok := pickChallenge(parseChallenges(resp.Header.Values("WWW-Authenticate")))
	if !ok {
		return resp, nil
	}
	// Learn the challenge; a refused token is dropped, so the retry (and
	// later scans) get a fresh one.
	t.state.mu.Lock()
	t.state.scheme, t.state.params = ch.scheme, ch.params
	if tok, ok := t.state.tokens[t.scope]; ok && "Bearer "+tok.value == sent {
		delete(t.state.tokens, t.scope)
	}
	t.state.mu.Unlock()
	fresh, err := t.header(ctx, ch.params["scope"])
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	// Once, and only when there is something new to show: the same
	// credentials refused twice stay refused.
	if fresh == "" || fresh == sent || (req.Body != nil && req.GetBody == nil) {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		req = req.Clone(ctx)
		req.Body = body
	}
	return t.send(req, fresh)
}

func (t *authTransport) send(req *http.Request, authorization string) (*http.Response, error) {
	r := req.Clone(req.Context())
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return t.next.RoundTrip(r)
}

// header is the Authorization header for the next request, fetching a
// bearer token when the registry wants one and none is valid. also is a
// scope the registry's challenge named, requested with ours.
func (t *authTransport) header(ctx context.Context, also string) (string, error) {
	if t.cfg.RegistryToken != "" {
		return "Bearer " + t.cfg.RegistryToken, nil
	}
	s := t.state
	s.mu.Lock()
	scheme, params := s.scheme, s.params
	tok, ok := s.tokens[t.scope]
	s.mu.Unlock()
	switch scheme {
	case "basic":
		switch {
		case t.cfg.Username != "" && t.cfg.Password != "":
			return "Basic " + base64.StdEncoding.EncodeToString([]byte(t.cfg.Username+":"+t.cfg.Password)), nil
		case t.cfg.Auth != "":
			return "Basic " + t.cfg.Auth, nil
		}
	case "bearer":
		if ok && time.Now().Before(tok.expires) {
			return "Bearer " + tok.value, nil
		}
		v, err := t.exchange(ctx, params, also)
		if err != nil {
			return "", err
		}
		return "Bearer " + v, nil
	}
	return "", nil
}

// exchange fetches a token for the repository's scope from the realm of
// the challenge, once for all the scans asking at the same time.
func (t *authTransport) exchange(ctx context.Context, params map[string]string, also string) (string, error) {
	scopes := []string{t.scope}
	if also != "" && also != t.scope {
		scopes = append(scopes, also)
	}
	ch := t.cache.flight.DoChan(t.state.key+"\x00"+strings.Join(scopes, " "), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenTimeout)
		defer cancel()
		start := time.Now()
		// go-containerregistry speaks the token protocols (GET with basic
		// credentials, OAuth2 POST with an identity token) and refuses
		// realms on private addresses other than the registry's own.
		tok, err := transport.Exchange(ctx, t.registry, t.auth, t.next, scopes,
			&transport.Challenge{Scheme: "bearer", Parameters: params, Insecure: t.insecure})
		if err != nil {
			return "", err
		}
		v := tok.Token
		if v == "" {
			v = tok.AccessToken
		}
		life := defaultTokenLife
		if tok.ExpiresIn > 0 {
			life = time.Duration(tok.ExpiresIn) * time.Second
		}
		s := t.state
		s.mu.Lock()
		defer s.mu.Unlock()
		for scope, old := range s.tokens {
			if start.After(old.expires) {
				delete(s.tokens, scope)
			}
		}
		// Used until 90% of its life, so it does not expire in flight.
		s.tokens[t.scope] = token{value: v, expires: start.Add(life * 9 / 10)}
		return v, nil
	})
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	}
}

// challenge is one of a WWW-Authenticate header's challenges.
type challenge struct {
	scheme string // lower case
	params map[string]string
}

// pickChallenge prefers Bearer, then Basic: the schemes we speak.
func pickChallenge(cs []challenge) (challenge, bool) {
	for _, want := range []string{"bearer", "basic"} {
		for _, c := range cs {
			if c.scheme == want {
				return c, true
			}
		}
	}
	return challenge{}, false
}

// parseChallenges reads WWW-Authenticate values (RFC 9110 section 11.6.1):
// challenges separated by commas, each a scheme and then name=value
// parameters, values tokens or quoted strings, also separated by commas.
// A name followed by "=" continues the current challenge; any other token
// starts the next one.
func parseChallenges(values []string) []challenge {
	var out []challenge
	for _, s := range values {
		for {
			s = strings.TrimLeft(s, " \t,")
			if s == "" {
				break
			}
			if strings.HasPrefix(s, `"`) {
				_, s = quotedString(s) // a stray value: skip it
				continue
			}
			tok, rest := httpToken(s)
			if tok == "" {
				s = s[1:] // a stray separator: skip it
				continue
			}
			rest = strings.TrimLeft(rest, " \t")
			if !strings.HasPrefix(rest, "=") {
				out = append(out, challenge{scheme: strings.ToLower(tok), params: map[string]string{}})
				s = rest
				continue
			}
			rest = strings.TrimLeft(rest[1:], " \t")
			var val string
			if strings.HasPrefix(rest, `"`) {
				val, rest = quotedString(rest)
			} else {
				val, rest = httpToken(rest)
			}
			if len(out) > 0 {
				out[len(out)-1].params[strings.ToLower(tok)] = val
			}
			s = rest
		}
	}
	return out
}

// httpToken splits a leading token (anything up to a separator) off s.
func httpToken(s string) (string, string) {
	i := strings.IndexAny(s, " \t,=\";")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// quotedString splits a leading quoted string off s, unescaping it.
func quotedString(s string) (string, string) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:]
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), "" // unterminated: take the rest
}
