package testregistry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The media types Helm pushes a chart with (helm push, Helm 3.8 and later).
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ChartTag is the OCI tag Helm gives a chart version: OCI tags cannot hold
// '+', so Helm writes build metadata after '_' (1.2.3+b1 is 1.2.3_b1).
func ChartTag(version string) string { return strings.ReplaceAll(version, "+", "_") }

// chartArchive is a minimal chart package: NAME/Chart.yaml in a tar.gz.
func chartArchive(chart, version string) ([]byte, []byte) {
	meta := fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\ntype: application\n", chart, version)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: chart + "/Chart.yaml", Mode: 0o644, Size: int64(len(meta)), ModTime: time.Unix(0, 0)})
	_, _ = tw.Write([]byte(meta))
	_ = tw.Close()
	_ = gz.Close()
	cfg, _ := json.Marshal(map[string]string{"apiVersion": "v2", "name": chart, "version": version, "type": "application"})
	return cfg, buf.Bytes()
}

// rawManifest is a manifest pushed as written.
type rawManifest struct {
	body      []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

// PushChart pushes a chart version as an OCI artifact the way helm push
// does (an OCI manifest with Helm's config and chart content media types)
// to repo, which ends in the chart's name, under the tag Helm gives the
// version (ChartTag). It returns the manifest digest.
func (r *Registry) PushChart(t testing.TB, repo, version string) string {
	t.Helper()
	chart := repo[strings.LastIndexByte(repo, '/')+1:]
	cfgJSON, archive := chartArchive(chart, version)
	ref, err := name.NewTag(r.Repo(repo)+":"+ChartTag(version), r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := static.NewLayer(cfgJSON, HelmConfigMediaType)
	content := static.NewLayer(archive, HelmChartMediaType)
	desc := func(l v1.Layer, mt types.MediaType) v1.Descriptor {
		d, _ := l.Digest()
		n, _ := l.Size()
		return v1.Descriptor{MediaType: mt, Digest: d, Size: n}
	}
	for _, l := range []v1.Layer{cfg, content} {
		if err := remote.WriteLayer(ref.Context(), l, r.RemoteOptions()...); err != nil {
			t.Fatalf("pushing a blob of %s: %v", ref, err)
		}
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: desc(cfg, HelmConfigMediaType), Layers: []v1.Descriptor{desc(content, HelmChartMediaType)}}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(ref, rawManifest{body, types.OCIManifestSchema1}, r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HelmOptions configure a HelmRepo.
type HelmOptions struct {
	// TLS serves HTTPS with a certificate from a fresh CA (HelmRepo.CAPEM).
	TLS bool
	// Username and Password require basic authentication when set.
	Username, Password string
	// Token requires "Authorization: Bearer <Token>" when set.
	Token string
	// NoValidators leaves out ETag and Last-Modified, as some static
	// hosts do, so that every fetch is a full one.
	NoValidators bool
}

// ChartVersion is a version in a HelmRepo's index.
type ChartVersion struct {
	Version string
	// Created is written as the entry's created time unless zero.
	Created time.Time
}

// HelmRepo is an HTTP(S) Helm chart repository: it serves index.yaml as
// Helm writes it (entries per chart, newest version first), with an ETag
// and Last-Modified it honours in conditional requests, and counts what it
// serves.
type HelmRepo struct {
	// URL is the repository URL, as given to helm repo add.
	URL string
	// CAPEM is the CA certificate when TLS is on.
	CAPEM []byte

	opts   HelmOptions
	server *httptest.Server

	mu       sync.Mutex
	charts   map[string][]ChartVersion
	index    []byte
	etag     string
	modified time.Time
	// Body replaces the index with these bytes when set (a broken index).
	body []byte

	requests, notModified, bytes atomic.Int64
}

// NewHelmRepo starts a Helm repository, stopped at the end of the test.
func NewHelmRepo(t testing.TB, o HelmOptions) *HelmRepo {
	t.Helper()
	h := &HelmRepo{opts: o, charts: map[string][]ChartVersion{}}
	h.server = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	if o.TLS {
		h.server.TLS, h.CAPEM, _, _ = newTLS(t, false)
		h.server.StartTLS()
	} else {
		h.server.Start()
	}
	t.Cleanup(h.server.Close)
	h.URL = h.server.URL + "/charts"
	h.render()
	return h
}

// Close stops the repository early.
func (h *HelmRepo) Close() { h.server.Close() }

// ChartURL is the URL an ImageRepository gives for chart: URL/chart.
func (h *HelmRepo) ChartURL(chart string) string { return h.URL + "/" + chart }

// Add publishes chart versions (a new index, with a new ETag).
func (h *HelmRepo) Add(chart string, versions ...ChartVersion) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.charts[chart] = append(h.charts[chart], versions...)
	h.renderLocked()
}

// AddVersions publishes versions created an hour apart, the last now.
func (h *HelmRepo) AddVersions(chart string, versions ...string) {
	now := time.Now().UTC().Truncate(time.Second)
	var vs []ChartVersion
	for i, v := range versions {
		vs = append(vs, ChartVersion{Version: v, Created: now.Add(time.Duration(i-len(versions)+1) * time.Hour)})
	}
	h.Add(chart, vs...)
}

// SetBody serves body instead of the index (nil: the index again).
func (h *HelmRepo) SetBody(body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.body = body
}

// Requests counts requests for the index, NotModified those answered 304,
// and BytesServed the bytes of the index bodies sent.
func (h *HelmRepo) Requests() int64    { return h.requests.Load() }
func (h *HelmRepo) NotModified() int64 { return h.notModified.Load() }
func (h *HelmRepo) BytesServed() int64 { return h.bytes.Load() }

func (h *HelmRepo) render() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renderLocked()
}

// renderLocked writes the index the way helm repo index lays it out: each
// chart's versions newest first, with the metadata a real index carries
// per version (so sizes are realistic: about 500 bytes a version).
func (h *HelmRepo) renderLocked() {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nentries:\n")
	names := make([]string, 0, len(h.charts))
	for n := range h.charts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %s:\n", n)
		vs := h.charts[n]
		for i := len(vs) - 1; i >= 0; i-- {
			v := vs[i]
			sum := sha256.Sum256([]byte(n + v.Version))
			fmt.Fprintf(&b, "  - apiVersion: v2\n    appVersion: %q\n", v.Version)
			if !v.Created.IsZero() {
				fmt.Fprintf(&b, "    created: %q\n", v.Created.Format(time.RFC3339Nano))
			}
			fmt.Fprintf(&b, "    description: A chart for tests, served by testregistry.HelmRepo\n"+
				"    digest: %s\n    home: https://example.com/%s\n    keywords:\n    - test\n"+
				"    maintainers:\n    - email: maintainers@example.com\n      name: maintainers\n"+
				"    name: %s\n    sources:\n    - https://example.com/%s/source\n    type: application\n"+
				"    urls:\n    - %s-%s.tgz\n    version: %s\n",
				hex.EncodeToString(sum[:]), n, n, n, n, v.Version, v.Version)
		}
	}
	h.modified = time.Now().UTC().Truncate(time.Second)
	fmt.Fprintf(&b, "generated: %q\n", h.modified.Format(time.RFC3339Nano))
	h.index = []byte(b.String())
	sum := sha256.Sum256(h.index)
	h.etag = `"` + hex.EncodeToString(sum[:16]) + `"`
}

func (h *HelmRepo) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/charts/index.yaml" {
		http.NotFound(w, req)
		return
	}
	h.requests.Add(1)
	switch {
	case h.opts.Username != "":
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(h.opts.Username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(h.opts.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	case h.opts.Token != "":
		if subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), []byte("Bearer "+h.opts.Token)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	h.mu.Lock()
	body, etag, modified := h.index, h.etag, h.modified
	if h.body != nil {
		body, etag = h.body, ""
	}
	h.mu.Unlock()
	if !h.opts.NoValidators && etag != "" {
		w.Header().Set("ETag", etag)
		w.Header().Set("Last-Modified", modified.Format(http.TimeFormat))
		if inm := req.Header.Get("If-None-Match"); inm != "" && inm == etag {
			h.notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-yaml")
	n, _ := w.Write(body)
	h.bytes.Add(int64(n))
}

// PushManifest pushes body, a manifest of media type mediaType, as it is,
// under ref (a tag or a digest of repo) and returns its digest: for
// manifests no client would write (hostile referrers, loops).
func (r *Registry) PushManifest(t testing.TB, repo, ref string, mediaType types.MediaType, body []byte) string {
	t.Helper()
	sep := ":"
	if strings.HasPrefix(ref, "sha256:") {
		sep = "@"
	}
	target, err := name.ParseReference(r.Repo(repo)+sep+ref, r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(target, rawManifest{body: body, mediaType: mediaType}, r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", target, err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// PushBlob uploads body as a blob of repo and returns its digest.
func (r *Registry) PushBlob(t testing.TB, repo string, body []byte) string {
	t.Helper()
	ref, err := name.NewRepository(r.Repo(repo), r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(ref, static.NewLayer(body, types.OCILayer), r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing a blob to %s: %v", ref, err)
	}
	h, _, _ := v1.SHA256(bytes.NewReader(body))
	return h.String()
}
