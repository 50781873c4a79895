package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Purposes of manifest and config requests, the metadata metric's purpose
// label.
const (
	PurposeDigest    = "digest"
	PurposeBuildTime = "build_time"
	PurposeSource    = "source"
)

// PlatformNotFoundError: a tag has no image for the platform asked.
type PlatformNotFoundError struct {
	Ref      string
	Platform string
	// Have are the platforms the tag has.
	Have []string
}

func (e *PlatformNotFoundError) Error() string {
	if len(e.Have) == 0 {
		return fmt.Sprintf("%s has no image for %s", e.Ref, e.Platform)
	}
	return fmt.Sprintf("%s has no image for %s, only for %s", e.Ref, e.Platform, strings.Join(e.Have, ", "))
}

// manifestDoc is what is read of a manifest or an index: enough to tell
// them apart, pick a platform and find the config.
type manifestDoc struct {
	Manifests   []v1.Descriptor   `json:"manifests"`
	Config      v1.Descriptor     `json:"config"`
	Annotations map[string]string `json:"annotations"`
}

func (d manifestDoc) isIndex() bool { return d.Manifests != nil }

// metadata fetches manifests and configs of one repository, counting each
// request under a purpose.
type metadata struct {
	c       *Client
	httpc   *http.Client
	repo    name.Repository
	o       Options
	purpose string
}

func (c *Client) metadata(ctx context.Context, repo name.Repository, o Options, purpose string) (*metadata, error) {
	httpc, err := c.httpClient(ctx, repo, o)
	if err != nil {
		return nil, err
	}
	return &metadata{c: c, httpc: httpc, repo: repo, o: o, purpose: purpose}, nil
}

// get fetches a manifest (by tag or digest) or a blob (by digest), at most
// limit bytes; a digest reference is checked against what came.
func (m *metadata) get(ctx context.Context, object, reference string, limit int64) ([]byte, string, error) {
	path := "manifests"
	if object == "config" {
		path = "blobs"
	}
	m.c.metrics.Metadata.WithLabelValues(m.purpose, object).Inc()
	u := baseURL(m.repo, m.o).JoinPath(path, reference)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	if path == "manifests" {
		req.Header.Set("Accept", manifestTypes)
	}
	resp, err := m.httpc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading %s %s: %w", object, reference, err)
	}
	if int64(len(body)) > limit {
		return nil, "", fmt.Errorf("%s %s is larger than %d bytes", object, reference, limit)
	}
	sum := sha256.Sum256(body)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if strings.HasPrefix(reference, "sha256:") && reference != digest {
		return nil, "", fmt.Errorf("%s %s: the registry sent content of digest %s", object, reference, digest)
	}
	return body, digest, nil
}

// manifest fetches and reads a manifest or an index.
func (m *metadata) manifest(ctx context.Context, reference string) (manifestDoc, string, error) {
	body, digest, err := m.get(ctx, "manifest", reference, 4<<20)
	if err != nil {
		return manifestDoc{}, "", err
	}
	var doc manifestDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return manifestDoc{}, "", fmt.Errorf("manifest %s: %w", reference, err)
	}
	return doc, digest, nil
}

// config fetches and reads an image config.
func (m *metadata) config(ctx context.Context, d v1.Descriptor) (*v1.ConfigFile, error) {
	// Configs carry the build history; 8 MiB is far above real ones.
	body, _, err := m.get(ctx, "config", d.Digest.String(), 8<<20)
	if err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", d.Digest, err)
	}
	return cfg, nil
}

// pick chooses the manifest of an index for a platform: the exact match,
// or with no variant asked, the first of that OS and architecture. With no
// platform, the first that is an image for some platform (not an
// attestation, which buildx lists as unknown/unknown).
func pick(ms []v1.Descriptor, want *v1.Platform) (v1.Descriptor, bool) {
	var loose *v1.Descriptor
	for i, m := range ms {
		p := m.Platform
		if p == nil {
			continue
		}
		if want == nil {
			if p.OS != "unknown" && p.Architecture != "unknown" {
				return m, true
			}
			continue
		}
		if p.OS != want.OS || p.Architecture != want.Architecture {
			continue
		}
		if p.Variant == want.Variant {
			return m, true
		}
		if want.Variant == "" && loose == nil {
			loose = &ms[i]
		}
	}
	if loose != nil {
		return *loose, true
	}
	return v1.Descriptor{}, false
}

