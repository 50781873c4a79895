#!/usr/bin/env bash
# The step of the tk-image GitHub Action (action.yml at the repository
# root): runs `tk-image update` over a directory with the policies of the
# inputs and/or of a cluster's ImagePolicies, logs every change, and writes
# the outputs `changed` and `files` to $GITHUB_OUTPUT. Over the workspace it
# commits nothing: that is the workflow's business. With the input
# repository it runs the write-back engine instead (`tk-image update
# --repository`): clone, update, commit, push or open a pull request, and
# also writes the outputs `commit` and `pull-request`.
#
# A composite action's steps get no INPUT_* variables of their own
# (actions/runner#665); action.yml passes each input explicitly as:
#   INPUT_PATH                   directory to update, relative to the working directory (default .)
#   INPUT_POLICIES               NAMESPACE:NAME=IMAGE:TAG[@DIGEST] lines; blank and # lines are skipped
#   INPUT_POLICIES_FROM_CLUSTER  true: kubectl get imagepolicies.image.toolkit.dev -A -o yaml
#   INPUT_DRY_RUN                true: write nothing, report what would change
#   INPUT_TK_IMAGE               a tk-image binary to use; empty: build one from ACTION_PATH
#   INPUT_REPOSITORY             a git URL: update that repository's branch instead of the workspace
#   INPUT_BRANCH                 with repository: the branch to check out and update (default main)
#   INPUT_PUSH_BRANCH            with repository: push there instead (forced, as Flux's push.branch)
#   INPUT_PULL_REQUEST           with repository: true proposes the change as a pull request
#   INPUT_AUTHOR_NAME            with repository: commit author (default github-actions[bot])
#   INPUT_AUTHOR_EMAIL           with repository: its email (default the bot's noreply address)
#   INPUT_TOKEN                  with repository: HTTPS token (user x-access-token), also the forge's
# and ACTION_PATH (github.action_path, the action's own checkout) and
# ACTION_REF (github.action_ref, stamped as the version of what it builds).
# GITHUB_OUTPUT and RUNNER_TEMP are the runner's.
#
# Exit status: 0 with or without changes; 1 on any error, with a ::error
# line that the runner shows as an annotation.
set -euo pipefail

fail() {
  echo "::error title=tk-image update::$*"
  exit 1
}

bool() { # bool NAME VALUE: VALUE must be true or false (as YAML inputs are strings)
  case $2 in
    true | false) ;;
    *) fail "input $1 must be true or false, got \"$2\"" ;;
  esac
}

[ -n "${GITHUB_OUTPUT:-}" ] || fail "GITHUB_OUTPUT is not set: run this as the action's step, or point it at a file"
command -v jq >/dev/null || fail "jq is not on PATH (GitHub-hosted runners have it): it reads tk-image's JSON report"

dir=${INPUT_PATH:-.}
from_cluster=${INPUT_POLICIES_FROM_CLUSTER:-false}
dry_run=${INPUT_DRY_RUN:-false}
bool policies-from-cluster "$from_cluster"
bool dry-run "$dry_run"
[ -n "${INPUT_REPOSITORY:-}" ] || [ -d "$dir" ] || fail "input path: \"$dir\" is not a directory (relative to $PWD)"

tmp=$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/tk-image-action.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

repository=${INPUT_REPOSITORY:-}
pull_request=${INPUT_PULL_REQUEST:-false}
bool pull-request "$pull_request"
if [ -z "$repository" ]; then
  for v in INPUT_BRANCH INPUT_PUSH_BRANCH INPUT_AUTHOR_NAME INPUT_AUTHOR_EMAIL INPUT_TOKEN; do
    n=${v#INPUT_} n=${n//_/-}
    [ -z "${!v:-}" ] || fail "input ${n,,} needs the input repository"
  done
  [ "$pull_request" = false ] || fail "input pull-request needs the input repository"
  args=(update --dir "$dir" --output json)
else
  # The path is the repository's directory to update, not the workspace's.
  args=(update --repository "$repository" --branch "${INPUT_BRANCH:-main}" --output json
    --author-name "${INPUT_AUTHOR_NAME:-github-actions[bot]}"
    --author-email "${INPUT_AUTHOR_EMAIL:-41898282+github-actions[bot]@users.noreply.github.com}")
  [ "$dir" = . ] || args+=(--path "$dir")
  [ -z "${INPUT_PUSH_BRANCH:-}" ] || args+=(--push-branch "$INPUT_PUSH_BRANCH")
  [ "$pull_request" = false ] || args+=(--pull-request)
  if [ -n "${INPUT_TOKEN:-}" ]; then
    # Through the environment, never the command line: tk-image reads the
    # variables it is named, and the runner masks the token in the log.
    export TK_IMAGE_GIT_USERNAME=x-access-token TK_IMAGE_GIT_TOKEN=$INPUT_TOKEN
    args+=(--git-username-env TK_IMAGE_GIT_USERNAME --git-password-env TK_IMAGE_GIT_TOKEN)
  fi
fi
[ "$dry_run" = false ] || args+=(--dry-run)

# Policies from the cluster first: tk-image lets --policy win over
# --policies-from, so a line of the input overrides the cluster's value.
if [ "$from_cluster" = true ]; then
  command -v kubectl >/dev/null || fail "policies-from-cluster: kubectl is not on PATH"
  # The group-qualified name: Flux's ImagePolicy is also "imagepolicies".
  if ! kubectl get imagepolicies.image.toolkit.dev --all-namespaces --output yaml >"$tmp/imagepolicies.yaml"; then
    fail "policies-from-cluster: kubectl get imagepolicies.image.toolkit.dev -A failed (see above); set up a kubeconfig for the cluster before this step"
  fi
  args+=(--policies-from "$tmp/imagepolicies.yaml")
fi

n=0 count=0
while IFS= read -r line || [ -n "$line" ]; do
  n=$((n + 1))
  line=${line#"${line%%[![:space:]]*}"} # trim
  line=${line%"${line##*[![:space:]]}"}
  case $line in
    "" | "#"*) continue ;;
    *=*) ;;
    *) fail "policies line $n: \"$line\" is not NAMESPACE:NAME=IMAGE:TAG[@DIGEST]" ;;
  esac
  # tk-image checks the rest and names the value in its message.
  args+=(--policy "$line")
  count=$((count + 1))
