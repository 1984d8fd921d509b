"""Benchmark: generated renderers vs apply_chat_template, PrimeIntellect's ``renderers``, tml-renderers, bare encode.

One run prints one table.  Per family, workload and conversation size, time per call of

* ``cold``   generated ``renderer.render_ids(messages, tools=..., add_generation_prompt=True)`` with
             the span cache off: each call renders a different conversation from the previous one
             (``--variants`` seeded variants, cycled); the renderer instance is reused;
* ``warm``   the same with the span cache on, over ``--warm-variants`` conversations that share their
             system prompt and tools (as the rollouts of one run do) and differ in everything else;
* ``act``    ``tokenizer.apply_chat_template(messages, tools=..., chat_template=<source>,
             add_generation_prompt=True, tokenize=True, return_dict=False)``;
* ``prime``  PrimeIntellect's ``renderers`` (0.1.12) renderer of the same family, built directly from
             the tokenizer and an explicit config: ``render_ids`` of the same messages;
* ``tml``    Thinking Machines' ``tml-renderers`` (0.2.1, Rust) renderer of the same family
             (``render_for_completion`` of the OpenAI messages), on the plain-chat workload (it takes
             no tools argument);
* ``encode`` ``tokenizer.encode(rendered_text, add_special_tokens=False)`` of the final text: the
             baseline, ratio 1.0;

plus generated ``render_text`` and ``render`` (ids with attribution), the bridge
(``bridge_to_next_turn`` vs the full re-render), ``parse_response`` throughput, the import time of
``rllm_renderers``, the memory of a constructed renderer, and ``benchmarks/bench_bridge.py``'s output.

Workloads: ``agentic`` (system + task, assistant turns with reasoning and tool calls, tool results,
three tools) and ``chat`` (system + plain user/assistant text turns).  Before anything is timed,
every variant's generated ids (cold and warm) are checked against apply_chat_template's (assert), warm
against cold on every warm conversation, and the bridge's result against the full re-render.  Prime's
and tml's ids are compared too and the result is shown (hand-written renderers do not always
reproduce the template).

Timing: time.perf_counter; per backend a warm-up, then ``--samples`` samples of ``n`` calls
(``n`` chosen so one sample takes about ``--sample-ms``), backends interleaved round-robin within
each sample round so machine noise hits all of them alike; garbage collection is off inside a
sample (as in timeit).  Reported: median (and min) ms per call; ratios are of medians.

Run from the project root:  .venv/bin/python benchmarks/bench_render.py [--corpus ../shared/corpus]
(needs the ``bench`` extra: ``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import base64
import copy
import gc
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_RATIO = 0.3  # the project's target: cold render_ids <= 0.3x bare encode
WARM_TARGET = 0.15  # warm render_ids (shared system prompt + tools cached) <= 0.15x bare encode

# ----------------------------------------------------------------------------- families


@dataclass(frozen=True)
class Family:
    name: str
    module: str
    class_name: str
    tokenizer: str
    template: str
    prime_class: str
    #: Workload shape the template (and prime) can render.
    reasoning: bool  # assistant turns carry reasoning_content
    max_calls: int  # tool calls per assistant turn
    openai_tool_calls: bool  # tool calls as OpenAI tool_calls (False: described in content)
    call_turn_content: str  # "text": short text beside the call, "none": content None
    notes: str = ""
    tml_class: str | None = None  # tml_renderers.renderers class, where tml-renderers covers the family


FAMILIES = [
    Family(
        "qwen3",
        "qwen3",
        "Qwen3Renderer",
        "qwen3",
        "Qwen__Qwen3-8B.jinja",
        "Qwen3Renderer",
        reasoning=True,
        max_calls=2,
        openai_tool_calls=True,
        call_turn_content="text",
        notes="full shape: reasoning + up to 2 parallel tool calls per turn",
        tml_class="Qwen3",
    ),
    Family(
        "qwen3.5",
        "qwen3_5",
        "Qwen35Renderer",
        "qwen35",
        "Qwen__Qwen3.5-4B.jinja",
        "Qwen35Renderer",
        reasoning=True,
        max_calls=2,
        openai_tool_calls=True,
        call_turn_content="text",
        notes="as qwen3",
        tml_class="Qwen35",
    ),
    Family(
        "llama3.1",
        "llama_3_1",
        "Llama31Renderer",
        "llama31",
        "meta-llama__Llama-3.1-8B-Instruct.jinja",
        "Llama3Renderer",
        reasoning=False,
        max_calls=1,
        openai_tool_calls=True,
        call_turn_content="none",
        notes="template raises on >1 tool call per turn and renders no reasoning: one call per turn, no reasoning",
    ),
    Family(
        "dsv3",
        "deepseek_v3",
        "DeepseekV3Renderer",
        "dsv3",
        "deepseek-ai__DeepSeek-V3.jinja",
        "DeepSeekV3Renderer",
        reasoning=False,
        max_calls=1,
        openai_tool_calls=False,
        call_turn_content="text",
        notes=(
            "template drops OpenAI tool_calls (content None is removed by transformers 5, so its "
            "tool-call branch never fires; with text content it ignores tool_calls): assistant turns "
            "are text that describes the call, followed by tool results"
        ),
        tml_class="DeepSeekV3",
    ),
    Family(
        "gpt-oss",
        "gpt_oss",
        "GptOssRenderer",
        "gptoss",
        "openai__gpt-oss-20b.jinja",
        "GptOssRenderer",
        reasoning=True,
        max_calls=1,
        openai_tool_calls=True,
        call_turn_content="none",
        notes=(
            "template renders only tool_calls[0] and rejects content+thinking on a tool-call turn: "
            "one call per turn, reasoning as reasoning_content (transformers also hands it to the template as "
            "'thinking'), content None on tool-call turns"
        ),
        tml_class="GptOss",
    ),
]

SIZES = {"short": 1_000, "medium": 8_000, "long": 40_000}  # characters of message text

# ----------------------------------------------------------------------------- workloads

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a UTF-8 text file from the repository and return its contents.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the repository root."},
                    "start_line": {"type": "integer", "description": "First line to return (1-based)."},
                    "end_line": {"type": "integer", "description": "Last line to return (inclusive)."},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the sandbox and return stdout, stderr and the exit code.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout": {"type": "number", "description": "Seconds before the command is killed."},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_code",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A Python regular expression."},
                    "glob": {"type": "string", "description": "Only files matching this glob."},
                    "case_sensitive": {"type": "boolean", "description": "Match case (default true)."},
                },
                "required": ["pattern"],
            },
        },
    },
]

_WORDS = (
    "the parser tokenizer cache request handler config value module function returns list of ids when "
    "template renders message turn assistant user tool result error retry timeout buffer offset span "
    "batch worker queue latency throughput metric checkpoint gradient rollout reward policy sample "
    "because therefore however first then finally maybe should could would not only also each every"
).split()
_UNICODE = ["naïve", "café", "→", "—", "Ünïcödé", "日本語のテキスト", "emoji 🚀", "±0.5 µs", "Größe"]
_PATHS = [
    "src/cache.py",
    "src/tokenizer/split.py",
    "tests/test_cache.py",
    "README.md",
    "src/server/handler.py",
    "pyproject.toml",
    "src/metrics.py",
    "docs/design.md",
]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    if rng.random() < 0.15:
        words.insert(rng.randrange(len(words)), rng.choice(_UNICODE))
    if rng.random() < 0.2:
        words.append(f"`{rng.choice(_PATHS)}:{rng.randint(1, 400)}`")
    return words[0].capitalize() + " " + " ".join(words[1:]) + rng.choice([".", ".", ".", "?", "!"])


def _paragraph(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < chars:
        parts.append(_sentence(rng))
    return " ".join(parts)


def _code(rng: random.Random, lines: int) -> str:
    out = [f"# {rng.choice(_PATHS)}", "import json", ""]
    for i in range(lines):
        kind = rng.random()
        if kind < 0.2:
            out.append(f"def {rng.choice(_WORDS)}_{i}(self, value: int = {rng.randint(0, 99)}) -> list[int]:")
        elif kind < 0.4:
            out.append(f"    if value > {rng.randint(0, 9999)}:  # {_sentence(rng)[:40]}")
        elif kind < 0.6:
            out.append(f"        return [x * {rng.randint(2, 9)} for x in range(value)]")
        elif kind < 0.8:
            out.append(f'    result = json.dumps({{"key": "{rng.choice(_WORDS)}", "n": {i}}}, indent=2)')
        else:
            out.append("")
    return "\n".join(out)


def _tool_output(rng: random.Random, name: str, chars: int) -> str:
    if name == "read_file":
        return _code(rng, max(3, chars // 42))
    if name == "run_shell":
        lines = []
        while sum(len(line) + 1 for line in lines) < chars:
            lines.append(
                f"{rng.choice(_PATHS)}::{rng.choice(_WORDS)}_{rng.randint(0, 99)} "
                f"{rng.choice(['PASSED', 'PASSED', 'FAILED', 'SKIPPED'])} [{rng.randint(0, 100)}%]"
            )
        lines.append(f"exit code: {rng.randint(0, 1)}")
        return "\n".join(lines)
    hits: list[dict] = []
    while len(json.dumps({"matches": hits}, ensure_ascii=False)) < chars:
        hits.append({"path": rng.choice(_PATHS), "line": rng.randint(1, 900), "text": _sentence(rng)[:70]})
    return json.dumps({"matches": hits}, ensure_ascii=False)


def _call(rng: random.Random, name: str) -> dict:
    if name == "read_file":
        args = {"path": rng.choice(_PATHS), "start_line": rng.randint(1, 50), "end_line": rng.randint(60, 300)}
    elif name == "run_shell":
        args = {"command": f"python -m pytest -x -q {rng.choice(_PATHS)} -k {rng.choice(_WORDS)}", "timeout": 120}
    else:
        args = {"pattern": rf"def {rng.choice(_WORDS)}_\d+\(", "glob": "src/**/*.py", "case_sensitive": False}
    return {"name": name, "arguments": args}


#: Per size: characters of (system, user task, reasoning per turn, tool output per call) and whether a
#: final answer + user follow-up is inserted halfway.  About 3 rounds for short, 8 for medium, 18 for long.
SHAPES = {
    "short": dict(system=150, user=120, reasoning=(60, 140), output=(60, 160), follow_up=False),
    "medium": dict(system=300, user=300, reasoning=(150, 450), output=(250, 900), follow_up=True),
    "long": dict(system=600, user=500, reasoning=(200, 700), output=(500, 2500), follow_up=True),
}


def message_text_chars(messages: list[dict]) -> int:
    """Characters of message text: contents, reasoning and tool-call arguments (as JSON)."""
    total = 0
    for m in messages:
        total += len(m.get("content") or "") + len(m.get("reasoning_content") or "")
        for c in m.get("tool_calls") or []:
            total += len(json.dumps(c["function"]["arguments"], ensure_ascii=False))
    return total


def build_conversation(family: Family, size: str, variant: int) -> list[dict]:
    """A deterministic agentic conversation of about ``SIZES[size]`` characters of message text.

    system + user task, then rounds of (assistant: reasoning + tool call(s)) + tool result(s); for
    medium and long a final answer and a user follow-up halfway.  The last round has exactly one
    call, so the conversation ends with one tool message (the bridge case).  ``variant`` changes the
    text (seeded), not the shape or the system prompt, so every call of a cold benchmark renders a new
    conversation that shares its system prompt and tools with the others, as the rollouts of one run do.
    """
    target, shape = SIZES[size], SHAPES[size]
    rng = random.Random(f"{family.name}/{size}/{variant}")
    system_rng = random.Random(f"{family.name}/{size}/system")  # one system prompt for all variants, as in a rollout
    messages: list[dict] = [
        {
            "role": "system",
            "content": "You are a careful coding agent working in a Python repository. "
            + _paragraph(system_rng, shape["system"]),
        },
        {"role": "user", "content": f"[session {variant:04d}] " + _paragraph(rng, shape["user"])},
    ]
    call_id = 0
    follow_up_done = not shape["follow_up"]
    round_chars = (sum(shape["reasoning"]) + sum(shape["output"]) * (1 + family.max_calls) / 2) / 2 + 60
    while True:
        used = message_text_chars(messages)
        last_round = target - used < 1.5 * round_chars
        if not follow_up_done and used > target * 0.5:
            follow_up_done = True
            answer = {"role": "assistant", "content": "Summary so far: " + _paragraph(rng, shape["user"])}
            if family.reasoning:
                answer["reasoning_content"] = _paragraph(rng, shape["reasoning"][0])
            messages.append(answer)
            messages.append({"role": "user", "content": "Thanks. " + _paragraph(rng, shape["user"] // 2)})
            continue
        n_calls = 1 if last_round else rng.randint(1, family.max_calls)
        calls = [_call(rng, rng.choice(["read_file", "run_shell", "search_code"])) for _ in range(n_calls)]
        reasoning = _paragraph(rng, rng.randint(*shape["reasoning"]))
        if family.openai_tool_calls:
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": None if family.call_turn_content == "none" else _sentence(rng),
                "tool_calls": [
                    {"id": f"call_{call_id + i}", "type": "function", "function": call} for i, call in enumerate(calls)
                ],
            }
            if family.reasoning:
                assistant["reasoning_content"] = reasoning
        else:
            described = "\n".join(
                f"Calling {c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in calls
            )
            assistant = {"role": "assistant", "content": reasoning + "\n\n" + described}
        messages.append(assistant)
        for i, call in enumerate(calls):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{call_id + i}",
                    "name": call["name"],
                    "content": _tool_output(rng, call["name"], rng.randint(*shape["output"])),
                }
            )
        call_id += n_calls
        if last_round:
            return messages


# ----------------------------------------------------------------------------- backends


def load_family(family: Family, corpus: Path):
    from rllm_renderers.encoding.loading import load_tokenizer

    tokenizer = load_tokenizer(corpus / "tokenizers" / family.tokenizer)
    template = (corpus / "templates" / family.template).read_text(encoding="utf-8")
    renderer = getattr(import_generated(family.module), family.class_name)(tokenizer)
    return tokenizer, template, renderer


def import_generated(module: str):
    """A checked-in generated module."""
    return importlib.import_module(f"rllm_renderers.generated.{module}")


O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def _offline_harmony_vocab(tokenizer) -> None:
    """openai_harmony downloads o200k_base.tiktoken on first use; write it from the gpt-oss tokenizer instead."""
    if os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        return
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    decoder = {chr(c): b for b, c in zip(printable, chars)}
    vocab = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["vocab"]
    data = b"".join(
        base64.b64encode(bytes(decoder[ch] for ch in token)) + b" " + str(rank).encode() + b"\n"
        for token, rank in sorted(vocab.items(), key=lambda item: item[1])
    )
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise RuntimeError("gpt-oss tokenizer's BPE table is not o200k_base; openai_harmony would go to the network")
    folder = Path(tempfile.mkdtemp(prefix="bench_harmony_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "o200k_base.tiktoken").write_bytes(data)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)


def prime_renderer(family: Family, tokenizer):
    """renderers' class for the family, constructed from the tokenizer and an explicit config (no Hub)."""
    import renderers

    if family.prime_class == "GptOssRenderer":
        _offline_harmony_vocab(tokenizer)
        # The template's fixed system-message fields; the date defaults to today, as strftime_now does.
        config = renderers.GptOssRendererConfig(
            knowledge_cutoff="2024-06", model_identity="You are ChatGPT, a large language model trained by OpenAI."
        )
        return renderers.GptOssRenderer(tokenizer, config)
    return getattr(renderers, family.prime_class)(tokenizer)


