#!/usr/bin/env bash
# What both pipeline examples run (docs/ci/github-actions.yml, docs/ci/gitlab-ci.yml): check the
# manifest, promote it to staging, then promote the same version to production. Only documented
# llmctl commands and exit codes (docs/cli.md). Needs llmctl on PATH and, in the environment:
#   LLMCP_URL, LLMCP_TOKEN   the control plane and a write-scope token
#   MODEL, MANIFEST          the model and its version manifest
#   LLM_NODE                 the node to serve an alias on if it runs nowhere yet
#   CI_RUN_URL, GIT_SHA      recorded with each promotion
# Writes promotion-staging.json and promotion-production.json (archive them) and exits with
# llmctl's code: 3 a gate or step failed (the previous version serves), 4 timed out (the
# promotion goes on server-side), 6 another promotion of the model is running.
set -euo pipefail

# Why a command failed, in the job's log too: its error document's detail names the reason.
detail() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("detail") or "")' \
    "$1" >&2 || true
}

check=0
llmctl versions register "$MODEL" -f "$MANIFEST" --dry-run --json > manifest-check.json || check=$?
if [ "$check" -ne 0 ]; then
  echo "the manifest $MANIFEST was refused (llmctl exited with $check)" >&2
  detail manifest-check.json
  exit "$check"
fi

promote() {  # alias, then --manifest FILE or --version N
  local alias="$1"; shift
  local code=0
  llmctl promote "$MODEL" "$@" --to "$alias" --node "$LLM_NODE" --wait --timeout 1800 \
    --ci-run-url "$CI_RUN_URL" --git-sha "$GIT_SHA" --json > "promotion-$alias.json" || code=$?
  case "$code" in
    0) echo "$MODEL promoted to $alias" ;;
    3) echo "promotion to $alias failed; the previous version still serves" >&2 ;;
    4) echo "promotion to $alias still running server-side; see promotion-$alias.json" >&2 ;;
    6) echo "another promotion of $MODEL is running; retry later" >&2 ;;
    *) echo "llmctl exited with $code" >&2 ;;
  esac
  if [ "$code" -ne 0 ]; then detail "promotion-$alias.json"; fi
  return "$code"
}

promote staging --manifest "$MANIFEST"
version="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
  promotion-staging.json)"
promote production --version "$version"
