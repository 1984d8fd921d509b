#!/usr/bin/env bash
# PrimeIntellect's own `renderers` test suite (its protocol-level files) against this project's
# generated renderers, through ../shared/tools/prime_suite and our factory
# (rllm_renderers/adapters/prime_config.py). Extra arguments go to pytest (e.g. -k gpt-oss).
#
# The run fails on any failure that scripts/prime_suite_expected.json does not list (each class
# there is a README row: "PrimeIntellect's suite"), and, on a full run (no pytest arguments, no
# PRIME_SUITE_FILES), on a listed class that no longer fails.
#
# Environment:
#   PY                   python with the suite's needs (default .venv/bin/python; scripts/setup.sh
#                        installs them: the prime and harmony extras, pytest-asyncio)
#   RLLM_CORPUS          the corpus (default ../shared/corpus)
#   PRIME_SUITE_DIR      the harness (default ../shared/tools/prime_suite)
#   PRIME_SUITE_VERSION  renderers sdist version (default 0.1.12, sha256-pinned below)
#   PRIME_SUITE_SDIST_CACHE  where the sdist is kept between runs (default ~/.cache/rllm-renderers)
#   PRIME_SUITE_FILES    the suite's test files to run (default: the harness's protocol set)
#   PRIME_SUITE_REPORT   the JSON report (default build/prime_suite_report.json)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CORPUS="${RLLM_CORPUS:-$(cd .. && pwd)/shared/corpus}"
HARNESS="${PRIME_SUITE_DIR:-$(cd .. && pwd)/shared/tools/prime_suite}"
VERSION="${PRIME_SUITE_VERSION:-0.1.12}"
declare -A SDIST_SHA256=([0.1.12]=0e688605163cf891cfa3afa3ed5895dbb29360279bcf52ef1d893c74079df9e4)
[[ -x "$HARNESS/run_prime_suite.sh" ]] || { echo "prime_suite.sh: no harness at $HARNESS (set PRIME_SUITE_DIR)" >&2; exit 2; }

# The sdist (their tests are not in the wheel), downloaded once from PyPI and kept.
cache="${PRIME_SUITE_SDIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rllm-renderers}/prime_suite"
sdist="$cache/renderers-$VERSION.tar.gz"
if [[ ! -f "$sdist" ]]; then
    mkdir -p "$cache"
    tmp="$(mktemp -d "$cache/dl.XXXXXX")"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "renderers==$VERSION" -d "$tmp"
    mv "$tmp/renderers-$VERSION.tar.gz" "$sdist.partial" && mv "$sdist.partial" "$sdist"
    rm -rf "$tmp"
fi
want="${SDIST_SHA256[$VERSION]:-}"
got="$("$PY" -c 'import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$sdist")"
if [[ -n "$want" && "$got" != "$want" ]]; then
    echo "prime_suite.sh: $sdist has sha256 $got, expected $want; delete it to download again" >&2
    exit 2
fi

report="${PRIME_SUITE_REPORT:-$ROOT/build/prime_suite_report.json}"
mkdir -p "$(dirname "$report")"
rm -f "$report"  # never judge an earlier run's report
rc=0
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
PRIME_SUITE_FACTORY="rllm_renderers.adapters.prime_config:make_renderer" \
PRIME_SUITE_SDIST="$sdist" PRIME_SUITE_REPORT="$report" CORPUS="$CORPUS" PY="$PY" \
    "$HARNESS/run_prime_suite.sh" "$@" || rc=$?
[[ -f "$report" ]] || { echo "prime_suite.sh: the suite wrote no report (exit $rc)" >&2; exit 2; }
# Failures are judged against the expected list, not by pytest's exit status.
partial=()
[[ $# -gt 0 || -n "${PRIME_SUITE_FILES:-}" ]] && partial=(--partial)
"$PY" "$ROOT/scripts/prime_suite_expected.py" "$report" "$ROOT/scripts/prime_suite_expected.json" ${partial[@]+"${partial[@]}"}
