#!/usr/bin/env bash
# Builds the tools the build and tests need (kube-apiserver, kubectl, etcd,
# helm, controller-gen, ...) from the Go modules pinned in hack/tools/<tool>/
# (go.mod and go.sum, written by hack/tools/pin.sh), caches them outside the
# clone, and links them into bin/.
#
#   hack/tools.sh TOOL...
#
# Reproducible: a tool is built inside its own pinned module with
# -mod=readonly, so every dependency is the one its go.sum names; a build that
# would need anything else fails instead of resolving something newer.
#
# No poisoned cache: an entry is built in a temporary directory, every binary
# it should hold must exist and answer its version command, and only then is
# it marked .complete and renamed into place. An entry that is not complete or
# lacks a binary is rebuilt, never trusted. The entry's name carries the tool's
# version and a hash of its pins and build flags, so a bumped pin never reuses
# an old build.
#
# Each hack/tools/<tool>/tool.sh is sourced here and declares, with the
# helpers below, the binaries to build (bin NAME PACKAGE VERSION-ARGS...),
# the tool's version, optional -ldflags, build tags and cgo=1, directories and
# files of a module to copy beside the binaries (data MODULE PATH[=NAME]...:
# what a tool reads at run time, or a test installs, copied to NAME, by
# default the same relative PATH; data may be called once per module, and
# several directories may fill one NAME) and the directory under bin/ to
# link into. Names of one package share one build.
# A tool whose published module lacks files its //go:embed needs (its
# release build generates them) names the module (srcmod MODULE FILE...): it
# is built inside a copy of that module, with the module's own go.mod and
# go.sum, the files written as stubs that say so.
#
# Environment (tests point these elsewhere):
#   IMAGE_TOOLKIT_TOOLS  the tool modules     (default hack/tools)
#   IMAGE_TOOLKIT_CACHE  the cache            (default ~/.cache/image-toolkit)
#   IMAGE_TOOLKIT_BIN    where links are made (default bin)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=${IMAGE_TOOLKIT_TOOLS:-$root/hack/tools}
cache=${IMAGE_TOOLKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/image-toolkit}/tools
bindir=${IMAGE_TOOLKIT_BIN:-$root/bin}
# -mod=readonly: the committed go.sum is the whole truth; GOWORK=off: the
# repository's workspace must not leak into a tool's build.
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0

