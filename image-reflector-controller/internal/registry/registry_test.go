package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"toolkit.dev/image-toolkit/pkg/testregistry"
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
