"""Benchmark: ``bridge_to_next_turn`` against re-rendering the whole conversation.

An agentic episode per family: system + user task, then 40 rounds of an assistant turn (reasoning
and a tool call where the template renders them) and a tool result of about 1.5 KB (Gemma-3, whose
template has no tool role: a user message instead). The completion of each round is the assistant
turn as the template renders it, cut after its close, i.e. what the model samples.

Reported per family, in one run:

* **render_ids cold / warm**: one ``render_ids`` of the whole conversation at turn 40 with the
  generation prompt; *cold* on a renderer whose encoder has no span cache (the whole text is
  tokenized, which is what "a full render" costs without memory), *warm* on the default renderer
  after the same conversation was rendered (every span is a cache hit: only the template run and
  the cache lookups remain).
* **bridge**: one bridge call at the last round, with ``messages=`` and with the history recalled
  from the renderer's memory, on the renderer without span cache (its new suffix is text it has
  never seen). Target of issue 9: at most 2% of a full render.
* **episode**: the 40 rounds driven by the bridge (one ``render_ids`` for the first prompt, then a
  bridge per round, the history recalled) against re-rendering the conversation every round, cold
  and warm. Target of issue 9: at least 10x.
* **floor**: the work any bridge that keeps the contract does at the last round, timed alone
  (:func:`contract_floor`: comparing the caller's prompt with the remembered copy, the result's
  fresh list, encoding the new suffix), beside 2% of the cold render and the time per bridge a
  10x episode allows.

Before timing, every bridged prompt of the episode is checked against ``render_ids`` of the same
conversation (assert), and the number of rounds where the bridge returned None is shown (the
template rewrote history there, so the episode re-renders, as an engine would).

Timing: process CPU time (all threads; ``--wall`` for ``time.perf_counter``), garbage collection
off inside a sample, median of ``--samples``.
Run from the project root:  .venv/bin/python benchmarks/bench_bridge.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WALL_CLOCK = False

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]

# family module -> (how assistant turns look, whether the template has a tool role)
SHAPES = {
    "qwen3": ("reasoning+call", True),
    "llama_3_1": ("call", True),
    "deepseek_v3": ("text", True),  # its tool-call branch never fires under transformers 5
    "gpt_oss": ("reasoning+call", True),
    "gemma_3": ("text", False),
}


def tool_output(rng: random.Random, round_index: int) -> str:
    lines = [f"def handler_{round_index}_{k}(request):  # {rng.randint(0, 10**6)}" for k in range(30)]
    return "\n".join(lines) + "\nPASSED tests/test_core.py::test_case_%d" % round_index


def episode(shape: str, has_tool_role: bool, rounds: int, seed: int = 0):
    """(initial messages, [(assistant turn, new messages)] per round)."""
    rng = random.Random(seed)
    start = [
        {"role": "system", "content": "You are a careful coding agent. Use the tools to inspect the repository."},
        {"role": "user", "content": "The test suite fails on test_core.py; find out why and fix it."},
    ]
    steps = []
    for index in range(rounds):
        call_id = f"call_{index:04d}"
        path = f"src/module_{index}.py"
        if shape == "text":
            assistant = {"role": "assistant", "content": f"I will read {path} next to check handler {index}."}
        else:
            assistant = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": {"path": path}}}],
            }
            if shape.startswith("reasoning"):
                assistant["reasoning_content"] = f"The failure may come from {path}; reading it first."
        if has_tool_role:
            new = [{"role": "tool", "tool_call_id": call_id, "name": "read_file", "content": tool_output(rng, index)}]
        else:
            new = [{"role": "user", "content": "Output of the last step:\n" + tool_output(rng, index)}]
        steps.append((assistant, new))
    return start, steps


def sampled(renderer, history, assistant):
    """The assistant turn as the template renders it after the generation prompt, cut after its stop."""
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    full = renderer.render_ids(history + [assistant], tools=TOOLS)
    assert full[: len(prompt)] == prompt, "the template renders this turn differently from a generation prompt + reply"
    stops = set(renderer.get_stop_token_ids())
    completion = full[len(prompt) :]
    close = next(k for k, token in enumerate(completion) if token in stops)
    return completion[: close + 1]


def timed(function, samples: int, setup=None) -> float:
    """Median seconds per call, of process CPU time (all threads) or, with --wall, of wall time.

    CPU time is the default because the machine these numbers come from is shared: a short call
    waiting for a core shows up in wall time, not in CPU time. ``setup`` runs, untimed, before each
    call.
    """
    clock = time.perf_counter if WALL_CLOCK else time.process_time
    if setup is not None:
        setup()
    function()
    results = []
    for _ in range(samples):
        if setup is not None:
            setup()
        gc.disable()
        start = clock()
        function()
        results.append(clock() - start)
        gc.enable()
    return statistics.median(results)


def bench_family(family, rounds: int, samples: int) -> dict:
    from rllm_renderers.bridging.memory import PromptHistories
    from rllm_renderers.encoding.tokenization import TextEncoder

    shape, has_tool_role = SHAPES[family.module]
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)  # the default: span cache on
    cold = family.renderer_class(tokenizer)
    cold._encoder = TextEncoder(tokenizer, span_cache_size=0)  # every call encodes all of its text
    start, steps = episode(shape, has_tool_role, rounds)

    # the episode, driven by the bridge; every bridged prompt checked against a full render
    history = list(start)
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    plan, declined = [], 0
    for assistant, new in steps:
        completion = sampled(renderer, history, assistant)
        plan.append((prompt, completion, list(history), new))
        history = history + [assistant] + new
        full = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
        bridged = renderer.bridge_to_next_turn(prompt, completion, new, tools=TOOLS, messages=plan[-1][2])
        if bridged is None:
            declined += 1
            prompt = full
        else:
            assert bridged.token_ids == full, f"{family.module}: the bridge differs from the full render"
            prompt = bridged.token_ids

    last_prompt, last_completion, last_history, last_new = plan[-1]
    full_conversation = last_history + [steps[-1][0]] + last_new
    render_last = lambda r: r.render_ids(full_conversation, tools=TOOLS, add_generation_prompt=True)  # noqa: E731
    warm_ms = timed(lambda: render_last(renderer), samples)
    cold_ms = timed(lambda: render_last(cold), samples)
    # The bridge is timed on the renderer without span cache: its new suffix is text never seen before.
    bridge_ms = timed(
        lambda: cold.bridge_to_next_turn(last_prompt, last_completion, last_new, tools=TOOLS, messages=last_history),
        samples,
    )
    # the prompt the engine had, rendered afresh before each call: the bridge goes on from a prompt it
    # has not extended before (bridging one prompt again, a second sample of it, costs one more copy)
    recalled_ms = timed(
        lambda: cold.bridge_to_next_turn(last_prompt, last_completion, last_new, tools=TOOLS),
        samples,
        setup=lambda: cold.render_ids(last_history, tools=TOOLS, add_generation_prompt=True),
    )

    def drive_with_bridge():  # as an engine does: the renderer recalls the history of its own prompts
        ids = cold.render_ids(start, tools=TOOLS, add_generation_prompt=True)
        for (_, completion, history_then, new), (assistant, _) in zip(plan, steps):
            bridged = cold.bridge_to_next_turn(ids, completion, new, tools=TOOLS)
            ids = bridged.token_ids if bridged is not None else cold.render_ids(
                history_then + [assistant] + new, tools=TOOLS, add_generation_prompt=True
            )

    def drive_with_render(r):
        for _, _, history_then, new in plan:
            r.render_ids(history_then, tools=TOOLS, add_generation_prompt=True)
        r.render_ids(full_conversation, tools=TOOLS, add_generation_prompt=True)

    def new_episode():  # each sample starts with an empty memory, as a new episode's renderer would
        for r in (cold, renderer):
            r.prompt_histories = PromptHistories()

    episode_samples = max(3, samples // 5)
    return {
        **contract_floor(cold, last_prompt, last_completion, render_last(cold), samples),
        "family": family.module,
        "tokens": len(render_last(renderer)),
        "declined": declined,
        "cold_ms": cold_ms * 1e3,
        "warm_ms": warm_ms * 1e3,
        "bridge_ms": bridge_ms * 1e3,
        "recalled_ms": recalled_ms * 1e3,
        "bridge_episode_ms": timed(drive_with_bridge, episode_samples, setup=new_episode) * 1e3,
        "cold_episode_ms": timed(lambda: drive_with_render(cold), episode_samples, setup=new_episode) * 1e3,
        "warm_episode_ms": timed(lambda: drive_with_render(renderer), episode_samples, setup=new_episode) * 1e3,
    }


def contract_floor(renderer, prompt: list[int], completion: list[int], full: list[int], samples: int) -> dict:
    """What any bridge that keeps the contract does at the last round, timed alone (ms).

    *confirm*: the caller's prompt compared with the renderer's copy of it, the one C pass that
    makes a recalled history the prompt's (the caller's list shares its ints with the copy, as in
    an episode); *fresh list*: the result's own list, the prompt's ids copied and the completion and
    new ids appended (kept alive, so their freeing is not counted); *suffix encode*: the new text
    (after the sampled turn's close) encoded once, checked to give the full render's ids. Nothing
    of parsing the completion or running the template is in it.
    """
    own = list(prompt)
    caller = list(own)  # the same int objects
    suffix_start = len(prompt) + len(completion) - 1  # from the close token on: it anchors the encode
    text = renderer.decode(full[suffix_start:])
    encoded = renderer.encoder.encode(text)
    assert encoded == full[suffix_start:], "the suffix does not encode alone to the full render's ids"
    new_ids = encoded[1:]
    kept = []

    def fresh_list():
        ids = own[:]
        ids += completion
        ids += new_ids
        kept.append(ids)

    def per_call(function, setup=None, repeat: int = 50) -> float:  # these calls are too short to time one by one
        def calls():
            for _ in range(repeat):
                function()

        return timed(calls, samples, setup=setup) / repeat * 1e3

    return {
        "confirm_ms": per_call(lambda: own == caller),
        "fresh_list_ms": per_call(fresh_list, setup=kept.clear),
        "suffix_encode_ms": per_call(lambda: renderer.encoder.encode(text)),
    }


# Where a bridge's time goes (--parts): the functions bridge_turn calls, timed where they are looked up.
PARTS = {
    "recall": [("rllm_renderers.bridging.bridge", "recalled_prompt")],
    "copy of the prompt": [("rllm_renderers.bridging.memory", "Recalled.ids")],
    "parse": [("rllm_renderers.bridging.bridge", "closed_completion"), ("rllm_renderers.bridging.bridge", "sampled_turn_as_message")],
    "inputs": [("rllm_renderers.core.base", "GeneratedRenderer.template_messages"), ("rllm_renderers.jinja.runtime", "template_tools")],
    "template run": [("rllm_renderers.bridging.bridge", "render_extended")],
    "checks": [
        ("rllm_renderers.bridging.bridge", name_)
        for name_ in ("history_of", "renders_by_call_ids", "ends_like", "sampled_turn_end", "checked_new_messages")
    ],
    "suffix encode + result": [("rllm_renderers.bridging.bridge", "bridged_tokens")],
    "remember": [("rllm_renderers.bridging.memory", "PromptHistories.remember")],
}


def bridge_parts(family, rounds: int, repeats: int = 10) -> dict[str, float]:
    """Microseconds per bridge, by part (PARTS), averaged over ``repeats`` bridge-driven episodes."""
    import functools
    import importlib

    from rllm_renderers.bridging.memory import PromptHistories
    from rllm_renderers.encoding.tokenization import TextEncoder

    spent = dict.fromkeys([*PARTS, "total"], 0.0)
    patched = []

    def patch(module_name: str, dotted: str, part: str) -> None:
        owner = importlib.import_module(module_name)
        *path, attribute = dotted.split(".")
        for step in path:
            owner = getattr(owner, step)
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed_part(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start

        setattr(owner, attribute, timed_part)
        patched.append((owner, attribute, original))

    shape, has_tool_role = SHAPES[family.module]
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)
    renderer._encoder = TextEncoder(tokenizer, span_cache_size=0)
    start, steps = episode(shape, has_tool_role, rounds)
    plan, history = [], list(start)
    for assistant, new in steps:
        plan.append((sampled(renderer, history, assistant), new))
        history = history + [assistant] + new
    def drive() -> None:
        renderer.prompt_histories = PromptHistories()
        ids = renderer.render_ids(start, tools=TOOLS, add_generation_prompt=True)
        for completion, new in plan:
            ids = renderer.bridge_to_next_turn(ids, completion, new, tools=TOOLS).token_ids

    drive()  # untimed: the encoder's first calls build its caches
    for part, places in PARTS.items():
        for module_name, dotted in places:
            patch(module_name, dotted, part)
    patch("rllm_renderers.core.base", "bridge_turn", "total")
    gc.collect()
    gc.disable()  # as inside the samples above: a collection of the other families' objects is no part
    try:
        for _ in range(repeats):
            drive()
    finally:
        gc.enable()
        for owner, attribute, original in reversed(patched):
            setattr(owner, attribute, original)
    bridges = repeats * rounds
    return {part: seconds / bridges * 1e6 for part, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"))
    parser.add_argument("--families", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--wall", action="store_true", help="time wall-clock instead of process CPU time")
    parser.add_argument("--parts", action="store_true", help="also: where a bridge's time goes, part by part")
    args = parser.parse_args()
    global WALL_CLOCK
    WALL_CLOCK = args.wall
    os.environ["RLLM_CORPUS"] = args.corpus
    from tests.families import FAMILIES

    wanted = args.families.split(",")
    clock = "wall time" if args.wall else "process CPU time"
    print(f"{args.rounds} rounds; ms of {clock} per call, medians of {args.samples} samples\n")
    print(
        "| family | tokens | declined | render_ids cold | render_ids warm | bridge (messages=) | bridge (recalled) "
        "| bridge / cold | bridge / warm | episode: bridge | episode: re-render cold | speed-up | "
        "episode: re-render warm | speed-up |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    rows = []
    for family in FAMILIES:
        if family.module not in wanted:
            continue
        row = bench_family(family, args.rounds, args.samples)
        rows.append(row)
        print(
            f"| {row['family']} | {row['tokens']} | {row['declined']}/{args.rounds} | {row['cold_ms']:.3f} "
            f"| {row['warm_ms']:.3f} | {row['bridge_ms']:.3f} | {row['recalled_ms']:.3f} "
            f"| {row['recalled_ms'] / row['cold_ms']:.1%} | {row['recalled_ms'] / row['warm_ms']:.1%} "
            f"| {row['bridge_episode_ms']:.1f} | {row['cold_episode_ms']:.1f} "
            f"| {row['cold_episode_ms'] / row['bridge_episode_ms']:.1f}x | {row['warm_episode_ms']:.1f} "
            f"| {row['warm_episode_ms'] / row['bridge_episode_ms']:.1f}x |",
            flush=True,
        )
    print(
        f"\nThe contract's floor at round {args.rounds} (microseconds of {clock}, medians): work no bridge can "
        "skip, against the two targets: 2% of a cold render_ids, and the time per bridge that makes the "
        "episode 10x cheaper than re-rendering cold\n"
    )
    print(
        "| family | confirm the prompt | fresh list | suffix encode | floor | floor / cold render | 2% of cold "
        "| 10x budget per bridge | bridge (recalled) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        floor = row["confirm_ms"] + row["fresh_list_ms"] + row["suffix_encode_ms"]
        budget = row["cold_episode_ms"] / 10 / args.rounds
        print(
            f"| {row['family']} | {row['confirm_ms'] * 1e3:.1f} | {row['fresh_list_ms'] * 1e3:.1f} "
            f"| {row['suffix_encode_ms'] * 1e3:.1f} | {floor * 1e3:.1f} | {floor / row['cold_ms']:.1%} "
            f"| {row['cold_ms'] * 20:.1f} | {budget * 1e3:.1f} | {row['recalled_ms'] * 1e3:.1f} |"
        )
    if not args.parts:
        return
    print(f"\nWhere a bridge's time goes: microseconds of wall time per bridge, the average over 10 episodes of {args.rounds} rounds\n")
    print("| family | " + " | ".join(PARTS) + " | other | total |")
    print("|---|" + "--:|" * (len(PARTS) + 2))
    for family in FAMILIES:
        if family.module not in wanted:
            continue
        parts = bridge_parts(family, args.rounds)
        other = parts["total"] - sum(parts[part] for part in PARTS)
        cells = " | ".join(f"{parts[part]:.1f}" for part in PARTS)
        print(f"| {family.module} | {cells} | {other:.1f} | {parts['total']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
