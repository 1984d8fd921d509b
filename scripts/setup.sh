#!/usr/bin/env bash
# Create .venv and install the project with everything the compiler and the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
# Optional run-time backends, exercised by tests/test_registry.py and tests/test_conformance.py:
# prime (renderers + httpx), tinker (CPU torch, the tinker SDK, Pillow), harmony (openai-harmony,
# the gpt-oss oracle; it reads the o200k vocabulary derived from the corpus tokenizer, no download)
# bench (tml-renderers, for benchmarks/bench_render.py) and prime-suite (pytest-asyncio, for
# PrimeIntellect's own tests in scripts/prime_suite.sh), gateway (what rLLM's model gateway needs, for
# tests/test_gateway_client.py), then tinker-cookbook itself without its
# declared dependencies, which its renderers do not need.
# view (playwright, for the viewer's browser test in tests/test_view.py), datasets (HF datasets and
# Ray Data, for tests/test_training_sets.py).
.venv/bin/python -m pip install --quiet -e ".[prime,tinker,harmony,bench,prime-suite,gateway,view,datasets]"
.venv/bin/python -m pip install --quiet --no-deps "tinker-cookbook==0.6.1"
.venv/bin/python -c "import torch; torch.version.cuda and print('warning: a CUDA torch build was installed')"
# The browser the viewer's test drives: the system's Chromium (Debian's package), installed only when
# missing, as root or through sudo (the test skips, saying why, when no Chromium can be found).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi
# vLLM in its own virtual environment, for the engine tests (scripts/setup_vllm.sh). A failed
# install does not stop the setup: the engine tests then skip, saying why. RLLM_SKIP_VLLM=1 skips it.
if [ "${RLLM_SKIP_VLLM:-0}" != "1" ]; then
    bash scripts/setup_vllm.sh || echo "warning: vLLM could not be set up; tests/engines/ will skip" >&2
fi
