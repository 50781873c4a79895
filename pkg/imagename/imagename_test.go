package imagename

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"an official image gets Docker Hub and library/", "busybox", "docker.io/library/busybox"},
		{"a Docker Hub user's image gets Docker Hub", "fluxcd/flux", "docker.io/fluxcd/flux"},
		{"docker.io is kept", "docker.io/library/nginx", "docker.io/library/nginx"},
		{"index.docker.io is spelt docker.io", "index.docker.io/library/nginx", "docker.io/library/nginx"},
		{"index.docker.io without library/ gets it", "index.docker.io/nginx", "docker.io/library/nginx"},
		{"another registry is kept", "ghcr.io/org/app", "ghcr.io/org/app"},
		{"a registry's port is kept", "registry.local:5000/team/app", "registry.local:5000/team/app"},
		{"localhost is a registry", "localhost/app", "localhost/app"},
		{"a deep path is kept", "gcr.io/p/a/b/c", "gcr.io/p/a/b/c"},
		{"a tag is no repository: unchanged", "nginx:1.25", "nginx:1.25"},
		{"upper case does not parse: unchanged", "Upper/Case", "Upper/Case"},
		{"empty: unchanged", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Normalize(tc.in); got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Canonical names a parsed repository the same whichever spelling of Docker
// Hub it was parsed from; other hosts are kept as written.
func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nginx", "docker.io/library/nginx"},
		{"docker.io/library/nginx", "docker.io/library/nginx"},
		{"index.docker.io/library/nginx", "docker.io/library/nginx"},
		{"registry-1.docker.io/library/nginx", "registry-1.docker.io/library/nginx"},
		{"ghcr.io/org/app", "ghcr.io/org/app"},
	} {
		r, err := name.NewRepository(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := Canonical(r); got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
