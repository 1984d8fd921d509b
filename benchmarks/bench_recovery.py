"""Benchmark: the ids-only bridge from a prompt the renderer did not render (an inference server's).

rLLM's gateway lets the server render a session's first prompt (and every prompt after a reset) and
then calls ``bridge_to_next_turn`` with ids alone; the renderer reads the conversation back from the
prompt (``rllm_renderers/bridging/recovery.py``), proves it, bridges, and remembers the result.

Per family and conversation length (a system prompt, then user / assistant exchanges of about 100
tokens each, then a user message): the prompt is rendered by a *server* renderer, and a fresh
renderer (empty memory) bridges from it with ids only.

* **first bridge**: that call (recovery, its proof, the bridge); target of issue 33 for 200 messages
  and about 20k tokens: under 50 ms of recovery;
* **next bridge**: the following turn's bridge, from the remembered result; target under 5 ms.

Every bridged prompt is checked against the bridge given the conversation (``messages=``), under
``--retention`` (default "verbatim": Qwen3 rewrites a turn once a user message follows it, so
under "template" its bridge here is None either way).
Timing: process CPU time, garbage collection off, median of ``--samples`` (a new renderer per
sample for the first bridge). Run from the project root:
    .venv/bin/python benchmarks/bench_recovery.py [--corpus ../shared/corpus] [--lengths 10,50,100,200]
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

FILLER = "The quick brown fox jumps over the lazy dog while the system logs every step it takes. "


def conversation(messages: int) -> list[dict]:
    """A system prompt, then exchanges of about 100 tokens per message, ending with a user message."""
    chat = [{"role": "system", "content": "You are a careful assistant."}]
    turn = 0
    while len(chat) < messages - 1:
        chat.append({"role": "user", "content": f"Question {turn}: " + FILLER * 5})
        chat.append({"role": "assistant", "content": f"Answer {turn}: " + FILLER * 5})
        turn += 1
    chat.append({"role": "user", "content": "One more question: " + FILLER})
    return chat


def completion_of(renderer, history: list[dict], reply: dict) -> list[int]:
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [reply])
    stops = set(renderer.get_stop_token_ids())
    end = next(index for index in range(len(prompt), len(full)) if full[index] in stops)
    return full[len(prompt) : end + 1]


def cpu_ms(function) -> float:
    gc.disable()
    try:
        start = time.process_time()
        function()
        return (time.process_time() - start) * 1e3
    finally:
        gc.enable()


def bench(family, tokenizer, messages: int, samples: int, retention: str) -> dict:
    server = family.renderer_class(tokenizer)
    history = conversation(messages)
    prompt = server.render_ids(history, add_generation_prompt=True)
    reply = {"role": "assistant", "content": "Here is the answer."}
    completion = completion_of(server, history, reply)
    new = [{"role": "user", "content": "Thanks. And another?"}]
    second_reply = {"role": "assistant", "content": "Another answer."}
    second_completion = completion_of(server, history + [reply] + new, second_reply)
    second_new = [{"role": "user", "content": "Last one."}]
    # the reference: the same bridges given the conversation (messages=)
    told = family.renderer_class(tokenizer, thinking_retention=retention)
    expected = told.bridge_to_next_turn(prompt, completion, new, messages=history)
    assert expected is not None, "the bridge with messages= declines this turn"
    second_expected = told.bridge_to_next_turn(
        list(expected.token_ids), second_completion, second_new, messages=history + [reply] + new
    )
    assert second_expected is not None, "the bridge with messages= declines the next turn"

    firsts, nexts = [], []
    for _ in range(samples):
        renderer = family.renderer_class(tokenizer, thinking_retention=retention)  # an empty memory
        renderer.warm()
        results = {}
        firsts.append(cpu_ms(lambda: results.update(first=renderer.bridge_to_next_turn(prompt, completion, new))))
        assert results["first"] is not None and results["first"].token_ids == expected.token_ids, "first bridge"
        ids = list(results["first"].token_ids)
        nexts.append(cpu_ms(lambda: results.update(next=renderer.bridge_to_next_turn(ids, second_completion, second_new))))
        assert results["next"] is not None and results["next"].token_ids == second_expected.token_ids, "next bridge"
    return {
        "messages": len(history),
        "tokens": len(prompt),
        "first_ms": statistics.median(firsts),
        "next_ms": statistics.median(nexts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--families", default="qwen3,llama_3_1,deepseek_v3")
    parser.add_argument("--lengths", default="10,50,100,200")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--retention", default="verbatim", help="Qwen3 rewrites a turn once a user follows it")
    args = parser.parse_args()
    os.environ["RLLM_CORPUS"] = args.corpus
    from tests.families import FAMILIES

    print(f"ms of process CPU time, medians of {args.samples} samples, thinking_retention={args.retention!r}\n")
    print("| family | messages | prompt tokens | first bridge (recovery) | next bridge (remembered) |")
    print("|---|--:|--:|--:|--:|")
    for family in FAMILIES:
        if family.module not in args.families.split(","):
            continue
        tokenizer = family.load_tokenizer()
        for length in map(int, args.lengths.split(",")):
            row = bench(family, tokenizer, length, args.samples, args.retention)
            print(
                f"| {family.module} | {row['messages']} | {row['tokens']} | {row['first_ms']:.1f} | {row['next_ms']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
