package webhook

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"toolkit.dev/image-toolkit/pkg/receiver"
)

// GoogleCertsURL is where Google publishes the keys that sign its OIDC ID
// tokens, the ones Pub/Sub push subscriptions send.
const GoogleCertsURL = "https://www.googleapis.com/oauth2/v3/certs"

// Secret keys of a gcr webhook, beside "token" (which only makes the path).
const (
	// EmailKey is the service account the push subscription authenticates
	// as; the ID token's email must be it.
	EmailKey = "email"
	// AudienceKey is the audience set on the push subscription (Pub/Sub
	// uses the push endpoint's URL when none is set); the token's aud
	// must be it, so a token Google made for another service is refused.
	AudienceKey = "audience"
)

// googleKeys verifies Google-signed ID tokens (RS256 JWTs), caching the
// published keys: fetched when first needed, again after an hour, and when
// a token names a key we do not have (Google rotates them), at most every
// 30 s so forged key ids cannot make us hammer Google.
type googleKeys struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetched time.Time
}

func newGoogleKeys(url string) *googleKeys {
	if url == "" {
		url = GoogleCertsURL
	}
	return &googleKeys{url: url, client: &http.Client{Timeout: 10 * time.Second}, now: time.Now}
}

func (g *googleKeys) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k, ok := g.keys[kid]
	stale := g.now().Sub(g.fetched) > time.Hour
	if ok && !stale {
		return k, nil
	}
	if !stale && g.now().Sub(g.fetched) < 30*time.Second {
		return nil, fmt.Errorf("unknown signing key %q", kid)
	}
	keys, err := g.fetch(ctx)
	if err != nil {
		if ok { // keep using a known key while Google cannot be reached
			return k, nil
		}
		return nil, err
	}
	g.keys, g.fetched = keys, g.now()
	if k, ok = keys[kid]; !ok {
		return nil, fmt.Errorf("unknown signing key %q", kid)
	}
	return k, nil
}

func (g *googleKeys) fetch(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching Google's signing keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching Google's signing keys: %s", resp.Status)
	}
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("Google's signing keys: %w", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid == "" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			continue
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	if len(keys) == 0 {
		return nil, errors.New("Google's signing keys: none usable")
	}
	return keys, nil
}

// verifyCall is the gcr sender's Verify: the call's token is checked
// against the Secret's email and audience.
func (g *googleKeys) verifyCall(ctx context.Context, c *receiver.Call, secret map[string][]byte) error {
	return g.verify(ctx, c.Header, secret[EmailKey], secret[AudienceKey])
}

// verify checks the Authorization bearer token is an ID token Google
// signed for audience, for the service account email, and not expired.
func (g *googleKeys) verify(ctx context.Context, h http.Header, email, audience []byte) error {
	const header = "Authorization"
	got := h.Get(header)
	if got == "" {
		return receiver.Missing(header)
	}
	jwt, ok := strings.CutPrefix(got, "Bearer ")
	if !ok {
		return receiver.Wrong(receiver.ReasonBadAuth, header)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return receiver.Wrong(receiver.ReasonBadAuth, header)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil || hdr.Alg != "RS256" {
		return receiver.Wrong(receiver.ReasonBadAuth, header)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return receiver.Wrong(receiver.ReasonBadSignature, header)
	}
	key, err := g.key(ctx, hdr.Kid)
	if err != nil {
		return &receiver.Refusal{Status: http.StatusForbidden, Reason: receiver.ReasonBadSignature, Msg: err.Error()}
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) != nil {
		return receiver.Wrong(receiver.ReasonBadSignature, header)
	}
	var c struct {
		Iss           string          `json:"iss"`
		Aud           json.RawMessage `json:"aud"`
		Exp           int64           `json:"exp"`
		Iat           int64           `json:"iat"`
		Email         string          `json:"email"`
		EmailVerified bool            `json:"email_verified"`
	}
	if err := decodeSegment(parts[1], &c); err != nil {
		return receiver.Wrong(receiver.ReasonBadAuth, header)
	}
	now := g.now().Unix()
	const skew = 60
	switch {
	case c.Iss != "accounts.google.com" && c.Iss != "https://accounts.google.com",
		!audienceIs(c.Aud, string(audience)),
		c.Exp+skew < now, c.Iat-skew > now,
		!c.EmailVerified || !receiver.Equal(c.Email, string(email)):
		return receiver.Wrong(receiver.ReasonBadAuth, header)
	}
	return nil
}

// audienceIs reads aud, a string or a list of them (RFC 7519).
func audienceIs(raw json.RawMessage, want string) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == want
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, a := range many {
			if a == want {
				return true
			}
		}
	}
	return false
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	return d.Decode(v)
}

// Google Artifact Registry and Container Registry notifications through a
// Pub/Sub push subscription
// (https://cloud.google.com/artifact-registry/docs/configure-notifications,
// https://cloud.google.com/pubsub/docs/push): the push envelope's
// message.data is base64 JSON with action INSERT or DELETE, digest and,
// for a tagged push, tag (host/project/repo/image:tag).
func parseGCR(body []byte) ([]Target, error) {
	var env struct {
		Message *struct {
			Data string `json:"data"`
		} `json:"message"`
	}
	if err := decode(body, &env); err != nil {
		return nil, err
	}
	if env.Message == nil || env.Message.Data == "" {
		return nil, errors.New("payload has no message.data")
	}
	data, err := base64.StdEncoding.DecodeString(env.Message.Data)
	if err != nil {
		return nil, fmt.Errorf("message.data is not base64: %w", err)
	}
	var n struct {
		Action string `json:"action"`
		Tag    string `json:"tag"`
	}
	if err := decode(data, &n); err != nil {
		return nil, err
	}
	if n.Action != "INSERT" || n.Tag == "" {
		return nil, errIgnore
	}
	t, err := repoTarget(n.Tag, "")
	if err != nil {
		return nil, err
	}
	return []Target{t}, nil
}