# ----------------------------------------------------------------------------- timing


@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)  # wall seconds per call
    cpu: list[float] = field(default_factory=list)  # process CPU seconds per call (all threads)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.samples) * 1e3

    @property
    def cpu_ms(self) -> float:
        return statistics.median(self.cpu) * 1e3


SINGLE_THREAD_SUFFIX = " 1t"  # backends whose name ends so run with TOKENIZERS_PARALLELISM=false


def measure(
    backends: dict[str, Callable[[int], Any]], n_variants: int, samples: int, sample_s: float
) -> dict[str, Timing]:
    """Per backend: warm-up, calibrate calls per sample, then interleaved samples (wall and CPU time).

    A backend whose name ends with `` 1t`` runs with ``TOKENIZERS_PARALLELISM=false`` (the Rust
    tokenizer reads it on every call), so ``encode_batch`` uses one thread.
    """

    def run(name: str, fn: Callable[[int], Any], first: int, n: int) -> tuple[float, float]:
        previous = os.environ.get("TOKENIZERS_PARALLELISM")
        if name.endswith(SINGLE_THREAD_SUFFIX):
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        gc.disable()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(first, first + n):
                fn(i % n_variants)
            return time.perf_counter() - wall, time.process_time() - cpu
        finally:
            gc.enable()
            if name.endswith(SINGLE_THREAD_SUFFIX):
                if previous is None:
                    del os.environ["TOKENIZERS_PARALLELISM"]
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = previous

    loops: dict[str, int] = {}
    for name, fn in backends.items():
        run(name, fn, 0, 3)  # warm-up
        calls, elapsed = 2, run(name, fn, 0, 2)[0]
        while elapsed < sample_s / 4:
            calls *= 2
            elapsed = run(name, fn, 0, calls)[0]
        loops[name] = max(1, round(sample_s / (elapsed / calls)))
    gc.collect()
    timings = {name: Timing() for name in backends}
    names = list(backends)
    for round_ in range(samples):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            n = loops[name]
            wall, cpu = run(name, backends[name], round_ * 7, n)
            timings[name].samples.append(wall / n)
            timings[name].cpu.append(cpu / n)
    return timings


