// Package testregistry runs a real OCI registry (go-containerregistry's
// pkg/registry) on loopback for tests, wrapped with what that registry lacks:
// basic authentication or bearer tokens, TLS with a private CA and optional
// client certificates, Link pagination of tags/list, an enforced request
// rate, and injected failures.
package testregistry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options configure a Registry.
type Options struct {
	// Username and Password require basic authentication when set.
	Username, Password string
	// TLS serves HTTPS with a certificate from a fresh CA (Registry.CAPEM).
	TLS bool
	// ClientCerts requires a client certificate signed by the CA
	// (Registry.ClientCertPEM, ClientKeyPEM); implies TLS.
	ClientCerts bool
	// PageSize paginates tags/list with Link headers when > 0, also when
	// the client asks for no page size.
	PageSize int
	// Bearer makes clients fetch tokens, as Docker Hub and most hosted
	// registries do: requests without a token for their repository get 401
	// with a Bearer challenge naming the realm /token on this server,
	// which issues tokens for the scopes asked (checking Username and
	// Password when set; anonymous otherwise), valid until RevokeTokens.
	Bearer bool
	// Limit enforces a request rate when its QPS is above 0.
	Limit Limit
	// Referrers serves the OCI 1.1 referrers API; without it clients
	// fall back to the referrers tag schema (sha256-<hex>), as with GHCR.
	Referrers bool
}

// Limit is a token bucket over every request, as a registry protecting
// itself enforces one: a request finding it empty gets 429 with a
// Retry-After of the seconds until the next token, rounded up.
type Limit struct {
	// QPS refills the bucket; Burst is its size (1 when 0).
	QPS   float64
	Burst int
	// Headers announces the bucket on every answer the way Docker Hub
	// announces its pull quota: RateLimit-Limit: <QPS>;w=1 and
	// RateLimit-Remaining: <whole tokens left>;w=1.
	Headers bool
}

// Registry is a running registry.
type Registry struct {
	// Host is host:port, for image references.
	Host string
	// CAPEM is the CA certificate when TLS is on.
	CAPEM []byte
	// ClientCertPEM and ClientKeyPEM are a client certificate for ClientCerts.
	ClientCertPEM, ClientKeyPEM []byte

	opts      Options
	server    *httptest.Server
	inner     http.Handler
	requests  atomic.Int64
	tagLists  atomic.Int64
	throttled atomic.Int64
	// manifestReads and blobReads count GET and HEAD of manifests and
	// blobs: what looking up digests and build times costs.
	manifestReads, blobReads atomic.Int64

	mu       sync.Mutex
	failures []failure
	// intercept answers requests before the registry does (Intercept).
	intercept func(http.ResponseWriter, *http.Request) bool
	tokens    map[string]map[string]bool // token → granted "name:action"
	bucket    float64                    // tokens of Limit
	filled    time.Time                  // when bucket was last refilled
}

type failure struct {
	status     int
	retryAfter string
}

// New starts a registry, stopped at the end of the test.
func New(t testing.TB, o Options) *Registry {
	t.Helper()
	r := &Registry{opts: o, inner: registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(o.Referrers)),
		tokens: map[string]map[string]bool{}, bucket: float64(max(o.Limit.Burst, 1)), filled: time.Now()}
	r.server = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if o.TLS || o.ClientCerts {
		r.setupTLS(t)
		r.server.StartTLS()
	} else {
		r.server.Start()
	}
	t.Cleanup(r.server.Close)
	u, _ := url.Parse(r.server.URL)
	r.Host = u.Host
	return r
}

// Close stops the registry early (e.g. to prove a restart needs no scan).
func (r *Registry) Close() { r.server.Close() }

// Requests counts the requests served, including rejected ones.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// TagListRequests counts tags/list requests (pages).
func (r *Registry) TagListRequests() int64 { return r.tagLists.Load() }

// ManifestRequests counts GET and HEAD requests of manifests.
func (r *Registry) ManifestRequests() int64 { return r.manifestReads.Load() }

// BlobRequests counts GET and HEAD requests of blobs (configs, layers).
func (r *Registry) BlobRequests() int64 { return r.blobReads.Load() }

