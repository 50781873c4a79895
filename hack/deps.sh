#!/usr/bin/env bash
# Makes sure the system packages the build and tests need are installed:
# libgit2 1.5 (git2go v34 accepts no other) with pkg-config for cgo, and git
# for the test git servers. Installs them with apt when we are root on
# Debian/Ubuntu; otherwise prints the command to run.
set -euo pipefail
packages=(libgit2-dev pkg-config git)

have() {
  command -v pkg-config >/dev/null && command -v git >/dev/null &&
    pkg-config --exists 'libgit2 >= 1.5.0' && ! pkg-config --exists 'libgit2 >= 1.6.0'
}
have && exit 0

if pkg-config --exists libgit2 2>/dev/null; then
  echo "libgit2 $(pkg-config --modversion libgit2) is installed; git2go v34 needs 1.5.x" >&2
fi
cmd="apt-get update && apt-get install -y --no-install-recommends ${packages[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  have || { echo "libgit2 1.5 is still missing after: $cmd" >&2; exit 1; }
else
  echo "missing libgit2 1.5 / pkg-config / git; run as root: $cmd" >&2
  exit 1
fi