# ----------------------------------------------------------------------------- cases


@dataclass
class Case:
    family: Family
    workload: str  # "agentic" (tools, tool calls, reasoning) or "chat" (plain text turns, no tools)
    size: str
    tools: list[dict] | None
    variants: list[list[dict]]  # cold: cycled; each checked against apply_chat_template
    warm_variants: list[list[dict]]  # warm: more conversations sharing the system prompt (and tools)
    texts: list[str]
    ids: list[list[int]]
    prime_match: str
    tml_match: str
    message_chars: float
    bridge_inputs: list[tuple[list[int], list[int], list[dict], list[dict]]]
    bridge_ok: str


def build_chat(family: Family, size: str, variant: int) -> list[dict]:
    """A plain chat of about ``SIZES[size]`` characters: one system prompt shared by all variants, then
    user / assistant text turns, ending with a user turn (what tml-renderers' OpenAI messages cover)."""
    rng = random.Random(f"chat/{family.name}/{size}/{variant}")
    system_rng = random.Random(f"chat/{family.name}/{size}/system")
    messages = [{"role": "system", "content": "You are a helpful assistant. " + _paragraph(system_rng, 500)}]
    while message_text_chars(messages) < SIZES[size]:
        messages.append({"role": "user", "content": f"[{variant:04d}] " + _paragraph(rng, rng.randint(80, 600))})
        messages.append({"role": "assistant", "content": _paragraph(rng, rng.randint(150, 1500))})
    messages.append({"role": "user", "content": _paragraph(rng, 200)})
    return messages


