#!/usr/bin/env bash
# A quick subset for contributors (a few minutes): the runtime's contracts on the families with
# real tokenizers, the ids-only bridge behind rLLM's gateway, resolution, inputs and the compiler's
# refusals. Assumes scripts/setup.sh ran. The full run is scripts/test.sh (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
export RLLM_CORPUS="${RLLM_CORPUS:-$(cd .. && pwd)/shared/corpus}"
export RLLM_ORACLES="${RLLM_ORACLES:-$(cd .. && pwd)/shared/oracles}"
export HF_HUB_OFFLINE=1
.venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_bridge_inputs.py tests/test_engine_entry_points.py tests/test_input_edges.py \
    tests/test_compiler_hostile.py \
    "tests/test_gateway_client.py::test_gateway_bridges_every_turn_the_template_keeps[qwen3-verbatim]" \
    "tests/test_gateway_client.py::test_gateway_bridges_every_turn_the_template_keeps[llama_3_1-template]" \
    "$@"
