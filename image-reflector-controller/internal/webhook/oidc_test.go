package webhook

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/receiver"
)

// fakeGoogle serves a JWKS as https://www.googleapis.com/oauth2/v3/certs
// does, and signs ID tokens shaped as Pub/Sub push sends them
// (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions).
type fakeGoogle struct {
	key     *rsa.PrivateKey
	kid     string
	fetches atomic.Int32
	srv     *httptest.Server
}

func newFakeGoogle(t *testing.T) *fakeGoogle {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGoogle{key: key, kid: "key-1"}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.fetches.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kid": g.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
			"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
		}}})
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *fakeGoogle) token(t *testing.T, header, claims map[string]any) string {
	t.Helper()
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := seg(header) + "." + seg(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, g.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

const (
	gcrEmail    = "pubsub-push@my-project.iam.gserviceaccount.com"
	gcrAudience = "https://images.example.com/hook/abc"
)

func validClaims() map[string]any {
	now := time.Now().Unix()
	return map[string]any{"iss": "https://accounts.google.com", "aud": gcrAudience, "azp": "1234",
		"email": gcrEmail, "email_verified": true, "iat": now, "exp": now + 3600, "sub": "1234"}
}

// Only an unexpired ID token Google signed for the subscription's
// audience and service account passes; every other token is refused.
func TestGoogleIDToken(t *testing.T) {
	g := newFakeGoogle(t)
	keys := newGoogleKeys(g.srv.URL)
	rs256 := map[string]any{"alg": "RS256", "kid": "key-1", "typ": "JWT"}
	with := func(k string, v any) map[string]any {
		c := validClaims()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := &fakeGoogle{key: other, kid: "key-1"}
	tests := []struct {
		name   string
		auth   string
		status int // 0: accepted
	}{
		{"valid", "Bearer " + g.token(t, rs256, validClaims()), 0},
		{"aud list", "Bearer " + g.token(t, rs256, with("aud", []string{"x", gcrAudience})), 0},
		{"no header", "", http.StatusUnauthorized},
		{"not bearer", "Basic " + g.token(t, rs256, validClaims()), http.StatusForbidden},
		{"not a jwt", "Bearer abc", http.StatusForbidden},
		{"alg none", "Bearer " + g.token(t, map[string]any{"alg": "none", "kid": "key-1"}, validClaims()), http.StatusForbidden},
		{"other key", "Bearer " + forged.token(t, rs256, validClaims()), http.StatusForbidden},
		{"unknown kid", "Bearer " + g.token(t, map[string]any{"alg": "RS256", "kid": "key-9"}, validClaims()), http.StatusForbidden},
		{"expired", "Bearer " + g.token(t, rs256, with("exp", time.Now().Add(-time.Hour).Unix())), http.StatusForbidden},
		{"other audience", "Bearer " + g.token(t, rs256, with("aud", "https://other.example.com")), http.StatusForbidden},
		{"other account", "Bearer " + g.token(t, rs256, with("email", "attacker@example.com")), http.StatusForbidden},
		{"unverified email", "Bearer " + g.token(t, rs256, with("email_verified", false)), http.StatusForbidden},
		{"other issuer", "Bearer " + g.token(t, rs256, with("iss", "https://evil.example.com")), http.StatusForbidden},
		{"tampered", "Bearer " + strings.Replace(g.token(t, rs256, validClaims()), ".", ".e30", 1), http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.auth != "" {
				h.Set("Authorization", tt.auth)
			}
			err := keys.verify(context.Background(), h, []byte(gcrEmail), []byte(gcrAudience))
			switch {
			case tt.status == 0 && err != nil:
				t.Errorf("refused: %v", err)
			case tt.status != 0:
				if ae, ok := err.(*receiver.Refusal); !ok || ae.Status != tt.status {
					t.Errorf("got %v, want %d", err, tt.status)
				}
			}
		})
	}
	// The keys were fetched once; the unknown key id did not refetch
	// within 30 s of that.
	if n := g.fetches.Load(); n != 1 {
		t.Errorf("fetched the keys %d times", n)
	}
}

// A Pub/Sub push of an Artifact Registry INSERT with a tag, with a valid
// ID token, requests a scan of that repository; DELETE and untagged
// pushes are accepted and do nothing.
func TestGCRPush(t *testing.T) {
	g := newFakeGoogle(t)
	f := start(t, imagev1.WebhookGCR, Options{GoogleCertsURL: g.srv.URL})
	var sec corev1.Secret
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hook"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[EmailKey], sec.Data[AudienceKey] = []byte(gcrEmail), []byte(gcrAudience)
	if err := f.c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	push := func(data string) string {
		b, _ := json.Marshal(map[string]any{"message": map[string]any{"data": base64.StdEncoding.EncodeToString([]byte(data)),
			"messageId": "136969346945", "publishTime": "2026-01-01T00:00:00Z", "attributes": map[string]string{}},
			"subscription": "projects/my-project/subscriptions/images"})
		return string(b)
	}
	auth := map[string]string{"Authorization": "Bearer " + g.token(t, map[string]any{"alg": "RS256", "kid": "key-1"}, validClaims())}
	for _, data := range []string{
		`{"action":"DELETE","tag":"127.0.0.1:5000/team/app:1.0"}`,
		`{"action":"INSERT","digest":"127.0.0.1:5000/team/app@sha256:6ec128e26cd5"}`,
	} {
		if got := f.post(t, f.url, push(data), auth); got != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", data, got)
		}
	}
	body := push(`{"action":"INSERT","digest":"127.0.0.1:5000/team/app@sha256:6ec128e26cd5","tag":"127.0.0.1:5000/team/app:1.1"}`)
	if got := f.post(t, f.url, body, auth); got != http.StatusAccepted {
		t.Fatalf("status %d", got)
	}
	waitRequested(t, f, "team/app")
	if got := f.post(t, f.url, body, nil); got != http.StatusUnauthorized {
		t.Errorf("without a token: status %d", got)
	}
}
