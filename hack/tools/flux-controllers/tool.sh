# Flux's source-controller and kustomize-controller, and their CRDs, for the
# tests that read health from a real Flux on the real node (issue 30)
# (sourced by hack/tools.sh). Not part of `make testenv` or `make demo`:
# `make flux-tools` builds them. They print no version; --help answers and
# exits 0. Both are pinned in one module, so they share one dependency set
# (hack/tools/pin.sh flux-controllers copies their replaces and requires their published
# api modules in place of ./api).
version=$(modversion github.com/fluxcd/kustomize-controller)
link=flux-controllers
data github.com/fluxcd/source-controller config/crd/bases=crds
data github.com/fluxcd/kustomize-controller config/crd/bases=crds
bin source-controller github.com/fluxcd/source-controller --help
bin kustomize-controller github.com/fluxcd/kustomize-controller --help
