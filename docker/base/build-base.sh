#!/usr/bin/env bash
# Makes the local base images that the CPU builds start FROM on a machine that reaches package
# registries but no container registry (nothing can be pulled):
#   llm-platform-base/debian:bookworm       debootstrap --variant=minbase, from this machine's own
#                                           Debian mirror (read from its apt sources, never written here)
#   llm-platform-base/python:3.11-bookworm  + Debian's Python 3.11 and venv: the stand-in for the
#                                           official python:3.11-slim-bookworm the Dockerfiles default to
#   llm-platform-base/postgres:15, llm-platform-base/redis:7
#                                           stand-ins for the official postgres and redis images that
#                                           docker/compose.yaml names (same environment variables)
# The Debian base is made once per machine (FORCE=1 remakes it); the others are rebuilt from their
# Dockerfiles each run, which Docker's layer cache makes a no-op while they are unchanged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

exists() { [ "${FORCE:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

# The first Debian (not -security) mirror in this machine's apt sources, deb822 or one-line style.
debian_mirror() {
  local uri
  uri="$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1 || true)"
  if [ -z "$uri" ]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
  fi
  if [ -z "$uri" ]; then
    echo "build-base: no Debian mirror in /etc/apt/sources.list{,.d}: add one, or pull the official images instead" >&2
    exit 1
  fi
  echo "$uri"
}

if ! exists llm-platform-base/debian:bookworm; then
  command -v debootstrap >/dev/null || { echo "build-base: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "build-base: debootstrap bookworm from $(debian_mirror) (about a minute)"
  debootstrap --variant=minbase bookworm "$rootfs" "$(debian_mirror)" >/dev/null
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - llm-platform-base/debian:bookworm >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
fi

build() {  # image, Dockerfile
  docker build --quiet --network host -t "$1" -f "$here/$2" "$here" >/dev/null
}
build llm-platform-base/python:3.11-bookworm python.Dockerfile
build llm-platform-base/postgres:15 postgres.Dockerfile
build llm-platform-base/redis:7 redis.Dockerfile
echo "build-base: ready"
