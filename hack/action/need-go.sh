#!/usr/bin/env bash
# The tk-image GitHub Action's first step (action.yml): whether Go must be
# set up before tk-image is built from the action's checkout. It must when
# go is not on PATH or is older than the go line of ACTION_PATH/go.work;
# then actions/setup-go installs go-version. Writes setup=true|false and
# go-version to $GITHUB_OUTPUT.
set -euo pipefail
[ -n "${GITHUB_OUTPUT:-}" ] || { echo "::error::GITHUB_OUTPUT is not set"; exit 1; }
want=$(awk '$1 == "go" {print $2; exit}' "${ACTION_PATH:?the action checkout}/go.work")
[ -n "$want" ] || { echo "::error::no go line in $ACTION_PATH/go.work"; exit 1; }

have=
if command -v go >/dev/null; then
  # From /, so that no go.mod of the workspace makes go switch toolchains
  # and report another version than its own.
  have=$(cd / && GOTOOLCHAIN=local go env GOVERSION) || have=
  have=${have#go}
fi
setup=true
if [ -n "$have" ] && [ "$(printf '%s\n' "$want" "$have" | sort -V | head -n1)" = "$want" ]; then
  setup=false
fi
echo "Go on PATH: ${have:-none}; tk-image needs ${want}: setup=${setup}"
{
  echo "setup=$setup"
  echo "go-version=>=$want"
} >>"$GITHUB_OUTPUT"
