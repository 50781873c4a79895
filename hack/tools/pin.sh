#!/usr/bin/env bash
# Pins one tool to a version by (re)writing hack/tools/<tool>/go.mod and
# go.sum. Run it by hand to bump a tool, then commit both files: builds
# (hack/tools.sh) only ever read the committed pins, so a build next year
# resolves exactly what this run resolved.
#
#   hack/tools/pin.sh kube 1.37.1        kube-apiserver and kubectl
#   hack/tools/pin.sh etcd 3.7.3
#   hack/tools/pin.sh helm 3.22.0
#   hack/tools/pin.sh kustomize 5.8.2
#   hack/tools/pin.sh controller-gen 0.23.0
#   hack/tools/pin.sh gitea 1.26.0           the forge tests/pullrequest runs
#   hack/tools/pin.sh node 1.37.1            kubelet, kube-scheduler, kube-controller-manager, kube-proxy
#   hack/tools/pin.sh argocd 3.5.1           Argo CD's multi-call binary (application controller, repo server)
#   hack/tools/pin.sh flux-controllers 1.9.1 Flux's source-controller and kustomize-controller
#   hack/tools/pin.sh notification-controller 1.9.2  Flux's notification-controller, which pushes health to a HealthWebhook
#   hack/tools/pin.sh flux 2.9.5             the Flux CLI, which runs tk-image as a plugin
#   hack/tools/pin.sh cosign 3.1.3           the cosign CLI, which signs the test images of pkg/signature
#   hack/tools/pin.sh notation 1.3.2         the notation CLI, the same for Notation
set -euo pipefail
[ $# = 2 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
tool=$1 v=${2#v}
dir=$(cd "$(dirname "$0")" && pwd)/$tool
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

case $tool in
  kube) main=k8s.io/kubernetes; tools=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl) ;;
  etcd) main=go.etcd.io/etcd/server/v3; tools=(go.etcd.io/etcd/server/v3) ;;
  helm) main=helm.sh/helm/v3; tools=(helm.sh/helm/v3/cmd/helm) ;;
  controller-gen) main=sigs.k8s.io/controller-tools; tools=(sigs.k8s.io/controller-tools/cmd/controller-gen) ;;
  kustomize) main=sigs.k8s.io/kustomize/kustomize/v5; tools=(sigs.k8s.io/kustomize/kustomize/v5) ;;
  gitea) main=code.gitea.io/gitea; tools=(code.gitea.io/gitea) ;;
  node) main=k8s.io/kubernetes; tools=(k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-proxy) ;;
  argocd) main=github.com/argoproj/argo-cd/v3; tools=(github.com/argoproj/argo-cd/v3/cmd) ;;
  flux-controllers) main=github.com/fluxcd/kustomize-controller; tools=(github.com/fluxcd/kustomize-controller github.com/fluxcd/source-controller) ;;
  notification-controller) main=github.com/fluxcd/notification-controller; tools=(github.com/fluxcd/notification-controller) ;;
  flux) main=github.com/fluxcd/flux2/v2; tools=(github.com/fluxcd/flux2/v2/cmd/flux) ;;
  cosign) main=github.com/sigstore/cosign/v3; tools=(github.com/sigstore/cosign/v3/cmd/cosign) ;;
  notation) main=github.com/notaryproject/notation; tools=(github.com/notaryproject/notation/cmd/notation) ;;
  *) echo "unknown tool $tool" >&2; exit 2 ;;
esac

rm -rf "$dir.new" && mkdir -p "$dir.new"
trap 'rm -rf "$dir.new"' EXIT
cd "$dir.new"
go mod init "toolkit.dev/image-toolkit/hack/tools/$tool" >/dev/null 2>&1
go mod edit -go=1.26.0
if [ "$tool" = kube ] || [ "$tool" = node ]; then
  # k8s.io/kubernetes points its staging modules (k8s.io/api, ...) at
  # ./staging, which does not exist when it is a dependency: pin each to the
  # release published with it, v0.<minor>.<patch>.
  gomod=$(go list -m -f '{{.GoMod}}' "$main@v$v")
  staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
  [ -n "$staging" ] || { echo "no staging replaces in $gomod" >&2; exit 1; }
  for m in $staging; do
    go mod edit -replace "$m=$m@v0.${v#*.}"
  done
fi
# copy_replaces GOMOD: the replace directives of GOMOD that name a module
# version (single lines and blocks; local paths skipped), copied here.
copy_replaces() {
  awk '$1 == "replace" && $2 == "(" {block = 1; next}
    block && $1 == ")" {block = 0; next}
    block || $1 == "replace" {
      l = $0; sub(/^[ \t]*replace[ \t]+/, "", l); n = split(l, f)
      if (f[2] == "=>" && n >= 4 && f[3] !~ /^\./) print f[1] "=" f[3] "@" f[4]
    }' "$1" | while read -r r; do go mod edit -replace "$r"; done
}
if [ "$tool" = gitea ] || [ "$tool" = argocd ]; then
  # Gitea and Argo CD pin some dependencies with replace directives, which a
  # dependent module does not inherit: copy them.
  copy_replaces "$(go list -m -f '{{.GoMod}}' "$main@v$v")"
fi
if [ "$tool" = argocd ]; then
  # Argo CD replaces its gitops-engine with ./gitops-engine, a directory its
  # module zip does not hold, and the pseudo-version it requires is refused
  # by the module proxy: pin the engine to a commit the proxy serves.
  go mod edit -replace "github.com/argoproj/argo-cd/gitops-engine=github.com/argoproj/argo-cd/gitops-engine@${ARGOCD_GITOPS_ENGINE:-v0.0.0-20260914071520-c9c369efcc5b}"
fi
if [ "$tool" = flux-controllers ] || [ "$tool" = notification-controller ]; then
  # Each controller replaces its api module with ./api, a directory its
  # module zip does not hold: require the api published with the release
  # instead. Copy their other replaces, which a dependent does not inherit.
  for m in "${tools[@]}"; do
    copy_replaces "$(go list -m -f '{{.GoMod}}' "$m@v$v")"
    go get "$m/api@v$v"
  done
fi
# Every path names its version: never @latest of anything.
go get "$main@v$v"
for t in "${tools[@]}"; do go get -tool "$t@v$v"; done
go mod tidy
# The tool.sh beside the pins is hand-written: keep it.
[ ! -f "$dir/tool.sh" ] || cp "$dir/tool.sh" "$dir.new/"
rm -rf "$dir" && mv "$dir.new" "$dir"
echo "pinned $tool v$v in $dir"
