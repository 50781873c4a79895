// Package meta holds API types shared by every image-toolkit API group:
// object references and the reconcile-request handshake. It mirrors the parts of
// Flux's github.com/fluxcd/pkg/apis/meta that our kinds use, so manifests written
// for Flux keep their shape.
// +kubebuilder:object:generate=true
package meta
