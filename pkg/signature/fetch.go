package signature

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/sigstore-go/pkg/bundle"
)

// fetcher reads one digest's signatures from its registry, within limits.
type fetcher struct {
	ctx    context.Context
	ref    name.Digest
	limits Limits
	capped *cappedTransport
	opts   []remote.Option
	// requests counts the registry requests made, for tests and metrics.
	requests *atomic.Int64
	// index is the digest's referrers list, read once per verification
	// (the signature and every attestation rule look in it).
	index *v1.IndexManifest
	// bundles are the bundles read, by referrer digest.
	bundles map[v1.Hash]bundleRead
}

type bundleRead struct {
	b   *bundle.Bundle
	err error
}

func newFetcher(ctx context.Context, ref name.Digest, access Access, limits Limits) *fetcher {
	base := access.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := &cappedTransport{next: base, max: max(limits.Manifest, limits.Blob)}
	auth := access.Auth
	if auth == nil {
		auth = authn.Anonymous
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(c)}
	// One puller for the whole verification: its authenticated transport
	// (the /v2/ ping, the bearer token) is set up once, not per request.
	if p, err := remote.NewPuller(opts...); err == nil {
		opts = append(opts, remote.Reuse(p))
	}
	return &fetcher{ctx: ctx, ref: ref, limits: limits, capped: c, requests: &c.requests, opts: opts}
}

// classify turns an error of a registry request into a hostile answer
// (too large: the transport cut it off) or leaves it an error (the
// registry could not be asked).
func (f *fetcher) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var tl *tooLargeError
	if errors.As(err, &tl) || f.capped.cut.Load() {
		return hostilef(TooLarge, "%s is larger than %d bytes", what, f.capped.max)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// notFound reports whether a registry answered 404 (or the OCI error
// codes meaning the same).
func notFound(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	if terr.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range terr.Errors {
		if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.BlobUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
			return true
		}
	}
	return false
}

