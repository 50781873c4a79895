# kustomize, to run `tk-image update --krm` as a KRM function in a real
# kustomize build (tests/krm) (sourced by hack/tools.sh). Its version comes
# from the build info: kustomize reads its own module's version among the
# dependencies, so no -ldflags are needed.
version=$(modversion sigs.k8s.io/kustomize/kustomize/v5)
bin kustomize sigs.k8s.io/kustomize/kustomize/v5 version
