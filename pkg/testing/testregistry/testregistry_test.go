package testregistry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestPaginationAuthTLS(t *testing.T) {
	// go-containerregistry takes loopback registries for plain HTTP and then
	// refuses HTTPS pagination links, so pages are tested without TLS.
	r := New(t, Options{Username: "u", Password: "p", PageSize: 10})
	var tags []string
	for i := range 25 {
		tags = append(tags, fmt.Sprintf("t%02d", i))
	}
	r.PushTags(t, "app", tags)
	repo, _ := name.NewRepository(r.Repo("app"))

	before := r.TagListRequests()
	got, err := remote.List(repo, r.RemoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 25 || r.TagListRequests()-before != 3 {
		t.Errorf("%d tags in %d pages, want 25 in 3", len(got), r.TagListRequests()-before)
	}

	_, err = remote.List(repo, remote.WithTransport(r.Transport()), remote.WithAuth(&authn.Basic{Username: "u", Password: "wrong"}))
	var terr *transport.Error
	if err == nil || !asTransport(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %v", err)
	}

	tr := New(t, Options{ClientCerts: true})
	tr.Push(t, "app", "v1")
	if got, err := remote.List(mustRepo(t, tr.Repo("app")), tr.RemoteOptions()...); err != nil || len(got) != 1 {
		t.Errorf("TLS with client certificate: %v %v", got, err)
	}
	if _, err := remote.List(mustRepo(t, tr.Repo("app"))); err == nil {
		t.Error("listing without the CA and client certificate succeeded")
	}

	tr.Fail(1, http.StatusTooManyRequests, "1")
	resp, err := tr.Transport().RoundTrip(mustReq(t, "https://"+tr.Host+"/v2/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("injected failure: %s %q", resp.Status, resp.Header.Get("Retry-After"))
	}
}

func asTransport(err error, target **transport.Error) bool {
	te, ok := err.(*transport.Error)
	if ok {
		*target = te
	}
	return ok
}

func mustReq(t *testing.T, u string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func mustRepo(t *testing.T, s string) name.Repository {
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBearer proves the token flow a Docker token server runs: a challenge
// naming the realm and the scope, tokens for the scopes asked (and only
// for the right credentials), and revocation forcing new tokens.
func TestBearer(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		user, pass string
		wantList   bool
	}{
		{"anonymous tokens, as Docker Hub's public repositories", Options{Bearer: true}, "", "", true},
		{"tokens for the right credentials", Options{Bearer: true, Username: "u", Password: "p"}, "u", "p", true},
		{"no token for wrong credentials", Options{Bearer: true, Username: "u", Password: "p"}, "u", "wrong", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(t, tt.opts)
			r.PushTags(t, "team/app", []string{"v1", "v2"})
			repo := mustRepo(t, r.Repo("team/app"))
			opts := []remote.Option{remote.WithTransport(r.Transport())}
			if tt.user != "" {
				opts = append(opts, remote.WithAuth(&authn.Basic{Username: tt.user, Password: tt.pass}))
			}
			got, err := remote.List(repo, opts...)
			if tt.wantList != (err == nil) || (err == nil && len(got) != 2) {
				t.Fatalf("listing: %v %v", got, err)
			}
			if !tt.wantList {
				return
			}

			// Without a token: a challenge for exactly this repository.
			resp := get(t, "http://"+r.Host+"/v2/team/app/tags/list", "")
			want := fmt.Sprintf(`Bearer realm="http://%s/token",service="testregistry",scope="repository:team/app:pull"`, r.Host)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
				t.Errorf("no token: %s %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
			}

			// A token works for its scope only, until revoked.
			tok := token(t, r, "repository:team/app:pull", tt.user, tt.pass)
			for path, code := range map[string]int{"/v2/team/app/tags/list": 200, "/v2/other/tags/list": 401} {
				if resp := get(t, "http://"+r.Host+path, tok); resp.StatusCode != code {
					t.Errorf("%s with a team/app token: %s, want %d", path, resp.Status, code)
				}
			}
			r.RevokeTokens()
			if resp := get(t, "http://"+r.Host+"/v2/team/app/tags/list", tok); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("revoked token: %s", resp.Status)
			}
		})
	}
}

// TestLimit proves the enforced token bucket: a burst passes, what follows
// gets 429 with Retry-After, Throttled counts them, and Headers announces
// the bucket.
func TestLimit(t *testing.T) {
	r := New(t, Options{Limit: Limit{QPS: 0.5, Burst: 3, Headers: true}})
	u := "http://" + r.Host + "/v2/"
	var codes []int
	var last *http.Response
	for range 5 {
		last = get(t, u, "")
		codes = append(codes, last.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" || r.Throttled() != 2 {
		t.Errorf("codes %v, throttled %d", codes, r.Throttled())
	}
	// At half a token a second, the next one is up to 2 s away.
	if ra := last.Header.Get("Retry-After"); ra != "1" && ra != "2" {
		t.Errorf("Retry-After %q", ra)
	}
	if l, rem := last.Header.Get("RateLimit-Limit"), last.Header.Get("RateLimit-Remaining"); l != "0.5;w=1" || rem != "0;w=1" {
		t.Errorf("RateLimit-Limit %q, RateLimit-Remaining %q", l, rem)
	}
}

func get(t *testing.T, u, token string) *http.Response {
	t.Helper()
	req := mustReq(t, u)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func token(t *testing.T, r *Registry, scope, user, pass string) string {
	t.Helper()
	req := mustReq(t, "http://"+r.Host+"/token?service=testregistry&scope="+scope)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Token == "" || strings.ContainsAny(body.Token, " \n") {
		t.Fatalf("token: %s %v %q", resp.Status, err, body.Token)
	}
	return body.Token
}
