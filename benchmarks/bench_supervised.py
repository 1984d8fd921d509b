"""Benchmark: supervised examples per second on one core, ``build_supervised_example`` against
``apply_chat_template(..., return_assistant_tokens_mask=True)`` on TRL's ``{% generation %}``-marked
copy of the same template (tests/data/generation_templates).

The conversations are fixed (seeded): a system prompt, 1-4 rounds of user / assistant, some rounds
with a tool call and its result, and a tools list. Before timing, every conversation is checked:
both sides give the same ids. Both sides start warm (the renderer built, the marked template
compiled by transformers' cache) and run pinned to one core with one tokenizer thread.

Timing: ``time.perf_counter`` over ``--rounds`` passes through all conversations, garbage collection
off; the best pass counts.
Run from the project root:
    .venv/bin/python benchmarks/bench_supervised.py [--corpus ../shared/corpus] [--family qwen2_5]
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers loads
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: family -> (generated module, class, corpus tokenizer, marked copy)
FAMILIES = {
    "qwen2_5": ("qwen2_5", "Qwen25Renderer", "qwen25", "qwen2_5_training.jinja"),
    "gemma_3": ("gemma_3", "Gemma3Renderer", "gemma3", "gemma3_training.jinja"),
}
WORDS = "the weather in Paris is sunny today and tomorrow it may rain so take an umbrella with you".split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def conversations(count: int, *, tool_calls: bool, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."

    result = []
    for _ in range(count):
        messages = [{"role": "system", "content": text(5, 20)}]
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": text(5, 40)})
            if tool_calls and rng.random() < 0.4:
                call = {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": rng.choice(WORDS)}},
                }
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
                messages.append({"role": "tool", "content": text(3, 15)})
            messages.append({"role": "assistant", "content": text(10, 120)})
        result.append(messages)
    return result


def best_pass(function, items, rounds: int) -> float:
    best = float("inf")
    gc.disable()
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            for item in items:
                function(item)
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=os.environ.get("RLLM_CORPUS", str(REPO.parent / "shared" / "corpus")))
    parser.add_argument("--family", choices=sorted(FAMILIES), default="qwen2_5")
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import importlib

    from rllm_renderers.encoding.loading import load_tokenizer

    module, class_name, tokenizer_name, marked_file = FAMILIES[args.family]
    tokenizer = load_tokenizer(Path(args.corpus) / "tokenizers" / tokenizer_name)
    renderer = getattr(importlib.import_module(f"rllm_renderers.generated.{module}"), class_name)(tokenizer)
    marked = (REPO / "tests" / "data" / "generation_templates" / marked_file).read_text(encoding="utf-8")
    tools = args.family != "gemma_3"  # Gemma-3's template has no tool role
    items = conversations(args.conversations, tool_calls=tools)
    tool_list = TOOLS if tools else None

    def ours(messages):
        return renderer.build_supervised_example(messages, tools=tool_list, train_on="all_assistant")

    def hf(messages):
        return tokenizer.apply_chat_template(
            messages,
            tools=tool_list,
            chat_template=marked,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )

    for messages in items:  # the same ids on both sides (and both warm)
        if ours(messages).token_ids != list(hf(messages)["input_ids"]):
            raise SystemExit(f"ids differ for {messages!r}")
    tokens = sum(len(ours(messages).token_ids) for messages in items)
    ours_time = best_pass(ours, items, args.rounds)
    hf_time = best_pass(hf, items, args.rounds)
    print(f"{args.family}: {len(items)} conversations, {tokens / len(items):.0f} tokens each on average, one core")
    print(f"  build_supervised_example:                   {len(items) / ours_time:8.0f} examples/s")
    print(f"  apply_chat_template + assistant tokens mask: {len(items) / hf_time:8.0f} examples/s")
    print(f"  ratio: {hf_time / ours_time:.1f}x")


if __name__ == "__main__":
    main()