func platforms(ms []v1.Descriptor) []string {
	var out []string
	for _, m := range ms {
		if m.Platform != nil && m.Platform.OS != "unknown" {
			out = append(out, m.Platform.String())
		}
	}
	return out
}

// PlatformDigest returns the digest of the manifest of one platform: from
// the index ref names (a tag, or the digest of an index whose signature
// verified), one request; when ref is a single image, its own digest once
// its config says it is of that platform (two requests).
func (c *Client) PlatformDigest(ctx context.Context, ref name.Reference, platform v1.Platform, o Options) (string, error) {
	m, err := c.metadata(ctx, ref.Context(), o, PurposeDigest)
	if err != nil {
		return "", err
	}
	doc, digest, err := m.manifest(ctx, ref.Identifier())
	if err != nil {
		return "", err
	}
	if doc.isIndex() {
		d, ok := pick(doc.Manifests, &platform)
		if !ok {
			return "", &PlatformNotFoundError{Ref: ref.String(), Platform: platform.String(), Have: platforms(doc.Manifests)}
		}
		return d.Digest.String(), nil
	}
	cfg, err := m.config(ctx, doc.Config)
	if err != nil {
		return "", err
	}
	if cfg.OS != "" && (cfg.OS != platform.OS || cfg.Architecture != platform.Architecture ||
		(platform.Variant != "" && cfg.Variant != platform.Variant)) {
		have := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		return "", &PlatformNotFoundError{Ref: ref.String(), Platform: platform.String(), Have: []string{have.String()}}
	}
	return digest, nil
}

// Created returns the build time (config created) of a tag's image, of the
// platform given or, for an index without one, of its first platform: two
// requests for an image, three for an index. The zero time when the config
// has none.
func (c *Client) Created(ctx context.Context, ref name.Tag, platform *v1.Platform, o Options) (time.Time, error) {
	_, cfg, err := c.image(ctx, ref.Repository, ref.TagStr(), platform, o, PurposeBuildTime)
	if err != nil {
		return time.Time{}, err
	}
	return cfg.Created.Time, nil
}

// Labels are the annotations of the image at reference (a tag or a
// digest) for platform (an index's, then its platform manifest's over
// them) and its config's labels: where builders say what the image was
// built from.
func (c *Client) Labels(ctx context.Context, repo name.Repository, reference string, platform *v1.Platform, o Options) (annotations, labels map[string]string, err error) {
	annotations, cfg, err := c.image(ctx, repo, reference, platform, o, PurposeSource)
	if err != nil {
		return nil, nil, err
	}
	return annotations, cfg.Config.Labels, nil
}

// image reads the manifest at reference (a tag or a digest; through an
// index, the platform's) and its config, returning the annotations of both
// manifests (the platform manifest's over the index's).
func (c *Client) image(ctx context.Context, repo name.Repository, reference string, platform *v1.Platform, o Options, purpose string) (map[string]string, *v1.ConfigFile, error) {
	m, err := c.metadata(ctx, repo, o, purpose)
	if err != nil {
		return nil, nil, err
	}
	doc, _, err := m.manifest(ctx, reference)
	if err != nil {
		return nil, nil, err
	}
	annotations := map[string]string{}
	for k, v := range doc.Annotations {
		annotations[k] = v
	}
	if doc.isIndex() {
		d, ok := pick(doc.Manifests, platform)
		if !ok {
			p := "any platform"
			if platform != nil {
				p = platform.String()
			}
			at := ":"
			if strings.Contains(reference, ":") {
				at = "@"
			}
			return nil, nil, &PlatformNotFoundError{Ref: repo.String() + at + reference, Platform: p, Have: platforms(doc.Manifests)}
		}
		if doc, _, err = m.manifest(ctx, d.Digest.String()); err != nil {
			return nil, nil, err
		}
		for k, v := range doc.Annotations {
			annotations[k] = v
		}
	}
	cfg, err := m.config(ctx, doc.Config)
	if err != nil {
		return nil, nil, err
	}
	return annotations, cfg, nil
}
