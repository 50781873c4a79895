#!/usr/bin/env bash
# Builds tk-image's Flux CLI plugin release: one archive per platform holding
# the binary as flux-tk-image (the manifest's bin, the name flux runs and
# tk-image answers to as `flux tk-image`), checksums.txt (sha256sum format),
# and tk-image.yaml, the catalog manifest (tk-image/plugin/tk-image.yaml) with
# this version's platforms: archive URL under BASE_URL and sha256 checksum.
# Nothing is uploaded.
#
#   tk-image/plugin/archives.sh VERSION BASE_URL OUT_DIR
#
# PLATFORMS (os/arch, space-separated) picks the platforms; the binaries are
# built without cgo, as tk-image's commands other than update --repository
# need none. SOURCE_DATE_EPOCH fixes the archives' timestamps.
set -euo pipefail
[ $# = 3 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
version=${1#v} base=${2%/} out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
epoch=${SOURCE_DATE_EPOCH:-0}
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
manifest=$out/tk-image.yaml
grep -v '^#' "$root/tk-image/plugin/tk-image.yaml" > "$manifest"
printf 'versions:\n- version: %s\n  platforms:\n' "$version" >> "$manifest"
: > "$out/checksums.txt"
for p in $platforms; do
  os=${p%/*} arch=${p#*/}
  exe=flux-tk-image
  [ "$os" = windows ] && exe=flux-tk-image.exe
  dir=$work/$os-$arch
  mkdir -p "$dir"
  (cd "$root" && GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X toolkit.dev/image-toolkit/pkg/version.Version=$version" -o "$dir/$exe" ./tk-image)
  touch -d "@$epoch" "$dir/$exe"
  if [ "$os" = windows ]; then
    archive=tk-image_${version}_${os}_${arch}.zip
    (cd "$dir" && rm -f "$out/$archive" && TZ=UTC zip -q -X "$out/$archive" "$exe")
  else
    archive=tk-image_${version}_${os}_${arch}.tar.gz
    tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$exe" | gzip -n > "$out/$archive"
  fi
  sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
  echo "$sum  $archive" >> "$out/checksums.txt"
  printf '  - os: %s\n    arch: %s\n    url: %s/%s\n    checksum: sha256:%s\n' "$os" "$arch" "$base" "$archive" "$sum" >> "$manifest"
done
echo "wrote $(wc -l < "$out/checksums.txt") archives, checksums.txt and tk-image.yaml to $out"
