#!/usr/bin/env bash
# Makes sure the system packages the build and tests need are installed:
# libgit2 1.5 (git2go v34 accepts no other) with pkg-config for cgo; git for
# the test git servers; openssh-server/-client for the SSH git server and SSH
# commit signatures; gnupg to verify OpenPGP signatures; prometheus for
# promtool and the scrape test; docker-registry (CNCF distribution 2.8) as a
# real sender of registry notifications for the webhook tests; containerd,
# runc, containernetworking-plugins, iptables, iproute2 and conntrack for the
# real node of tests/node and `make cluster` (tests/internal/cluster),
# busybox-static for its shell image; redis-server for Argo CD's cache in
# tests/argocd (pkg/testing/testargocd); chromium, the headless browser
# tests/dashboard drives, and npm, which installs axe-core for it (make
# browser-tools). Installs them
# with apt when we are root on Debian/Ubuntu; otherwise prints the command to
# run.
set -euo pipefail
# Each package with what proves it is installed: a command, an executable
# path, or (libgit2-dev) a pkg-config check. Only missing packages are
# installed: a machine whose Node.js came from elsewhere (NodeSource's nodejs
# ships npm and conflicts with Debian's npm) keeps it.
checks=(
  "libgit2-dev:libgit2" "pkg-config:pkg-config" "git:git" "openssh-server:/usr/sbin/sshd"
  "openssh-client:ssh-keygen" "gnupg:gpg" "prometheus:promtool" "docker-registry:docker-registry"
  "containerd:ctr" "runc:runc" "containernetworking-plugins:/usr/lib/cni/bridge" "iptables:iptables"
  "iproute2:ip" "conntrack:conntrack" "busybox-static:/bin/busybox" "redis-server:redis-server"
  "chromium:chromium" "npm:npm"
)

# `hack/deps.sh build` checks only what building the binaries needs (what
# `make build` and `make demo` run): libgit2 1.5 with pkg-config for cgo,
# and git. A person who only builds, or runs the demo, gets nothing else,
# and one without root who has those three builds without being told to
# install a browser.
if [ "${1:-}" = build ]; then
  checks=("libgit2-dev:libgit2" "pkg-config:pkg-config" "git:git")
fi

# installed CHECK: the package behind CHECK is there.
installed() {
  case $1 in
  libgit2) pkg-config --exists 'libgit2 >= 1.5.0' 2>/dev/null && ! pkg-config --exists 'libgit2 >= 1.6.0' ;;
  /*) [ -x "$1" ] ;;
  *) command -v "$1" >/dev/null ;;
  esac
}

missing() {
  local c
  for c in "${checks[@]}"; do
    installed "${c#*:}" || echo "${c%%:*}"
  done
}

packages=($(missing))
[ ${#packages[@]} -eq 0 ] && exit 0

if pkg-config --exists libgit2 2>/dev/null && pkg-config --exists 'libgit2 >= 1.6.0'; then
  echo "libgit2 $(pkg-config --modversion libgit2) is installed; git2go v34 needs 1.5.x" >&2
fi
cmd="apt-get update && apt-get install -y --no-install-recommends ${packages[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  still=$(missing)
  [ -z "$still" ] || { echo "still missing after $cmd: $still" >&2; exit 1; }
else
  echo "missing: ${packages[*]}; run as root: $cmd" >&2
  exit 1
fi
