// Package registry lists the tags of image repositories and looks up
// digests, politely and cheaply.
//
// Politeness is adaptive and per registry host. A fixed rate is wrong both
// ways: low enough for the strictest registry, it made a cold start of a
// thousand repositories on one fast registry wait 200 s; high enough for
// that, it overruns a registry that cannot take it. Registries say when
// they are overrun, so the limiter listens instead of guessing:
//
//   - It never exceeds the ceiling, --registry-qps with --registry-burst:
//     the operator's bound for a registry that gives no feedback. It
//     starts below it, at 100 a second (the fixed ceiling of before), and
//     until a host first refuses, doubles each second while requests wait
//     for their turn: a fast registry is found in seconds, and a ceiling
//     is never taken for a rate the registry has shown it takes.
//   - A 429 or 503 halves the rate once per round of requests in flight
//     (a refusal of a request sent before the last decrease answers the
//     old rate), and growth then stops at 90% of the refused rate for a
//     minute, so a registry with a steady limit refuses about once a
//     minute, not at every probe. Retry-After pauses every request to the
//     host, not only the refused one (at most MaxBackoff); requests queued
//     at the old rate wait it out too, and the refused one is retried.
//   - After that, every answered request adds a tenth of a request per
//     second: busy, the rate grows 10% a second, a tenth of that just past
//     where the registry last refused. It grows only while requests wait
//     for their turn (as TCP's window grows only while it limits the
//     sender): a host with few requests stays where it is, rather than
//     climb over hours to a rate a burst after a restart would then use
//     unproven.
//   - Quotas a registry announces (RateLimit-Limit and -Remaining, e.g.
//     Docker Hub's "100;w=21600", or X-RateLimit-*) are exported per host,
//     and when less than a tenth is left the requests of the kind that
//     carried them (tag lists, manifests, blobs) are paced so the rest
//     lasts until the reset, or at 90% of the quota's rate when the reset
//     is not given: the limit is approached, not hit. Docker Hub announces
//     its pull quota on manifest answers only, so a low pull quota paces
//     digest lookups, not tag lists, which it does not count.
//   - A request whose turn is further away than MaxBackoff (or past its
//     deadline) fails at once and its reconcile is retried later, rather
//     than hold a worker for minutes.
//
// Authentication is reused. Per registry host and credentials (by hash) the
// client remembers the registry's challenge and the bearer tokens it
// issued, per repository scope, until 90% of their lifetime; it sends no
// credentials until a 401 asks for them, so an anonymous registry is never
// pinged. A scan is then one tags/list request per page; a 401 on a
// remembered token fetches a fresh one and retries once.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the registry request metrics.
type Metrics struct {
	Requests  *prometheus.CounterVec
	Throttled *prometheus.CounterVec
	Retried   *prometheus.CounterVec
	// Allowed is the adaptive limiter's current rate per host.
	Allowed *prometheus.GaugeVec
	// QuotaLimit and QuotaRemaining are the quota registries announce.
	QuotaLimit, QuotaRemaining *prometheus.GaugeVec
	// Metadata counts manifest and config requests by purpose.
	Metadata *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics named imagetoolkit_reflector_*.
func NewMetrics() *Metrics {
	opts := func(n, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "imagetoolkit", Subsystem: "reflector", Name: n, Help: help}
	}
	gauge := func(n, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "imagetoolkit", Subsystem: "reflector", Name: n, Help: help}, []string{"host"})
	}
	return &Metrics{
		Requests: prometheus.NewCounterVec(opts("registry_requests_total",
			"Registry HTTP requests, by registry host and status code (error: no response)."), []string{"host", "code"}),
		Throttled: prometheus.NewCounterVec(opts("registry_throttled_requests_total",
			"Registry responses asking us to slow down (429, 503), by host."), []string{"host"}),
		Retried: prometheus.NewCounterVec(opts("registry_retried_requests_total",
			"Registry requests retried after a 429 or 503, by host."), []string{"host"}),
		Allowed: gauge("registry_allowed_requests_per_second",
			"Requests per second the adaptive limiter allows to each registry host now: from 100 (or --registry-qps, if lower) up to --registry-qps while requests wait and the host keeps up, lower after it throttles."),
		QuotaLimit: gauge("registry_ratelimit_limit",
			"The request quota a registry host last announced (RateLimit-Limit or X-RateLimit-Limit), per its window."),
		QuotaRemaining: gauge("registry_ratelimit_remaining",
			"What is left of the quota a registry host last announced (RateLimit-Remaining or X-RateLimit-Remaining)."),
		Metadata: prometheus.NewCounterVec(opts("image_metadata_requests_total",
			"Manifest and config requests to registries, by purpose (digest, build_time) and object (manifest, config)."),
			[]string{"purpose", "object"}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests, m.Throttled, m.Retried, m.Allowed, m.QuotaLimit, m.QuotaRemaining, m.Metadata}
}

