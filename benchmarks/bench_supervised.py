"""Benchmark: supervised examples per second on one core, ``build_supervised_example`` against
``apply_chat_template(..., return_assistant_tokens_mask=True)`` on TRL's ``{% generation %}``-marked
copy of the same template (tests/data/generation_templates).

The conversations are fixed (seeded): a system prompt, 1-4 rounds of user / assistant, some rounds
with a tool call and its result, and a tools list. Before timing, every conversation is checked:
both sides give the same ids. Both sides start warm (the renderer built, the marked template
compiled by transformers' cache) and run pinned to one core with one tokenizer thread.

Timing: ``time.perf_counter`` over ``--rounds`` passes through all conversations, garbage collection
off; the best pass counts.
The renderer's encoder is the default engine as a process has it once it renders at scale
(tiktoken, then fastokens built in the background: rllm_renderers/encoding/engine_upgrade.py),
waited for before timing.

``--workers``: the data-set path (rllm_renderers/training_sets.py) through HF ``datasets.map(...,
batched=True, num_proc=N)`` for N = 1 and 2 over ``--dataset-rows`` conversations (each worker builds its
own renderer from the pickled recipe, inside the timed map), not pinned: wall time, and the CPU time of
each worker process in the function (its renderer's build included), which other processes on a
shared machine do not inflate: the busiest worker's CPU bounds the wall time on idle cores.

Run from the project root:
    .venv/bin/python benchmarks/bench_supervised.py [--corpus ../shared/corpus] [--family qwen2_5] [--workers]
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
#: family -> the model name get_renderer resolves (the data-set path builds its renderer by name)
MODELS = {"qwen2_5": "Qwen/Qwen2.5-7B-Instruct", "gemma_3": "google/gemma-3-27b-it"}
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
    parser.add_argument("--workers", action="store_true", help="also datasets.map with 1 and 2 worker processes")
    parser.add_argument("--dataset-rows", type=int, default=4000)
    args = parser.parse_args()
    if args.workers:
        dataset_speedup(args)
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
    print(f"engine: {renderer.encoder.backend} -> {renderer.encoder.upgrade(wait=True)} (the default after its background upgrade)")

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


class _TimedBatches:
    """The data-set function, and per batch the CPU seconds its worker process spent in it (the
    renderer's build on a worker's first batch included) and that process's id, as two more columns."""

    def __init__(self, function):
        self.function = function

    def __call__(self, batch):
        import time as clock

        start = clock.process_time()
        columns = self.function(batch)
        count = len(columns["input_ids"])
        columns["cpu"] = [clock.process_time() - start] + [0.0] * (count - 1)
        columns["pid"] = [os.getpid()] * count
        return columns


def dataset_speedup(args) -> None:
    """datasets.map(batched=True, num_proc=N) for N = 1, 2 (module docstring, ``--workers``)."""
    import json

    import datasets

    from rllm_renderers.training_sets import SupervisedBatches

    datasets.disable_progress_bars()
    datasets.disable_caching()
    tools = args.family != "gemma_3"
    items = conversations(args.dataset_rows, tool_calls=tools, seed=1)
    columns = {"messages": [json.dumps(messages) for messages in items]}
    if tools:
        columns["tools"] = [json.dumps(TOOLS)] * len(items)
    dataset = datasets.Dataset.from_dict(columns)
    results = {}
    for workers in (1, 2):
        function = SupervisedBatches(MODELS[args.family], str(Path(args.corpus) / "tokenizers" / FAMILIES[args.family][2]),
                                     tools_column="tools" if tools else None, train_on="all_assistant")  # fmt: skip
        start = time.perf_counter()
        mapped = dataset.map(_TimedBatches(function), batched=True, batch_size=50, num_proc=workers,
                             remove_columns=dataset.column_names)  # fmt: skip
        wall = time.perf_counter() - start
        first: dict[int, float] = {}  # per worker: its first batch (the renderer's build in it)
        rest: dict[int, float] = {}  # and every later batch
        for pid, cpu in zip(mapped["pid"], mapped["cpu"]):
            if cpu and pid not in first:
                first[pid] = cpu
            elif cpu:
                rest[pid] = rest.get(pid, 0.0) + cpu
        later = len(items) - 50 * len(first)
        results[workers] = (wall, rest, mapped["input_ids"])
        print(f"datasets.map, num_proc={workers}, {len(items)} conversations: {wall:.1f} s wall; CPU per worker process: "
              f"first batch (renderer built) {', '.join(f'{cpu:.2f}' for cpu in first.values())} s, later batches "
              f"{', '.join(f'{cpu:.2f}' for cpu in rest.values())} s ({later / sum(rest.values()):.0f} examples per CPU second)")  # fmt: skip
    assert results[1][2] == results[2][2]
    (wall1, cpu1, _), (wall2, cpu2, _) = results[1], results[2]
    print(f"speed-up 1 -> 2 workers: {wall1 / wall2:.2f}x wall (load {os.getloadavg()[0]:.1f}); by CPU of the later "
          f"batches {sum(cpu1.values()) / max(cpu2.values()) * (len(items) - 100) / (len(items) - 50):.2f}x (one worker's "
          "CPU per example over the busiest of two: the speed-up on two idle cores once the build is paid)")  # fmt: skip


if __name__ == "__main__":
    main()