[ $# -gt 0 ] || { sed -n '2,8p' "$0" >&2; exit 2; }

# modversion MODULE [GOMOD]: the version GOMOD requires of MODULE.
modversion() {
  awk -v m="$1" '$1 == m && $2 ~ /^v[0-9]/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "${2:-go.mod}"
}

# Filled by a tool.sh.
declare -a names pkgs checks datadirs datamods datasrcs stubs
version= ldflags= link= tags= cgo= srcmod=
bin() {
  local name=$1 pkg=$2; shift 2
  names+=("$name") pkgs+=("$pkg") checks+=("$*")
}
data() {
  local mod=$1 d; shift
  for d; do datamods+=("$mod") datasrcs+=("${d%%=*}") datadirs+=("${d#*=}"); done
}
srcmod() {
  srcmod=$1; shift
  stubs=("$@")
}

# check DIR: every binary exists and answers its version command. The output
# is read whole, never through a pipe a reader may close early (SIGPIPE under
# pipefail made `etcd --version | head -1` fail a good build).
check() {
  local dir=$1 i out
  for i in "${!names[@]}"; do
    if [ ! -x "$dir/${names[$i]}" ]; then
      echo "$tool: $dir/${names[$i]} is missing" >&2
      return 1
    fi
    # shellcheck disable=SC2086 # the version arguments are words
    if ! out=$(timeout 60 "$dir/${names[$i]}" ${checks[$i]} 2>&1); then
      echo "$tool: ${names[$i]} ${checks[$i]} failed: $out" >&2
      return 1
    fi
    echo "${names[$i]}: ${out%%$'\n'*}"
  done
  for i in "${datadirs[@]}"; do
    [ -e "$dir/$i" ] || { echo "$tool: $dir/$i is missing" >&2; return 1; }
  done
}

build() {
  local src=$1 out=$2 i j dir=$1 f
  mkdir -p "$out"
  if [ -n "$srcmod" ]; then
    dir=$out/.src
    mkdir -p "$dir"
    cp -R "$(cd "$src" && go mod download "$srcmod" && go list -m -f '{{.Dir}}' "$srcmod")/." "$dir"
    chmod -R u+w "$dir"
    for f in "${stubs[@]}"; do
      mkdir -p "$dir/$(dirname "$f")"
      echo "# A stub: $srcmod's release build generates this file; image-toolkit's build of $tool does not use it." > "$dir/$f"
    done
  fi
  for i in "${!names[@]}"; do
    # A multi-call binary (Argo CD's picks its part by the name it runs
    # as) named twice is built once; the second name is a hard link.
    for ((j = 0; j < i; j++)); do
      if [ "${pkgs[$j]}" = "${pkgs[$i]}" ]; then
        ln "$out/${names[$j]}" "$out/${names[$i]}"
        continue 2
      fi
    done
    echo "$tool: building ${names[$i]} ${version} (${pkgs[$i]})" >&2
    (cd "$dir" && CGO_ENABLED=${cgo:-0} go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
      -o "$out/${names[$i]}" "${pkgs[$i]}")
  done
  local mdir
  for i in "${!datadirs[@]}"; do
    mdir=$(cd "$src" && go list -m -f '{{.Dir}}' "${datamods[$i]}")
    if [ -d "$mdir/${datasrcs[$i]}" ]; then
      mkdir -p "$out/${datadirs[$i]}"
      cp -R "$mdir/${datasrcs[$i]}/." "$out/${datadirs[$i]}/"
    else
      mkdir -p "$(dirname "$out/${datadirs[$i]}")"
      cp "$mdir/${datasrcs[$i]}" "$out/${datadirs[$i]}"
    fi
    chmod -R u+w "$out/${datadirs[$i]}"
  done
  rm -rf "$out/.src"
}

for tool in "$@"; do
  src=$tools/$tool
  [ -f "$src/tool.sh" ] && [ -f "$src/go.mod" ] && [ -f "$src/go.sum" ] ||
    { echo "$tool: $src needs go.mod, go.sum and tool.sh" >&2; exit 1; }
  names=() pkgs=() checks=() datadirs=() datamods=() datasrcs=() stubs=() version= ldflags= link= tags= cgo= srcmod=
  # shellcheck source=/dev/null
  pushd "$src" >/dev/null && . ./tool.sh && popd >/dev/null
  [ -n "$version" ] && [ ${#names[@]} -gt 0 ] || { echo "$tool: tool.sh sets no version or binaries" >&2; exit 1; }
  key=$( { cat "$src/go.mod" "$src/go.sum" "$src/tool.sh"; echo "$ldflags${tags:+ tags=$tags}${cgo:+ cgo=$cgo}"; go version; } | sha256sum | cut -c1-12)
  entry=$cache/$tool-$version-$key

  # One build per entry at a time: a second run (another clone, another
  # make) waits for the first and then finds its entry complete, instead of
  # spending minutes building the same tool beside it.
  mkdir -p "$cache/.locks"
  exec 9>"$cache/.locks/${entry##*/}"
  flock 9
  if [ -f "$entry/.complete" ] && check "$entry" >/dev/null; then
    :
  else
    [ ! -e "$entry" ] || echo "$tool: $entry is incomplete; rebuilding it" >&2
    tmp=$(mktemp -d "$entry.tmp.XXXXXX") && chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    build "$src" "$tmp"
    check "$tmp" >"$tmp/.versions"
    touch "$tmp/.complete"
    rm -rf "$entry"
    # Another build may have won the race; its entry is as good as ours.
    mv -T "$tmp" "$entry" 2>/dev/null || rm -rf "$tmp"
    trap - EXIT
  fi
  check "$entry"
  exec 9>&-

  dest=$bindir${link:+/$link}
  # Earlier layouts linked bin/testenv to a single cache directory.
  [ ! -L "$dest" ] || rm -f "$dest"
  mkdir -p "$dest"
  for n in "${names[@]}" "${datadirs[@]}"; do
    mkdir -p "$(dirname "$dest/$n")"
    ln -sfn "$entry/$n" "$dest/$n"
  done
done
