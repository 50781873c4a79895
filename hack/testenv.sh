#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, kubectl, etcd) and helm from Go
# modules only, because nothing else is downloadable where we build and test. The
# result is cached outside the clone, keyed by version, so a fresh clone on a machine
# that has built it once links it in seconds.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.1}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}
HELM_VERSION=${HELM_VERSION:-3.22.0}
# Helm's lint checks charts against the Kubernetes version baked in at build time.
K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${IMAGE_TOOLKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/image-toolkit}
envdir=$cache/testenv-$K8S_VERSION-$ETCD_VERSION
helmdir=$cache/helm-$HELM_VERSION
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0

build_kube() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cd "$work"
  go mod init local/testenv-kube >/dev/null 2>&1
  # k8s.io/kubernetes points its staging modules at ./staging; as a dependency
  # those paths do not exist, so pin each one to the published v0.x release.
  local gomod
  gomod=$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@v$K8S_VERSION")
  local staging
  staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
  [ -n "$staging" ] || { echo "no staging replaces found in $gomod" >&2; return 1; }
  for m in $staging; do
    go mod edit -replace "$m=$m@v0.$K8S_MINOR.$(echo "$K8S_VERSION" | cut -d. -f3)"
  done
  go mod edit -require "k8s.io/kubernetes@v$K8S_VERSION"
  go get -tool k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
  local ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR -X $p.gitTreeState=clean"
  done
  mkdir -p "$1"
  go build -trimpath -ldflags "-s -w $ld" -o "$1/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  go build -trimpath -ldflags "-s -w $ld" -o "$1/kubectl" k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cd "$work"
  go mod init local/testenv-etcd >/dev/null 2>&1
  go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  mkdir -p "$1"
  go build -trimpath -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3
}

build_helm() {
  local v=helm.sh/helm/v3
  mkdir -p "$1"
  GOBIN=$1 go install -trimpath -ldflags "-s -w -X $v/internal/version.version=v$HELM_VERSION \
    -X $v/pkg/lint/rules.k8sVersionMajor=1 -X $v/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR \
    -X $v/pkg/chartutil.k8sVersionMajor=1 -X $v/pkg/chartutil.k8sVersionMinor=$K8S_MINOR" \
    "$v/cmd/helm@v$HELM_VERSION"
}

# Build into a temporary directory and rename, so an interrupted build never
# leaves a half-filled cache entry that later runs would trust.
if [ ! -f "$envdir/.complete" ]; then
  tmp=$envdir.tmp.$$
  rm -rf "$tmp"
  ( build_kube "$tmp" ) && ( build_etcd "$tmp" )
  touch "$tmp/.complete"
  rm -rf "$envdir" && mv "$tmp" "$envdir"
fi
if [ ! -f "$helmdir/.complete" ]; then
  tmp=$helmdir.tmp.$$
  rm -rf "$tmp"
  ( build_helm "$tmp" )
  touch "$tmp/.complete"
  rm -rf "$helmdir" && mv "$tmp" "$helmdir"
fi

mkdir -p "$root/bin"
ln -sfn "$envdir" "$root/bin/testenv"
ln -sfn "$helmdir/helm" "$root/bin/helm"
"$root/bin/testenv/kube-apiserver" --version
"$root/bin/testenv/etcd" --version | head -1
"$root/bin/helm" version --short