def build_workload(family: Family, workload: str, size: str, variant: int) -> list[dict]:
    return (build_conversation if workload == "agentic" else build_chat)(family, size, variant)


def completion_for(renderer, history: list[dict], assistant: dict, tools) -> tuple[list[int], list[int]]:
    """(prompt ids, sampled completion ids) for ``assistant`` answering ``history``, as a model would emit them."""
    prompt_text = renderer.render_text(history, tools=tools, add_generation_prompt=True)
    full_text = renderer.render_text(history + [assistant], tools=tools)
    assert full_text.startswith(prompt_text), "template rewrites the prompt when the turn is appended"
    completion = renderer.encoder.encode(full_text[len(prompt_text) :])
    stops = set(renderer.get_stop_token_ids())
    cut = next((i + 1 for i, token in enumerate(completion) if token in stops), len(completion))
    return renderer.encoder.encode(prompt_text), completion[:cut]


def tml_render_ids(tml, messages: list[dict]) -> list[int]:
    """tml-renderers: OpenAI dicts -> its messages -> render_for_completion -> the ids of its spans."""
    from tml_renderers import chat

    spans, _ = tml.render_for_completion(chat.OpenAIMessage.from_oss_messages(messages))
    ids: list[int] = []
    for span in spans:
        ids += span.span.tokens
    return ids


def _first_difference(got: list[int], want: list[int]) -> str:
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"{len(got) - len(want):+d} tok, 1st diff @{first}"


