#!/usr/bin/env bash
# CI's container checks for real: a Docker daemon (installed and started if this machine has
# none), the local base images, the three images, then docker/e2e.py against the compose stack.
# Layers and base images stay cached in the daemon between runs on one machine; the first run on
# a fresh machine builds everything (see docker/README.md for the times measured).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
started=$(date +%s)

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "docker-ci: installing docker.io and debootstrap (Debian packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "docker-ci: starting dockerd"
  nohup dockerd >/tmp/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "docker-ci: dockerd did not start; see /tmp/dockerd.log" >&2; exit 1; }
fi

bash docker/build.sh
built=$(date +%s)
.venv/bin/python docker/e2e.py
echo "docker-ci: images built in $((built - started)) s, stack checked in $(( $(date +%s) - built )) s"
