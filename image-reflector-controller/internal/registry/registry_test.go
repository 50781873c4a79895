package registry

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

func repoOf(t *testing.T, r *testregistry.Registry, repo string) name.Repository {
	t.Helper()
	ref, err := name.NewRepository(r.Repo(repo))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestListTagsPaginates(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{PageSize: 400})
	var want []string
	for i := range 1100 {
		want = append(want, fmt.Sprintf("1.0.%04d", i))
	}
	reg.PushTags(t, "app", want)

	c := New(100, 100, nil)
	before := reg.TagListRequests()
	got, err := c.ListTags(context.Background(), repoOf(t, reg, "app"), Options{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("got %d tags, want %d", len(got), len(want))
	}
	if pages := reg.TagListRequests() - before; pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	if n := testutil.ToFloat64(c.metrics.Requests.WithLabelValues(reg.Host, "200")); n < 3 {
		t.Errorf("200 responses counted: %v", n)
	}
}

func TestListTagsAuth(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "pa55word"})
	reg.PushTags(t, "app", []string{"v1"})
	c := New(100, 100, nil)
	ctx := context.Background()

	tags, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Insecure: true,
		Auth: &authn.Basic{Username: "bot", Password: "pa55word"}})
	if err != nil || !slices.Equal(tags, []string{"v1"}) {
		t.Fatalf("with credentials: %v %v", tags, err)
	}
	for _, auth := range []authn.Authenticator{nil, &authn.Basic{Username: "bot", Password: "wrong-one"}} {
		_, err = c.ListTags(ctx, repoOf(t, reg, "app"), Options{Insecure: true, Auth: auth})
		if !IsAuthError(err) {
			t.Fatalf("want an auth error, got %v", err)
		}
		if !strings.Contains(err.Error(), "authentication required") || strings.Contains(err.Error(), "wrong-one") {
			t.Errorf("error %q: want the registry's message and no secret", err)
		}
	}
}

func TestListTagsTLS(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{ClientCerts: true, PageSize: 1})
	reg.PushTags(t, "app", []string{"a", "b", "c"})
	c := New(100, 100, nil)
	ctx := context.Background()

	// Paging over HTTPS from a loopback address: the case
	// go-containerregistry's own lister refuses.
	tags, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Transport: reg.Transport()})
	if err != nil || len(tags) != 3 {
		t.Fatalf("with CA and client certificate: %v %v", tags, err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(reg.CAPEM)
	noCert := http.DefaultTransport.(*http.Transport).Clone()
	noCert.TLSClientConfig = &tls.Config{RootCAs: pool}
	for name, tr := range map[string]http.RoundTripper{"untrusted CA": nil, "no client certificate": noCert} {
		if _, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Transport: tr}); err == nil {
			t.Errorf("%s: listing succeeded", name)
		}
	}
}

func TestPlainHTTPNeedsInsecure(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"v1"})
	_, err := New(100, 100, nil).ListTags(context.Background(), repoOf(t, reg, "app"), Options{})
	if err == nil || !strings.Contains(err.Error(), "set spec.insecure") {
		t.Errorf("plain HTTP registry without insecure: %v", err)
	}
}

func TestRetryAfterAndServerErrors(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"v1", "v2"})
	c := New(100, 100, nil)
	ctx := context.Background()

	reg.Fail(2, http.StatusTooManyRequests, "1")
	start := time.Now()
	tags, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Insecure: true})
	if err != nil || len(tags) != 2 {
		t.Fatalf("after 429s: %v %v", tags, err)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Errorf("Retry-After: 1 twice, but only %s passed", waited)
	}
	if n := testutil.ToFloat64(c.metrics.Retried.WithLabelValues(reg.Host)); n != 2 {
		t.Errorf("retried = %v, want 2", n)
	}
	if n := testutil.ToFloat64(c.metrics.Requests.WithLabelValues(reg.Host, "429")); n != 2 {
		t.Errorf("429s counted = %v, want 2", n)
	}

	// A 500 is an error for this scan, not a retry loop.
	reg.Fail(1, http.StatusInternalServerError, "")
	if _, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Insecure: true}); err == nil {
		t.Error("a 500 was not reported")
	}
	// Retry-After beyond the deadline fails now instead of sleeping.
	reg.Fail(1, http.StatusServiceUnavailable, "3600")
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start = time.Now()
	if _, err := c.ListTags(short, repoOf(t, reg, "app"), Options{Insecure: true}); err == nil || time.Since(start) > time.Second {
		t.Errorf("Retry-After past the deadline: err %v after %s", err, time.Since(start))
	}
}