def prepare_case(
    family: Family, workload: str, size: str, tokenizer, template: str, gen, cold, prime, tml, args
) -> Case:
    tools = TOOLS if workload == "agentic" else None
    variants = [build_workload(family, workload, size, v) for v in range(args.variants)]
    warm_variants = [build_workload(family, workload, size, v) for v in range(1000, 1000 + args.warm_variants)]
    texts, ids, bridge_inputs = [], [], []
    prime_note = tml_note = ""
    prime_mismatch = tml_mismatch = bridge_none = 0
    for messages in variants:
        snapshot = copy.deepcopy(messages)
        expected = tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        name = f"{family.name}/{workload}/{size}"
        assert gen.render_ids(messages, tools=tools, add_generation_prompt=True) == expected, f"{name}: warm != template"
        assert cold.render_ids(messages, tools=tools, add_generation_prompt=True) == expected, f"{name}: cold != template"
        text = gen.render_text(messages, tools=tools, add_generation_prompt=True)
        assert tokenizer.encode(text, add_special_tokens=False) == expected, "render_text + encode != template ids"
        assert gen.render(messages, tools=tools, add_generation_prompt=True).token_ids == expected
        if prime is not None:
            prime_ids = prime.render_ids(messages, tools=tools, add_generation_prompt=True)
            if prime_ids != expected:
                prime_mismatch += 1
                prime_note = _first_difference(prime_ids, expected)
        if tml is not None:
            tml_ids = tml_render_ids(tml, messages)
            if tml_ids != expected:
                tml_mismatch += 1
                tml_note = _first_difference(tml_ids, expected)
        assert messages == snapshot, "a backend mutated the messages"
        # The bridge: the last assistant turn was sampled, the message after it arrives.
        assert messages[-2]["role"] == "assistant"
        prompt_ids, completion_ids = completion_for(gen, messages[:-2], messages[-2], tools)
        # (the prompt ids come from completion_for's text encode, not from render_ids, so the renderer does
        # not remember them: the history is handed over, as an engine that keeps its messages does)
        bridged = gen.bridge_to_next_turn(prompt_ids, completion_ids, [messages[-1]], tools=tools, messages=messages[:-2])
        if bridged is None:
            bridge_none += 1
        else:
            assert bridged.token_ids == expected, f"{name}: bridge differs from the full re-render"
        texts.append(text)
        ids.append(expected)
        bridge_inputs.append((prompt_ids, completion_ids, [messages[-1]], messages[:-2]))
    for messages in warm_variants:  # warm == cold on every conversation the warm column renders
        warm_ids = gen.render_ids(messages, tools=tools, add_generation_prompt=True)
        assert warm_ids == cold.render_ids(messages, tools=tools, add_generation_prompt=True)
    n = args.variants
    return Case(
        family,
        workload,
        size,
        tools,
        variants,
        warm_variants,
        texts,
        ids,
        "n/a" if prime is None else "yes" if not prime_mismatch else f"no ({prime_mismatch}/{n}; {prime_note})",
        "n/a" if tml is None else "yes" if not tml_mismatch else f"no ({tml_mismatch}/{n}; {tml_note})",
        statistics.mean(message_text_chars(m) for m in variants),
        bridge_inputs,
        "= full" if not bridge_none else f"None {bridge_none}/{n}",
    )


def run_case(case: Case, tokenizer, template: str, gen, cold, prime, tml, samples: int, sample_s: float):
    v, w, tools, texts, bridge_inputs = case.variants, case.warm_variants, case.tools, case.texts, case.bridge_inputs
    backends: dict[str, Callable[[int], Any]] = {
        "cold": lambda i: cold.render_ids(v[i], tools=tools, add_generation_prompt=True),
        # len(w) conversations cycled through an LRU smaller than their spans: only the shared
        # system prompt (and tools) block stays cached, as in a run of rollouts.
        "warm": lambda i: gen.render_ids(w[i * 5 % len(w)], tools=tools, add_generation_prompt=True),
        "act": lambda i: tokenizer.apply_chat_template(
            v[i], tools=tools, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False
        ),
        "encode": lambda i: tokenizer.encode(texts[i], add_special_tokens=False),
        "text": lambda i: gen.render_text(v[i], tools=tools, add_generation_prompt=True),
        "render": lambda i: gen.render(v[i], tools=tools, add_generation_prompt=True),
        "bridge": lambda i: gen.bridge_to_next_turn(*bridge_inputs[i][:3], tools=tools, messages=bridge_inputs[i][3]),
    }
    if prime is not None:
        backends["prime"] = lambda i: prime.render_ids(v[i], tools=tools, add_generation_prompt=True)
    if tml is not None:
        backends["tml"] = lambda i: tml_render_ids(tml, v[i])
    return measure(backends, len(v), samples, sample_s)


def parse_throughput(case: Case, gen, samples: int, sample_s: float) -> float:
    """Tokens per second of ``parse_response`` on the sampled assistant turns of the case."""
    completions = [completion for _, completion, _, _ in case.bridge_inputs]
    timing = measure(
        {"parse": lambda i: gen.parse_response(completions[i], tools=case.tools)}, len(completions), samples, sample_s
    )["parse"]
    return statistics.mean(len(c) for c in completions) / (timing.median_ms / 1e3)


# ----------------------------------------------------------------------------- never-seen text


class FreshText:
    """Chunks of the Python standard library's own sources, handed out once each: message text the
    process has never encoded (so only what repeats across real files can be in any backend's cache)."""

    def __init__(self, seed: int = 0):
        import sysconfig

        files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
        random.Random(seed).shuffle(files)
        self._files = iter(files)
        self._buffer = ""

    def take(self, chars: int) -> str:
        while len(self._buffer) < chars:
            try:
                self._buffer += next(self._files).read_text(encoding="utf-8", errors="replace")
            except StopIteration:
                raise RuntimeError("the standard library ran out of never-seen text") from None
            except OSError:
                continue
        text, self._buffer = self._buffer[:chars], self._buffer[chars:]
        return text


FRESH_POOL = {"short": 400, "medium": 80, "long": 24}  # conversations per size, each rendered once


def fresh_chat(family: Family, size: str, fresh: FreshText, rng: random.Random) -> list[dict]:
    """A chat shaped as :func:`build_chat` (its shared system prompt included) whose turns are never-seen text."""
    messages = build_chat(family, size, 0)[:1]
    while message_text_chars(messages) < SIZES[size]:
        messages.append({"role": "user", "content": fresh.take(rng.randint(80, 600))})
        messages.append({"role": "assistant", "content": fresh.take(rng.randint(150, 1500))})
    messages.append({"role": "user", "content": fresh.take(200)})
    return messages


