"""Benchmark: ``parse_response`` is linear in the number of tool calls, for ASCII and non-ASCII text.

A completion of ``n`` tool calls (the family's learned syntax, ``{"i": k, "s": TEXT}`` arguments, or
XML parameters) after a short content, ended by the turn's stop token, is parsed at ``n`` and ``4n``
calls; a linear parser takes about 4x as long at 4n. Two texts per family: ASCII only, and with one
non-ASCII character in the content (``é``), which used to make every call boundary re-encode the
text before it (quadratic). DeepSeek-V3's own markers (``<｜tool▁call▁begin｜>``) are non-ASCII, so
its completions are non-ASCII either way; Gemma-3 (no tool calls) has no row.

Before timing, every parse is checked: ``n`` calls, all ``ok``, the last one's arguments and token span.

Timing: ``time.perf_counter``, garbage collection off, the median of ``--samples`` parses.
Run from the project root:  .venv/bin/python benchmarks/bench_parse.py [--corpus ../shared/corpus] [--calls 400]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FAMILIES = ("qwen3", "qwen3_5", "deepseek_v3", "llama_3_1", "gpt_oss", "deepseek_v4")
TEXTS = {"ascii": "Working on it.", "non-ascii": "Voilà."}


def call_text(syntax, index: int) -> str:
    if syntax.style == "xml":
        parameter = f"{syntax.parameter_start}i{syntax.parameter_value}{index}{syntax.parameter_end}"
        return f"{syntax.call_start}step{syntax.name_end}{parameter}{syntax.call_end}"
    return f'{syntax.call_start}step{syntax.name_end}{{"i": {index}}}{syntax.call_end}'


def completion(renderer, content: str, calls: int) -> list[int]:
    syntax = renderer.TOOL_CALLS
    text = content + syntax.content_separator + syntax.block_start + "".join(call_text(syntax, i) for i in range(calls))
    return renderer.encoder.encode(text) + renderer.get_stop_token_ids()[:1]


def checked_parse(renderer, ids: list[int], calls: int, prompt: list[int]) -> None:
    parsed = renderer.parse_response(ids, prompt_ids=prompt)
    assert len(parsed.tool_calls) == calls, (len(parsed.tool_calls), calls)
    assert all(call.status == "ok" for call in parsed.tool_calls)
    last = parsed.tool_calls[-1]
    assert last.arguments in ({"i": calls - 1}, {"i": str(calls - 1)}), last.arguments
    start, stop = last.token_span
    assert 0 < start < stop < len(ids), last.token_span


def seconds_per_parse(renderer, ids: list[int], prompt: list[int], samples: int) -> float:
    times = []
    gc.disable()
    try:
        for _ in range(samples):
            start = time.process_time()
            renderer.parse_response(ids, prompt_ids=prompt)
            times.append(time.process_time() - start)
    finally:
        gc.enable()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--calls", type=int, default=400, help="n (the second size is 4n)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    os.environ["RLLM_CORPUS"] = args.corpus
    from tests.families import FAMILIES as ALL

    by_module = {family.module: family for family in ALL}
    n = args.calls
    print(f"parse_response of n and 4n tool calls (median of {args.samples}; linear: 4n/n about 4)")
    print(f"| family | text | n = {n} (ms) | 4n = {4 * n} (ms) | 4n / n |")
    print("| --- | --- | ---: | ---: | ---: |")
    for module in args.families.split(","):
        family = by_module[module]
        renderer = family.renderer_class(family.load_tokenizer())
        prompt = renderer.encoder.encode("Go.")  # a prompt that does not end inside a reasoning block
        for label, content in TEXTS.items():
            times = []
            for calls in (n, 4 * n):
                ids = completion(renderer, content, calls)
                checked_parse(renderer, ids, calls, prompt)
                times.append(seconds_per_parse(renderer, ids, prompt, args.samples))
            print(f"| {module} | {label} | {times[0] * 1e3:.1f} | {times[1] * 1e3:.1f} | {times[1] / times[0]:.1f} |")


if __name__ == "__main__":
    main()
