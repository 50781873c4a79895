# flux, the Flux CLI, which tests/dashboard installs tk-image into as a plugin
# (flux plugin install) and runs it through (sourced by hack/tools.sh). Its
# version comes from -ldflags, as flux's release build sets it. The published
# module lacks cmd/flux/manifests/*.yaml, which flux's release build
# generates (with kustomize, from GitHub) and embeds for flux install and
# bootstrap: this build stubs them, so those two commands are not for use;
# the plugin commands need no manifests.
version=$(modversion github.com/fluxcd/flux2/v2)
ldflags="-X main.VERSION=${version#v}"
srcmod github.com/fluxcd/flux2/v2 cmd/flux/manifests/stub.yaml
bin flux ./cmd/flux version --client
