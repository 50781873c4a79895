package argocd

import (
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Current reads back what an override file sets for an image, as a
// reference, with the line a rollback changes.
func TestCurrentReadsTheImageAndItsLine(t *testing.T) {
	kustomize := []byte("kustomize:\n  images:\n  - other:1\n  - podinfo=ghcr.io/org/podinfo:6.4.0@sha256:aa\n")
	helm := []byte("helm:\n  parameters:\n  - name: image.repository\n    value: ghcr.io/org/podinfo\n    forcestring: true\n  - name: image.tag\n    value: 6.4.0\n    forcestring: true\n  - name: app.image\n    value: ghcr.io/org/app:2@sha256:bb\n")
	tests := []struct {
		name     string
		data     []byte
		typ      string
		img      Image
		want     meta.ImageRef
		line     int
		notFound bool
	}{
		{"kustomize, by the manifests' name", kustomize, TypeKustomize, Image{ImageRef: meta.ImageRef{Name: "ghcr.io/org/podinfo"}, ArgoCDImageFields: meta.ArgoCDImageFields{KustomizeName: "podinfo"}},
			meta.ImageRef{Name: "ghcr.io/org/podinfo", Tag: "6.4.0", Digest: "sha256:aa"}, 4, false},
		{"kustomize, not set", kustomize, TypeKustomize, Image{ImageRef: meta.ImageRef{Name: "ghcr.io/org/db"}}, meta.ImageRef{}, 0, true},
		{"helm name and tag: the tag's line", helm, TypeHelm, Image{ImageRef: meta.ImageRef{Name: "ghcr.io/org/podinfo"}},
			meta.ImageRef{Name: "ghcr.io/org/podinfo", Tag: "6.4.0"}, 7, false},
		{"helm spec", helm, TypeHelm, Image{ImageRef: meta.ImageRef{Name: "ghcr.io/org/app"}, ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageSpec: "app.image"}},
			meta.ImageRef{Name: "ghcr.io/org/app", Tag: "2", Digest: "sha256:bb"}, 10, false},
		{"helm, not set", helm, TypeHelm, Image{ImageRef: meta.ImageRef{Name: "x"}, ArgoCDImageFields: meta.ArgoCDImageFields{HelmImageName: "x.repository", HelmImageTag: "x.tag"}}, meta.ImageRef{}, 0, true},
		{"no file yet", nil, TypeKustomize, Image{ImageRef: meta.ImageRef{Name: "podinfo"}}, meta.ImageRef{}, 0, true},
		{"valuesObject is not read", helm, TypeHelm, Image{ImageRef: meta.ImageRef{Name: "ghcr.io/org/podinfo"}, ArgoCDImageFields: meta.ArgoCDImageFields{HelmValuesObject: true}}, meta.ImageRef{}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, line, ok, err := Current(tt.data, tt.typ, tt.img)
			if err != nil || ok == tt.notFound || got != tt.want || line != tt.line {
				t.Errorf("got %+v line %d ok %v err %v; want %+v line %d", got, line, ok, err, tt.want, tt.line)
			}
		})
	}
}
