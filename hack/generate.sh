#!/usr/bin/env bash
# Regenerates deepcopy code, CRDs and RBAC roles with controller-gen.
# With --verify it fails when the generated files in the tree were stale, so
# `make test` catches API changes that were not regenerated (the tree is left
# regenerated, ready to commit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
gen=${CONTROLLER_GEN:-$root/bin/controller-gen}

generated() {
  find pkg/apis -name zz_generated.deepcopy.go
  find charts/*/files -name '*.yaml' 2>/dev/null || true
}
sums() { generated | sort | xargs -r sha256sum; }

before=$(sums)

( cd pkg/apis && "$gen" object:headerFile="$root/hack/boilerplate.go.txt" paths=./... )

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
( cd pkg/apis && "$gen" crd paths=./... output:crd:artifacts:config="$tmp" )

# One chart per controller, each carrying the CRDs of the kinds it reconciles.
# They live in files/crds, not crds/: Helm installs crds/ once and never
# upgrades it, so templates/crds.yaml renders them from here instead.
place() {
  local chart=$1; shift
  rm -rf "charts/$chart/crds" "charts/$chart/files/crds"
  mkdir -p "charts/$chart/files/crds"
  for f in "$@"; do
    cp "$tmp/$f" "charts/$chart/files/crds/$f"
  done
}
place image-reflector-controller image.toolkit.dev_imagerepositories.yaml image.toolkit.dev_imagepolicies.yaml image.toolkit.dev_imagewebhooks.yaml image.toolkit.dev_healthwebhooks.yaml
place image-automation-controller image.toolkit.dev_imageupdateautomations.yaml image.toolkit.dev_gitwebhooks.yaml
place update-job-controller update.toolkit.dev_updatejobs.yaml
left=$(cd "$tmp" && ls | grep -v -x -e image.toolkit.dev_imagerepositories.yaml -e image.toolkit.dev_imagepolicies.yaml \
  -e image.toolkit.dev_imageupdateautomations.yaml -e image.toolkit.dev_imagewebhooks.yaml -e image.toolkit.dev_gitwebhooks.yaml -e image.toolkit.dev_healthwebhooks.yaml -e update.toolkit.dev_updatejobs.yaml || true)
[ -z "$left" ] || { echo "CRDs not placed in any chart: $left" >&2; exit 1; }

# RBAC rules come from the +kubebuilder:rbac markers next to the reconcilers;
# each chart's ClusterRole template reads them from files/role.yaml.
for c in image-reflector-controller image-automation-controller update-job-controller; do
  mkdir -p "charts/$c/files"
  ( cd "$c" && "$gen" rbac:roleName="$c" paths=./... output:rbac:artifacts:config="$root/charts/$c/files" )
done

after=$(sums)
if [ "${1:-}" = "--verify" ] && [ "$before" != "$after" ]; then
  echo "generated files were stale; they are regenerated now, commit them:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
