package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// Against a real registry holding a multi-platform index (with a buildx
// attestation) and a single-platform image: PlatformDigest answers the
// platform's manifest digest, never the index's, and refuses a platform the
// tag lacks; Created reads the build time of the platform asked (the first
// real one by default); each costs the requests its documentation says,
// counted by purpose.
func TestPlatformDigestAndCreated(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	built := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	index, per := reg.PushIndex(t, "multi", "1.0.0", built, "linux/amd64", "linux/arm64/v8", "linux/arm/v7")
	single := reg.PushBuilt(t, "single", "1.0.0", built.Add(time.Hour))
	c := New(100, 100, nil)
	o := Options{Insecure: true}
	tag := func(repo string) name.Tag {
		ref, err := name.NewTag(reg.Repo(repo) + ":1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	if d, err := c.Digest(context.Background(), tag("multi"), o); err != nil || d != index {
		t.Fatalf("the default digest is %s, %v; want the index's %s", d, err, index)
	}

	tests := []struct {
		name     string
		repo     string
		platform string
		want     string // digest; "" when PlatformNotFound
		requests int64  // manifests and blobs read
	}{
		{"index, exact platform", "multi", "linux/arm/v7", per["linux/arm/v7"], 1},
		{"index, platform without variant matches any variant", "multi", "linux/arm64", per["linux/arm64/v8"], 1},
		{"index, platform missing", "multi", "windows/amd64", "", 1},
		{"single image of the platform: its own digest", "single", "linux/amd64", single, 2},
		{"single image of another platform", "single", "linux/arm64", "", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v1.ParsePlatform(tc.platform)
			if err != nil {
				t.Fatal(err)
			}
			before := reg.ManifestRequests() + reg.BlobRequests()
			d, err := c.PlatformDigest(context.Background(), tag(tc.repo), *p, o)
			var nf *PlatformNotFoundError
			switch {
			case tc.want == "" && !errors.As(err, &nf):
				t.Errorf("got %s, %v; want PlatformNotFoundError", d, err)
			case tc.want != "" && (err != nil || d != tc.want):
				t.Errorf("got %s, %v; want %s", d, err, tc.want)
			}
			if n := reg.ManifestRequests() + reg.BlobRequests() - before; n != tc.requests {
				t.Errorf("%d requests; want %d", n, tc.requests)
			}
		})
	}

	created := []struct {
		name     string
		repo     string
		platform *v1.Platform
		want     time.Time
		requests int64
	}{
		{"index, default platform", "multi", nil, built, 3},
		{"index, platform asked", "multi", &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, built, 3},
		{"single image", "single", nil, built.Add(time.Hour), 2},
	}
	for _, tc := range created {
		t.Run("created: "+tc.name, func(t *testing.T) {
			before := reg.ManifestRequests() + reg.BlobRequests()
			got, err := c.Created(context.Background(), tag(tc.repo), tc.platform, o)
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("got %s, %v; want %s", got, err, tc.want)
			}
			if n := reg.ManifestRequests() + reg.BlobRequests() - before; n != tc.requests {
				t.Errorf("%d requests; want %d", n, tc.requests)
			}
		})
	}
	if n := testutil.ToFloat64(c.metrics.Metadata.WithLabelValues(PurposeBuildTime, "config")); n != 3 {
		t.Errorf("build-time config requests counted: %v; want 3", n)
	}
	if n := testutil.ToFloat64(c.metrics.Metadata.WithLabelValues(PurposeDigest, "manifest")); n != 6 {
		t.Errorf("digest manifest requests counted: %v; want 6", n)
	}
}
