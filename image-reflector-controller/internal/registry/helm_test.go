package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

func caTransport(t *testing.T, caPEM []byte) *http.Transport {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	return tr
}

func indexURL(t *testing.T, h *testregistry.HelmRepo) *url.URL {
	t.Helper()
	u, err := url.Parse(h.URL)
	if err != nil {
		t.Fatal(err)
	}
	return HelmIndexURL(u)
}

// ChartVersions reads a chart's versions and creation times from a real
// HTTP(S) Helm repository's index, with each kind of credentials Helm
// repositories take, and fails with the error a reconciler can tell apart:
// refused credentials, an unverified certificate, plain HTTP without
// consent, a chart the index lacks, a body that is no index, one past the
// cap.
func TestChartVersions(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	tests := []struct {
		name  string
		repo  testregistry.HelmOptions
		chart string
		body  string // served instead of the index when set
		limit int64
		// opts: trust the CA (TLS), credentials, insecure
		trust    bool
		auth     authn.Authenticator
		insecure bool
		want     []string
		check    func(error) bool
		errText  string
	}{
		{name: "https anonymous", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", trust: true,
			want: []string{"6.1.0", "6.0.0+build.1", "1.0.0"}},
		{name: "https basic auth", repo: testregistry.HelmOptions{TLS: true, Username: "u", Password: "p"}, chart: "podinfo",
			trust: true, auth: &authn.Basic{Username: "u", Password: "p"}, want: []string{"6.1.0", "6.0.0+build.1", "1.0.0"}},
		{name: "bearer token", repo: testregistry.HelmOptions{TLS: true, Token: "tok"}, chart: "podinfo",
			trust: true, auth: &authn.Bearer{Token: "tok"}, want: []string{"6.1.0", "6.0.0+build.1", "1.0.0"}},
		{name: "plain http with insecure", chart: "podinfo", insecure: true, want: []string{"6.1.0", "6.0.0+build.1", "1.0.0"}},
		{name: "wrong password", repo: testregistry.HelmOptions{TLS: true, Username: "u", Password: "p"}, chart: "podinfo",
			trust: true, auth: &authn.Basic{Username: "u", Password: "wrong"}, check: IsAuthError},
		{name: "no credentials", repo: testregistry.HelmOptions{TLS: true, Username: "u", Password: "p"}, chart: "podinfo",
			trust: true, check: IsAuthError},
		{name: "unknown CA", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", errText: "certificate"},
		{name: "plain http without insecure", chart: "podinfo", errText: "set spec.insecure"},
		{name: "chart not listed", repo: testregistry.HelmOptions{TLS: true}, chart: "nginx", trust: true,
			check: func(err error) bool { var e *ChartNotFoundError; return errors.As(err, &e) }, errText: `chart "nginx" is not in`},
		{name: "not yaml", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", trust: true, body: "<html>\n  <p>: [x\n",
			check: func(err error) bool { var e *HelmIndexError; return errors.As(err, &e) }, errText: "is not a valid Helm repository index"},
		{name: "no apiVersion", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", trust: true, body: "hello: world\n",
			check: func(err error) bool { var e *HelmIndexError; return errors.As(err, &e) }, errText: "no apiVersion"},
		{name: "past the cap", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", trust: true, limit: 1000,
			check: func(err error) bool { var e *HelmIndexError; return errors.As(err, &e) }, errText: "larger than the 1000 bytes cap"},
		{name: "json index", repo: testregistry.HelmOptions{TLS: true}, chart: "podinfo", trust: true,
			body: `{"apiVersion":"v1","entries":{"podinfo":[{"version":"2.0.0","created":"2026-01-02T03:04:05.0000006Z"},{"version":"1.10"}]}}`,
			want: []string{"2.0.0", "1.10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testregistry.NewHelmRepo(t, tt.repo)
			h.Add("podinfo", testregistry.ChartVersion{Version: "1.0.0"},
				testregistry.ChartVersion{Version: "6.0.0+build.1", Created: created},
				testregistry.ChartVersion{Version: "6.1.0", Created: created})
			h.Add("other", testregistry.ChartVersion{Version: "9.9.9"})
			if tt.body != "" {
				h.SetBody([]byte(tt.body))
			}
			o := Options{Auth: tt.auth, Insecure: tt.insecure}
			if tt.trust {
				o.Transport = caTransport(t, h.CAPEM)
			}
			c := New(100, 100, nil)
			c.HelmIndexLimit = tt.limit
			got, fetch, err := c.ChartVersions(context.Background(), indexURL(t, h), tt.chart, o)
			if tt.check != nil || tt.errText != "" {
				if err == nil {
					t.Fatalf("no error; versions %v", got)
				}
				if tt.check != nil && !tt.check(err) {
					t.Errorf("error %T %v is not the kind expected", err, err)
				}
				if !strings.Contains(err.Error(), tt.errText) {
					t.Errorf("error %q does not say %q", err, tt.errText)
				}
				for _, secret := range []string{"wrong", "tok"} {
					if tt.auth != nil && strings.Contains(err.Error(), secret) {
						t.Errorf("error %q holds a credential", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var versions []string
			for _, v := range got {
				versions = append(versions, v.Version)
			}
			if !slices.Equal(versions, tt.want) {
				t.Errorf("versions %v, want %v", versions, tt.want)
			}
			if !got[0].Created.Equal(created) {
				t.Errorf("created %v, want %v", got[0].Created, created)
			}
			if fetch.Bytes == 0 || fetch.NotModified {
				t.Errorf("fetch %+v", fetch)
			}
		})
	}
}

// An unchanged index is not downloaded again: the second scan sends the
// ETag, gets 304 and the versions read the first time; a new version (a
// new ETag) is read in full. Without validators every scan is a full one.
func TestChartVersionsConditional(t *testing.T) {
	for _, noValidators := range []bool{false, true} {
		h := testregistry.NewHelmRepo(t, testregistry.HelmOptions{NoValidators: noValidators})
		h.AddVersions("podinfo", "1.0.0", "1.1.0")
		c := New(100, 100, nil)
		o := Options{Insecure: true}
		scan := func() ([]ChartVersion, HelmFetch) {
			t.Helper()
			v, f, err := c.ChartVersions(context.Background(), indexURL(t, h), "podinfo", o)
			if err != nil {
				t.Fatal(err)
			}
			return v, f
		}
		first, f1 := scan()
		second, f2 := scan()
		if len(first) != 2 || len(second) != 2 || f1.NotModified {
			t.Fatalf("validators %t: %v then %v", !noValidators, first, second)
		}
		if f2.NotModified == noValidators || (f2.Bytes == 0) == noValidators {
			t.Errorf("validators %t: second fetch %+v", !noValidators, f2)
		}
		h.AddVersions("podinfo", "1.2.0")
		third, f3 := scan()
		if len(third) != 3 || f3.NotModified {
			t.Errorf("validators %t: after a new version %v, %+v", !noValidators, third, f3)
		}
		if want := int64(map[bool]int{false: 1, true: 0}[noValidators]); h.NotModified() != want {
			t.Errorf("validators %t: %d answers 304, want %d", !noValidators, h.NotModified(), want)
		}
		// A 304 for a chart the cache does not hold (another chart of the
		// same index) is never taken for versions.
		if _, _, err := c.ChartVersions(context.Background(), indexURL(t, h), "nginx", o); err == nil {
			t.Error("a chart absent from the index was found")
		}
	}
}

// BenchmarkHelmIndexScan is the cost of scanning one chart of a Helm
// repository whose index holds 1,000 versions of it (about 0.5 MB, laid out
// as helm repo index writes it), per scan of an unchanged index: with the
// repository's ETag reused (a conditional request answered 304) and
// without validators (every scan downloads and parses the whole index).
// It reports requests and body bytes per scan as the server counted them.
func BenchmarkHelmIndexScan(b *testing.B) {
	for _, tc := range []struct {
		name         string
		noValidators bool
	}{{"etag", false}, {"no-validators", true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := testregistry.NewHelmRepo(b, testregistry.HelmOptions{NoValidators: tc.noValidators})
			versions := make([]string, 1000)
			for i := range versions {
				versions[i] = fmt.Sprintf("%d.%d.%d", i/100, i/10%10, i%10)
			}
			h.AddVersions("app", versions...)
			u, _ := url.Parse(h.URL)
			c := New(1e6, 1000, nil)
			scan := func() {
				v, _, err := c.ChartVersions(context.Background(), HelmIndexURL(u), "app", Options{Insecure: true})
				if err != nil || len(v) != 1000 {
					b.Fatalf("%d versions, %v", len(v), err)
				}
			}
			scan() // the first scan of a repository is a full one either way
			full := h.BytesServed()
			req0, bytes0 := h.Requests(), h.BytesServed()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				scan()
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(h.Requests()-req0)/n, "requests/scan")
			b.ReportMetric(float64(h.BytesServed()-bytes0)/n, "body-bytes/scan")
			b.ReportMetric(float64(full), "index-bytes")
		})
	}
}