// referrers lists the referrers of the digest whose artifact type has
// prefix (and that keep, when not nil, keeps): through the OCI 1.1
// referrers API, or the referrers tag schema (sha256-<hex>) where the
// registry has none. It returns at most limits.Referrers of them and how
// many there were. The list is read once per fetcher.
func (f *fetcher) referrers(prefix string, keep func(v1.Descriptor) bool) ([]v1.Descriptor, int, error) {
	if f.index == nil {
		idx, err := remote.Referrers(f.ref, f.opts...)
		if err != nil {
			if notFound(err) {
				f.index = &v1.IndexManifest{}
				return nil, 0, nil
			}
			return nil, 0, f.classify("referrers of "+f.ref.DigestStr(), err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, 0, hostilef(Malformed, "referrers of %s: %v", f.ref.DigestStr(), err)
		}
		if int64(len(im.Manifests)) > f.limits.Manifest/64 {
			// Not reachable through the transport's cap for real lists; a
			// list of empty descriptors is still too many to walk.
			return nil, 0, hostilef(TooLarge, "referrers of %s list %d manifests", f.ref.DigestStr(), len(im.Manifests))
		}
		f.index = im
	}
	var out []v1.Descriptor
	total := 0
	for _, d := range f.index.Manifests {
		if !strings.HasPrefix(d.ArtifactType, prefix) || (keep != nil && !keep(d)) {
			continue
		}
		total++
		if len(out) < f.limits.Referrers {
			out = append(out, d)
		}
	}
	return out, total, nil
}

// manifest reads the image manifest of a referrer, checks it names the
// digest as its subject, and returns it.
func (f *fetcher) manifest(d v1.Descriptor) (*v1.Manifest, error) {
	if d.Size > f.limits.Manifest {
		return nil, hostilef(TooLarge, "manifest %s is %d bytes, more than %d", d.Digest, d.Size, f.limits.Manifest)
	}
	ref := f.ref.Context().Digest(d.Digest.String())
	desc, err := remote.Get(ref, f.opts...)
	if err != nil {
		if notFound(err) {
			return nil, hostilef(Malformed, "referrer %s is listed but not found", d.Digest)
		}
		return nil, f.classify("manifest "+d.Digest.String(), err)
	}
	if int64(len(desc.Manifest)) > f.limits.Manifest {
		return nil, hostilef(TooLarge, "manifest %s is larger than %d bytes", d.Digest, f.limits.Manifest)
	}
	if desc.MediaType.IsIndex() {
		return nil, hostilef(Malformed, "referrer %s is an index, not a signature manifest", d.Digest)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, hostilef(Malformed, "manifest %s: %v", d.Digest, err)
	}
	if m.Subject == nil || m.Subject.Digest.String() != f.ref.DigestStr() {
		return nil, hostilef(Malformed, "referrer %s does not name %s as its subject", d.Digest, f.ref.DigestStr())
	}
	return m, nil
}

// blob reads one layer of a signature manifest, within limits.Blob; the
// content is checked against its digest.
func (f *fetcher) blob(d v1.Descriptor) ([]byte, error) {
	if d.Size > f.limits.Blob || d.Size < 0 {
		return nil, hostilef(TooLarge, "blob %s is %d bytes, more than %d", d.Digest, d.Size, f.limits.Blob)
	}
	l, err := remote.Layer(f.ref.Context().Digest(d.Digest.String()), f.opts...)
	if err != nil {
		return nil, f.classify("blob "+d.Digest.String(), err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, f.classify("blob "+d.Digest.String(), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, f.limits.Blob+1))
	if err != nil {
		if notFound(err) {
			return nil, hostilef(Malformed, "blob %s is listed but not found", d.Digest)
		}
		return nil, f.classify("blob "+d.Digest.String(), err)
	}
	if int64(len(b)) > f.limits.Blob {
		return nil, hostilef(TooLarge, "blob %s is larger than %d bytes", d.Digest, f.limits.Blob)
	}
	if int64(len(b)) != d.Size {
		return nil, hostilef(Malformed, "blob %s is %d bytes, its descriptor says %d", d.Digest, len(b), d.Size)
	}
	if h, _, err := v1.SHA256(bytes.NewReader(b)); err != nil || h != d.Digest {
		return nil, hostilef(Malformed, "blob %s does not match its digest", d.Digest)
	}
	return b, nil
}

// bundle reads and parses the Sigstore bundle of a bundle referrer, once
// per fetcher.
func (f *fetcher) bundle(d v1.Descriptor) (*bundle.Bundle, error) {
	if r, ok := f.bundles[d.Digest]; ok {
		return r.b, r.err
	}
	b, err := f.readBundle(d)
	if f.bundles == nil {
		f.bundles = map[v1.Hash]bundleRead{}
	}
	var h *hostile
	if err == nil || errors.As(err, &h) {
		f.bundles[d.Digest] = bundleRead{b, err}
	}
	return b, err
}

func (f *fetcher) readBundle(d v1.Descriptor) (*bundle.Bundle, error) {
	m, err := f.manifest(d)
	if err != nil {
		return nil, err
	}
	l, ok := layer(m, bundleArtifactType)
	if !ok {
		return nil, hostilef(Malformed, "referrer %s has no Sigstore bundle layer", d.Digest)
	}
	raw, err := f.blob(l)
	if err != nil {
		return nil, err
	}
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(raw); err != nil {
		return nil, hostilef(Malformed, "bundle %s: %v", l.Digest, err)
	}
	return &bun, nil
}

// layer finds the one layer of m with media type mt.
func layer(m *v1.Manifest, mt string) (v1.Descriptor, bool) {
	for _, l := range m.Layers {
		if string(l.MediaType) == mt || strings.HasPrefix(string(l.MediaType), mt) {
			return l, true
		}
	}
	return v1.Descriptor{}, false
}

// cappedTransport cuts off any answer larger than max bytes: the declared
// Content-Length is checked first, and the body is counted as it is read,
// so a registry that lies about a size gets no further.
type cappedTransport struct {
	next     http.RoundTripper
	max      int64
	cut      atomic.Bool
	requests atomic.Int64
}

type tooLargeError struct{ max int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("response larger than %d bytes", e.max)
}

func (c *cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > c.max {
		resp.Body.Close()
		c.cut.Store(true)
		return nil, &tooLargeError{max: c.max}
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: c.max, t: c}
	return resp, nil
}

type cappedBody struct {
	io.ReadCloser
	left int64
	t    *cappedTransport
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, &tooLargeError{max: b.t.max}
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		b.t.cut.Store(true)
		return n, &tooLargeError{max: b.t.max}
	}
	return n, err
}