done <<<"${INPUT_POLICIES:-}"
[ "$count" -gt 0 ] || [ "$from_cluster" = true ] || fail "no policies: set the input policies, or policies-from-cluster: true"

tk=${INPUT_TK_IMAGE:-}
if [ -z "$tk" ]; then
  # The module path toolkit.dev/image-toolkit is not fetchable, so no `go
  # install ...@ref`: build from the action's own checkout, the ref the
  # workflow named in `uses:`.
  [ -f "${ACTION_PATH:-}/go.work" ] ||
    fail "ACTION_PATH (\"${ACTION_PATH:-}\") is not the action's checkout with go.work; or set the input tk-image"
  command -v go >/dev/null || fail "go is not on PATH, and the input tk-image is empty"
  tk=$tmp/tk-image
  # The engine behind repository links git2go v34, which needs libgit2 1.5
  # (Debian 12's libgit2-dev); a workspace update needs no cgo.
  cgo=0
  if [ -n "$repository" ]; then
    v=$(pkg-config --modversion libgit2 2>/dev/null || true)
    case $v in
      1.5.*) cgo=1 ;;
      *) fail "input repository needs tk-image built with libgit2 1.5 (found \"${v:-none}\"): run on Debian 12 with libgit2-dev, or set the input tk-image to such a binary (the tk-image container image has one)" ;;
    esac
  fi
  echo "Building tk-image ${ACTION_REF:-} from $ACTION_PATH with $(go version)"
  (cd "$ACTION_PATH" && GOWORK='' CGO_ENABLED=$cgo GOFLAGS=-buildvcs=false go build -trimpath \
    -ldflags "-X toolkit.dev/image-toolkit/pkg/version.Version=${ACTION_REF:-action}" -o "$tk" ./tk-image) ||
    fail "building tk-image from $ACTION_PATH failed (see above)"
fi
[ -x "$tk" ] || fail "input tk-image: \"$tk\" is not an executable file"
"$tk" version

# 0: done; 1: some files could not be read (tk-image names them on stderr)
# but the others were updated and reported; anything else: nothing done.
rc=0
"$tk" "${args[@]}" >"$tmp/result.json" || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
  fail "tk-image update failed with exit status $rc (its message is above)"
fi

# Paths relative to the working directory, as `git add` wants them; with
# repository, to the repository's root, as tk-image already gives them. The
# engine's report holds the setters' result under .changes.
prefix=
[ "$dir" = . ] || [ -n "$repository" ] || prefix=${dir%/}/
result='.files'
[ -z "$repository" ] || result='.changes.files'
mapfile -t files < <(jq -r --arg p "$prefix" "$result"' // [] | .[] | $p + .path' "$tmp/result.json")
jq -r --arg p "$prefix" "$result"' // [] | .[] | .path as $f | .objects[] | "\(.kind)/\(.namespace // "")/\(.name // "")" as $o |
  .changes[] | "\($p)\($f): \($o): \(.oldValue) -> \(.newValue) (\(.setter))"' "$tmp/result.json"

changed=false
[ ${#files[@]} -eq 0 ] || changed=true
if [ "$changed" = false ]; then
  echo "No changes."
elif [ "$dry_run" = true ]; then
  echo "Dry run: ${#files[@]} file(s) would change; none written."
fi
# A multi-line output needs a delimiter no path can contain.
delim=tk-image-files-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
{
  echo "changed=$changed"
  echo "files<<$delim"
  [ "$changed" = false ] || printf '%s\n' "${files[@]}"
  echo "$delim"
  if [ -n "$repository" ]; then
    echo "commit=$(jq -r '.commit // ""' "$tmp/result.json")"
    echo "pull-request=$(jq -r '.pullRequest.URL // ""' "$tmp/result.json")"
  fi
} >>"$GITHUB_OUTPUT"

[ "$rc" -eq 0 ] || fail "tk-image could not read some files (named above); the others were updated"