def fresh_text_rows(family: Family, tokenizer, gen, engines: dict[str, Any], tml, sizes: list[str], fresh: FreshText) -> list[tuple]:
    """Per size: every conversation of a pool rendered once by each renderer of ``engines`` (cold
    ``render_ids``, span cache off, one per encoder engine), tml and a bare encode of its text, in
    rotating order, one call each, garbage collection off; then the same conversation rendered a
    second time by the default renderer ``gen`` (span cache on: the ``repeat`` column, the only one
    that has seen the text).  Mean ms per conversation."""
    rows = []
    for size in sizes:
        rng = random.Random(f"fresh/{family.name}/{size}")
        pool = [fresh_chat(family, size, fresh, rng) for _ in range(FRESH_POOL[size])]
        texts = [gen.render_text(messages, add_generation_prompt=True) for messages in pool]  # text only: no encoder runs
        calls = {name: (lambda r: lambda k: r.render_ids(pool[k], add_generation_prompt=True))(renderer)
                 for name, renderer in engines.items()}  # fmt: skip
        calls["encode"] = lambda k: tokenizer.encode(texts[k], add_special_tokens=False)
        if tml is not None:
            calls["tml"] = lambda k: tml_render_ids(tml, pool[k])
        totals = {name: 0.0 for name in [*calls, "repeat"]}
        results: dict[str, list] = {name: [] for name in totals}
        names = list(calls)
        gc.disable()
        try:
            for k in range(len(pool)):
                for name in names[k % len(names) :] + names[: k % len(names)]:
                    start = time.perf_counter()
                    ids = calls[name](k)
                    totals[name] += time.perf_counter() - start
                    results[name].append(ids)
                gen.render_ids(pool[k], add_generation_prompt=True)  # (untimed) the first render of the span-cached renderer
                start = time.perf_counter()
                results["repeat"].append(gen.render_ids(pool[k], add_generation_prompt=True))
                totals["repeat"] += time.perf_counter() - start
        finally:
            gc.enable()
        for name in [*engines, "repeat"]:
            assert results[name] == results["encode"], f"{family.name}/{size}: {name} render_ids != bare encode on fresh text"
        tml_same = "n/a" if tml is None else "yes" if results["tml"] == results["encode"] else "NO"
        tokens = statistics.mean(len(ids) for ids in results["encode"])
        per_call = {name: total / len(pool) * 1e3 for name, total in totals.items()}
        rows.append((family.name, size, len(pool), tokens, per_call, tml_same))
    return rows


def print_fresh_rows(rows: list[tuple], engines: list[str]) -> None:
    print("\nnever-seen text (chat workload, message text from the standard library's sources, each conversation "
          "rendered once per backend): mean ms per conversation")  # fmt: skip
    head = f"{'family':8} {'size':6} {'convs':>5} {'tok':>6} |"
    for name in engines:
        head += f" {name + ' ms':>14} {'x enc':>5} {'tml/it':>6} |"
    print(head + f" {'tml ms':>8} {'=tmpl':>5} | {'bare encode ms':>14} | {'repeat ms':>9} {'x enc':>5}")
    for name, size, count, tokens, ms, tml_same in rows:
        line = f"{name:8} {size:6} {count:5d} {tokens:6.0f} |"
        for engine in engines:
            speed = f"{ms['tml'] / ms[engine]:6.2f}" if "tml" in ms else f"{'-':>6}"
            line += f" {ms[engine]:14.3f} {ms[engine] / ms['encode']:5.3f} {speed} |"
        tml = f"{ms['tml']:8.3f} {tml_same:>5}" if "tml" in ms else f"{'-':>8} {'-':>5}"
        print(line + f" {tml} | {ms['encode']:14.3f} | {ms['repeat']:9.3f} {ms['repeat'] / ms['encode']:5.3f}")
    print("tml/it: tml-renderers time / that renderer's time (> 1: ours is faster). repeat: the default renderer "
          "(span cache on) rendering the same conversation a second time.")