// Client talks to registries. It is safe for concurrent use.
type Client struct {
	qps     float64
	burst   int
	metrics *Metrics
	// fixed turns adaptation off: the rate stays at qps whatever the
	// registry says, as before this limiter; tests compare against it.
	fixed bool

	// MaxRetries bounds retries of one request after 429/503.
	MaxRetries int
	// MaxBackoff caps a single wait, whatever Retry-After says.
	MaxBackoff time.Duration
	// PageSize is the n asked of tags/list.
	PageSize int
	// HelmIndexLimit caps the bytes read of a Helm repository's
	// index.yaml; MaxHelmIndexBytes when zero.
	HelmIndexLimit int64

	mu       sync.Mutex
	limiters map[string]*hostLimiter
	auth     authCache
	helm     helmCache
}

// New returns a client allowing at most qps requests per second (burst
// burst) to each registry host, and fewer when a host asks.
func New(qps float64, burst int, metrics *Metrics) *Client {
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Client{
		qps: qps, burst: max(burst, 1), metrics: metrics,
		MaxRetries: 5, MaxBackoff: 30 * time.Second, PageSize: 1000,
		limiters: map[string]*hostLimiter{},
	}
}

// Options say how to reach one repository.
type Options struct {
	// Auth authenticates; anonymous when nil.
	Auth authn.Authenticator
	// Transport carries TLS and proxy settings; http.DefaultTransport when
	// nil.
	Transport http.RoundTripper
	// Insecure uses plain HTTP.
	Insecure bool
}

func (c *Client) limiter(host string) *hostLimiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.limiters[host]
	if !ok {
		l = newHostLimiter(host, c.qps, c.burst, c.fixed, c.MaxBackoff, c.metrics)
		c.limiters[host] = l
	}
	return l
}

// httpClient builds the authenticating, polite client for a repository.
func (c *Client) httpClient(ctx context.Context, repo name.Repository, o Options) (*http.Client, error) {
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	auth := o.Auth
	if auth == nil {
		auth = authn.Anonymous
	}
	cfg, err := authn.Authorization(ctx, auth)
	if err != nil {
		return nil, err
	}
	reg := repo.RegistryStr()
	polite := &politeTransport{client: c, host: reg, next: base, requireTLS: !o.Insecure}
	return &http.Client{Transport: &authTransport{
		cache: &c.auth, state: c.auth.state(authKey(reg, o.Insecure, cfg), time.Now()),
		registry: repo.Registry, insecure: o.Insecure, scope: repo.Scope(transport.PullScope),
		auth: auth, cfg: cfg, next: polite,
	}}, nil
}

