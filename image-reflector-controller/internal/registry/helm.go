package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	yaml "go.yaml.in/yaml/v3"
)

// MaxHelmIndexBytes is the default cap of an index.yaml (Client.HelmIndexLimit).
// The indexes of the largest public repositories are tens of MiB; a body
// past this is refused rather than read into a controller that scans many
// repositories at once.
const MaxHelmIndexBytes = 64 << 20

// ChartVersion is one version of a chart in a Helm repository's index.
type ChartVersion struct {
	Version string
	// Created is the index's created time of this version; zero when the
	// index does not say.
	Created time.Time
}

// HelmIndexError is an index.yaml that is not a Helm repository index:
// retrying will not help until the repository publishes another one.
type HelmIndexError struct {
	URL string
	Err error
}

func (e *HelmIndexError) Error() string {
	return fmt.Sprintf("%s is not a valid Helm repository index: %v", e.URL, e.Err)
}

func (e *HelmIndexError) Unwrap() error { return e.Err }

// ChartNotFoundError is a valid index without the chart.
type ChartNotFoundError struct {
	URL, Chart string
	// Charts is how many charts the index lists.
	Charts int
}

func (e *ChartNotFoundError) Error() string {
	return fmt.Sprintf("chart %q is not in %s (%d charts listed)", e.Chart, e.URL, e.Charts)
}

// HelmFetch says what fetching an index cost.
type HelmFetch struct {
	// NotModified is true when the repository answered 304 to the
	// validators of the last fetch, and the versions are the ones read
	// then.
	NotModified bool
	// Bytes is the size of the body read (0 for a 304).
	Bytes int64
}

// helmCache keeps, per index, credentials and chart, the validators
// (ETag, Last-Modified) of the last answer and the chart's versions read
// from it: a scan of an unchanged index is one request with an empty
// answer, not tens of MiB to download and parse again. Only the chart's
// versions are kept, never the whole index.
type helmCache struct {
	mu sync.Mutex
	m  map[string]helmCached
}

type helmCached struct {
	etag, lastModified string
	versions           []ChartVersion
}

// maxHelmCached bounds the cache; past it, the cache starts over (each
// repository then pays one full fetch).
const maxHelmCached = 4096

func (c *helmCache) get(key string) (helmCached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *helmCache) put(key string, v helmCached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHelmCached {
		c.m = map[string]helmCached{}
	}
	c.m[key] = v
}

// HelmIndexURL is where a Helm repository at repoURL keeps its index, as
// Helm resolves it: repoURL/index.yaml.
func HelmIndexURL(repoURL *url.URL) *url.URL {
	return repoURL.JoinPath("index.yaml")
}

// ChartVersions returns the versions of chart in the Helm repository index
// at index, in the index's order. It goes through the same per-host
// limiter, metrics and TLS rules as registry requests (plain HTTP only with
// o.Insecure). Credentials are Helm's: o.Auth's username and password as
// basic authentication, or its registry token as a bearer token; they are
// never sent on a redirect to another host (net/http drops Authorization
// there). When the last answer for the same index, credentials and chart
// had an ETag or Last-Modified, the request is conditional, and a 304
// returns the versions read then.
func (c *Client) ChartVersions(ctx context.Context, index *url.URL, chart string, o Options) ([]ChartVersion, HelmFetch, error) {
	var fetch HelmFetch
	auth := o.Auth
	if auth == nil {
		auth = authn.Anonymous
	}
	cfg, err := authn.Authorization(ctx, auth)
	if err != nil {
		return nil, fetch, err
	}
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	httpc := &http.Client{Transport: &politeTransport{client: c, host: index.Host, next: base, requireTLS: !o.Insecure}}
	key := authKey(index.String(), o.Insecure, cfg) + "\x00" + chart

	cached, haveCached := c.helm.get(key)
	req, err := indexRequest(ctx, index, cfg, cached)
	if err != nil {
		return nil, fetch, err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, fetch, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && haveCached {
		fetch.NotModified = true
		return cached.versions, fetch, nil
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, fetch, err
	}
	// Read while counting, never past the cap: a repository cannot make
	// the controller hold more than HelmIndexLimit of it.
	limit := c.HelmIndexLimit
	if limit <= 0 {
		limit = MaxHelmIndexBytes
	}
	body := &countingReader{r: io.LimitReader(resp.Body, limit+1)}
	versions, charts, found, err := parseHelmIndex(body, chart)
	fetch.Bytes = body.n
	if body.n > limit {
		return nil, fetch, &HelmIndexError{URL: index.String(), Err: fmt.Errorf("larger than the %d bytes cap", limit)}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fetch, ctx.Err()
		}
		var ie *HelmIndexError
		if errors.As(err, &ie) {
			ie.URL = index.String()
			return nil, fetch, ie
		}
		return nil, fetch, fmt.Errorf("reading %s: %w", index, err)
	}
	if !found {
		return nil, fetch, &ChartNotFoundError{URL: index.String(), Chart: chart, Charts: charts}
	}
	etag, lastModified := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if etag != "" || lastModified != "" {
		c.helm.put(key, helmCached{etag: etag, lastModified: lastModified, versions: versions})
	}
	return versions, fetch, nil
}