func TestRateLimitPerHost(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"v1"})
	c := New(10, 1, nil)
	before := reg.Requests()
	start := time.Now()
	for range 6 {
		if _, err := c.ListTags(context.Background(), repoOf(t, reg, "app"), Options{Insecure: true}); err != nil {
			t.Fatal(err)
		}
	}
	// At 10 per second with a burst of 1, the requests after the first
	// wait 100ms each; a lower bound cannot flake.
	n := int(reg.Requests() - before)
	if min := time.Duration(n-1) * 100 * time.Millisecond; time.Since(start) < min-10*time.Millisecond {
		t.Errorf("%d requests in %s: faster than 10/s", n, time.Since(start))
	}
}

func TestDigest(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	want := reg.Push(t, "app", "v1")
	ref, _ := name.NewTag(reg.Repo("app") + ":v1")
	got, err := New(100, 100, nil).Digest(context.Background(), ref, Options{Insecure: true})
	if err != nil || got != want {
		t.Errorf("digest %q, %v; want %q", got, err, want)
	}
}

func TestNextPage(t *testing.T) {
	cur, _ := url.Parse("https://r.example.com/v2/app/tags/list?n=2")
	tests := []struct {
		link, want, err string
	}{
		{"", "", ""},
		{`</v2/app/tags/list?n=2&last=b>; rel="next"`, "https://r.example.com/v2/app/tags/list?n=2&last=b", ""},
		{`<https://r.example.com/v2/app/tags/list?last=b>; rel=next, <x>; rel="prev"`, "", ""},
		{`<https://r.example.com/v2/app/tags/list?last=b>; rel="next"`, "https://r.example.com/v2/app/tags/list?last=b", ""},
		{`<https://evil.example.com/v2/app/tags/list>; rel="next"`, "", "refusing"},
		{`<http://r.example.com/v2/app/tags/list>; rel="next"`, "", "refusing"},
		{`/v2/app; rel="next"`, "", "malformed"},
	}
	for _, tt := range tests {
		got, err := nextPage(cur, tt.link)
		gotS := ""
		if got != nil {
			gotS = got.String()
		}
		if gotS != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("nextPage(%q) = %q, %v; want %q, %q", tt.link, gotS, err, tt.want, tt.err)
		}
	}
}

// TestRequestsPerScan proves authentication is reused: once a registry's
// challenge is known and while its token is valid, a scan costs exactly
// its pages of tags/list, for anonymous, basic and bearer registries; a
// new repository costs one token more, and a revoked token one 401 and one
// token more, once.
func TestRequestsPerScan(t *testing.T) {
	tests := []struct {
		name string
		opts testregistry.Options
		auth authn.Authenticator
		// first is what the first scan costs beyond its pages (learning the
		// challenge from a 401, fetching a token); newRepo what a scan of
		// another repository costs beyond its pages.
		first, newRepo int
		bearer         bool
	}{
		{name: "anonymous", first: 0, newRepo: 0},
		{name: "basic", opts: testregistry.Options{Username: "bot", Password: "pa55"},
			auth: &authn.Basic{Username: "bot", Password: "pa55"}, first: 1, newRepo: 0},
		{name: "anonymous bearer tokens", opts: testregistry.Options{Bearer: true}, first: 2, newRepo: 1, bearer: true},
		{name: "bearer tokens for credentials", opts: testregistry.Options{Bearer: true, Username: "bot", Password: "pa55"},
			auth: &authn.Basic{Username: "bot", Password: "pa55"}, first: 2, newRepo: 1, bearer: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.PageSize = 2
			reg := testregistry.New(t, o)
			reg.PushTags(t, "app", []string{"v1", "v2", "v3"})
			reg.PushTags(t, "other", []string{"v1"})
			c := New(100, 100, nil)
			scan := func(repo string) (requests, pages int64) {
				t.Helper()
				r0, p0 := reg.Requests(), reg.TagListRequests()
				if _, err := c.ListTags(context.Background(), repoOf(t, reg, repo), Options{Insecure: true, Auth: tt.auth}); err != nil {
					t.Fatalf("scanning %s: %v", repo, err)
				}
				return reg.Requests() - r0, reg.TagListRequests() - p0
			}
			check := func(what, repo string, extra int64) {
				t.Helper()
				if requests, pages := scan(repo); requests != pages+extra {
					t.Errorf("%s: %d requests for %d pages, want %d more", what, requests, pages, extra)
				}
			}
			check("first scan", "app", int64(tt.first))
			check("second scan", "app", 0)
			check("third scan", "app", 0)
			check("another repository", "other", int64(tt.newRepo))
			check("its second scan", "other", 0)
			if !tt.bearer {
				return
			}
			reg.RevokeTokens()
			check("after the tokens were revoked", "app", 2)
			check("and then", "app", 0)
		})
	}
}

