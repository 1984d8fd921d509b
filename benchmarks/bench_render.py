"""Benchmark: generated renderers vs apply_chat_template vs PrimeIntellect's ``renderers`` vs bare encode.

One run prints one table.  Per family and conversation size, time per call of

* ``gen``    generated ``renderer.render_ids(messages, tools=..., add_generation_prompt=True)``, cold:
             each call renders a different conversation from the previous one (``--variants`` seeded
             variants, cycled) and nothing is cached between calls; the renderer instance is reused;
             also shown with ``TOKENIZERS_PARALLELISM=false`` (``gen 1-thread``) and as CPU time;
* ``act``    ``tokenizer.apply_chat_template(messages, tools=..., chat_template=<source>,
             add_generation_prompt=True, tokenize=True, return_dict=False)``;
* ``prime``  PrimeIntellect's ``renderers`` (0.1.12) renderer of the same family, built directly from
             the tokenizer and an explicit config: ``render_ids`` of the same messages;
* ``encode`` ``tokenizer.encode(rendered_text, add_special_tokens=False)`` of the final text: the
             baseline, ratio 1.0;

plus, for information, generated ``render_text`` and ``render`` (ids with attribution), and the
bridge: ``bridge_to_next_turn(prompt_ids, completion_ids, [tool message])`` vs the full re-render
with ``render_ids`` that it replaces.

Before anything is timed, every variant's generated ids are checked against apply_chat_template's
(assert) and the bridge's result against the full re-render.  Prime's ids are compared too and the
result is shown (its hand-written renderers do not always reproduce the template).

Timing: time.perf_counter; per backend a warm-up, then ``--samples`` samples of ``n`` calls
(``n`` chosen so one sample takes about ``--sample-ms``), backends interleaved round-robin within
each sample round so machine noise hits all of them alike; garbage collection is off inside a
sample (as in timeit).  Reported: median (and min) ms per call; ratios are of medians.

``--profile auto|all|none`` adds, for the cases that miss the 0.8x target (auto) or all cases, a
breakdown of generated ``render_ids`` into its stages (input normalisation, the translated template,
joining the text, the added-token split, the tokenizer call, splicing the ids) measured the same way,
plus the top functions of a cProfile run.  Results and findings: benchmarks/README.md.

Run from the project root:  .venv/bin/python benchmarks/bench_render.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import atexit
import base64
import copy
import cProfile
import gc
import hashlib
import io
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_RATIO = 0.8  # the project's target: cold render_ids <= 0.8x bare encode

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
    import importlib

    from rllm_renderers.loading import load_tokenizer

    tokenizer = load_tokenizer(corpus / "tokenizers" / family.tokenizer)
    template = (corpus / "templates" / family.template).read_text(encoding="utf-8")
    renderer = getattr(importlib.import_module(f"rllm_renderers.generated.{family.module}"), family.class_name)(tokenizer)
    return tokenizer, template, renderer


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
    size: str
    variants: list[list[dict]]
    texts: list[str]
    ids: list[list[int]]
    prime_match: str
    message_chars: float
    bridge_inputs: list[tuple[list[int], list[int], list[dict]]]
    bridge_ok: str


def completion_for(renderer, history: list[dict], assistant: dict) -> tuple[list[int], list[int]]:
    """(prompt ids, sampled completion ids) for ``assistant`` answering ``history``, as a model would emit them."""
    prompt_text = renderer.render_text(history, tools=TOOLS, add_generation_prompt=True)
    full_text = renderer.render_text(history + [assistant], tools=TOOLS)
    assert full_text.startswith(prompt_text), "template rewrites the prompt when the turn is appended"
    completion = renderer.encoder.encode(full_text[len(prompt_text) :])
    stops = set(renderer.get_stop_token_ids())
    cut = next((i + 1 for i, token in enumerate(completion) if token in stops), len(completion))
    return renderer.encoder.encode(prompt_text), completion[:cut]


def prepare_case(family: Family, size: str, tokenizer, template: str, gen, prime, n_variants: int) -> Case:
    variants = [build_conversation(family, size, v) for v in range(n_variants)]
    texts, ids, bridge_inputs = [], [], []
    prime_mismatch = 0
    prime_note = ""
    bridge_none = 0
    for messages in variants:
        snapshot = copy.deepcopy(messages)
        expected = tokenizer.apply_chat_template(
            messages, tools=TOOLS, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        got = gen.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
        assert got == expected, f"{family.name}/{size}: generated render_ids differ from apply_chat_template"
        text = gen.render_text(messages, tools=TOOLS, add_generation_prompt=True)
        assert tokenizer.encode(text, add_special_tokens=False) == expected, "render_text + encode != template ids"
        assert gen.render(messages, tools=TOOLS, add_generation_prompt=True).token_ids == expected
        try:
            prime_ids = prime.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            raise AssertionError(f"{family.name}/{size}: prime renderer rejected the workload: {exc!r}") from exc
        if prime_ids != expected:
            prime_mismatch += 1
            first = next(
                (i for i, (a, b) in enumerate(zip(prime_ids, expected)) if a != b), min(len(prime_ids), len(expected))
            )
            prime_note = f"{len(prime_ids) - len(expected):+d} tok, 1st diff @{first}"
        assert messages == snapshot, "a backend mutated the messages"
        # The bridge: the last assistant turn was sampled, its one tool result arrives.
        assert messages[-1]["role"] == "tool" and messages[-2]["role"] == "assistant"
        prompt_ids, completion_ids = completion_for(gen, messages[:-2], messages[-2])
        bridged = gen.bridge_to_next_turn(prompt_ids, completion_ids, [messages[-1]], tools=TOOLS)
        if bridged is None:
            bridge_none += 1
        else:
            assert bridged.token_ids == expected, f"{family.name}/{size}: bridge differs from the full re-render"
        texts.append(text)
        ids.append(expected)
        bridge_inputs.append((prompt_ids, completion_ids, [messages[-1]]))
    prime_match = "yes" if not prime_mismatch else f"no ({prime_mismatch}/{n_variants}; {prime_note})"
    bridge_ok = "= full" if not bridge_none else f"None {bridge_none}/{n_variants}"
    message_chars = statistics.mean(message_text_chars(m) for m in variants)
    return Case(family, size, variants, texts, ids, prime_match, message_chars, bridge_inputs, bridge_ok)


def run_case(case: Case, tokenizer, template: str, gen, prime, samples: int, sample_s: float) -> dict[str, Timing]:
    v, texts, bridge_inputs = case.variants, case.texts, case.bridge_inputs
    backends: dict[str, Callable[[int], Any]] = {
        "gen": lambda i: gen.render_ids(v[i], tools=TOOLS, add_generation_prompt=True),
        "gen" + SINGLE_THREAD_SUFFIX: lambda i: gen.render_ids(v[i], tools=TOOLS, add_generation_prompt=True),
        "act": lambda i: tokenizer.apply_chat_template(
            v[i], tools=TOOLS, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False
        ),
        "prime": lambda i: prime.render_ids(v[i], tools=TOOLS, add_generation_prompt=True),
        "encode": lambda i: tokenizer.encode(texts[i], add_special_tokens=False),
        "text": lambda i: gen.render_text(v[i], tools=TOOLS, add_generation_prompt=True),
        "render": lambda i: gen.render(v[i], tools=TOOLS, add_generation_prompt=True),
        "bridge": lambda i: gen.bridge_to_next_turn(*bridge_inputs[i], tools=TOOLS),
    }
    return measure(backends, len(v), samples, sample_s)


# ----------------------------------------------------------------------------- profile


def profile_case(case: Case, gen, samples: int, sample_s: float) -> tuple[dict[str, Timing], str, int]:
    """Stage breakdown of generated render_ids, timed like the backends, plus a cProfile listing."""
    from rllm_renderers.output import RenderOutput
    from rllm_renderers.template_runtime import template_data

    v = case.variants
    encoder = gen.encoder
    inputs = [gen.template_inputs(m, TOOLS) for m in v]
    outputs = []
    for tm, tt in inputs:
        out = RenderOutput(tm)
        gen.render_template(out, tm, tt, None, True)
        outputs.append(out)
    texts = case.texts
    splits = [encoder._split(t) for t in texts]
    spans = [[t[s:e] for s, e, id_ in pieces if id_ is None] for t, pieces in zip(texts, splits)]

    # render_ids with the one tokenizer call replaced by its precomputed result: everything else
    # (normalisation, template, join, added-token split, span slicing, splicing the ids) is Python.
    encodings = [encoder._encode_batch(span_list, False) for span_list in spans]
    joined = ["".join(span_list) for span_list in spans]
    current = [0]

    def stubbed(i):
        current[0] = i
        return gen.render_ids(v[i], tools=TOOLS, add_generation_prompt=True)

    def splice(i):  # what TextEncoder._encode does with the backend's result
        ids: list[int] = []
        results = iter(encodings[i])
        for _, _, id_ in splits[i]:
            if id_ is not None:
                ids.append(id_)
            else:
                ids += next(results).ids
        return ids

    def template_only(i):
        tm, tt = inputs[i]
        out = RenderOutput(tm)
        gen.render_template(out, tm, tt, None, True)

    stages: dict[str, Callable[[int], Any]] = {
        "render_ids": lambda i: gen.render_ids(v[i], tools=TOOLS, add_generation_prompt=True),
        "1 template_inputs": lambda i: gen.template_inputs(v[i], TOOLS),
        "1a  of which template_data(tools)": lambda i: template_data(TOOLS),
        "2 render_template": template_only,
        "3 RenderOutput.text": lambda i: outputs[i].text(),
        "4 encoder.encode": lambda i: encoder.encode(texts[i]),
        "4a _split (added tokens)": lambda i: encoder._split(texts[i]),
        "4b backend encode_batch": lambda i: encoder._encode_batch(spans[i], False),
        "4b backend encode_batch" + SINGLE_THREAD_SUFFIX: lambda i: encoder._encode_batch(spans[i], False),
        "4c splice ids (Encoding.ids)": splice,
        "spans joined, one text"
        + SINGLE_THREAD_SUFFIX: lambda i: encoder._span_tokenizer.encode_batch_fast(
            [joined[i]], add_special_tokens=False
        ),
        "backend, whole text, no offsets": lambda i: encoder._backend.encode_batch_fast(
            [texts[i]], add_special_tokens=False
        ),
        "bare encode": lambda i: gen.tokenizer.encode(texts[i], add_special_tokens=False),
        "backend.encode (no HF wrapper)": lambda i: encoder._backend.encode(texts[i], add_special_tokens=False),
    }
    timings = measure(stages, len(v), samples, sample_s)
    encoder._encode_batch = lambda texts, with_offsets: encodings[current[0]]  # instance attribute shadows the method
    try:
        assert stubbed(1) == case.ids[1]
        timings.update(measure({"render_ids, tokenizer call stubbed": stubbed}, len(v), samples, sample_s))
    finally:
        del encoder._encode_batch

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        for messages in v:
            gen.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
    profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.sort_stats("tottime").print_stats(8)
    listing = "\n".join(line for line in buffer.getvalue().splitlines() if line.strip())
    # Tokens of the part every conversation of a rollout shares: the system message and the tools.
    shared = len(encoder.encode(os.path.commonprefix(case.texts))) if len(case.texts) > 1 else 0
    return timings, listing, shared


# ----------------------------------------------------------------------------- main


def fmt(t: Timing, width: int = 17) -> str:
    return f"{t.median_ms:.3f} ({t.min_ms:.3f})".rjust(width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    parser.add_argument("--families", default=",".join(f.name for f in FAMILIES))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--variants", type=int, default=8, help="distinct conversations per case, cycled (cold)")
    parser.add_argument("--samples", type=int, default=15, help="timed samples per backend and case")
    parser.add_argument("--sample-ms", type=float, default=30.0, help="target duration of one sample")
    parser.add_argument(
        "--profile",
        choices=("auto", "all", "none"),
        default="auto",
        help="stage breakdown + cProfile of generated render_ids: for cases that miss the target (auto), all, none",
    )
    args = parser.parse_args(argv)

    import renderers
    import tokenizers
    import transformers

    corpus = args.corpus.resolve()
    wanted = args.families.split(",")
    families = [f for f in FAMILIES if f.name in wanted]
    sizes = args.sizes.split(",")
    sample_s = args.sample_ms / 1e3
    print(
        f"python {sys.version.split()[0]}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"renderers {renderers.__version__}, cpus {os.cpu_count()}, corpus {corpus}"
    )
    print(
        f"{args.variants} variants per case (cold: cycled), {args.samples} samples x ~{args.sample_ms:.0f} ms per backend; "
        "ms per call as median (min); ratios = median / median of bare encode\n"
    )

    rows, profiles, notes = [], [], []
    for family in families:
        tokenizer, template, gen = load_family(family, corpus)
        prime = prime_renderer(family, tokenizer)
        notes.append(f"{family.name}: {family.notes}")
        for size in sizes:
            case = prepare_case(family, size, tokenizer, template, gen, prime, args.variants)
            timings = run_case(case, tokenizer, template, gen, prime, args.samples, sample_s)
            chars = statistics.mean(len(t) for t in case.texts)
            tokens = statistics.mean(len(i) for i in case.ids)
            rows.append((case, chars, tokens, timings))
            print(
                f"  measured {family.name:8} {size:6} ({chars / 1e3:.1f} KB rendered, {tokens:.0f} tokens)",
                file=sys.stderr,
            )
            ratio = timings["gen"].median_ms / timings["encode"].median_ms
            if args.profile == "all" or (args.profile == "auto" and ratio > TARGET_RATIO):
                profiles.append((case, ratio, *profile_case(case, gen, args.samples, sample_s)))

    header = (
        f"{'family':8} {'size':6} {'msgKB':>5} {'KB':>5} {'tok':>6} | {'gen render_ids ms':>17} {'x enc':>5} | "
        f"{'gen 1-thread ms':>15} {'x enc':>5} | {'cpu x':>5} | {'apply_chat_tmpl ms':>18} {'x enc':>5} | "
        f"{'prime ms':>17} {'x enc':>5} {'=tmpl':>5} | {'bare encode ms':>17} | {'text ms':>7} {'render ms':>9} | "
        f"{'bridge ms':>9} {'x full':>6}"
    )
    print(header)
    print("-" * len(header))
    for case, chars, tokens, t in rows:
        enc = t["encode"].median_ms
        single = t["gen" + SINGLE_THREAD_SUFFIX]
        bridge = f"{t['bridge'].median_ms / t['gen'].median_ms:6.2f}" if case.bridge_ok == "= full" else "  None"
        print(
            f"{case.family.name:8} {case.size:6} {case.message_chars / 1e3:5.1f} {chars / 1e3:5.1f} {tokens:6.0f} | "
            f"{fmt(t['gen']):>17} {t['gen'].median_ms / enc:5.2f} | "
            f"{fmt(single, 15)} {single.median_ms / enc:5.2f} | {t['gen'].cpu_ms / t['encode'].cpu_ms:5.2f} | "
            f"{fmt(t['act']):>18} {t['act'].median_ms / enc:5.2f} | "
            f"{fmt(t['prime']):>17} {t['prime'].median_ms / enc:5.2f} {'yes' if case.prime_match == 'yes' else 'NO':>5} | "
            f"{fmt(t['encode']):>17} | {t['text'].median_ms:7.3f} {t['render'].median_ms:9.3f} | "
            f"{t['bridge'].median_ms:9.3f} {bridge}"
        )
    print()
    print(
        f"msgKB: message text (contents, reasoning, tool arguments); KB/tok: the rendered prompt. "
        f"x enc: median / median of bare encode (target for gen: <= {TARGET_RATIO}).\n"
        "gen 1-thread: the same render_ids with TOKENIZERS_PARALLELISM=false (encode_batch on one thread); "
        "cpu x: process CPU time of gen / of bare encode (both threads counted).\n"
        "=tmpl: prime's ids equal apply_chat_template's for every variant. "
        "x full: bridge_to_next_turn / full render_ids of the same conversation (None: the bridge declines)."
    )
    for case, chars, tokens, t in rows:
        if case.prime_match != "yes":
            print(f"prime != template for {case.family.name}/{case.size}: {case.prime_match}")
        if case.bridge_ok != "= full":
            print(f"bridge returned None (caller re-renders) for {case.family.name}/{case.size}: {case.bridge_ok}")
    print("workload adaptations:")
    for note in notes:
        print(f"  {note}")

    for case, ratio, timings, listing, shared in profiles:
        total = timings["render_ids"].median_ms
        python = timings["render_ids, tokenizer call stubbed"].median_ms
        print(
            f"\nprofile {case.family.name}/{case.size} (table: {ratio:.2f}x encode): generated render_ids = "
            f"{total:.3f} ms (median), bare encode = {timings['bare encode'].median_ms:.3f} ms; "
            f"Python side (all but the tokenizer call) = {python:.3f} ms ({python / total * 100:.0f}%)"
        )
        for name, timing in timings.items():
            if name == "render_ids":
                continue
            print(f"  {name:34} {fmt(timing, 20)} ms  {timing.median_ms / total * 100:5.1f}% of render_ids")
        if shared:
            print(f"  common prefix of all variants (system prompt + tools): ~{shared} of {len(case.ids[0])} tokens")
        print("  cProfile (20 x variants renders, by tottime; cProfile inflates Python-level costs):")
        for line in listing.splitlines()[3:]:
            print("    " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