// Throttled counts the requests Limit refused with 429.
func (r *Registry) Throttled() int64 { return r.throttled.Load() }

// RevokeTokens invalidates every token issued so far, as their expiry
// would: clients must fetch new ones.
func (r *Registry) RevokeTokens() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.tokens)
}

// Fail makes the next n requests fail with status, with a Retry-After
// header when retryAfter is not empty.
func (r *Registry) Fail(n, status int, retryAfter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range n {
		r.failures = append(r.failures, failure{status, retryAfter})
	}
}

// Intercept makes h answer the requests it returns true for, before the
// registry: answers no registry would give (a referrers list of thousands
// of entries naming no manifest, a body larger than it says).
func (r *Registry) Intercept(h func(http.ResponseWriter, *http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intercept = h
}

// Repo returns a reference to a repository of the registry.
func (r *Registry) Repo(repo string) string { return r.Host + "/" + repo }

// Push pushes a small random image as repo:tag and returns its digest.
func (r *Registry) Push(t testing.TB, repo, tag string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(r.Repo(repo)+":"+tag, r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// PushBuilt pushes a small random image for linux/amd64 whose config says
// it was built at created, as repo:tag, and returns its digest.
func (r *Registry) PushBuilt(t testing.TB, repo, tag string, created time.Time) string {
	t.Helper()
	img := r.platformImage(t, v1.Platform{OS: "linux", Architecture: "amd64"}, created)
	r.write(t, repo, tag, img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// PushIndex pushes a multi-platform image as repo:tag: an OCI index of one
// small random image per platform ("linux/amd64", "linux/arm/v7"), each
// built at created, followed by a buildx-style attestation manifest
// (platform unknown/unknown). It returns the index's digest and each
// platform's manifest digest.
func (r *Registry) PushIndex(t testing.TB, repo, tag string, created time.Time, platforms ...string) (string, map[string]string) {
	t.Helper()
	var adds []mutate.IndexAddendum
	digests := map[string]string{}
	for _, ps := range platforms {
		p, err := v1.ParsePlatform(ps)
		if err != nil {
			t.Fatal(err)
		}
		img := r.platformImage(t, *p, created)
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[ps] = d.String()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	att := r.platformImage(t, v1.Platform{OS: "unknown", Architecture: "unknown"}, created)
	adds = append(adds, mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}})
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	ref, err := name.NewTag(r.Repo(repo)+":"+tag, r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String(), digests
}

// PushLabelled pushes a small random image for linux/amd64 as repo:tag,
// with labels in its config and annotations on its manifest (either may
// be nil), as docker/metadata-action writes the OCI image keys, and
// returns its digest.
func (r *Registry) PushLabelled(t testing.TB, repo, tag string, labels, annotations map[string]string) string {
	t.Helper()
	img := r.platformImage(t, v1.Platform{OS: "linux", Architecture: "amd64"}, time.Now())
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Labels = labels
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	if annotations != nil {
		img = mutate.Annotations(img, annotations).(v1.Image)
	}
	r.write(t, repo, tag, img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// platformImage is a small random image whose config names a platform and
// a build time.
func (r *Registry) platformImage(t testing.TB, p v1.Platform, created time.Time) v1.Image {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = v1.Time{Time: created}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

func (r *Registry) write(t testing.TB, repo, tag string, img v1.Image) {
	t.Helper()
	ref, err := name.NewTag(r.Repo(repo)+":"+tag, r.nameOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.RemoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// PushTags pushes one image under many tags (cheap: one upload).
func (r *Registry) PushTags(t testing.TB, repo string, tags []string) {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range tags {
		ref, err := name.NewTag(r.Repo(repo)+":"+tag, r.nameOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = remote.Write(ref, img, r.RemoteOptions()...)
		} else {
			err = remote.Tag(ref, img, r.RemoteOptions()...) // the manifest only
		}
		if err != nil {
			t.Fatalf("pushing %s: %v", ref, err)
		}
	}
}

func (r *Registry) nameOpts() []name.Option {
	if r.opts.TLS || r.opts.ClientCerts {
		return nil
	}
	return []name.Option{name.Insecure}
}

// RemoteOptions are options for go-containerregistry's remote package that
// reach this registry as its owner (credentials, CA, client certificate).
func (r *Registry) RemoteOptions() []remote.Option {
	opts := []remote.Option{remote.WithTransport(r.Transport())}
	if r.opts.Username != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.opts.Username, Password: r.opts.Password}))
	}
	return opts
}

// Transport trusts the registry's CA and presents its client certificate.
func (r *Registry) Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.CAPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CAPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		if r.ClientCertPEM != nil {
			cert, _ := tls.X509KeyPair(r.ClientCertPEM, r.ClientKeyPEM)
			tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
		}
	}
	return tr
}

// DockerConfigJSON is a dockerconfigjson document with the credentials.
func (r *Registry) DockerConfigJSON() []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{
		r.Host: map[string]string{"username": r.opts.Username, "password": r.opts.Password},
	}})
	return b
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		switch {
		case strings.Contains(req.URL.Path, "/manifests/"):
			r.manifestReads.Add(1)
		case strings.Contains(req.URL.Path, "/blobs/"):
			r.blobReads.Add(1)
		}
	}
	r.mu.Lock()
	var f *failure
	if len(r.failures) > 0 {
		f = &r.failures[0]
		r.failures = r.failures[1:]
	}
	r.mu.Unlock()
	if f != nil {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		http.Error(w, http.StatusText(f.status), f.status)
		return
	}
	if r.opts.Limit.QPS > 0 && !r.admit(w) {
		r.throttled.Add(1)
		writeError(w, http.StatusTooManyRequests, "TOOMANYREQUESTS", "rate limit exceeded")
		return
	}
	if r.opts.Bearer {
		if req.URL.Path == "/token" {
			r.serveToken(w, req)
			return
		}
		if !r.authorized(w, req) {
			return
		}
	} else if r.opts.Username != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.opts.Username || p != r.opts.Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="testregistry"`)
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
	}
	r.mu.Lock()
	intercept := r.intercept
	r.mu.Unlock()
	if intercept != nil && intercept(w, req) {
		return
	}
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/tags/list") {
		r.tagLists.Add(1)
		r.serveTags(w, req)
		return
	}
	if r.opts.Referrers && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/referrers/") {
		r.serveReferrers(w, req)
		return
	}
	r.inner.ServeHTTP(w, req)
}

// serveReferrers answers the referrers API with each referrer's
// artifactType as the distribution spec says: the manifest's artifactType
// when it has one, else its config's media type. go-containerregistry's
// registry always gives the config's, which would hide every cosign v3
// bundle (whose config is the empty descriptor).
func (r *Registry) serveReferrers(w http.ResponseWriter, req *http.Request) {
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	var idx v1.IndexManifest
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &idx) != nil {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	repo := strings.TrimPrefix(req.URL.Path[:strings.Index(req.URL.Path, "/referrers/")], "/v2/")
	for i, d := range idx.Manifests {
		get := httptest.NewRequest(http.MethodGet, "/v2/"+repo+"/manifests/"+d.Digest.String(), nil)
		mrec := httptest.NewRecorder()
		r.inner.ServeHTTP(mrec, get)
		var m struct {
			ArtifactType string `json:"artifactType"`
		}
		if json.Unmarshal(mrec.Body.Bytes(), &m) == nil && m.ArtifactType != "" {
			idx.Manifests[i].ArtifactType = m.ArtifactType
		}
	}
	body, _ := json.Marshal(idx)
	w.Header().Set("Content-Type", string(types.OCIImageIndex))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// admit takes a token from the Limit bucket, setting the rate-limit and
// Retry-After headers; false when the bucket is empty.
func (r *Registry) admit(w http.ResponseWriter) bool {
	l := r.opts.Limit
	r.mu.Lock()
	now := time.Now()
	r.bucket = min(float64(max(l.Burst, 1)), r.bucket+now.Sub(r.filled).Seconds()*l.QPS)
	r.filled = now
	ok := r.bucket >= 1
	if ok {
		r.bucket--
	}
	left := r.bucket
	r.mu.Unlock()
	if l.Headers {
		w.Header().Set("RateLimit-Limit", strconv.FormatFloat(l.QPS, 'f', -1, 64)+";w=1")
		w.Header().Set("RateLimit-Remaining", strconv.Itoa(int(left))+";w=1")
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil((1-left)/l.QPS))))
	}
	return ok
}

// repoPath finds the repository name and what is asked of it in a
// Distribution API path.
var repoPath = regexp.MustCompile(`^/v2/(.+)/(tags|manifests|blobs)/`)

// authorized checks a request's bearer token against the scope it needs,
// answering 401 with a challenge when it falls short.
func (r *Registry) authorized(w http.ResponseWriter, req *http.Request) bool {
	token, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	r.mu.Lock()
	grant, valid := r.tokens[token]
	r.mu.Unlock()
	scheme := "http"
	if r.server.TLS != nil {
		scheme = "https"
	}
	challenge := fmt.Sprintf(`Bearer realm="%s://%s/token",service="testregistry"`, scheme, r.Host)
	m := repoPath.FindStringSubmatch(req.URL.Path)
	if m == nil {
		// /v2/ and the like need a token, of any scope.
		if valid {
			return true
		}
	} else {
		action, want := "pull", "pull"
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			action, want = "push", "push,pull"
		}
		if grant[m[1]+":"+action] {
			return true
		}
		challenge += fmt.Sprintf(`,scope="repository:%s:%s"`, m[1], want)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
	return false
}

// serveToken issues a token for the scopes asked, as a Docker token
// server's GET endpoint does.
func (r *Registry) serveToken(w http.ResponseWriter, req *http.Request) {
	if r.opts.Username != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.opts.Username || p != r.opts.Password {
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
	}
	grant := map[string]bool{}
	for _, scope := range req.URL.Query()["scope"] {
		for _, s := range strings.Fields(scope) {
			parts := strings.Split(s, ":")
			if len(parts) != 3 || parts[0] != "repository" {
				continue
			}
			for _, action := range strings.Split(parts[2], ",") {
				grant[parts[1]+":"+action] = true
			}
		}
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	r.mu.Lock()
	r.tokens[token] = grant
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_in": 300})
}

// writeError answers in the Distribution API's error format.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

// serveTags pages tags/list itself: the inner registry sends no Link header
// and mishandles a last past the end.
func (r *Registry) serveTags(w http.ResponseWriter, req *http.Request) {
	inner := req.Clone(req.Context())
	inner.URL.RawQuery = ""
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, inner)
	if rec.Code != http.StatusOK {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	var list struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sort.Strings(list.Tags)
	q := req.URL.Query()
	if last := q.Get("last"); last != "" {
		i := sort.SearchStrings(list.Tags, last)
		for i < len(list.Tags) && list.Tags[i] <= last {
			i++
		}
		list.Tags = list.Tags[i:]
	}
	n := r.opts.PageSize
	if s := q.Get("n"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 && (n == 0 || v < n) {
			n = v
		}
	}
	if n > 0 && len(list.Tags) > n {
		list.Tags = list.Tags[:n]
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {list.Tags[n-1]}}
		w.Header().Set("Link", fmt.Sprintf(`<%s?%s>; rel="next"`, req.URL.Path, next.Encode()))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

func (r *Registry) setupTLS(t testing.TB) {
	t.Helper()
	r.server.TLS, r.CAPEM, r.ClientCertPEM, r.ClientKeyPEM = newTLS(t, r.opts.ClientCerts)
}

// newTLS makes a fresh CA and a server certificate for 127.0.0.1 and
// localhost: the server's TLS configuration, the CA's PEM, and with
// clientCerts a client certificate and key the server requires.
func newTLS(t testing.TB, clientCerts bool) (cfg *tls.Config, caPEM, clientCertPEM, clientKeyPEM []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testregistry CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	issue := func(serial int64, server bool) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "testregistry"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		if !server {
			clientCertPEM, clientKeyPEM = certPEM, keyPEM
		}
		pair, _ := tls.X509KeyPair(certPEM, keyPEM)
		return pair
	}
	cfg = &tls.Config{Certificates: []tls.Certificate{issue(2, true)}}
	if clientCerts {
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		issue(3, false)
	}
	return cfg, caPEM, clientCertPEM, clientKeyPEM
}
