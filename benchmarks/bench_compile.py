"""Benchmark: compile time against template size (``generate``: analyse, translate, probe, verify, write).

Two synthetic templates grow to ``--max-kb`` (default 1024) by doubling from ``--start-kb``:

* ``text``      a message loop with one ``{% if message.content == 'k<i>' %}`` block per ~1 KB, each
                writing a long literal (a template that is mostly text: system prompts, instructions);
* ``branches``  a message loop with one role branch per ~200 bytes, each with a ``{% set %}`` and an
                ``{% elif %}`` (a template that is mostly structure: the translator's scope and role
                passes see one more name and two more branches per block).

Each size is compiled once, in this process (the imports are not timed), into a fresh folder with
``cases=1`` and the synthetic tokenizer (no tokenizer folder: no corpus needed). Printed: size, seconds,
seconds per 100 KB, and the ratio to the previous size (2.0 per doubling is linear), each in wall-clock
and in CPU seconds of this process (on a shared machine the CPU time is the one other load leaves alone).

Run from the project root:  .venv/bin/python benchmarks/bench_compile.py [--shapes text,branches] [--max-kb 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.pipeline import generate  # noqa: E402
from compiler.source import resolve_source  # noqa: E402

HEAD = "{{ bos_token }}{% for message in messages %}"
TAIL = (
    "{% if message.role == 'user' %}<u>{{ message.content }}{{ eos_token }}"
    "{% elif message.role == 'assistant' %}<a>{{ message.content }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)
TEXT = (
    "You are a careful assistant. Answer in the language of the question, cite sources when you can, "
    "and say so when you are unsure. "
) * 8
BLOCKS = {
    "text": "{%- if message.content == 'k@' %}<r@>" + TEXT + "{{ message.content }}{% endif %}\n",
    "branches": (
        "{%- if message.role == 'user' and message.content == 'k@' %}<u@>{{ message.content | trim }}{{ eos_token }}\n"
        "{%- elif message.role == 'r@' %}{% set x@ = message.content %}<r@>{{ x@ }}{% endif %}\n"
    ),
}
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def template_of(shape: str, kilobytes: int) -> str:
    """A template of ``shape`` of about ``kilobytes`` KB (blocks numbered, so no two are alike)."""
    block, parts, size, index = BLOCKS[shape], [HEAD], len(HEAD) + len(TAIL), 0
    while size < kilobytes * 1024:
        part = block.replace("@", str(index))
        parts.append(part)
        size += len(part)
        index += 1
    return "".join(parts) + TAIL


def compile_seconds(template: str, scratch: Path, name: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one ``generate``."""
    path = scratch / f"{name}.jinja"
    path.write_text(template, encoding="utf-8")
    source = resolve_source(f"bench/{name}", template=path, allow_hub=False)
    started, started_cpu = time.perf_counter(), time.process_time()
    generate(source, scratch / name, cases=1, seed=0, special_tokens=SPECIAL_TOKENS)
    return time.perf_counter() - started, time.process_time() - started_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="text,branches")
    parser.add_argument("--start-kb", type=int, default=64)
    parser.add_argument("--max-kb", type=int, default=1024)
    args = parser.parse_args()
    print(f"{'shape':<9} {'KB':>6} {'seconds':>8} {'s/100KB':>8} {'x prev':>7} {'cpu s':>8} {'x prev':>7}")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for shape in args.shapes.split(","):
            previous = None
            kilobytes = args.start_kb
            while kilobytes <= args.max_kb:
                template = template_of(shape, kilobytes)
                seconds, cpu = compile_seconds(template, scratch, f"{shape}_{kilobytes}")
                ratio = f"{seconds / previous[0]:7.2f}" if previous else f"{'':>7}"
                cpu_ratio = f"{cpu / previous[1]:7.2f}" if previous else f"{'':>7}"
                per_100kb = seconds * 100 * 1024 / len(template)
                print(f"{shape:<9} {len(template) // 1024:>6} {seconds:>8.1f} {per_100kb:>8.2f} {ratio} {cpu:>8.1f} {cpu_ratio}")
                sys.stdout.flush()
                previous = seconds, cpu
                kilobytes *= 2


if __name__ == "__main__":
    main()