// TestTokensNeverCrossCredentials proves a token is reused only by the
// credentials it was issued to: other credentials, or none, fetch their own
// (and are refused), while the cache of the right ones stays valid.
func TestTokensNeverCrossCredentials(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Bearer: true, Username: "bot", Password: "pa55"})
	reg.PushTags(t, "app", []string{"v1"})
	c := New(100, 100, nil)
	ctx := context.Background()
	list := func(auth authn.Authenticator) (int64, error) {
		before := reg.Requests()
		_, err := c.ListTags(ctx, repoOf(t, reg, "app"), Options{Insecure: true, Auth: auth})
		return reg.Requests() - before, err
	}
	right := &authn.Basic{Username: "bot", Password: "pa55"}
	if _, err := list(right); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		auth authn.Authenticator
	}{
		{"wrong password", &authn.Basic{Username: "bot", Password: "guess"}},
		{"no credentials", nil},
	} {
		n, err := list(tt.auth)
		// A 401 and a refused token request: the right credentials' token
		// was not offered.
		if !IsAuthError(err) || n != 2 || strings.Contains(err.Error(), "guess") {
			t.Errorf("%s: %d requests, %v; want 2 and an auth error without the password", tt.name, n, err)
		}
	}
	if n, err := list(right); err != nil || n != 1 {
		t.Errorf("the right credentials again: %d requests, %v; want 1", n, err)
	}
	if k := authKey("r.example.com", false, &authn.AuthConfig{Username: "bot", Password: "pa55"}); strings.Contains(k, "pa55") {
		t.Errorf("the cache key %q holds the password", k)
	}
}

// TestEnforcedLimit proves, against a real registry enforcing a token
// bucket, that the adaptive limiter draws no more 429s than a fixed one:
// than one at the same ceiling when the registry's limit is silent (a
// fixed rate cannot know it), than one at the registry's own rate and burst
// when the registry announces its quota (which the adaptive limiter then
// paces by, so it draws none); and that under a limit above the ceiling
// nothing is refused and the ceiling holds. Counts, not durations, except
// a lower bound on time, which cannot flake.
func TestEnforcedLimit(t *testing.T) {
	tests := []struct {
		name           string
		limit          testregistry.Limit
		qps            float64
		burst          int
		workers, scans int
		fixedAtLimit   bool
		wantNone       bool
		// slack is how many 429s beyond the fixed limiter's are tolerated,
		// and the most allowed.
		slack int64
	}{
		{name: "a silent limit below the ceiling", limit: testregistry.Limit{QPS: 50, Burst: 10},
			qps: 500, burst: 100, workers: 8, scans: 80},
		// Paced by the announced quota it draws none or, when scheduling
		// on a loaded 2-core machine bunches requests (seen once in four
		// -race runs), one, as a fixed limiter at the registry's own rate
		// does: at most one, never more than the fixed limiter plus one.
		{name: "an announced limit below the ceiling", limit: testregistry.Limit{QPS: 50, Burst: 20, Headers: true},
			qps: 500, burst: 100, workers: 4, scans: 150, fixedAtLimit: true, slack: 1},
		{name: "a limit above the ceiling", limit: testregistry.Limit{QPS: 1000, Burst: 1000},
			qps: 50, burst: 5, workers: 4, scans: 100, wantNone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var host string
			run := func(c *Client) (refused int64, elapsed time.Duration) {
				reg := testregistry.New(t, testregistry.Options{Limit: tt.limit})
				host = reg.Host
				// Pushing goes through the limit too: start from a full bucket.
				reg.PushTags(t, "app", []string{"v1"})
				time.Sleep(time.Duration(float64(time.Second) * float64(max(tt.limit.Burst, 1)) / tt.limit.QPS))
				before := reg.Throttled()
				start := time.Now()
				scanAll(t, c, repoOf(t, reg, "app"), tt.workers, tt.scans)
				return reg.Throttled() - before, time.Since(start)
			}
			adaptive := New(tt.qps, tt.burst, nil)
			got, elapsed := run(adaptive)
			if q := testutil.ToFloat64(adaptive.metrics.QuotaLimit.WithLabelValues(host)); tt.limit.Headers && q != tt.limit.QPS {
				t.Errorf("quota gauge %v, want the announced %v", q, tt.limit.QPS)
			}
			fixed := New(tt.qps, tt.burst, nil)
			if tt.fixedAtLimit {
				fixed = New(tt.limit.QPS, max(tt.limit.Burst, 1), nil)
			}
			fixed.fixed = true
			base, fixedElapsed := run(fixed)
			t.Logf("429s: adaptive %d in %s, fixed %d in %s", got, elapsed, base, fixedElapsed)
			if got > base+tt.slack {
				t.Errorf("the adaptive limiter drew %d 429s, a fixed one %d", got, base)
			}
			if tt.slack > 0 && got > tt.slack {
				t.Errorf("%d 429s, want at most %d", got, tt.slack)
			}
			if tt.wantNone && got != 0 {
				t.Errorf("%d 429s, want none", got)
			}
			if least := time.Duration(float64(tt.scans-tt.burst) / tt.qps * float64(time.Second)); tt.limit.QPS > tt.qps && elapsed < least {
				t.Errorf("%d scans in %s: faster than the ceiling of %v a second allows", tt.scans, elapsed, tt.qps)
			}
		})
	}
}