// indexRequest is the GET of a repository's index with its credentials,
// conditional on the copy cached (its ETag and Last-Modified, empty when
// none), so an unchanged index costs a 304.
func indexRequest(ctx context.Context, index *url.URL, cfg *authn.AuthConfig, cached helmCached) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, index.String(), nil)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.RegistryToken != "":
		req.Header.Set("Authorization", "Bearer "+cfg.RegistryToken)
	case cfg.Username != "" || cfg.Password != "":
		req.SetBasicAuth(cfg.Username, cfg.Password)
	}
	req.Header.Set("Accept", "application/yaml, application/x-yaml, text/yaml, application/json;q=0.9, */*;q=0.8")
	if cached.etag != "" {
		req.Header.Set("If-None-Match", cached.etag)
	}
	if cached.lastModified != "" {
		req.Header.Set("If-Modified-Since", cached.lastModified)
	}
	return req, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// helmIndex is the part of an index.yaml read: of each version, only the
// version and its creation time are kept (the chart's metadata, URLs and
// digests are dropped while decoding).
type helmIndex struct {
	APIVersion string                      `yaml:"apiVersion"`
	Entries    map[string][]helmIndexEntry `yaml:"entries"`
}

type helmIndexEntry struct {
	Version string `yaml:"version"`
	// Created is read as text: Helm writes RFC 3339 with nanoseconds,
	// other tools other layouts, and a time that does not parse must not
	// reject the whole index.
	Created string `yaml:"created"`
}

// parseHelmIndex decodes an index (YAML, or JSON, which is YAML) and
// returns the versions of chart, how many charts the index lists, and
// whether chart is one of them. Versions without a version string are
// skipped, as Helm skips them.
func parseHelmIndex(r io.Reader, chart string) ([]ChartVersion, int, bool, error) {
	var idx helmIndex
	if err := yaml.NewDecoder(r).Decode(&idx); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, false, &HelmIndexError{Err: errors.New("empty")}
		}
		return nil, 0, false, &HelmIndexError{Err: err}
	}
	if idx.APIVersion == "" {
		return nil, 0, false, &HelmIndexError{Err: errors.New("no apiVersion (is the URL a Helm repository?)")}
	}
	entries, found := idx.Entries[chart]
	out := make([]ChartVersion, 0, len(entries))
	for _, e := range entries {
		v := strings.TrimSpace(e.Version)
		if v == "" {
			continue
		}
		cv := ChartVersion{Version: v}
		if e.Created != "" {
			if t, err := time.Parse(time.RFC3339Nano, e.Created); err == nil {
				cv.Created = t.UTC()
			}
		}
		out = append(out, cv)
	}
	return out, len(idx.Entries), found, nil
}