func baseURL(repo name.Repository, o Options) *url.URL {
	scheme := "https"
	if o.Insecure {
		scheme = "http"
	}
	return &url.URL{Scheme: scheme, Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/"}
}

// ListTags returns every tag of the repository, following Link pagination.
func (c *Client) ListTags(ctx context.Context, repo name.Repository, o Options) ([]string, error) {
	httpc, err := c.httpClient(ctx, repo, o)
	if err != nil {
		return nil, err
	}
	next := baseURL(repo, o).JoinPath("tags", "list")
	next.RawQuery = url.Values{"n": {strconv.Itoa(c.PageSize)}}.Encode()
	var tags []string
	seen := map[string]bool{}
	for next != nil {
		if seen[next.String()] {
			return nil, fmt.Errorf("tags/list pagination loops at %s", next)
		}
		seen[next.String()] = true
		page, link, err := getPage(ctx, httpc, next)
		if err != nil {
			return nil, err
		}
		tags = append(tags, page...)
		if next, err = nextPage(next, link); err != nil {
			return nil, err
		}
	}
	return tags, nil
}

func getPage(ctx context.Context, httpc *http.Client, u *url.URL) ([]string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, "", err
	}
	var body struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, "", fmt.Errorf("decoding tags/list from %s: %w", u.Host, err)
	}
	return body.Tags, resp.Header.Get("Link"), nil
}

// nextPage resolves a Link header's rel="next" target against the current
// page. Links may not leave the registry host or downgrade to plain HTTP:
// the transport would carry credentials there.
func nextPage(cur *url.URL, link string) (*url.URL, error) {
	if link == "" {
		return nil, nil
	}
	for _, part := range strings.Split(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
			continue
		}
		target = strings.TrimSpace(target)
		if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
			return nil, fmt.Errorf("malformed Link header %q", link)
		}
		ref, err := url.Parse(target[1 : len(target)-1])
		if err != nil {
			return nil, fmt.Errorf("malformed Link header %q: %w", link, err)
		}
		u := cur.ResolveReference(ref)
		if u.Host != cur.Host || (cur.Scheme == "https" && u.Scheme != "https") {
			return nil, fmt.Errorf("refusing pagination link to %s://%s from %s://%s", u.Scheme, u.Host, cur.Scheme, cur.Host)
		}
		return u, nil
	}
	return nil, nil
}

// manifestTypes are the manifests a tag may point to, as Accept asks for
// them: without it a registry may convert an index to one platform's
// manifest and answer that digest.
var manifestTypes = strings.Join([]string{
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
}, ", ")

// Digest returns the digest of the manifest a tag points to: the
// Docker-Content-Digest of a HEAD, which Docker Hub does not count as a
// pull, or the sha256 of the manifest when a registry does not send it.
func (c *Client) Digest(ctx context.Context, ref name.Tag, o Options) (string, error) {
	httpc, err := c.httpClient(ctx, ref.Repository, o)
	if err != nil {
		return "", err
	}
	u := baseURL(ref.Repository, o).JoinPath("manifests", ref.TagStr())
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		c.metrics.Metadata.WithLabelValues(PurposeDigest, "manifest").Inc()
		req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Accept", manifestTypes)
		resp, err := httpc.Do(req)
		if err != nil {
			return "", err
		}
		d, err := manifestDigest(resp)
		resp.Body.Close()
		if err != nil || d != "" {
			return d, err
		}
	}
	return "", fmt.Errorf("%s: the registry sent neither a digest nor a manifest", ref)
}

// manifestDigest reads a manifest answer's digest: its Docker-Content-Digest
// header, else (for a GET) the sha256 of its body; "" when neither is there.
func manifestDigest(resp *http.Response) (string, error) {
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return "", err
	}
	if h := resp.Header.Get("Docker-Content-Digest"); h != "" {
		d, err := v1.NewHash(h)
		if err != nil {
			return "", fmt.Errorf("Docker-Content-Digest %q: %w", h, err)
		}
		return d.String(), nil
	}
	if resp.Request == nil || resp.Request.Method != http.MethodGet {
		return "", nil
	}
	h := sha256.New()
	// Manifests are small; the distribution specification caps them at 4 MiB.
	switch n, err := io.Copy(h, io.LimitReader(resp.Body, 4<<20+1)); {
	case err != nil:
		return "", fmt.Errorf("reading the manifest: %w", err)
	case n > 4<<20:
		return "", errors.New("the manifest is larger than 4 MiB")
	case n == 0:
		return "", nil
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// IsAuthError reports whether err is the registry refusing our credentials.
func IsAuthError(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden
	}
	return false
}
