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
# tests/argocd (tests/testkit/testargocd); chromium, the headless browser
# tests/dashboard drives, and npm, which installs axe-core for it (make
# browser-tools). Installs them
# with apt when we are root on Debian/Ubuntu; otherwise prints the command to
# run.
set -euo pipefail
packages=(libgit2-dev pkg-config git openssh-server openssh-client gnupg prometheus docker-registry
  containerd runc containernetworking-plugins iptables iproute2 conntrack busybox-static redis-server chromium npm)

have() {
  for c in pkg-config git /usr/sbin/sshd ssh-keygen gpg promtool prometheus docker-registry \
    containerd ctr runc iptables ip conntrack /usr/lib/cni/bridge /bin/busybox redis-server chromium npm; do
    command -v "$c" >/dev/null || [ -x "$c" ] || return 1
  done
  pkg-config --exists 'libgit2 >= 1.5.0' && ! pkg-config --exists 'libgit2 >= 1.6.0'
}
have && exit 0

if pkg-config --exists libgit2 2>/dev/null && pkg-config --exists 'libgit2 >= 1.6.0'; then
  echo "libgit2 $(pkg-config --modversion libgit2) is installed; git2go v34 needs 1.5.x" >&2
fi
cmd="apt-get update && apt-get install -y --no-install-recommends ${packages[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  have || { echo "libgit2 1.5 is still missing after: $cmd" >&2; exit 1; }
else
  echo "missing some of: ${packages[*]}; run as root: $cmd" >&2
  exit 1
fi
