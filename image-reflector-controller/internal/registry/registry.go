// Package registry lists the tags of image repositories and looks up
// digests, politely: a rate limit per registry host, Retry-After honoured on
// 429 and 503 with capped backoff, and every request counted by host and
// status code.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Metrics are the registry request metrics.
type Metrics struct {
	Requests  *prometheus.CounterVec
	Throttled *prometheus.CounterVec
	Retried   *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics named imagetoolkit_reflector_*.
func NewMetrics() *Metrics {
	opts := func(n, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "imagetoolkit", Subsystem: "reflector", Name: n, Help: help}
	}
	return &Metrics{
		Requests: prometheus.NewCounterVec(opts("registry_requests_total",
			"Registry HTTP requests, by registry host and status code (error: no response)."), []string{"host", "code"}),
		Throttled: prometheus.NewCounterVec(opts("registry_throttled_requests_total",
			"Registry responses asking us to slow down (429, 503), by host."), []string{"host"}),
		Retried: prometheus.NewCounterVec(opts("registry_retried_requests_total",
			"Registry requests retried after a 429 or 503, by host."), []string{"host"}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests, m.Throttled, m.Retried}
}

// Client talks to registries. It is safe for concurrent use.
type Client struct {
	qps     rate.Limit
	burst   int
	metrics *Metrics

	// MaxRetries bounds retries of one request after 429/503.
	MaxRetries int
	// MaxBackoff caps a single wait, whatever Retry-After says.
	MaxBackoff time.Duration
	// PageSize is the n asked of tags/list.
	PageSize int

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// New returns a client allowing qps requests per second (burst burst) to
// each registry host.
func New(qps float64, burst int, metrics *Metrics) *Client {
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Client{
		qps: rate.Limit(qps), burst: max(burst, 1), metrics: metrics,
		MaxRetries: 5, MaxBackoff: 30 * time.Second, PageSize: 1000,
		limiters: map[string]*rate.Limiter{},
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

func (c *Client) limiter(host string) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.limiters[host]
	if !ok {
		l = rate.NewLimiter(c.qps, c.burst)
		c.limiters[host] = l
	}
	return l
}

// transport builds the authenticating, polite transport for a repository.
func (c *Client) transport(ctx context.Context, repo name.Repository, o Options) (http.RoundTripper, error) {
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	polite := &politeTransport{client: c, host: repo.RegistryStr(), next: base, requireTLS: !o.Insecure}
	auth := o.Auth
	if auth == nil {
		auth = authn.Anonymous
	}
	return transport.NewWithContext(ctx, repo.Registry, auth, polite, []string{repo.Scope(transport.PullScope)})
}

// ListTags returns every tag of the repository, following Link pagination.
func (c *Client) ListTags(ctx context.Context, repo name.Repository, o Options) ([]string, error) {
	tr, err := c.transport(ctx, repo, o)
	if err != nil {
		return nil, err
	}
	scheme := "https"
	if o.Insecure {
		scheme = "http"
	}
	next := &url.URL{
		Scheme:   scheme,
		Host:     repo.RegistryStr(),
		Path:     fmt.Sprintf("/v2/%s/tags/list", repo.RepositoryStr()),
		RawQuery: url.Values{"n": {strconv.Itoa(c.PageSize)}}.Encode(),
	}
	httpc := &http.Client{Transport: tr}
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

// Digest returns the digest of the manifest a tag points to (HEAD).
func (c *Client) Digest(ctx context.Context, ref name.Tag, o Options) (string, error) {
	tr, err := c.transport(ctx, ref.Repository, o)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(ref, remote.WithContext(ctx), remote.WithTransport(tr))
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// IsAuthError reports whether err is the registry refusing our credentials.
func IsAuthError(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden
	}
	return false
}

// politeTransport rate-limits requests per host, retries 429 and 503 after
// Retry-After (or exponential backoff with jitter), and counts requests.
type politeTransport struct {
	client *Client
	host   string
	next   http.RoundTripper
	// requireTLS refuses plain HTTP: go-containerregistry falls back to it
	// for loopback and private addresses when HTTPS fails, which would
	// downgrade a registry the user did not mark insecure.
	requireTLS bool
}

func (p *politeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := p.client
	ctx := req.Context()
	if p.requireTLS && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("refusing plain HTTP to %s: set spec.insecure to allow it", req.URL.Host)
	}
	for attempt := 0; ; attempt++ {
		if err := c.limiter(p.host).Wait(ctx); err != nil {
			return nil, err
		}
		resp, err := p.next.RoundTrip(req)
		if err != nil {
			c.metrics.Requests.WithLabelValues(p.host, "error").Inc()
			return nil, err
		}
		c.metrics.Requests.WithLabelValues(p.host, strconv.Itoa(resp.StatusCode)).Inc()
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		c.metrics.Throttled.WithLabelValues(p.host).Inc()
		// Only requests without a body can be sent again as they are.
		if attempt >= c.MaxRetries || (req.Body != nil && req.GetBody == nil) {
			return resp, nil
		}
		wait := retryAfter(resp, attempt, c.MaxBackoff)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return nil, fmt.Errorf("%s asks to retry after %s, past the scan's deadline: %w", p.host, wait, context.DeadlineExceeded)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		c.metrics.Retried.WithLabelValues(p.host).Inc()
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(ctx)
			req.Body = body
		}
	}
}

// retryAfter reads Retry-After (seconds or an HTTP date); without it, backs
// off exponentially from 500ms with jitter. Capped at max.
func retryAfter(resp *http.Response, attempt int, maxWait time.Duration) time.Duration {
	var wait time.Duration
	if v := resp.Header.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			wait = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			wait = time.Until(t)
		}
	}
	if wait <= 0 {
		base := 500 * time.Millisecond << min(attempt, 10)
		wait = base/2 + time.Duration(rand.Int64N(int64(base/2)+1))
	}
	return min(wait, maxWait)
}