// scanAll lists a repository's tags scans times from workers goroutines;
// scans refused for good (a fixed limiter's retries run out) are allowed.
func scanAll(t *testing.T, c *Client, repo name.Repository, workers, scans int) {
	t.Helper()
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range workers {
		wg.Go(func() {
			for range jobs {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, _ = c.ListTags(ctx, repo, Options{Insecure: true})
				cancel()
			}
		})
	}
	for range scans {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
}

// TestQuotaGauges proves the quota a registry announces is exported per
// host, as Docker Hub announces it.
func TestQuotaGauges(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Limit", "100;w=21600")
		w.Header().Set("RateLimit-Remaining", "76;w=21600")
		_, _ = w.Write([]byte(`{"tags":["v1"]}`))
	}))
	defer srv.Close()
	c := New(100, 100, nil)
	repo, _ := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/app", name.Insecure)
	if _, err := c.ListTags(context.Background(), repo, Options{Insecure: true}); err != nil {
		t.Fatal(err)
	}
	host := repo.RegistryStr()
	if l, r := testutil.ToFloat64(c.metrics.QuotaLimit.WithLabelValues(host)), testutil.ToFloat64(c.metrics.QuotaRemaining.WithLabelValues(host)); l != 100 || r != 76 {
		t.Errorf("limit %v, remaining %v; want 100, 76", l, r)
	}
	if a := testutil.ToFloat64(c.metrics.Allowed.WithLabelValues(host)); a != 100 {
		t.Errorf("allowed %v a second, want the ceiling", a)
	}
}

// TestDigestFallsBackToGet proves a digest is read from a HEAD's
// Docker-Content-Digest and, from a registry that does not send one, is the
// sha256 of the manifest a GET returns.
func TestDigestFallsBackToGet(t *testing.T) {
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`)
	sum := sha256.Sum256(manifest)
	want := "sha256:" + hex.EncodeToString(sum[:])
	tests := []struct {
		name       string
		header     string
		wantMethod []string
	}{
		{"a HEAD with the digest", want, []string{"HEAD"}},
		{"no digest header", "", []string{"HEAD", "GET"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var methods []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				methods = append(methods, r.Method)
				if !strings.Contains(r.Header.Get("Accept"), "application/vnd.oci.image.index.v1+json") {
					t.Errorf("Accept %q", r.Header.Get("Accept"))
				}
				if tt.header != "" {
					w.Header().Set("Docker-Content-Digest", tt.header)
				}
				_, _ = w.Write(manifest)
			}))
			defer srv.Close()
			ref, _ := name.NewTag(strings.TrimPrefix(srv.URL, "http://")+"/app:v1", name.Insecure)
			got, err := New(100, 100, nil).Digest(context.Background(), ref, Options{Insecure: true})
			if err != nil || got != want || !slices.Equal(methods, tt.wantMethod) {
				t.Errorf("digest %q, %v after %v; want %q after %v", got, err, methods, want, tt.wantMethod)
			}
		})
	}
}

// TestParseChallenges proves WWW-Authenticate is read as registries send
// it: Docker Hub's bearer challenge with its scope, basic, several
// challenges in one header or several headers, quoted commas and escapes.
func TestParseChallenges(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []challenge
	}{
		{"Docker Hub", []string{`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"`},
			[]challenge{{"bearer", map[string]string{"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
				"scope": "repository:library/nginx:pull"}}}},
		{"basic, token values", []string{`Basic realm=registry`}, []challenge{{"basic", map[string]string{"realm": "registry"}}}},
		{"two in one header, spaces", []string{`Basic realm="a, b" , Bearer realm = "https://t.example.com/token", service=x`},
			[]challenge{{"basic", map[string]string{"realm": "a, b"}},
				{"bearer", map[string]string{"realm": "https://t.example.com/token", "service": "x"}}}},
		{"two headers, an escape", []string{`Negotiate`, `Bearer realm="say \"hi\""`},
			[]challenge{{"negotiate", map[string]string{}}, {"bearer", map[string]string{"realm": `say "hi"`}}}},
		{"garbage", []string{`=,="x"`, ``}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseChallenges(tt.values)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("parseChallenges = %v, want %v", got, tt.want)
			}
		})
	}
	if c, ok := pickChallenge(parseChallenges([]string{`Basic realm=x, Bearer realm=y`})); !ok || c.scheme != "bearer" {
		t.Errorf("picked %v, want bearer", c)
	}
}
