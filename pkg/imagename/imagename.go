// Package imagename gives an image repository its one canonical name, the
// name every part of image-toolkit shows, stores and compares:
// ImageRepository status.canonicalImageName, discovered images, the
// patterns of discover.include and discover.exclude, policies matched to
// images, and the webhook receiver's index.
//
// The canonical name is the repository written in full, as Docker,
// containerd and Kubernetes normalise it: busybox is
// docker.io/library/busybox, and a registry's port is kept. Docker Hub is
// spelt docker.io, the name people write (and match with patterns), not
// index.docker.io, the host go-containerregistry uses for it.
//
// The package depends on go-containerregistry's name parser only, so every
// module can use it.
package imagename

import "github.com/google/go-containerregistry/pkg/name"

// DockerHub is Docker Hub's registry in canonical names.
const DockerHub = "docker.io"

// Canonical is r's canonical name: docker.io/library/busybox for busybox.
func Canonical(r name.Repository) string {
	reg := r.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = DockerHub
	}
	return reg + "/" + r.RepositoryStr()
}

// Normalize is the canonical name of the repository ref, or ref itself when
// it is no repository (it does not parse, or carries a tag or digest).
func Normalize(repository string) string {
	r, err := name.NewRepository(repository)
	if err != nil {
		return repository
	}
	return Canonical(r)
}