def _commit() -> str:
    """The commit of the checkout the benchmark runs from (``+`` when the tree has changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


# ----------------------------------------------------------------------------- process-level figures


def import_time_ms(runs: int = 9) -> tuple[float, float]:
    """Median and min wall time of ``import rllm_renderers`` in a fresh interpreter."""
    code = "import time; t = time.perf_counter(); import rllm_renderers; print(time.perf_counter() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(times) * 1e3, min(times) * 1e3


_MEMORY_PROBE = """
import importlib, json, sys, time, tracemalloc
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from rllm_renderers.encoding.loading import load_tokenizer
tokenizer = load_tokenizer(sys.argv[1])
before = rss()
tracemalloc.start()
start = time.perf_counter()
cls = getattr(importlib.import_module(sys.argv[4] + "." + sys.argv[2]), sys.argv[3])
renderer = cls(tokenizer)
renderer.render_ids([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
elapsed = time.perf_counter() - start
python_mb = tracemalloc.get_traced_memory()[0] / 2**20
print(json.dumps({"rss_mb": rss() - before, "python_mb": python_mb, "first_render_s": elapsed,
                  "backend": renderer.encoder.backend}))
"""


def renderer_memory(family: Family, corpus: Path) -> dict:
    """RSS and Python-heap growth of constructing a renderer and rendering once (the encoder, its
    rank table and private backend copy included), in a fresh process after the tokenizer is loaded."""
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(corpus / "tokenizers" / family.tokenizer), family.module,
         family.class_name, import_generated(family.module).__name__.rsplit(".", 1)[0]],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main


def fmt(t: Timing, width: int = 15) -> str:
    return f"{t.median_ms:.3f} ({t.min_ms:.3f})".rjust(width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    parser.add_argument("--families", default=",".join(f.name for f in FAMILIES))
    parser.add_argument("--workloads", default="agentic,chat")
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--variants", type=int, default=8, help="distinct conversations per case, cycled (cold)")
    parser.add_argument("--warm-variants", type=int, default=48, help="conversations cycled by the warm column")
    parser.add_argument("--samples", type=int, default=11, help="timed samples per backend and case")
    parser.add_argument("--sample-ms", type=float, default=25.0, help="target duration of one sample")
    parser.add_argument("--no-bridge-bench", action="store_true", help="skip benchmarks/bench_bridge.py")
    parser.add_argument("--no-fresh", action="store_true", help="skip the never-seen-text figures")
    parser.add_argument("--fresh-only", action="store_true", help="only the never-seen-text figures (the headline)")
    parser.add_argument("--fresh-scale", type=float, default=1.0, help="scale the never-seen pools (400 / 80 / 24 conversations)")
    args = parser.parse_args(argv)
    # fastokens reads these when a tokenizer is built (its caches, its thread count for inputs of
    # 64 KiB or more): this run measures its defaults.
    for variable in ("FASTOKENS_SEGMENT_CACHE", "FASTOKENS_INPUT_CACHE", "FASTOKENS_BPE_THREADS"):
        if os.environ.pop(variable, None) is not None:
            print(f"note: {variable} unset for this run")

    import renderers
    import tokenizers
    import transformers

    from rllm_renderers.encoding.tokenization import TextEncoder

    try:
        import tml_renderers
        from tml_renderers import renderers as tml_classes
    except ImportError:  # the 'bench' extra is not installed: no tml column
        tml_renderers = tml_classes = None

    corpus = args.corpus.resolve()
    families = [f for f in FAMILIES if f.name in args.families.split(",")]
    sizes, workloads = args.sizes.split(","), args.workloads.split(",")
    sample_s = args.sample_ms / 1e3
    print(
        f"python {sys.version.split()[0]}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"renderers {renderers.__version__}, tml-renderers "
        f"{getattr(tml_renderers, '__version__', None) or _dist_version('tml-renderers')}, "
        f"tiktoken {_dist_version('tiktoken')}, fastokens {_dist_version('fastokens')}, cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, corpus {corpus}"
    )
    print(f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {_commit()}")
    print(
        f"cold: {args.variants} variants cycled, span cache off; warm: {args.warm_variants} variants cycled, "
        f"span cache on; {args.samples} samples x ~{args.sample_ms:.0f} ms per backend; ms per call as median "
        "(min); ratios = median / median of bare encode\n"
    )

    for size in FRESH_POOL:
        FRESH_POOL[size] = max(1, round(FRESH_POOL[size] * args.fresh_scale))
    rows, notes, parse_rows, memory, fresh_rows = [], [], [], {}, []
    fresh = FreshText()
    for family in families:
        tokenizer, template, gen = load_family(family, corpus)
        # The default engine as a process has it once it renders at scale: tiktoken first, then
        # fastokens built in the background (rllm_renderers/encoding/engine_upgrade.py), waited for here.
        started, cpu = time.perf_counter(), time.process_time()
        first_engine = gen.encoder.backend
        gen.encoder.upgrade(wait=True)
        print(f"{family.name}: default engine {first_engine} -> {gen.encoder.backend} after "
              f"{time.perf_counter() - started:.1f} s ({time.process_time() - cpu:.1f} s CPU)")  # fmt: skip
        cold = copy.copy(gen)  # same class and knobs, its own encoder without the span cache
        cold._encoder = TextEncoder(tokenizer, span_cache_size=0)
        cold._encoder.warm()  # what a renderer's constructor builds (else the first timed render builds it)
        gen.encoder._cache.size = 64  # smaller than the spans of the warm conversations (see run_case)
        prime = prime_renderer(family, tokenizer)
        tml = getattr(tml_classes, family.tml_class)() if tml_classes and family.tml_class else None
        notes.append(f"{family.name} (encoder backend: {gen.encoder.backend}): {family.notes}")
        for workload in [] if args.fresh_only else workloads:
            for size in sizes:
                tml_here = tml if workload == "chat" else None  # tml-renderers takes no tools argument
                case = prepare_case(family, workload, size, tokenizer, template, gen, cold, prime, tml_here, args)
                timings = run_case(case, tokenizer, template, gen, cold, prime, tml_here, args.samples, sample_s)
                chars = statistics.mean(len(t) for t in case.texts)
                tokens = statistics.mean(len(i) for i in case.ids)
                rows.append((case, chars, tokens, timings))
                if workload == "agentic":
                    parse_rows.append((case, parse_throughput(case, gen, args.samples, sample_s)))
                print(f"  measured {family.name:8} {workload:7} {size:6} ({tokens:.0f} tokens)", file=sys.stderr)
        if not args.no_fresh and "chat" in workloads:
            fresh_engines = {"default": cold}
            if gen.encoder.backend != "tiktoken":  # the engine of a process's first 1M characters
                fresh_engines["tiktoken"] = copy.copy(gen)
                fresh_engines["tiktoken"]._encoder = TextEncoder(tokenizer, span_cache_size=0, backend="tiktoken")
                fresh_engines["tiktoken"]._encoder.warm()
            fresh_rows.append((list(fresh_engines), fresh_text_rows(family, tokenizer, gen, fresh_engines, tml, sizes, fresh)))
            print(f"  measured {family.name:8} never-seen text", file=sys.stderr)
        if not args.fresh_only:
            memory[family.name] = renderer_memory(family, corpus)

    if fresh_rows:  # the headline
        for engines in sorted({tuple(names) for names, _ in fresh_rows}):
            print_fresh_rows([row for names, rows_ in fresh_rows if tuple(names) == engines for row in rows_], list(engines))
    if args.fresh_only:
        return 0

    header = (
        f"{'family':8} {'work':7} {'size':6} {'tok':>6} | {'cold, cycled ms':>15} {'x enc':>5} {'min x':>5} | "
        f"{'warm, cycled ms':>15} {'x enc':>5} {'min x':>5} | "
        f"{'apply_chat_tmpl':>15} {'x enc':>5} | {'prime ms':>15} {'x enc':>5} {'=tmpl':>5} | "
        f"{'tml ms':>15} {'x enc':>5} {'=tmpl':>5} {'tml/cold':>8} {'min':>5} | {'bare encode ms':>15} | "
        f"{'text ms':>7} {'render ms':>9} | {'bridge ms':>9} {'x cold':>6}"
    )
    print("\nconversations cycled (each cold and warm conversation is rendered many times; the never-seen table "
          "above renders each once):")  # fmt: skip
    print(header)
    print("-" * len(header))
    for case, chars, tokens, t in rows:
        enc = t["encode"].median_ms
        cold_ms = t["cold"].median_ms

        def column(name: str, match: str) -> str:
            if name not in t:
                return f"{'-':>15} {'-':>5} {'-':>5}"
            return f"{fmt(t[name])} {t[name].median_ms / enc:5.2f} {('yes' if match == 'yes' else 'NO'):>5}"

        enc_min = t["encode"].min_ms
        tml_speed = (
            f"{t['tml'].median_ms / cold_ms:8.2f} {t['tml'].min_ms / t['cold'].min_ms:5.2f}"
            if "tml" in t
            else f"{'-':>8} {'-':>5}"
        )
        bridge = f"{t['bridge'].median_ms / cold_ms:6.2f}" if case.bridge_ok == "= full" else "  None"
        print(
            f"{case.family.name:8} {case.workload:7} {case.size:6} {tokens:6.0f} | "
            f"{fmt(t['cold'])} {cold_ms / enc:5.2f} {t['cold'].min_ms / enc_min:5.2f} | "
            f"{fmt(t['warm'])} {t['warm'].median_ms / enc:5.2f} {t['warm'].min_ms / enc_min:5.2f} | "
            f"{fmt(t['act'])} {t['act'].median_ms / enc:5.2f} | {column('prime', case.prime_match)} | "
            f"{column('tml', case.tml_match)} {tml_speed} | {fmt(t['encode'])} | "
            f"{t['text'].median_ms:7.3f} {t['render'].median_ms:9.3f} | {t['bridge'].median_ms:9.3f} {bridge}"
        )
    print()
    print(
        f"x enc: median / median of bare encode (targets: cold <= {TARGET_RATIO}, warm <= {WARM_TARGET}). "
        "min x: the same ratio of the minimum samples (less sensitive to other processes' load). "
        "tml/cold: tml-renderers time / cold render_ids time (> 1: the generated renderer is faster), medians "
        "and mins.\n"
        "=tmpl: the backend's ids equal apply_chat_template's for every variant. "
        "x cold: bridge_to_next_turn / cold render_ids of the same conversation (None: the bridge declines)."
    )
    for case, chars, tokens, t in rows:
        label = f"{case.family.name}/{case.workload}/{case.size}"
        for what, match in (("prime", case.prime_match), ("tml-renderers", case.tml_match)):
            if match not in ("yes", "n/a"):
                print(f"{what} != template for {label}: {match}")
        if case.bridge_ok != "= full":
            print(f"bridge returned None (caller re-renders) for {label}: {case.bridge_ok}")
    print("workload adaptations (agentic):")
    for note in notes:
        print(f"  {note}")


    print("\nparse_response throughput (agentic completions: reasoning + tool calls):")
    for case, rate in parse_rows:
        tokens = statistics.mean(len(c) for _, c, _, _ in case.bridge_inputs)
        print(f"  {case.family.name:8} {case.size:6} {tokens:6.0f} tokens/completion  {rate / 1e6:6.2f} M tokens/s")
    median_ms, min_ms = import_time_ms()
    print(f"\nimport rllm_renderers (fresh interpreter, 9 runs): median {median_ms:.1f} ms, min {min_ms:.1f} ms")
    print("renderer construction + first render_ids, fresh process after the tokenizer is loaded:")
    for name, figures in memory.items():
        print(
            f"  {name:8} RSS +{figures['rss_mb']:.1f} MB, Python heap {figures['python_mb']:.1f} MB, "
            f"{figures['first_render_s']:.2f} s, encoder backend {figures['backend']}"
        )

    bridge_bench = REPO / "benchmarks" / "bench_bridge.py"
    if not args.no_bridge_bench and bridge_bench.exists():  # the bridge's own benchmark (episodes), same run
        print("\nbenchmarks/bench_bridge.py:")
        sys.stdout.flush()
        subprocess.run([sys.executable, str(bridge_bench), "--corpus", str(corpus)], cwd=REPO, check=True)
    return 0


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
