"""``python -m compiler list``: what the checked-in renderers cover, one row per model.

Columns: model id, module, short template sha256, parity level (``tokens``: verified on the
model's own tokenizer; ``structural``: text plus token ids from a synthetic tokenizer carrying
the template's marker strings; ``text``: text only), the turn facts the class learned (how a turn
ends, reasoning markers, what it could not learn), its tool-call syntax and the bridge's
default retention policy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .analysis import parse_template
from .errors import CompileError, SourceError
from .markers import template_markers
from .source import resolve_source

COLUMNS = ("model", "module", "sha256", "parity", "turn", "reasoning", "tool calls", "retention")


def parity_level(model_id: str, corpus: Path | None) -> str:
    """How a renderer of ``model_id`` is verified here (see the module docstring)."""
    try:
        source = resolve_source(model_id, corpus=corpus, allow_hub=False)
    except SourceError:
        return "?"
    if source.tokenizer_dir is not None:
        return "tokens"
    markers = template_markers(parse_template(source.source, source.display_name))
    return "structural" if markers else "text"


def turn_summary(renderer_class: type) -> str:
    turn = renderer_class.TURN
    if turn is None:
        return "not learned"
    if turn.close:
        return f"close {turn.close!r}"
    return "next header (" + ", ".join(turn.stop_tokens) + ")"


def reasoning_summary(renderer_class: type) -> str:
    if "reasoning" in renderer_class.UNLEARNED:
        return "not learned"
    reasoning = renderer_class.REASONING
    return f"{reasoning.open}...{reasoning.close}" if reasoning is not None else "-"


def tool_call_summary(renderer_class: type) -> str:
    if "tool_calls" in renderer_class.UNLEARNED:
        return "not learned"
    calls = renderer_class.TOOL_CALLS
    if calls is None:
        return "-"
    return f"{calls.style}: {calls.call_start.strip()!r}"


def coverage_rows(folder: Path, corpus: Path | None) -> list[tuple[str, ...]]:
    from .pipeline import load_generated_file

    rows = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        renderer_class = load_generated_file(path)
        for model_id in renderer_class.MODEL_IDS:
            rows.append(
                (
                    model_id,
                    path.stem,
                    renderer_class.TEMPLATE_SHA256[:12],
                    parity_level(model_id, corpus),
                    turn_summary(renderer_class),
                    reasoning_summary(renderer_class),
                    tool_call_summary(renderer_class),
                    renderer_class.DEFAULT_THINKING_RETENTION,
                )
            )
    return sorted(rows)


def format_table(rows: list[tuple[str, ...]]) -> str:
    table = [COLUMNS, *rows]
    widths = [max(len(row[column]) for row in table) for column in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def command_list(args: argparse.Namespace) -> int:
    corpus = args.corpus if args.corpus is not None and args.corpus.is_dir() else None
    if args.corpus is not None and corpus is None:
        raise CompileError(f"corpus folder not found: {args.corpus}")
    if not args.dir.is_dir():
        raise CompileError(f"--dir {args.dir} is not a folder of generated renderers")
    rows = coverage_rows(args.dir, corpus)
    print(format_table(rows))
    print(f"{len(rows)} models in {len({row[1] for row in rows})} modules")
    return 0
