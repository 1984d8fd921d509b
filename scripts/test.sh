#!/usr/bin/env bash
# Set up a fresh machine and run every test: the staleness check, the compiler's own verification
# of all checked-in renderers, PrimeIntellect's own renderer tests against ours
# (scripts/prime_suite.sh), then the pytest suite (with tests/engines/: real vLLM servers). Each
# stage prints its wall time, and the whole run its total, on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
run_started=$SECONDS

# stage NAME COMMAND...: run COMMAND and say how long it took (its status is kept)
stage() {
    local name="$1" started=$SECONDS status=0
    shift
    echo "==> stage: $name" >&2
    "$@" || status=$?
    echo "==> stage: $name: $((SECONDS - started)) s (exit $status)" >&2
    return "$status"
}

stage setup bash scripts/setup.sh
export RLLM_CORPUS="${RLLM_CORPUS:-$(cd .. && pwd)/shared/corpus}"
export RLLM_ORACLES="${RLLM_ORACLES:-$(cd .. && pwd)/shared/oracles}"
export HF_HUB_OFFLINE=1
stage "compiler check" .venv/bin/python -m compiler check --corpus "$RLLM_CORPUS"
stage "compiler verify --all" .venv/bin/python -m compiler verify --all --corpus "$RLLM_CORPUS" --cases "${VERIFY_CASES:-500}"
# PrimeIntellect's suite (their renderers sdist from PyPI, cached): fails on a failure that
# scripts/prime_suite_expected.json (the README's "PrimeIntellect's suite" table) does not explain.
# (Before pytest, so that the run closes on pytest's own summary line, not on the count of their
# explained failures.)
stage "PrimeIntellect's suite" env PY="$(pwd)/.venv/bin/python" bash scripts/prime_suite.sh
stage pytest .venv/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/engines
# the engine tests (real vLLM servers, tests/engines/) in a stage of their own, so their time shows
stage "pytest, engines" .venv/bin/python -m pytest -q -p no:cacheprovider tests/engines
echo "==> total: $((SECONDS - run_started)) s" >&2
